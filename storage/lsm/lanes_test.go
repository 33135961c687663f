package lsm

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/shaledb/shale/storage/objstore"
)

// readGate holds the first read of an object whose name contains a chosen
// string until released, as a slow store holds a long compaction's reads;
// later reads pass.
type readGate struct {
	objstore.Bucket
	mu      sync.Mutex
	match   string
	reached chan struct{} // closed at the first read held
	release chan struct{}
}

func (g *readGate) arm(match string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.match, g.reached, g.release = match, make(chan struct{}), make(chan struct{})
}

func (g *readGate) hold(name string) {
	g.mu.Lock()
	match, reached, release := g.match, g.reached, g.release
	if match == "" || !strings.Contains(name, match) {
		g.mu.Unlock()
		return
	}
	g.match = ""
	close(reached)
	g.mu.Unlock()
	<-release
}

func (g *readGate) Get(ctx context.Context, name string) (io.ReadCloser, error) {
	g.hold(name)
	return g.Bucket.Get(ctx, name)
}

func (g *readGate) GetRange(ctx context.Context, name string, off, length int64) (io.ReadCloser, error) {
	g.hold(name)
	return g.Bucket.GetRange(ctx, name, off, length)
}

// laneOptions send every merge of runs to the run lane.
func laneOptions() Options {
	o := testOptions()
	o.L0CompactionTrigger = 1
	o.TargetTableBytes = 1 << 10
	o.RunLaneBytes = 1
	return o
}

// flushValues writes prefix-NNN = value for n keys and flushes them to an L0
// table.
func flushValues(t *testing.T, db *DB, prefix string, n int, value string) {
	t.Helper()
	var b Batch
	for i := range n {
		b.Put(fmt.Appendf(nil, "%s%03d", prefix, i), []byte(value))
	}
	if err := db.Write(context.Background(), &b, db.DefaultWriteOptions()); err != nil {
		t.Fatal(err)
	}
	if err := db.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// compactL0 runs one compaction of the L0 lane, which must not wait for the
// run lane: a deadline turns a wait into a failure instead of a hang.
func compactL0(t *testing.T, db *DB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if done, err := db.compactOnce(ctx, laneL0); err != nil || done {
		t.Fatalf("L0 compaction: done=%v err=%v", done, err)
	}
}

func (db *DB) manifestNow() *manifest {
	db.mu.Lock()
	defer db.mu.Unlock()
	return db.man
}

// startHeldRunLane starts a compaction of the run lane and returns once it
// is held on a read of the table firstTable, with a wait for its result.
// A read of key first opens the tables (their footers and indexes), so
// that the read held is one of the compaction's own.
func startHeldRunLane(t *testing.T, db *DB, g *readGate, firstTable, key string) func() (bool, error) {
	t.Helper()
	mustGet(t, db, key)
	g.arm(firstTable)
	type result struct {
		done bool
		err  error
	}
	res := make(chan result, 1)
	go func() {
		done, err := db.compactOnce(context.Background(), laneRuns)
		res <- result{done, err}
	}()
	select {
	case <-g.reached:
	case r := <-res:
		t.Fatalf("the run lane finished without reading %s: done=%v err=%v", firstTable, r.done, r.err)
	}
	return func() (bool, error) {
		close(g.release)
		r := <-res
		return r.done, r.err
	}
}

// twoRuns opens a DB with laneOptions on a readGate, closed when the test
// ends, and makes two runs of n keys each (prefix-NNN = value), older first;
// it returns the manifest that holds them and no L0 table.
func twoRuns(t *testing.T, prefix1 string, n1 int, value1, prefix2 string, n2 int, value2 string) (*DB, *readGate, *manifest) {
	t.Helper()
	g := &readGate{Bucket: objstore.NewMemoryBucket()}
	db := openDB(t, g, laneOptions(), Components{})
	t.Cleanup(func() { db.Close() })
	flushValues(t, db, prefix1, n1, value1)
	compactL0(t, db)
	flushValues(t, db, prefix2, n2, value2)
	compactL0(t, db)
	man := db.manifestNow()
	if len(man.Runs) != 2 || len(man.L0) != 0 {
		t.Fatalf("%d runs, %d L0 tables; want 2 and 0", len(man.Runs), len(man.L0))
	}
	return db, g, man
}

// TestRunLaneBesideL0 holds a merge of two runs on a read while newer
// writes are flushed and compacted: L0 must drain meanwhile, and once the
// merge commits, the newest value of every key must still win, which it
// would not if the merged run went in front of the newer one.
func TestRunLaneBesideL0(t *testing.T) {
	db, g, man := twoRuns(t, "k", 200, "a", "k", 200, "b")
	wait := startHeldRunLane(t, db, g, man.Runs[1].Tables[0].ID, "k000")

	for round, v := range []string{"c", "d"} {
		flushValues(t, db, "k", 200, v)
		compactL0(t, db)
		man := db.manifestNow()
		if len(man.L0) != 0 || len(man.Runs) != 3+round {
			t.Fatalf("while the run lane is held: %d L0 tables and %d runs, want 0 and %d", len(man.L0), len(man.Runs), 3+round)
		}
		if got, _ := mustGet(t, db, "k042"); got != v {
			t.Fatalf("while the run lane is held: k042 = %q, want %q", got, v)
		}
	}
	if done, err := wait(); err != nil || done {
		t.Fatalf("run lane: done=%v err=%v", done, err)
	}
	if l0, runs := testutil.ToFloat64(db.m.compactions[laneL0]), testutil.ToFloat64(db.m.compactions[laneRuns]); l0 != 4 || runs != 1 {
		t.Fatalf("shale_lsm_compactions_total: l0 %v, runs %v; want 4 and 1", l0, runs)
	}
	man = db.manifestNow()
	if len(man.Runs) != 3 {
		t.Fatalf("%d runs after the merge, want 3 (two newer, the merged one)", len(man.Runs))
	}
	for i := range 200 {
		k := fmt.Sprintf("k%03d", i)
		if got, ok := mustGet(t, db, k); !ok || got != "d" {
			t.Fatalf("after the merge: %s = %q,%v; want \"d\"", k, got, ok)
		}
	}
	if err := db.Compact(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, _ := mustGet(t, db, "k199"); got != "d" {
		t.Fatalf("after compacting everything: k199 = %q, want \"d\"", got)
	}
}

// TestCompactionAbandonedWhenSourceDropped holds a merge of two runs while a
// range delete drops one of them whole (every table inside the range) and,
// reaching nothing else, leaves the manifest. The merge must not commit: its
// output would bring the deleted keys back.
func TestCompactionAbandonedWhenSourceDropped(t *testing.T) {
	db, g, man := twoRuns(t, "a", 100, "old", "b", 100, "new")
	// The runs do not overlap: a compaction would move their tables rather
	// than read them. Tables under an eighth of this are merged.
	db.opts.TargetTableBytes = 1 << 20
	wait := startHeldRunLane(t, db, g, man.Runs[0].Tables[0].ID, "b000")

	if err := db.DeleteRange(context.Background(), []byte("a"), []byte("b")); err != nil {
		t.Fatal(err)
	}
	if err := db.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	man = db.manifestNow()
	if len(man.Runs) != 1 || len(man.Tombs) != 0 {
		t.Fatalf("after the range delete: %d runs and %d tombstones, want the a-run dropped and no tombstone", len(man.Runs), len(man.Tombs))
	}
	if done, err := wait(); err != nil || done {
		t.Fatalf("run lane: done=%v err=%v", done, err)
	}
	for _, k := range []string{"a000", "a050", "a099"} {
		if got, ok := mustGet(t, db, k); ok {
			t.Fatalf("%s = %q after its range was deleted", k, got)
		}
	}
	if got, ok := mustGet(t, db, "b050"); !ok || got != "new" {
		t.Fatalf("b050 = %q,%v; want \"new\"", got, ok)
	}
	if db.manifestNow().tableIDs()[man.Runs[0].Tables[0].ID] != true {
		t.Fatal("the b-run was replaced by the abandoned merge's output")
	}
}

// TestPlanCompactionLanes checks the size-tiered policy of each lane on
// manifests given as table sizes: L0 tables newest first, runs newest first
// (run i has id 100+i and holds one table of its size, keys a to z).
func TestPlanCompactionLanes(t *testing.T) {
	opts := DefaultOptions()
	opts.L0CompactionTrigger = 2
	opts.MaxSortedRuns = 4
	opts.SizeRatio = 4
	opts.RunLaneBytes = 1000
	build := func(l0 []int64, runs []int64, tomb bool) *manifest {
		m := &manifest{}
		for i, s := range l0 {
			m.L0 = append(m.L0, tableMeta{ID: fmt.Sprintf("l%d", i), Size: s, SmallestKey: []byte("a"), LargestKey: []byte("z"), MinSeq: 10, MaxSeq: 20})
		}
		for i, s := range runs {
			m.Runs = append(m.Runs, sortedRun{ID: uint64(100 + i), Tables: []tableMeta{{ID: fmt.Sprintf("r%d", i), Size: s, SmallestKey: []byte("a"), LargestKey: []byte("z"), MinSeq: 1, MaxSeq: 9}}})
		}
		if tomb {
			m.Tombs = []rangeTomb{{start: []byte("m"), end: []byte("n"), seq: 30}}
		}
		return m
	}
	for _, tc := range []struct {
		name     string
		l0, runs []int64
		tomb     bool
		lane     compactionLane
		busy     []uint64
		want     string // compactionPlan.String, or "" for none
	}{
		{name: "L0 below its trigger", l0: []int64{10}, runs: []int64{50}, lane: laneL0},
		{name: "L0 and the newest runs within the ratio", l0: []int64{10, 10}, runs: []int64{50, 200, 5000}, lane: laneL0,
			want: "lane=l0 l0=2 runs=[100 101] bottom=false"},
		{name: "L0 takes in every run: bottom", l0: []int64{10, 10}, runs: []int64{50, 200}, lane: laneL0,
			want: "lane=l0 l0=2 runs=[100 101] bottom=true"},
		{name: "L0 stops before RunLaneBytes", l0: []int64{100, 100}, runs: []int64{300, 700}, lane: laneL0,
			want: "lane=l0 l0=2 runs=[100] bottom=false"},
		{name: "L0 stops at a run the other lane merges", l0: []int64{10, 10}, runs: []int64{50, 200}, busy: []uint64{100}, lane: laneL0,
			want: "lane=l0 l0=2 runs=[] bottom=false"},
		{name: "runs below RunLaneBytes are left to L0", runs: []int64{50, 200, 5000}, lane: laneRuns},
		{name: "runs that reach RunLaneBytes", runs: []int64{300, 700, 5000}, lane: laneRuns,
			want: "lane=runs l0=0 runs=[100 101] bottom=false"},
		{name: "runs from the newest one L0 does not merge", runs: []int64{10, 300, 700, 1500}, busy: []uint64{100}, lane: laneRuns,
			want: "lane=runs l0=0 runs=[101 102 103] bottom=true"},
		{name: "runs stop at a run the other lane merges", runs: []int64{300, 700, 1500}, busy: []uint64{102}, lane: laneRuns,
			want: "lane=runs l0=0 runs=[100 101] bottom=false"},
		{name: "too many runs", runs: []int64{1, 1, 1000, 10000, 100000, 1000000}, lane: laneRuns,
			want: "lane=runs l0=0 runs=[100 101 102] bottom=false"},
		{name: "too many runs, one busy", runs: []int64{1, 1, 1000, 10000, 100000, 1000000}, busy: []uint64{100}, lane: laneRuns,
			want: "lane=runs l0=0 runs=[101 102 103] bottom=false"},
		{name: "a tombstone rewrites what it reaches", l0: []int64{10}, runs: []int64{50, 5000}, tomb: true, lane: laneL0,
			want: "lane=l0 l0=1 runs=[100 101] bottom=true"},
		{name: "a tombstone waits for the run lane", l0: []int64{10}, runs: []int64{50, 5000}, tomb: true, busy: []uint64{101}, lane: laneL0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			busy := map[uint64]bool{}
			for _, id := range tc.busy {
				busy[id] = true
			}
			got := ""
			if p := planCompaction(build(tc.l0, tc.runs, tc.tomb), &opts, tc.lane, busy); p != nil {
				got = p.String()
			}
			if got != tc.want {
				t.Fatalf("plan %q, want %q", got, tc.want)
			}
		})
	}
}
