package lsm

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/shaledb/shale/corrupt"
	"github.com/shaledb/shale/storage/objstore"
)

// TestLostAnswersUnderProductionStack runs the writer over the decorators
// the server uses (a MetricsBucket over the backend), with the network's
// faults between them: conditional puts of WAL objects, L0 tables,
// compaction output and manifests that land but whose answer is lost. Each
// one must be recognised as landed by reading it back, never taken for a
// newer writer: no fencing, every acknowledged write readable, and the
// writer goes on writing.
func TestLostAnswersUnderProductionStack(t *testing.T) {
	ctx := context.Background()
	mem := objstore.NewMemoryBucket()
	fb := objstore.NewFaultBucket(mem)
	reg := prometheus.NewRegistry()
	stack, err := objstore.NewMetricsBucket(fb, reg, "test")
	if err != nil {
		t.Fatal(err)
	}
	opts := testOptions()
	// Each flush writes new keys, so L0 is one deep; its tables are small
	// and merged, not moved.
	opts.L0CompactionTrigger = 1
	db := openDB(t, stack, opts, Components{Registerer: reg})

	lose := func(dir string) {
		t.Helper()
		fb.Inject(objstore.Fault{Ops: []objstore.Op{objstore.OpPut}, AfterApply: true, Times: 1,
			Match: func(_ objstore.Op, name string) bool { return strings.Contains(name, dir) }})
	}
	n := 0
	acked := map[string]string{}
	put := func() {
		t.Helper()
		k, v := fmt.Sprintf("k%04d", n), fmt.Sprintf("v%d", n)
		n++
		if err := db.Put(ctx, []byte(k), []byte(v)); err != nil {
			t.Fatalf("put %s: %v", k, err)
		}
		acked[k] = v
	}
	landed := func() float64 { return testutil.ToFloat64(db.m.putsLanded) }

	steps := []struct {
		what string
		dir  string
		do   func() error
	}{
		{"wal object", "/wal/", func() error { put(); return nil }},
		{"l0 table", "/sst/", func() error { put(); return db.Flush(ctx) }},
		{"manifest of a flush", "/manifest/", func() error { put(); return db.Flush(ctx) }},
		{"compaction output", "/sst/", func() error {
			put()
			if err := db.Flush(ctx); err != nil {
				return err
			}
			return db.Compact(ctx)
		}},
		{"manifest of a compaction", "/manifest/", func() error {
			for range 2 {
				put()
				if err := db.Flush(ctx); err != nil {
					return err
				}
			}
			return db.Compact(ctx)
		}},
	}
	for _, st := range steps {
		before := landed()
		injectedBefore := fb.Injected(objstore.OpPut)
		lose(st.dir)
		if err := st.do(); err != nil {
			t.Fatalf("%s: %v", st.what, err)
		}
		if fb.Injected(objstore.OpPut) == injectedBefore {
			t.Fatalf("%s: no answer was lost (the step wrote no %s object)", st.what, st.dir)
		}
		if landed() <= before {
			t.Fatalf("%s: the lost answer was not recognised by reading back", st.what)
		}
		if h := db.Health(); h.Fenced {
			t.Fatalf("%s: writer fenced by its own put", st.what)
		}
		if err := db.CheckFenced(ctx); err != nil {
			t.Fatalf("%s: CheckFenced: %v", st.what, err)
		}
	}
	put()
	if got := len(db.viewp.Load().man.Runs); got == 0 {
		t.Fatalf("no compaction ran")
	}
	if err := db.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	db = openDB(t, stack, opts, Components{})
	defer db.Close()
	for k, v := range acked {
		if got, ok := mustGet(t, db, k); !ok || got != v {
			t.Fatalf("acknowledged %s = %q,%v after reopen; want %q", k, got, ok, v)
		}
	}
}

// TestSpoiledAnswers: a store whose answers are sometimes spoiled on the way
// (one bit flipped) does not keep a crashed writer from replaying its WAL,
// nor a read from its table blocks, nor a lost answer from being recognised
// as landed; a WAL object whose every answer is spoiled (corrupt at rest)
// stops the open with a corruption error rather than being skipped.
func TestSpoiledAnswers(t *testing.T) {
	ctx := context.Background()
	mem := objstore.NewMemoryBucket()
	fb := objstore.NewFaultBucket(mem)
	opts := testOptions()
	db := openDB(t, fb, opts, Components{})
	acked := map[string]string{}
	put := func(db *DB, i int) {
		t.Helper()
		k, v := fmt.Sprintf("k%04d", i), fmt.Sprintf("v%d", i)
		if err := db.Put(ctx, []byte(k), []byte(v)); err != nil {
			t.Fatalf("put %s: %v", k, err)
		}
		acked[k] = v
	}
	for i := range 40 {
		put(db, i)
	}
	if err := db.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for i := 40; i < 80; i++ { // in WAL objects only
		put(db, i)
	}
	crash(db)

	isWAL := func(_ objstore.Op, name string) bool { return strings.Contains(name, "/wal/") }
	isTable := func(_ objstore.Op, name string) bool { return strings.Contains(name, "/sst/") }
	spoil := func(match func(objstore.Op, string) bool, times int) {
		fb.Inject(objstore.Fault{Corrupt: true, Times: times, Match: match})
	}
	check := func(db *DB, what string) {
		t.Helper()
		for k, v := range acked {
			if got, ok := mustGet(t, db, k); !ok || got != v {
				t.Fatalf("%s: %s = %q,%v; want %q", what, k, got, ok, v)
			}
		}
	}

	// The first corruptRereads answers for every WAL object spoiled: the
	// replay reads each again until it checks.
	seen := map[string]int{}
	spoil(func(op objstore.Op, name string) bool {
		seen[name]++ // Match runs under the bucket's lock
		return isWAL(op, name) && seen[name] <= corruptRereads
	}, 0)
	reg := prometheus.NewRegistry()
	db = openDB(t, fb, opts, Components{Registerer: reg})
	if fb.Injected(objstore.OpGet) == 0 {
		t.Fatal("no WAL object was read")
	}
	fb.ClearFaults()
	spoiledReads := func() float64 { return testutil.ToFloat64(db.m.corruptReads) }
	if got, want := spoiledReads(), float64(fb.Injected(objstore.OpGet)); got != want {
		t.Errorf("shale_lsm_corrupt_reads_total %g, want %g (the spoiled answers)", got, want)
	}
	check(db, "replayed")

	// Table blocks read through the cache.
	if err := db.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	fb.ResetCounts()
	spoil(isTable, corruptRereads)
	before := spoiledReads()
	check(db, "tables")
	if fb.Injected(objstore.OpGetRange) == 0 {
		t.Fatal("no table block was read")
	}
	if got := spoiledReads() - before; got != float64(fb.Injected(objstore.OpGetRange)) {
		t.Errorf("%g spoiled table reads counted, want %d", got, fb.Injected(objstore.OpGetRange))
	}
	fb.ClearFaults()

	// A WAL object's put whose answer is lost, and whose read-back is
	// spoiled: it landed all the same.
	landed := testutil.ToFloat64(db.m.putsLanded)
	fb.Inject(objstore.Fault{Ops: []objstore.Op{objstore.OpPut}, AfterApply: true, Times: 1, Match: isWAL})
	spoil(isWAL, 1)
	put(db, 80)
	if testutil.ToFloat64(db.m.putsLanded) != landed+1 {
		t.Error("the lost answer was not recognised as landed")
	}
	if err := db.CheckFenced(ctx); err != nil || db.Health().Fenced {
		t.Fatalf("the writer took its own spoiled read-back for another writer: %v", err)
	}
	fb.ClearFaults()
	put(db, 81)
	crash(db)

	// Corrupt at rest: every read of one WAL object is spoiled.
	objs, err := mem.List(ctx, "db/wal/", "", 0)
	if err != nil || len(objs.Objects) == 0 {
		t.Fatalf("list wal: %d objects, %v", len(objs.Objects), err)
	}
	bad := objs.Objects[len(objs.Objects)-1].Name
	fb.Inject(objstore.Fault{Corrupt: true, Match: func(_ objstore.Op, name string) bool { return name == bad }})
	if db, err := Open(ctx, fb, "db", opts, Components{Merge: concatMerge}); !errors.Is(err, corrupt.Err) {
		if err == nil {
			db.Close()
		}
		t.Fatalf("open over a WAL object corrupt at rest: %v, want a corruption error", err)
	}
	fb.ClearFaults()
	db = openDB(t, fb, opts, Components{})
	defer db.Close()
	check(db, "reopened")
}
