package lsm

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shaledb/shale/cache"
	"github.com/shaledb/shale/cache/cachetest"
	"github.com/shaledb/shale/storage/objstore"
)

// Run with:
//
//	go test -run '^$' -bench . -benchtime 2s ./storage/lsm/

// countingBucket counts requests, to report object store requests per
// second (or per operation).
type countingBucket struct {
	objstore.Bucket
	n atomic.Int64
}

func (c *countingBucket) Get(ctx context.Context, name string) (io.ReadCloser, error) {
	c.n.Add(1)
	return c.Bucket.Get(ctx, name)
}
func (c *countingBucket) GetRange(ctx context.Context, name string, off, length int64) (io.ReadCloser, error) {
	c.n.Add(1)
	return c.Bucket.GetRange(ctx, name, off, length)
}
func (c *countingBucket) Put(ctx context.Context, name string, r io.Reader, size int64, opts objstore.PutOptions) (objstore.Attributes, error) {
	c.n.Add(1)
	return c.Bucket.Put(ctx, name, r, size, opts)
}
func (c *countingBucket) List(ctx context.Context, prefix, startAfter string, limit int) (objstore.ListPage, error) {
	c.n.Add(1)
	return c.Bucket.List(ctx, prefix, startAfter, limit)
}

func benchKey(dst []byte, i uint64) []byte {
	dst = append(dst[:0], "series/"...)
	return binary.BigEndian.AppendUint64(dst, i)
}

func benchOptions(wal bool) Options {
	o := DefaultOptions()
	o.WALEnabled = wal
	o.GCInterval = 0
	return o
}

func BenchmarkPut(b *testing.B) {
	value := make([]byte, 100)
	for _, bc := range []struct {
		name  string
		wal   bool
		await bool
		batch int
	}{
		{"wal=off/batch=1", false, false, 1},
		{"wal=off/batch=100", false, false, 100},
		{"wal=on/await=false/batch=1", true, false, 1},
		{"wal=on/await=false/batch=100", true, false, 100},
	} {
		b.Run(bc.name, func(b *testing.B) {
			cb := &countingBucket{Bucket: objstore.NewMemoryBucket()}
			db, err := Open(context.Background(), cb, "bench", benchOptions(bc.wal), Components{})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			var batch Batch
			var key []byte
			var i uint64
			b.ReportAllocs()
			start := time.Now()
			for b.Loop() {
				batch.Reset()
				for j := 0; j < bc.batch; j++ {
					key = benchKey(key, i)
					i++
					batch.Put(key, value)
				}
				if err := db.Write(ctx, &batch, WriteOptions{AwaitDurable: bc.await}); err != nil {
					b.Fatal(err)
				}
			}
			elapsed := time.Since(start)
			if err := db.Close(); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(i)/elapsed.Seconds(), "puts/s")
			b.ReportMetric(float64(cb.n.Load())/elapsed.Seconds(), "requests/s")
		})
	}
}

// BenchmarkPutDurable measures group commit: many writers each wait for
// their WAL object (10 ms flush interval).
func BenchmarkPutDurable(b *testing.B) {
	value := make([]byte, 100)
	for _, writers := range []int{64, 512} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			cb := &countingBucket{Bucket: objstore.NewMemoryBucket()}
			opts := benchOptions(true)
			opts.WALFlushInterval = 10 * time.Millisecond
			db, err := Open(context.Background(), cb, "bench", opts, Components{})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			puts, elapsed := parallelPuts(b, db, writers, value)
			if err := db.Close(); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(puts)/elapsed.Seconds(), "puts/s")
			b.ReportMetric(float64(cb.n.Load())/elapsed.Seconds(), "requests/s")
		})
	}
}

// parallelPuts puts value under fresh keys from about writers goroutines
// (b.RunParallel) and returns how many puts it made and how long they took.
func parallelPuts(b *testing.B, db *DB, writers int, value []byte) (puts uint64, elapsed time.Duration) {
	var next atomic.Uint64
	b.SetParallelism(writers / max(1, testingProcs()))
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		var key []byte
		for pb.Next() {
			key = benchKey(key, next.Add(1))
			if err := db.Put(context.Background(), key, value); err != nil {
				b.Error(err)
				return
			}
		}
	})
	return next.Load(), time.Since(start)
}

func testingProcs() int { return max(1, runtimeGOMAXPROCS()) }

// loadBenchDB writes n keys and compacts them into one sorted run.
func loadBenchDB(b *testing.B, cb objstore.Bucket, c cache.Cache, n int) *DB {
	b.Helper()
	ctx := context.Background()
	opts := benchOptions(false)
	opts.CompactionInterval = 0
	db, err := Open(ctx, cb, "bench", opts, Components{Cache: c})
	if err != nil {
		b.Fatal(err)
	}
	value := make([]byte, 100)
	var batch Batch
	var key []byte
	for i := 0; i < n; i += 1000 {
		batch.Reset()
		for j := i; j < i+1000 && j < n; j++ {
			key = benchKey(key, uint64(j))
			batch.Put(key, value)
		}
		if err := db.Write(ctx, &batch, WriteOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	if err := db.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	if err := db.Compact(ctx); err != nil {
		b.Fatal(err)
	}
	return db
}

func BenchmarkGet(b *testing.B) {
	const n = 200_000
	for _, cached := range []bool{true, false} {
		b.Run(fmt.Sprintf("cached=%v", cached), func(b *testing.B) {
			cb := &countingBucket{Bucket: objstore.NewMemoryBucket()}
			var c cache.Cache
			if cached {
				c = cachetest.NewMap()
			}
			db := loadBenchDB(b, cb, c, n)
			defer db.Close()
			ctx := context.Background()
			rnd := rand.New(rand.NewPCG(1, 2))
			var key []byte
			// Warm the table handles (and the cache, when there is one).
			for i := 0; i < n; i += 50 {
				key = benchKey(key, uint64(i))
				if _, _, err := db.Get(ctx, key); err != nil {
					b.Fatal(err)
				}
			}
			before := cb.n.Load()
			gets := 0
			b.ReportAllocs()
			start := time.Now()
			for b.Loop() {
				key = benchKey(key, rnd.Uint64N(n))
				if _, ok, err := db.Get(ctx, key); err != nil || !ok {
					b.Fatalf("get: %v %v", ok, err)
				}
				gets++
			}
			elapsed := time.Since(start)
			b.ReportMetric(float64(gets)/elapsed.Seconds(), "gets/s")
			b.ReportMetric(float64(cb.n.Load()-before)/float64(gets), "requests/op")
		})
	}
}

func BenchmarkScan(b *testing.B) {
	const n = 200_000
	for _, length := range []int{100, 10_000} {
		b.Run(fmt.Sprintf("keys=%d", length), func(b *testing.B) {
			cb := &countingBucket{Bucket: objstore.NewMemoryBucket()}
			db := loadBenchDB(b, cb, cachetest.NewMap(), n)
			defer db.Close()
			ctx := context.Background()
			rnd := rand.New(rand.NewPCG(3, 4))
			var key []byte
			keys := 0
			b.ReportAllocs()
			start := time.Now()
			for b.Loop() {
				key = benchKey(key, rnd.Uint64N(n-uint64(length)))
				it, err := db.NewIterator(ctx, key, nil)
				if err != nil {
					b.Fatal(err)
				}
				ok := it.First()
				for j := 0; ok && j < length; j++ {
					keys++
					ok = it.Next()
				}
				if err := it.Close(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(keys)/time.Since(start).Seconds(), "keys/s")
		})
	}
}

func runtimeGOMAXPROCS() int { return runtime.GOMAXPROCS(0) }

// BenchmarkColdGet opens a fresh Reader (no cache, no open tables) over 8
// L0 tables and 1 sorted run behind a store with 5 ms per request, and reads
// one key that only the oldest data holds: table metadata is fetched in
// parallel, so the cost is a few round trips, not two per table.
func BenchmarkColdGet(b *testing.B) {
	ctx := context.Background()
	mem := objstore.NewMemoryBucket()
	opts := benchOptions(false)
	opts.CompactionInterval = 0
	db, err := Open(ctx, mem, "bench", opts, Components{})
	if err != nil {
		b.Fatal(err)
	}
	value := make([]byte, 100)
	var key []byte
	for t := 0; t < 9; t++ {
		for i := 0; i < 1000; i++ {
			key = benchKey(key, uint64(i*9+t))
			if err := db.Write(ctx, batchOf(string(key), value), WriteOptions{}); err != nil {
				b.Fatal(err)
			}
		}
		if err := db.Flush(ctx); err != nil {
			b.Fatal(err)
		}
		if t == 0 {
			opts.L0CompactionTrigger = 1
			if err := db.Compact(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := db.Close(); err != nil {
		b.Fatal(err)
	}
	fb := objstore.NewFaultBucket(mem)
	fb.SetLatency(5 * time.Millisecond)
	cb := &countingBucket{Bucket: fb}
	gets := 0
	var total time.Duration
	b.ReportAllocs()
	for b.Loop() {
		r, err := OpenReader(ctx, cb, "bench", ReaderOptions{RetryBackoff: time.Millisecond}, Components{})
		if err != nil {
			b.Fatal(err)
		}
		gstart := time.Now()
		if _, ok, err := r.Get(ctx, benchKey(key, 9*500)); err != nil || !ok {
			b.Fatalf("get: %v %v", ok, err)
		}
		total += time.Since(gstart)
		r.Close()
		gets++
	}
	b.ReportMetric(float64(total.Microseconds())/1000/float64(gets), "ms/get")
	b.ReportMetric(float64(cb.n.Load())/float64(gets), "requests/op")
}
