package lsm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shaledb/shale/storage/objstore"
)

// fakeClock is a Clock moved only by the test.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Now()} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// concatMerge appends operands to the existing value: associative, as the
// MergeOperator contract asks.
func concatMerge(_, existing []byte, operands [][]byte) ([]byte, error) {
	out := append([]byte(nil), existing...)
	for _, op := range operands {
		out = append(out, op...)
	}
	return out, nil
}

var errInjected = errors.New("injected fault")

// faultBucket wraps a bucket with random transient failures, puts that land
// but report failure, and a dead switch that fails everything (a crash:
// in-flight writes are lost).
type faultBucket struct {
	objstore.Bucket
	mu       sync.Mutex
	rnd      *rand.Rand
	failProb float64 // per request
	dead     atomic.Bool
	requests atomic.Int64
}

func newFaultBucket(b objstore.Bucket, seed uint64) *faultBucket {
	return &faultBucket{Bucket: b, rnd: rand.New(rand.NewPCG(seed, 7))}
}

func (f *faultBucket) setFailProb(p float64) {
	f.mu.Lock()
	f.failProb = p
	f.mu.Unlock()
}

// roll returns: 0 pass, 1 fail before, 2 fail after applying.
func (f *faultBucket) roll() int {
	f.requests.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failProb == 0 || f.rnd.Float64() >= f.failProb {
		return 0
	}
	return 1 + f.rnd.IntN(2)
}

func (f *faultBucket) check() error {
	if f.dead.Load() {
		return errors.New("bucket unreachable")
	}
	return nil
}

func (f *faultBucket) Get(ctx context.Context, name string) (io.ReadCloser, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	if f.roll() != 0 {
		return nil, objstore.Transient(errInjected)
	}
	return f.Bucket.Get(ctx, name)
}

func (f *faultBucket) GetRange(ctx context.Context, name string, off, length int64) (io.ReadCloser, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	if f.roll() != 0 {
		return nil, objstore.Transient(errInjected)
	}
	return f.Bucket.GetRange(ctx, name, off, length)
}

func (f *faultBucket) Put(ctx context.Context, name string, r io.Reader, size int64, opts objstore.PutOptions) (objstore.Attributes, error) {
	if err := f.check(); err != nil {
		return objstore.Attributes{}, err
	}
	switch f.roll() {
	case 1:
		return objstore.Attributes{}, objstore.Transient(errInjected)
	case 2:
		if _, err := f.Bucket.Put(ctx, name, r, size, opts); err != nil {
			return objstore.Attributes{}, err
		}
		return objstore.Attributes{}, objstore.Transient(errInjected)
	}
	return f.Bucket.Put(ctx, name, r, size, opts)
}

func (f *faultBucket) Delete(ctx context.Context, name string) error {
	if err := f.check(); err != nil {
		return err
	}
	switch f.roll() {
	case 1:
		return objstore.Transient(errInjected)
	case 2:
		_ = f.Bucket.Delete(ctx, name)
		return objstore.Transient(errInjected)
	}
	return f.Bucket.Delete(ctx, name)
}

func (f *faultBucket) List(ctx context.Context, prefix, startAfter string, limit int) (objstore.ListPage, error) {
	if err := f.check(); err != nil {
		return objstore.ListPage{}, err
	}
	if f.roll() != 0 {
		return objstore.ListPage{}, objstore.Transient(errInjected)
	}
	return f.Bucket.List(ctx, prefix, startAfter, limit)
}

// testOptions are small settings that keep background work out of the way:
// tests drive flushes, compactions and GC themselves.
func testOptions() Options {
	o := DefaultOptions()
	o.WALFlushInterval = 2 * time.Millisecond
	o.MemtableBytes = 1 << 20
	o.MaxUnflushedBytes = 8 << 20
	o.MemtableMaxAge = 0
	o.CompactionInterval = 0
	o.GCInterval = 0
	o.RetryBackoff = time.Millisecond
	o.TargetTableBytes = 16 << 10
	o.Table.BlockSize = 512
	return o
}

func openDB(t testing.TB, b objstore.Bucket, opts Options, comp Components) *DB {
	t.Helper()
	if comp.Merge == nil {
		comp.Merge = concatMerge
	}
	db, err := Open(context.Background(), b, "db", opts, comp)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return db
}

// openMemDB opens a DB as openDB does on a new in-memory bucket, closed
// when the test ends; the bucket is returned for opening it again.
func openMemDB(t testing.TB, opts Options, comp Components) (*DB, objstore.Bucket) {
	t.Helper()
	b := objstore.NewMemoryBucket()
	db := openDB(t, b, opts, comp)
	t.Cleanup(func() { db.Close() })
	return db, b
}

func mustGet(t testing.TB, g interface {
	Get(context.Context, []byte) ([]byte, bool, error)
}, key string) (string, bool) {
	t.Helper()
	v, ok, err := g.Get(context.Background(), []byte(key))
	if err != nil {
		t.Fatalf("get %q: %v", key, err)
	}
	return string(v), ok
}

// countKeys counts the keys of it, and closes it.
func countKeys(it *Iterator) (int, error) {
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		n++
	}
	return n, it.Close()
}

// crash stops db as a killed process would: no flush, background work cut
// off mid-flight.
func crash(db *DB) { db.stop() }

// roundKey is key i of writeRounds.
func roundKey(i int) []byte { return fmt.Appendf(nil, "k%05d", i) }

// writeRounds writes six rounds of keys to db, each filled by fill (with
// val, 100 bytes whose first byte is the round) and flushed to a table of its
// own, and compacts after round 3: a sorted run under L0 tables.
func writeRounds(t *testing.T, db *DB, fill func(round int, batch *Batch, val []byte)) {
	t.Helper()
	ctx := context.Background()
	val := make([]byte, 100)
	for round := range 6 {
		batch := NewBatch(400, 400*110)
		val[0] = byte(round)
		fill(round, batch, val)
		if err := db.Write(ctx, batch, db.DefaultWriteOptions()); err != nil {
			t.Fatal(err)
		}
		if err := db.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if round == 3 {
			if err := db.Compact(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// closedRounds writes the rounds of writeRounds, filled by fill, on a new
// in-memory bucket with tables small enough for runs of several, and closes
// the DB: a DB opened on the bucket with the options returned reads it all
// from the store.
func closedRounds(t *testing.T, fill func(round int, batch *Batch, val []byte)) (objstore.Bucket, Options) {
	t.Helper()
	b := objstore.NewMemoryBucket()
	opts := testOptions()
	opts.TargetTableBytes = 4 << 10
	db := openDB(t, b, opts, Components{})
	writeRounds(t, db, fill)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return b, opts
}
