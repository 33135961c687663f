package lsm

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/shaledb/shale/storage/objstore"
)

// modelVal is what the model knows of one key: a base value and the merge
// operands written after it.
type modelVal struct {
	base    string
	hasBase bool
	ops     []string
}

func (v modelVal) read() (string, bool) {
	if len(v.ops) == 0 {
		return v.base, v.hasBase
	}
	return v.base + strings.Join(v.ops, ""), true
}

type model map[string]modelVal

func (m model) clone() model {
	c := make(model, len(m))
	for k, v := range m {
		v.ops = slices.Clone(v.ops)
		c[k] = v
	}
	return c
}

func (m model) apply(op modelOp) {
	switch op.kind {
	case kindPut:
		m[op.key] = modelVal{base: op.value, hasBase: true}
	case kindDelete:
		delete(m, op.key)
	case kindMerge:
		v := m[op.key]
		v.ops = append(v.ops, op.value)
		m[op.key] = v
	case kindRangeDelete:
		for k := range m {
			if k >= op.key && k < op.value {
				delete(m, k)
			}
		}
	}
}

type modelOp struct {
	kind       kind
	key, value string
}

func (op modelOp) addTo(b *Batch) {
	switch op.kind {
	case kindPut:
		b.Put([]byte(op.key), []byte(op.value))
	case kindDelete:
		b.Delete([]byte(op.key))
	case kindMerge:
		b.Merge([]byte(op.key), []byte(op.value))
	case kindRangeDelete:
		b.DeleteRange([]byte(op.key), []byte(op.value))
	}
}

type getter interface {
	Get(context.Context, []byte) ([]byte, bool, error)
	NewIterator(ctx context.Context, lower, upper []byte) (*Iterator, error)
}

const modelKeys = 40

func modelKey(i int) string { return fmt.Sprintf("k%02d", i) }

// checkModel compares every key and a full and a bounded scan of g with m.
func checkModel(t *testing.T, rnd *rand.Rand, g getter, m model, what string) {
	t.Helper()
	ctx := context.Background()
	for i := 0; i < modelKeys; i++ {
		k := modelKey(i)
		want, wantOK := m[k].read()
		got, ok, err := g.Get(ctx, []byte(k))
		if err != nil {
			t.Fatalf("%s: get %s: %v", what, k, err)
		}
		if ok != wantOK || string(got) != want {
			t.Fatalf("%s: get %s = %q,%v; model has %q,%v", what, k, got, ok, want, wantOK)
		}
	}
	lo, hi := rnd.IntN(modelKeys), rnd.IntN(modelKeys+1)
	bounds := [][2][]byte{{nil, nil}, {[]byte(modelKey(lo)), []byte(modelKey(hi))}}
	for _, bnd := range bounds {
		var want []string
		for _, k := range slices.Sorted(maps.Keys(m)) {
			if bnd[0] != nil && (k < string(bnd[0]) || k >= string(bnd[1])) {
				continue
			}
			if v, ok := m[k].read(); ok {
				want = append(want, k+"="+v)
			}
		}
		it, err := g.NewIterator(ctx, bnd[0], bnd[1])
		if err != nil {
			t.Fatalf("%s: iterator: %v", what, err)
		}
		var got []string
		for ok := it.First(); ok; ok = it.Next() {
			got = append(got, string(it.Key())+"="+string(it.Value()))
		}
		if err := it.Close(); err != nil {
			t.Fatalf("%s: iterate [%q,%q): %v", what, bnd[0], bnd[1], err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%s: scan [%q,%q):\n got %v\nwant %v", what, bnd[0], bnd[1], got, want)
		}
		// SeekGE into the middle agrees with the scan too.
		if len(want) > 1 {
			it, _ := g.NewIterator(ctx, bnd[0], bnd[1])
			mid := want[len(want)/2]
			if !it.SeekGE([]byte(mid[:strings.IndexByte(mid, '=')])) || string(it.Key())+"="+string(it.Value()) != mid {
				t.Fatalf("%s: SeekGE(%s) landed on %q", what, mid, it.Key())
			}
			it.Close()
		}
	}
}

type modelConfig struct {
	wal    bool
	faults bool
	// background runs compactions (and, with the WAL, age flushes) on their
	// own, so crashes land in the middle of them.
	background bool
	seed       uint64
	steps      int
	// regions splits flushes at the tens digit of the key and writes one
	// region at a time, mostly: L0 tables then often overlap no other, and
	// compactions move them.
	regions bool
}

// TestModel runs random writes, flushes, compactions, GC, crashes and
// reopens against a map, with a reader following, and checks that the DB
// and the reader give the model's answers every time: acknowledged writes
// survive crashes.
func TestModel(t *testing.T) {
	var cfgs []modelConfig
	for seed := uint64(1); seed <= 3; seed++ {
		for _, wal := range []bool{true, false} {
			for _, faults := range []bool{false, true} {
				cfgs = append(cfgs, modelConfig{wal: wal, faults: faults, seed: seed, steps: 400})
			}
		}
		cfgs = append(cfgs, modelConfig{wal: true, faults: true, background: true, seed: seed, steps: 400})
		cfgs = append(cfgs, modelConfig{wal: false, faults: true, background: true, seed: seed, steps: 400})
		cfgs = append(cfgs, modelConfig{wal: true, faults: true, regions: true, seed: seed, steps: 400})
		cfgs = append(cfgs, modelConfig{wal: false, faults: true, background: true, regions: true, seed: seed, steps: 400})
	}
	for _, cfg := range cfgs {
		t.Run(fmt.Sprintf("wal=%v/faults=%v/background=%v/regions=%v/seed=%d", cfg.wal, cfg.faults, cfg.background, cfg.regions, cfg.seed), func(t *testing.T) {
			t.Parallel()
			runModel(t, objstore.NewMemoryBucket(), cfg)
		})
	}
}

func runModel(t *testing.T, base objstore.Bucket, cfg modelConfig) {
	ctx := context.Background()
	rnd := rand.New(rand.NewPCG(cfg.seed, 99))
	clock := newFakeClock()
	fb := newFaultBucket(base, cfg.seed)
	if cfg.faults {
		fb.setFailProb(0.05)
	}
	opts := testOptions()
	opts.WALEnabled = cfg.wal
	opts.L0CompactionTrigger = 2
	opts.L0StallTables = 1000
	opts.MaxSortedRuns = 3
	opts.TargetTableBytes = 2 << 10
	// Runs of a few tables go to the run lane: with background compaction
	// it merges them beside the L0 lane.
	opts.RunLaneBytes = 512
	if !cfg.wal {
		// Without a WAL only flushed writes are durable; keep flushes to the
		// test's Flush calls so the durable state is known exactly.
		opts.MemtableBytes = 64 << 20
		opts.MaxUnflushedBytes = 64 << 20
	} else {
		opts.MemtableBytes = 4 << 10
	}
	if cfg.background {
		opts.CompactionInterval = time.Millisecond
		if cfg.wal {
			opts.MemtableMaxAge = time.Millisecond
		}
	}
	comp := Components{Clock: clock, Merge: concatMerge}
	if cfg.regions {
		opts.TargetTableBytes = 1 << 10
		comp.FlushSplit = func(prev, key []byte) bool { return prev[1] != key[1] }
	}
	db := openDB(t, fb, opts, comp)
	defer func() { db.Close() }()
	// moved counts the bytes compactions moved, over every DB opened.
	var moved float64
	movedBy := func(db *DB) float64 {
		return testutil.ToFloat64(db.m.compactionMoved[laneL0]) + testutil.ToFloat64(db.m.compactionMoved[laneRuns])
	}
	rdr, err := OpenReader(ctx, base, "db", ReaderOptions{ReplayWAL: true, RetryBackoff: time.Millisecond}, comp)
	if err != nil {
		t.Fatal(err)
	}
	defer rdr.Close()

	live := model{}    // every acknowledged write
	durable := model{} // what must survive a crash
	inflight := 0
	var b Batch
	step := 0
	randOp := func() modelOp {
		k := modelKey(rnd.IntN(modelKeys))
		if cfg.regions && rnd.IntN(5) > 0 {
			k = modelKey((step/25)%(modelKeys/10)*10 + rnd.IntN(10))
		}
		switch r := rnd.IntN(100); {
		case r < 45:
			return modelOp{kind: kindPut, key: k, value: fmt.Sprintf("v%d", rnd.IntN(1000))}
		case r < 60:
			return modelOp{kind: kindDelete, key: k}
		case r < 95:
			return modelOp{kind: kindMerge, key: k, value: fmt.Sprintf("+%d", rnd.IntN(10))}
		default:
			lo := rnd.IntN(modelKeys)
			return modelOp{kind: kindRangeDelete, key: modelKey(lo), value: modelKey(lo + 1 + rnd.IntN(6))}
		}
	}
	reopen := func(why string) {
		t.Helper()
		moved += movedBy(db)
		db = openDB(t, fb, opts, comp)
		if cfg.wal {
			durable = live.clone()
		} else {
			live = durable.clone()
		}
		checkModel(t, rnd, db, live, why)
	}
	for ; step < cfg.steps; step++ {
		switch r := rnd.IntN(100); {
		case r < 70:
			op := randOp()
			b.Reset()
			op.addTo(&b)
			if err := db.Write(ctx, &b, WriteOptions{AwaitDurable: cfg.wal}); err != nil {
				t.Fatalf("step %d: write %+v: %v", step, op, err)
			}
			live.apply(op)
			if cfg.wal {
				durable.apply(op)
			}
			k := op.key
			want, wantOK := live[k].read()
			if got, ok := mustGet(t, db, k); ok != wantOK || got != want {
				t.Fatalf("step %d: after %+v get %s = %q,%v; want %q,%v", step, op, k, got, ok, want, wantOK)
			}
		case r < 75:
			b.Reset()
			var ops []modelOp
			for i := 0; i < 2+rnd.IntN(8); i++ {
				op := randOp()
				op.addTo(&b)
				ops = append(ops, op)
			}
			if err := db.Write(ctx, &b, WriteOptions{AwaitDurable: cfg.wal}); err != nil {
				t.Fatalf("step %d: batch: %v", step, err)
			}
			for _, op := range ops {
				live.apply(op)
				if cfg.wal {
					durable.apply(op)
				}
			}
		case r < 78:
			clock.Advance(time.Duration(500+rnd.IntN(1500)) * time.Millisecond)
		case r < 84:
			if err := db.Flush(ctx); err != nil {
				t.Fatalf("step %d: flush: %v", step, err)
			}
			durable = live.clone()
		case r < 88:
			if err := db.Compact(ctx); err != nil {
				t.Fatalf("step %d: compact: %v", step, err)
			}
		case r < 90:
			clock.Advance(11 * time.Minute)
			if _, err := db.CollectGarbage(ctx); err != nil {
				t.Fatalf("step %d: gc: %v", step, err)
			}
		case r < 94:
			if err := rdr.Refresh(ctx); err != nil {
				t.Fatalf("step %d: reader refresh: %v", step, err)
			}
			checkModel(t, rnd, rdr, durable, fmt.Sprintf("step %d reader", step))
		case r < 97:
			// Crash: maybe with a write in flight that the store never gets.
			if cfg.faults && rnd.IntN(2) == 0 {
				fb.dead.Store(true)
				inflight++
				key := fmt.Sprintf("inflight%03d", inflight)
				done := make(chan error, 1)
				go func() { done <- db.Put(ctx, []byte(key), []byte("x")) }()
				crash(db)
				<-done
				fb.dead.Store(false)
			} else {
				crash(db)
			}
			reopen(fmt.Sprintf("step %d after crash", step))
		default:
			if err := db.Close(); err != nil {
				t.Fatalf("step %d: close: %v", step, err)
			}
			durable = live.clone()
			reopen(fmt.Sprintf("step %d after close", step))
		}
		if step%50 == 0 {
			checkModel(t, rnd, db, live, fmt.Sprintf("step %d", step))
		}
	}
	checkModel(t, rnd, db, live, "end")
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if moved += movedBy(db); cfg.regions && moved == 0 {
		t.Error("no compaction moved a table: the run did not test moves")
	}
	if err := rdr.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	checkModel(t, rnd, rdr, live, "reader at end")
}
