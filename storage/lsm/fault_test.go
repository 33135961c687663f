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

// TestRefusedWritesHeal: a store that refuses every write for a while (a
// revoked permission, a read-only folder) makes writes wait and the health
// say so, not fail for good; once it takes writes again the waiting write
// completes, later ones succeed, health is ok, and nothing acknowledged is
// lost across a reopen.
func TestRefusedWritesHeal(t *testing.T) {
	for _, wal := range []bool{true, false} {
		t.Run(fmt.Sprintf("wal=%v", wal), func(t *testing.T) {
			ctx := context.Background()
			mem := objstore.NewMemoryBucket()
			fb := objstore.NewFaultBucket(mem)
			opts := testOptions()
			opts.WALEnabled = wal
			opts.MaxRetryBackoff = 5 * time.Millisecond
			db := openDB(t, fb, opts, Components{})
			wopts := WriteOptions{AwaitDurable: wal}
			put := func(ctx context.Context, k, v string) error {
				var b Batch
				b.Put([]byte(k), []byte(v))
				if err := db.Write(ctx, &b, wopts); err != nil {
					return err
				}
				if !wal {
					return db.Flush(ctx)
				}
				return nil
			}
			if err := put(ctx, "a", "1"); err != nil {
				t.Fatal(err)
			}
			denied := errors.New("access denied")
			refused := make(chan struct{}, 1)
			remove := fb.Inject(objstore.Fault{Ops: []objstore.Op{objstore.OpPut}, Err: denied,
				Match: func(objstore.Op, string) bool {
					select {
					case refused <- struct{}{}:
					default:
					}
					return true
				}})
			// A write with a deadline gives up waiting; the one without
			// waits for the store.
			short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			if err := put(short, "b", "2"); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("write with a deadline while refused: %v, want %v", err, context.DeadlineExceeded)
			}
			cancel()
			// A refusal is seen before it is recorded; the retry that
			// follows comes after, so wait on refusals until health says so.
			h := db.Health()
			for !h.Failing {
				<-refused
				h = db.Health()
			}
			if !h.Failing || !errors.Is(h.Err, denied) || h.Fenced {
				t.Fatalf("health while refused: %+v", h)
			}
			waiting := make(chan error, 1)
			go func() { waiting <- put(ctx, "c", "3") }()
			<-refused // the store refused again after the waiting write began
			select {
			case err := <-waiting:
				t.Fatalf("write returned while the store refuses writes: %v", err)
			default:
			}
			remove()
			if err := <-waiting; err != nil {
				t.Fatalf("write after the store took writes again: %v", err)
			}
			if err := put(ctx, "d", "4"); err != nil {
				t.Fatalf("later write: %v", err)
			}
			if h := db.Health(); h.Failing || h.Err != nil {
				t.Fatalf("health after recovery: %+v", h)
			}
			if err := db.Close(); err != nil {
				t.Fatalf("close: %v", err)
			}
			db = openDB(t, fb, opts, Components{})
			defer db.Close()
			for k, v := range map[string]string{"a": "1", "c": "3", "d": "4"} {
				if got, ok := mustGet(t, db, k); !ok || got != v {
					t.Fatalf("acknowledged write %s lost: %q,%v", k, got, ok)
				}
			}
		})
	}
}

// TestOpenThroughFailingLeaseReads: a writer (and a reader asking for the
// writer's lease) opening while the store fails the lease's HEAD retries it
// rather than giving up: a restart during a bad minute of the store waits
// for it, as every other request of the writer does.
func TestOpenThroughFailingLeaseReads(t *testing.T) {
	ctx := context.Background()
	mem := objstore.NewMemoryBucket()
	fb := objstore.NewFaultBucket(mem)
	opts := testOptions()
	opts.MaxRetryBackoff = 5 * time.Millisecond
	db := openDB(t, fb, opts, Components{})
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	reset := objstore.Transient(errors.New("connection reset by peer"))
	fb.FailNext(objstore.OpAttributes, 3, reset)
	db = openDB(t, fb, opts, Components{})
	defer db.Close()
	if n := fb.Injected(objstore.OpAttributes); n != 3 {
		t.Fatalf("%d lease reads failed, want 3", n)
	}

	r, err := OpenReader(ctx, fb, "db", ReaderOptions{RetryBackoff: time.Millisecond}, Components{Merge: concatMerge})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	fb.FailNext(objstore.OpAttributes, 2, reset)
	lease, err := r.WriterLease(ctx)
	if err != nil || lease == "" {
		t.Fatalf("writer lease through failing reads: %q, %v", lease, err)
	}
}
