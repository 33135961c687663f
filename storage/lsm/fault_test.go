package lsm

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shaledb/shale/storage/objstore"
)

// TestFaultInjection fails and delays object store calls of one kind of
// object at a time (WAL objects, tables written by L0 flushes and
// compactions, manifests), some after the write took effect, while writers
// run; afterwards, and after a reopen, every acknowledged write is readable,
// no merge operand is applied twice, and nothing reads as corrupt.
func TestFaultInjection(t *testing.T) {
	for _, phase := range []string{"/wal/", "/sst/", "/manifest/", ""} {
		for _, wal := range []bool{true, false} {
			name := strings.Trim(phase, "/")
			if name == "" {
				name = "all"
			}
			t.Run(fmt.Sprintf("objects=%s/wal=%v", name, wal), func(t *testing.T) {
				t.Parallel()
				runFaults(t, phase, wal)
			})
		}
	}
}

func runFaults(t *testing.T, phase string, wal bool) {
	ctx := context.Background()
	mem := objstore.NewMemoryBucket()
	fb := objstore.NewFaultBucket(mem)
	opts := testOptions()
	opts.WALEnabled = wal
	opts.MemtableBytes = 8 << 10
	opts.L0CompactionTrigger = 2
	opts.CompactionInterval = time.Millisecond
	opts.MemtableMaxAge = 5 * time.Millisecond
	db := openDB(t, fb, opts, Components{})
	match := func(op objstore.Op, name string) bool { return strings.Contains(name, phase) }
	fb.Inject(objstore.Fault{Match: match, Probability: 0.3})
	fb.Inject(objstore.Fault{Match: match, Probability: 0.2, AfterApply: true})
	fb.SetLatency(100 * time.Microsecond)

	const writers, perWriter = 4, 60
	var mu sync.Mutex
	acked := map[string]string{}
	var ackedOps []string
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perWriter; i++ {
				key := fmt.Sprintf("w%d-%03d", w, i)
				val := strings.Repeat(key, 8)
				op := fmt.Sprintf("<%d.%d>", w, i)
				var b Batch
				b.Put([]byte(key), []byte(val))
				b.Merge([]byte("shared"), []byte(op))
				err := db.Write(ctx, &b, WriteOptions{AwaitDurable: wal})
				if err != nil {
					t.Errorf("write %s: %v", key, err)
					return
				}
				mu.Lock()
				acked[key] = val
				ackedOps = append(ackedOps, op)
				mu.Unlock()
				if i%20 == 19 && !wal {
					if err := db.Flush(ctx); err != nil {
						t.Errorf("flush: %v", err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		db.Close()
		return
	}
	if err := db.Flush(ctx); err != nil {
		t.Fatalf("flush under faults: %v", err)
	}
	if err := db.Compact(ctx); err != nil {
		t.Fatalf("compact under faults: %v", err)
	}
	verify := func(g getter, what string) {
		t.Helper()
		for k, v := range acked {
			got, ok, err := g.Get(ctx, []byte(k))
			if err != nil || !ok || string(got) != v {
				t.Fatalf("%s: %s = %q,%v,%v; want %q", what, k, got, ok, err, v)
			}
		}
		shared, ok, err := g.Get(ctx, []byte("shared"))
		if err != nil || !ok {
			t.Fatalf("%s: shared: %v,%v", what, ok, err)
		}
		for _, op := range ackedOps {
			if n := strings.Count(string(shared), op); n != 1 {
				t.Fatalf("%s: operand %s applied %d times", what, op, n)
			}
		}
	}
	verify(db, "under faults")
	if err := db.Close(); err != nil {
		t.Fatalf("close under faults: %v", err)
	}
	fb.ClearFaults()
	db = openDB(t, fb, opts, Components{})
	defer db.Close()
	verify(db, "after reopen")
}

// TestPermanentWALFailure: a WAL write that fails for good fails the waiting
// writes and every later one instead of hanging; acknowledged writes
// survive.
func TestPermanentWALFailure(t *testing.T) {
	ctx := context.Background()
	mem := objstore.NewMemoryBucket()
	fb := objstore.NewFaultBucket(mem)
	db := openDB(t, fb, testOptions(), Components{})
	if err := db.Put(ctx, []byte("a"), []byte("1")); err != nil {
		t.Fatal(err)
	}
	denied := errors.New("access denied")
	fb.Inject(objstore.Fault{Ops: []objstore.Op{objstore.OpPut}, Err: denied})
	if err := db.Put(ctx, []byte("b"), []byte("2")); !errors.Is(err, denied) {
		t.Fatalf("write during outage: %v, want %v", err, denied)
	}
	if err := db.Put(ctx, []byte("c"), []byte("3")); !errors.Is(err, denied) {
		t.Fatalf("write after failure: %v, want %v", err, denied)
	}
	if err := db.Close(); !errors.Is(err, denied) {
		t.Fatalf("close: %v, want %v", err, denied)
	}
	fb.ClearFaults()
	db = openDB(t, fb, testOptions(), Components{})
	defer db.Close()
	if v, ok := mustGet(t, db, "a"); !ok || v != "1" {
		t.Fatalf("acknowledged write lost: %q,%v", v, ok)
	}
}
