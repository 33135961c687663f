package lsm

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

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
	opts.L0CompactionTrigger = 2
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
