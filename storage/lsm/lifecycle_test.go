package lsm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/shaledb/shale/storage/objstore"
)

func listNames(t *testing.T, b objstore.Bucket, prefix string) []string {
	t.Helper()
	var names []string
	err := objstore.Iter(context.Background(), b, prefix, func(a objstore.Attributes) error {
		names = append(names, a.Name)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return names
}

func writeKeys(t *testing.T, db *DB, prefix string, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		if err := db.Put(context.Background(), []byte(fmt.Sprintf("%s%04d", prefix, i)), []byte(strings.Repeat("v", 50))); err != nil {
			t.Fatal(err)
		}
	}
}

// flushKeys writes keys as writeKeys does and flushes them to a table.
func flushKeys(t *testing.T, db *DB, prefix string, n int) {
	t.Helper()
	writeKeys(t, db, prefix, n)
	if err := db.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestGarbageCollection(t *testing.T) {
	ctx := context.Background()
	clock := newFakeClock()
	opts := testOptions()
	opts.ManifestsToKeep = 2
	opts.L0CompactionTrigger = 3
	db, b := openMemDB(t, opts, Components{Clock: clock})
	// A reader that keeps the first manifest until it must refresh.
	rdr, err := OpenReader(ctx, b, "db", ReaderOptions{RetryBackoff: time.Millisecond}, Components{})
	if err != nil {
		t.Fatal(err)
	}
	defer rdr.Close()
	// The same keys each round: tables over one range, which compaction
	// merges (tables of disjoint ranges it would move, leaving no garbage).
	for range 4 {
		flushKeys(t, db, "r-", 50)
	}
	if err := rdr.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if err := db.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	before := len(listNames(t, b, "db/sst/"))
	if n, err := db.CollectGarbage(ctx); err != nil || n != 0 {
		t.Fatalf("gc within the grace period deleted %d objects (err %v)", n, err)
	}
	clock.Advance(11 * time.Minute)
	n, err := db.CollectGarbage(ctx)
	if err != nil || n == 0 {
		t.Fatalf("gc after the grace period: %d, %v", n, err)
	}
	live := map[string]bool{}
	man := db.viewp.Load().man
	for _, r := range man.Runs {
		for _, tm := range r.Tables {
			live["db/sst/"+tm.ID+".sst"] = true
		}
	}
	for _, tm := range man.L0 {
		live["db/sst/"+tm.ID+".sst"] = true
	}
	ssts := listNames(t, b, "db/sst/")
	for _, name := range ssts {
		if !live[name] {
			t.Errorf("unreferenced table %s survived", name)
		}
	}
	if len(ssts) != len(live) || len(ssts) >= before {
		t.Fatalf("tables: %d listed, %d live, %d before gc", len(ssts), len(live), before)
	}
	if got := len(listNames(t, b, "db/manifest/")); got != opts.ManifestsToKeep+1 {
		t.Fatalf("%d manifests kept, want %d", got, opts.ManifestsToKeep+1)
	}
	for _, name := range listNames(t, b, "db/wal/") {
		if id, _ := db.s.paths.parseWAL(name); id <= man.ReplayAfter {
			t.Fatalf("wal %s at or below the replay position %d survived", name, man.ReplayAfter)
		}
	}
	// The reader's manifest names collected tables: it refreshes and retries.
	if v, ok := mustGet(t, rdr, "r-0001"); !ok || v != strings.Repeat("v", 50) {
		t.Fatalf("reader after gc: %q,%v", v, ok)
	}
}

func TestDeleteRangeDropsTables(t *testing.T) {
	ctx := context.Background()
	opts := testOptions()
	opts.L0CompactionTrigger = 1 // the three tables do not overlap: L0 is one deep
	db, _ := openMemDB(t, opts, Components{})
	for _, p := range []string{"p1/", "p2/", "p3/"} {
		flushKeys(t, db, p, 100)
	}
	if err := db.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	flushKeys(t, db, "p2/", 10) // p2 now also lives in L0
	if err := db.DeleteRange(ctx, []byte("p2/"), []byte("p3/")); err != nil {
		t.Fatal(err)
	}
	if _, ok := mustGet(t, db, "p2/0005"); ok {
		t.Fatal("deleted key visible in the memtable's range")
	}
	if err := db.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	man := db.viewp.Load().man
	if len(man.L0) != 0 {
		t.Fatalf("L0 table fully inside the deleted range kept: %+v", man.L0)
	}
	for _, k := range []string{"p2/0005", "p2/0050"} {
		if _, ok := mustGet(t, db, k); ok {
			t.Fatalf("%s visible after DeleteRange", k)
		}
	}
	if err := db.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	man = db.viewp.Load().man
	if len(man.Tombs) != 0 {
		t.Fatalf("tombstone kept after compaction rewrote its tables: %+v", man.Tombs)
	}
	for _, k := range []string{"p1/0099", "p3/0000"} {
		if _, ok := mustGet(t, db, k); !ok {
			t.Fatalf("%s lost", k)
		}
	}
	it, _ := db.NewIterator(ctx, []byte("p2/"), []byte("p3/"))
	if it.First() {
		t.Fatalf("iterator found %q in the deleted range", it.Key())
	}
	it.Close()
}

func TestCompactionSplitsOutput(t *testing.T) {
	ctx := context.Background()
	opts := testOptions()
	opts.TargetTableBytes = 4 << 10
	db, _ := openMemDB(t, opts, Components{})
	// Four tables whose keys interleave (s-0000-0, s-0000-1, ...): one
	// range four deep, which the compaction merges and splits.
	for i := range 4 {
		for j := range 200 {
			if err := db.Put(ctx, fmt.Appendf(nil, "s-%04d-%d", j, i), []byte(strings.Repeat("v", 50))); err != nil {
				t.Fatal(err)
			}
		}
		if err := db.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	man := db.viewp.Load().man
	if len(man.L0) != 0 || len(man.Runs) != 1 || len(man.Runs[0].Tables) < 3 {
		t.Fatalf("after compaction: l0=%d runs=%d", len(man.L0), len(man.Runs))
	}
	if moved := testutil.ToFloat64(db.m.compactionMoved[laneL0]); moved != 0 {
		t.Fatalf("%v bytes moved; every table overlaps the others", moved)
	}
	run := man.Runs[0].Tables
	for i := 1; i < len(run); i++ {
		if string(run[i-1].LargestKey) >= string(run[i].SmallestKey) {
			t.Fatalf("tables %d and %d of the run overlap", i-1, i)
		}
	}
	it, _ := db.NewIterator(ctx, nil, nil)
	if n, err := countKeys(it); err != nil || n != 800 {
		t.Fatalf("scan found %d keys, err %v", n, err)
	}
}

// gateBucket holds table uploads until the test opens the gate.
type gateBucket struct {
	objstore.Bucket
	gate chan struct{}
}

func (g *gateBucket) Put(ctx context.Context, name string, r io.Reader, size int64, opts objstore.PutOptions) (objstore.Attributes, error) {
	if strings.Contains(name, "/sst/") {
		select {
		case <-g.gate:
		case <-ctx.Done():
			return objstore.Attributes{}, ctx.Err()
		}
	}
	return g.Bucket.Put(ctx, name, r, size, opts)
}

func TestBackPressure(t *testing.T) {
	ctx := context.Background()
	gb := &gateBucket{Bucket: objstore.NewMemoryBucket(), gate: make(chan struct{})}
	opts := testOptions()
	opts.WALEnabled = false
	opts.MemtableBytes = 4 << 10
	opts.MaxUnflushedBytes = 16 << 10
	reg := prometheus.NewRegistry()
	db := openDB(t, gb, opts, Components{Registerer: reg})
	defer db.Close()
	value := make([]byte, 1000)
	i := 0
	for ; i < 1000; i++ {
		wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		err := db.Write(wctx, batchOf(fmt.Sprintf("k%04d", i), value), WriteOptions{})
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if i == 1000 {
		t.Fatal("writes never blocked while no table could be written")
	}
	if held := db.unflushedBytes(); held > opts.MaxUnflushedBytes+opts.MemtableBytes+2048 {
		t.Fatalf("memory not bounded: %d bytes unflushed", held)
	}
	if testutil.ToFloat64(db.m.writeStalls) == 0 {
		t.Fatal("stall not counted")
	}
	close(gb.gate)
	if err := db.Write(ctx, batchOf("after", value), WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := db.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if testutil.ToFloat64(db.m.flushes) == 0 || testutil.CollectAndCount(reg) == 0 {
		t.Fatal("flush metrics missing")
	}
}

func batchOf(key string, value []byte) *Batch {
	var b Batch
	b.Put([]byte(key), value)
	return &b
}

// TestGCProtectsRecentlyDroppedTables: a table that left the manifest less
// than a grace period ago stays, however old its object, since a reader may
// still hold a manifest naming it.
func TestGCProtectsRecentlyDroppedTables(t *testing.T) {
	ctx := context.Background()
	clock := newFakeClock()
	opts := testOptions()
	opts.L0CompactionTrigger = 2
	db, b := openMemDB(t, opts, Components{Clock: clock})
	for range 2 {
		flushKeys(t, db, "g-", 20) // one range twice: the compaction merges, not moves
	}
	old := db.viewp.Load().man.tableIDs()
	rdr, err := OpenReader(ctx, b, "db", ReaderOptions{ReplayWAL: true, RetryBackoff: time.Millisecond}, Components{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer rdr.Close()
	clock.Advance(time.Hour) // every object is old now
	if err := db.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.CollectGarbage(ctx); err != nil {
		t.Fatal(err)
	}
	for id := range old {
		if len(listNames(t, b, "db/sst/"+id)) == 0 {
			t.Fatalf("table %s deleted right after it left the manifest", id)
		}
	}
	// The reader, still on the old manifest, can scan it whole.
	it, _ := rdr.NewIterator(ctx, nil, nil)
	if n, err := countKeys(it); err != nil || n != 20 {
		t.Fatalf("reader on the old manifest: %d keys, %v", n, err)
	}
	clock.Advance(11 * time.Minute)
	if _, err := db.CollectGarbage(ctx); err != nil {
		t.Fatal(err)
	}
	for id := range old {
		if len(listNames(t, b, "db/sst/"+id)) != 0 {
			t.Fatalf("table %s kept a grace period after it left the manifest", id)
		}
	}
}

// TestFailLogsOnce: the goroutines of a writer that fail on one cause
// (a full disk fails the WAL's put and a table's) log the error that stops
// the writer once, and a fenced writer says so once.
func TestFailLogsOnce(t *testing.T) {
	for _, cause := range []error{errors.New("no space left on device"), ErrFenced} {
		var log strings.Builder
		db := openDB(t, objstore.NewMemoryBucket(), testOptions(), Components{Logger: slog.New(slog.NewTextHandler(&log, nil))})
		db.fail(cause)
		db.fail(cause)
		db.fail(errors.New("a later error"))
		db.Close() // its goroutines log no more
		got := strings.Count(log.String(), "lsm: writer stopped") + strings.Count(log.String(), "lsm: writer fenced")
		if got != 1 || !strings.Contains(log.String(), cause.Error()) && cause != ErrFenced {
			t.Errorf("%v: %d lines:\n%s", cause, got, log.String())
		}
	}
}
