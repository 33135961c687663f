package lsm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shaledb/shale/storage/objstore"
)

// openBusyDB opens a DB without a WAL whose memtables of memtableBytes
// freeze often and whose L0 is compacted at l0Trigger tables, every
// millisecond: flushes and compactions run beside a test's writes.
func openBusyDB(t *testing.T, memtableBytes int64, l0Trigger int) *DB {
	opts := testOptions()
	opts.WALEnabled = false
	opts.MemtableBytes = memtableBytes
	opts.L0CompactionTrigger = l0Trigger
	opts.CompactionInterval = time.Millisecond
	db, _ := openMemDB(t, opts, Components{})
	return db
}

// TestConcurrentReadWrite: while writers go through memtable freezes, L0
// flushes and background compactions, readers always see every write that
// was acknowledged before they looked, and scans stay sorted.
func TestConcurrentReadWrite(t *testing.T) {
	ctx := context.Background()
	db := openBusyDB(t, 4<<10, 2)

	const writers, perWriter = 2, 400
	var written [writers]atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perWriter; i++ {
				var b Batch
				b.Put([]byte(fmt.Sprintf("w%d/%05d", w, i)), []byte(fmt.Sprintf("value-%d-%d", w, i)))
				b.Merge([]byte(fmt.Sprintf("count/%d", w)), []byte{'x'})
				if err := db.Write(ctx, &b, WriteOptions{}); err != nil {
					t.Error(err)
					return
				}
				written[w].Store(int64(i + 1))
			}
		}()
	}
	var rg sync.WaitGroup
	for r := 0; r < 2; r++ {
		rg.Add(1)
		go func() {
			defer rg.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				w := n % writers
				done := written[w].Load()
				if done == 0 {
					continue
				}
				i := n % int(done)
				want := fmt.Sprintf("value-%d-%d", w, i)
				v, ok, err := db.Get(ctx, []byte(fmt.Sprintf("w%d/%05d", w, i)))
				if err != nil || !ok || string(v) != want {
					t.Errorf("get w%d/%05d = %q,%v,%v; want %q", w, i, v, ok, err, want)
					return
				}
				c, ok, err := db.Get(ctx, []byte(fmt.Sprintf("count/%d", w)))
				if err != nil || !ok || int64(len(c)) < done {
					t.Errorf("count/%d has %d operands, want >= %d (%v)", w, len(c), done, err)
					return
				}
				if n%20 == 0 {
					it, err := db.NewIterator(ctx, []byte(fmt.Sprintf("w%d/", w)), []byte(fmt.Sprintf("w%d0", w)))
					if err != nil {
						t.Error(err)
						return
					}
					var prev []byte
					seen := int64(0)
					for ok := it.First(); ok; ok = it.Next() {
						if prev != nil && string(prev) >= string(it.Key()) {
							t.Errorf("scan out of order: %q then %q", prev, it.Key())
						}
						prev = append(prev[:0], it.Key()...)
						seen++
					}
					if err := it.Close(); err != nil || seen < done {
						t.Errorf("scan saw %d keys of writer %d, want >= %d (%v)", seen, w, done, err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	rg.Wait()
}

// TestFencingWhileWriting opens a second writer while the first is busy;
// every write the first one acknowledged as durable before being fenced is
// in the second, and the first only ever fails with ErrFenced.
func TestFencingWhileWriting(t *testing.T) {
	for _, wal := range []bool{true, false} {
		t.Run(fmt.Sprintf("wal=%v", wal), func(t *testing.T) {
			ctx := context.Background()
			b := objstore.NewMemoryBucket()
			opts := testOptions()
			opts.WALEnabled = wal
			opts.MemtableBytes = 2 << 10
			old := openDB(t, b, opts, Components{})
			var mu sync.Mutex
			var acked []string
			var wg sync.WaitGroup
			started := make(chan struct{})
			var once sync.Once
			for w := 0; w < 3; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var pending []string
					for i := 0; ; i++ {
						key := fmt.Sprintf("w%d-%05d", w, i)
						err := old.Put(ctx, []byte(key), []byte(key))
						if err == nil && !wal && i%5 == 4 {
							err = old.Flush(ctx)
						}
						if err != nil {
							if !errors.Is(err, ErrFenced) {
								t.Errorf("old writer failed with %v, want ErrFenced", err)
							}
							return
						}
						pending = append(pending, key)
						if wal || i%5 == 4 {
							mu.Lock()
							acked = append(acked, pending...)
							mu.Unlock()
							pending = pending[:0]
						}
						if i == 10 {
							once.Do(func() { close(started) })
						}
					}
				}()
			}
			<-started
			cur := openDB(t, b, opts, Components{})
			defer cur.Close()
			if err := cur.Put(ctx, []byte("new"), []byte("1")); err != nil {
				t.Fatal(err)
			}
			if err := cur.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			wg.Wait()
			old.Close()
			for _, k := range acked {
				if v, ok := mustGet(t, cur, k); !ok || v != k {
					t.Fatalf("acknowledged write %s lost after fencing: %q,%v", k, v, ok)
				}
			}
			if len(acked) == 0 {
				t.Fatal("old writer acknowledged nothing")
			}
		})
	}
}

// TestLargeBatchesAtomic writes batches that each rewrite every key of a
// writer's set with the batch's generation, from two writers at once, large
// enough to fill several memtables in a run, beside small writes and
// readers. A snapshot never shows part of a batch (every key of a set has
// one generation), and a write is visible once its Write returns. (A Write
// that inserted outside the DB's lock and published its sequence numbers
// out of order failed it.)
func TestLargeBatchesAtomic(t *testing.T) {
	ctx := context.Background()
	db := openBusyDB(t, 256<<10, 4)

	const writers, keys, gens = 2, 2000, 12
	var written [writers]atomic.Int64 // generations whose Write returned
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			value := make([]byte, 64)
			for g := 1; g <= gens; g++ {
				var b Batch
				for k := range keys {
					binary.BigEndian.PutUint64(value, uint64(g))
					b.Put(fmt.Appendf(nil, "set%d/%05d", w, k), value)
				}
				if err := db.Write(ctx, &b, WriteOptions{}); err != nil {
					t.Error(err)
					return
				}
				written[w].Store(int64(g))
			}
		})
	}
	var small atomic.Int64 // small writes whose Write returned
	wg.Go(func() {
		for i := 1; i <= 300; i++ {
			var b Batch
			b.Put(fmt.Appendf(nil, "small/%05d", i), []byte("v"))
			if err := db.Write(ctx, &b, WriteOptions{}); err != nil {
				t.Error(err)
				return
			}
			small.Store(int64(i))
		}
	})
	stop := make(chan struct{})
	var rg sync.WaitGroup
	for r := range 2 {
		rg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				w := (n + r) % writers
				floor := written[w].Load()
				smallFloor := small.Load()
				it, err := db.NewIterator(ctx, fmt.Appendf(nil, "set%d/", w), fmt.Appendf(nil, "set%d0", w))
				if err != nil {
					t.Error(err)
					return
				}
				seen, gen := 0, int64(-1)
				for ok := it.First(); ok; ok = it.Next() {
					g := int64(binary.BigEndian.Uint64(it.Value()))
					if gen >= 0 && g != gen {
						t.Errorf("set%d: %s has generation %d, the keys before it %d: part of a batch seen", w, it.Key(), g, gen)
					}
					gen = g
					seen++
				}
				if err := it.Close(); err != nil {
					t.Error(err)
					return
				}
				if floor > 0 && (seen != keys || gen < floor) {
					t.Errorf("set%d: %d keys at generation %d after generation %d was written", w, seen, gen, floor)
				}
				if smallFloor > 0 {
					if _, ok, err := db.Get(ctx, fmt.Appendf(nil, "small/%05d", smallFloor)); err != nil || !ok {
						t.Errorf("small/%05d not found after its write returned (%v)", smallFloor, err)
					}
				}
				if t.Failed() {
					return
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	rg.Wait()
}
