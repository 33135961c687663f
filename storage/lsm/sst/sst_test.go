package sst

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/shaledb/shale/cache"
	"github.com/shaledb/shale/cache/cachetest"
)

func TestRoundTrip(t *testing.T) {
	specs := map[string]genSpec{
		"small":          {keys: 300, maxVersions: 1, maxValue: 40},
		"empty-values":   {keys: 200, maxVersions: 2, maxValue: 10, emptyShare: 0.7},
		"large-values":   {keys: 50, maxVersions: 2, maxValue: 100, largeEvery: 7, largeSize: 9000},
		"long-prefix":    {keys: 400, prefixLen: 200, maxVersions: 1, maxValue: 20},
		"many-versions":  {keys: 20, maxVersions: 120, maxValue: 30},
		"single":         {keys: 1, maxVersions: 1, maxValue: 5},
		"one-key-spills": {keys: 1, maxVersions: 400, maxValue: 50},
	}
	optsList := map[string]WriterOptions{
		"default":        DefaultWriterOptions(),
		"none-tiny":      {BlockSize: 64, BloomBitsPerKey: 10, Compression: CompressionNone, RestartInterval: 1},
		"zstd-1k":        {BlockSize: 1024, BloomBitsPerKey: 10, Compression: CompressionZstd, RestartInterval: 4},
		"s2-nofilter":    {BlockSize: 512, Compression: CompressionS2},
		"none-bigblocks": {BlockSize: 64 << 10, BloomBitsPerKey: 3, RestartInterval: 128},
	}
	for sname, spec := range specs {
		for oname, opts := range optsList {
			t.Run("entries="+sname+"/opts="+oname, func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(len(sname)), uint64(len(oname))))
				entries := genEntries(rng, spec)
				data, info := buildTable(t, entries, opts)
				checkInfo(t, info, entries)
				for _, c := range []cache.Cache{nil, cachetest.NewMap()} {
					tb := openTable(t, data, c)
					got := tb.Info()
					if got.Size != info.Size || got.NumDataBlocks != info.NumDataBlocks || got.DataSize != info.DataSize ||
						got.IndexSize != info.IndexSize || got.FilterSize != info.FilterSize {
						t.Fatalf("opened info %+v, writer info %+v", got, info)
					}
					checkInfo(t, got, entries)
					checkTable(t, tb, entries, rng)
				}
			})
		}
	}
}

func checkInfo(t *testing.T, info Info, entries []Entry) {
	t.Helper()
	if info.NumEntries != uint64(len(entries)) {
		t.Fatalf("info has %d entries, want %d", info.NumEntries, len(entries))
	}
	if !bytes.Equal(info.SmallestKey, entries[0].Key) || !bytes.Equal(info.LargestKey, entries[len(entries)-1].Key) {
		t.Fatalf("info keys [%q, %q], want [%q, %q]", info.SmallestKey, info.LargestKey, entries[0].Key, entries[len(entries)-1].Key)
	}
	minSeq, maxSeq := entries[0].Seq, entries[0].Seq
	for _, e := range entries {
		minSeq, maxSeq = min(minSeq, e.Seq), max(maxSeq, e.Seq)
	}
	if info.MinSeq != minSeq || info.MaxSeq != maxSeq {
		t.Fatalf("info seqs [%d, %d], want [%d, %d]", info.MinSeq, info.MaxSeq, minSeq, maxSeq)
	}
}

// checkTable compares a table with the entries it was built from: a full
// scan, Get of every key and of absent keys, and random bounded seeks.
func checkTable(t *testing.T, tb *Table, entries []Entry, rng *rand.Rand) {
	t.Helper()
	ctx := context.Background()
	it := tb.NewIter(ctx, nil, nil)
	checkEntries(t, "full scan", collect(t, it, it.First()), entries)
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}

	var dst []Entry
	for i := 0; i < len(entries); {
		j := i
		for j < len(entries) && bytes.Equal(entries[j].Key, entries[i].Key) {
			j++
		}
		var err error
		if dst, err = tb.Get(ctx, entries[i].Key, dst[:0]); err != nil {
			t.Fatalf("get %q: %v", entries[i].Key, err)
		}
		checkEntries(t, fmt.Sprintf("get %q", entries[i].Key), dst, entries[i:j])
		absent := append(bytes.Clone(entries[i].Key), 0)
		if j < len(entries) && bytes.Equal(absent, entries[j].Key) {
			absent = append(absent, 0)
		}
		if dst, err = tb.Get(ctx, absent, dst[:0]); err != nil || len(dst) != 0 {
			t.Fatalf("get absent %q: %d entries, %v", absent, len(dst), err)
		}
		i = j
	}
	for _, k := range [][]byte{nil, {}, {0}, bytes.Repeat([]byte{0xff}, 300)} {
		if got, err := tb.Get(ctx, k, nil); err != nil || len(got) != 0 {
			t.Fatalf("get %q: %d entries, %v", k, len(got), err)
		}
	}

	randKey := func() []byte {
		if rng.IntN(5) == 0 {
			return nil
		}
		k := bytes.Clone(entries[rng.IntN(len(entries))].Key)
		switch rng.IntN(3) {
		case 0:
			k = append(k, byte(rng.IntN(256)))
		case 1:
			k = k[:rng.IntN(len(k)+1)]
		}
		return k
	}
	for range 12 {
		lower, upper := randKey(), randKey()
		it := tb.NewIter(ctx, lower, upper)
		lo, hi := 0, len(entries)
		if lower != nil {
			lo = lowerBound(entries, lower)
		}
		if upper != nil {
			hi = lowerBound(entries, upper)
		}
		want := entries[lo:max(lo, hi)]
		checkEntries(t, fmt.Sprintf("first in [%q, %q)", lower, upper), collect(t, it, it.First()), want)
		for range 3 {
			k := randKey()
			if k == nil {
				k = []byte{}
			}
			from := max(lowerBound(entries, k), lo)
			want := entries[from:max(from, hi)]
			got := collect(t, it, it.SeekGE(k))
			checkEntries(t, fmt.Sprintf("seek %q in [%q, %q)", k, lower, upper), got, want)
		}
		if it.Next() || it.Valid() {
			t.Fatal("exhausted iterator moved on")
		}
		if err := it.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestEmptyTable(t *testing.T) {
	data, info := buildTable(t, nil, DefaultWriterOptions())
	if info.NumEntries != 0 || info.NumDataBlocks != 0 || info.SmallestKey != nil || info.LargestKey != nil {
		t.Fatalf("info %+v", info)
	}
	tb := openTable(t, data, nil)
	it := tb.NewIter(context.Background(), nil, nil)
	if it.First() || it.SeekGE([]byte("a")) || it.Err() != nil {
		t.Fatalf("empty table iterates: %v", it.Err())
	}
	if got, err := tb.Get(context.Background(), []byte("a"), nil); err != nil || got != nil {
		t.Fatalf("get: %v %v", got, err)
	}
	if tb.MayContain([]byte("a")) {
		t.Fatal("empty table may contain a key")
	}
}

// TestKeySpanningBlocks checks one key whose entries fill several blocks, with
// neighbours on both sides.
func TestKeySpanningBlocks(t *testing.T) {
	var entries []Entry
	entries = append(entries, Entry{Key: []byte("a"), Seq: 1, Kind: KindPut, Value: []byte("x")})
	for s := 500; s > 0; s-- {
		entries = append(entries, Entry{Key: []byte("key"), Seq: uint64(s), Kind: KindMerge, Value: fmt.Appendf(nil, "operand-%d", s)})
	}
	entries = append(entries, Entry{Key: []byte("z"), Seq: 1, Kind: KindDelete})
	opts := WriterOptions{BlockSize: 256, BloomBitsPerKey: 10, Compression: CompressionS2}
	data, info := buildTable(t, entries, opts)
	if info.NumDataBlocks < 10 {
		t.Fatalf("%d blocks; want the key to span many", info.NumDataBlocks)
	}
	tb := openTable(t, data, cachetest.NewMap())
	got, err := tb.Get(context.Background(), []byte("key"), nil)
	if err != nil {
		t.Fatal(err)
	}
	checkEntries(t, "get", got, entries[1:501])
	it := tb.NewIter(context.Background(), nil, nil)
	defer it.Close()
	checkEntries(t, "seek", collect(t, it, it.SeekGE([]byte("key"))), entries[1:])
	checkEntries(t, "seek past", collect(t, it, it.SeekGE([]byte("key\x00"))), entries[501:])
	it2 := tb.NewIter(context.Background(), []byte("b"), []byte("key\x00"))
	defer it2.Close()
	checkEntries(t, "bounded", collect(t, it2, it2.First()), entries[1:501])
}

func TestWriterRejects(t *testing.T) {
	e := func(k string, seq uint64, kind Kind) Entry { return Entry{Key: []byte(k), Seq: seq, Kind: kind} }
	tests := []struct {
		name  string
		opts  WriterOptions
		first Entry
		next  Entry
	}{
		{"key-order", DefaultWriterOptions(), e("b", 1, KindPut), e("a", 1, KindPut)},
		{"seq-equal", DefaultWriterOptions(), e("a", 5, KindPut), e("a", 5, KindPut)},
		{"seq-rising", DefaultWriterOptions(), e("a", 5, KindPut), e("a", 6, KindMerge)},
		{"bad-kind", DefaultWriterOptions(), e("a", 5, KindPut), e("b", 5, 0)},
		{"bad-kind-high", DefaultWriterOptions(), e("a", 5, KindPut), e("b", 5, 4)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := NewWriter(&bytes.Buffer{}, tc.opts)
			if err := w.Add(tc.first); err != nil {
				t.Fatal(err)
			}
			if err := w.Add(tc.next); err == nil {
				t.Fatal("accepted")
			}
			// The writer stays usable for entries in order.
			if err := w.Add(e("c", 1, KindPut)); err != nil {
				t.Fatal(err)
			}
			if _, err := w.Finish(); err != nil {
				t.Fatal(err)
			}
			if _, err := w.Finish(); err == nil {
				t.Fatal("second finish accepted")
			}
			if err := w.Add(e("d", 1, KindPut)); err == nil {
				t.Fatal("add after finish accepted")
			}
		})
	}
	for _, o := range []WriterOptions{{BlockSize: -1}, {Compression: 9}, {BloomBitsPerKey: -2}, {RestartInterval: 5000}} {
		w := NewWriter(&bytes.Buffer{}, o)
		if err := w.Add(e("a", 1, KindPut)); err == nil {
			t.Fatalf("options %+v accepted", o)
		}
	}
}

type failingWriter struct{ after int }

func (w *failingWriter) Write(p []byte) (int, error) {
	if w.after <= 0 {
		return 0, errors.New("disk full")
	}
	w.after--
	return len(p), nil
}

func TestWriterPropagatesWriteErrors(t *testing.T) {
	for after := range 4 {
		w := NewWriter(&failingWriter{after: after}, WriterOptions{BlockSize: 16, BloomBitsPerKey: 10})
		var err error
		for i := 0; i < 5 && err == nil; i++ {
			err = w.Add(Entry{Key: fmt.Appendf(nil, "k%03d", i), Seq: 1, Kind: KindPut, Value: []byte("0123456789abcdef")})
		}
		if err == nil {
			_, err = w.Finish()
		}
		if err == nil || errors.Is(err, ErrCorrupt) {
			t.Fatalf("after %d writes: err %v", after, err)
		}
	}
}

func TestEstimatedSize(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	entries := genEntries(rng, genSpec{keys: 3000, maxVersions: 2, maxValue: 60})
	var buf bytes.Buffer
	w := NewWriter(&buf, DefaultWriterOptions())
	var half, prev int64
	for i, e := range entries {
		if err := w.Add(e); err != nil {
			t.Fatal(err)
		}
		if i == len(entries)/2 {
			half = w.EstimatedSize()
		}
	}
	prev = w.EstimatedSize()
	if r := float64(half) / float64(prev); r < 0.4 || r > 0.6 {
		t.Fatalf("estimate %d halfway, %d at the end", half, prev)
	}
	info, err := w.Finish()
	if err != nil {
		t.Fatal(err)
	}
	if ratio := float64(prev) / float64(info.Size); ratio < 0.9 || ratio > 1.1 {
		t.Fatalf("estimate %d for a table of %d bytes", prev, info.Size)
	}
}

func TestBloomFalsePositiveRate(t *testing.T) {
	for _, bits := range []int{5, 10, 16} {
		t.Run(fmt.Sprintf("bits=%d", bits), func(t *testing.T) {
			const n = 20000
			entries := make([]Entry, n)
			for i := range entries {
				entries[i] = Entry{Key: fmt.Appendf(nil, "series/%08d", 2*i), Seq: 1, Kind: KindPut}
			}
			data, _ := buildTable(t, entries, WriterOptions{BloomBitsPerKey: bits})
			tb := openTable(t, data, nil)
			for _, e := range entries {
				if !tb.MayContain(e.Key) {
					t.Fatalf("false negative for %q", e.Key)
				}
			}
			fp := 0
			for i := range n {
				if tb.MayContain(fmt.Appendf(nil, "series/%08d", 2*i+1)) {
					fp++
				}
			}
			rate := float64(fp) / n
			// Theory for a standard bloom filter with optimal k: 0.6185^bits.
			limits := map[int]float64{5: 0.12, 10: 0.015, 16: 0.002}
			t.Logf("bits/key=%d false positive rate %.4f", bits, rate)
			if rate > limits[bits] {
				t.Fatalf("false positive rate %.4f above %.4f", rate, limits[bits])
			}
		})
	}
}

func TestCacheServesRepeatReads(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	entries := genEntries(rng, genSpec{keys: 2000, maxVersions: 1, maxValue: 50})
	data, info := buildTable(t, entries, DefaultWriterOptions())
	c := cachetest.NewMap()
	ctx := context.Background()

	tb, r := openCounted(t, data, c)
	if reads, _ := r.stats(); reads > 2 {
		t.Fatalf("cold open made %d reads", reads)
	}
	if n := c.Count(cache.ClassMeta); n != 3 {
		t.Fatalf("%d meta blocks cached, want footer, index and filter", n)
	}
	r.reset()
	if _, err := Open(ctx, r, "tbl", c); err != nil {
		t.Fatal(err)
	}
	if reads, _ := r.stats(); reads != 0 {
		t.Fatalf("warm open made %d reads", reads)
	}

	key := entries[len(entries)/2].Key
	if got, err := tb.Get(ctx, key, nil); err != nil || len(got) != 1 {
		t.Fatalf("get: %v %v", got, err)
	}
	if reads, _ := r.stats(); reads != 1 {
		t.Fatalf("first get made %d reads", reads)
	}
	if got, err := tb.Get(ctx, key, nil); err != nil || len(got) != 1 {
		t.Fatalf("get: %v %v", got, err)
	}
	if reads, _ := r.stats(); reads != 1 {
		t.Fatalf("second get of the same block read again (%d reads)", reads)
	}
	if n := c.Count(cache.ClassData); n != 1 {
		t.Fatalf("%d data blocks cached", n)
	}

	r.reset()
	it := tb.NewIter(ctx, nil, nil)
	checkEntries(t, "scan", collect(t, it, it.First()), entries)
	it.Close()
	coldReads, coldBytes := r.stats()
	if n := c.Count(cache.ClassData); n != info.NumDataBlocks {
		t.Fatalf("%d of %d data blocks cached after a scan", n, info.NumDataBlocks)
	}
	if coldBytes > info.DataSize {
		t.Fatalf("scan read %d bytes of %d data bytes", coldBytes, info.DataSize)
	}
	for _, k := range c.Keys() {
		if v, _ := c.Get(k); cap(v) > len(v)+blockTrailerLen {
			t.Fatalf("cached block %s of %d bytes pins %d", k, len(v), cap(v))
		}
	}
	t.Logf("cold scan of %d blocks: %d reads, %d bytes", info.NumDataBlocks, coldReads, coldBytes)
	r.reset()
	it = tb.NewIter(ctx, nil, nil)
	checkEntries(t, "warm scan", collect(t, it, it.First()), entries)
	it.Close()
	if reads, _ := r.stats(); reads != 0 {
		t.Fatalf("warm scan made %d reads", reads)
	}
}

// TestColdScanRoundTrips checks read-ahead: a bounded cold scan reads a run
// of blocks per round trip instead of one block at a time.
func TestColdScanRoundTrips(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	entries := genEntries(rng, genSpec{keys: 20000, maxVersions: 1, maxValue: 100})
	data, info := buildTable(t, entries, WriterOptions{BlockSize: 4096, Compression: CompressionNone})
	if info.DataSize < 512<<10 {
		t.Fatalf("table too small for the test: %d", info.DataSize)
	}
	for _, tc := range []struct {
		name      string
		upper     []byte
		maxReads  int64
		withCache bool
	}{
		{"bounded-cache", entries[len(entries)-1].Key, info.DataSize/boundedReadahead + 2, true},
		{"bounded-nocache", entries[len(entries)-1].Key, info.DataSize/boundedReadahead + 2, false},
		{"unbounded-cache", nil, 12, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c cache.Cache
			if tc.withCache {
				c = cachetest.NewMap()
			}
			tb, r := openCounted(t, data, c)
			r.reset()
			it := tb.NewIter(context.Background(), nil, tc.upper)
			got := collect(t, it, it.First())
			it.Close()
			want := entries
			if tc.upper != nil {
				want = entries[:lowerBound(entries, tc.upper)]
			}
			checkEntries(t, "scan", got, want)
			reads, n := r.stats()
			t.Logf("%d blocks, %d bytes: %d reads, %d bytes", info.NumDataBlocks, info.DataSize, reads, n)
			if int64(reads) > tc.maxReads || n > info.DataSize {
				t.Fatalf("%d reads of %d bytes; want at most %d reads", reads, n, tc.maxReads)
			}
		})
	}
}

func TestPrefetch(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	entries := genEntries(rng, genSpec{keys: 5000, maxVersions: 1, maxValue: 60})
	data, _ := buildTable(t, entries, DefaultWriterOptions())
	c := cachetest.NewMap()
	ctx := context.Background()
	tb, r := openCounted(t, data, c)
	lower, upper := entries[1000].Key, entries[3000].Key
	if tb.Cached(lower, upper) {
		t.Fatal("Cached before any read")
	}
	r.reset()
	if err := tb.Prefetch(ctx, lower, upper); err != nil {
		t.Fatal(err)
	}
	if reads, _ := r.stats(); reads != 1 {
		t.Fatalf("prefetch made %d reads", reads)
	}
	if !tb.Cached(lower, upper) || tb.Cached(lower, nil) {
		t.Fatalf("Cached after the prefetch: %v for the range, %v to the end", tb.Cached(lower, upper), tb.Cached(lower, nil))
	}
	r.reset()
	it := tb.NewIter(ctx, lower, upper)
	checkEntries(t, "scan", collect(t, it, it.First()), entries[1000:3000])
	it.Close()
	for i := 1000; i < 3000; i += 50 {
		if _, err := tb.Get(ctx, entries[i].Key, nil); err != nil {
			t.Fatal(err)
		}
	}
	if reads, _ := r.stats(); reads != 0 {
		t.Fatalf("reads after prefetch: %d", reads)
	}
	if err := tb.Prefetch(ctx, lower, upper); err != nil {
		t.Fatal(err)
	}
	if reads, _ := r.stats(); reads != 0 {
		t.Fatalf("second prefetch made %d reads", reads)
	}
}

func TestReadErrorsAreNotCorruption(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	entries := genEntries(rng, genSpec{keys: 500, maxVersions: 1, maxValue: 60})
	data, _ := buildTable(t, entries, DefaultWriterOptions())
	boom := errors.New("connection reset")
	r := &countingReadable{data: data, err: boom}
	if _, err := Open(context.Background(), r, "tbl", nil); !errors.Is(err, boom) || errors.Is(err, ErrCorrupt) {
		t.Fatalf("open: %v", err)
	}
	r.err = nil
	tb, err := Open(context.Background(), r, "tbl", cachetest.NewMap())
	if err != nil {
		t.Fatal(err)
	}
	r.err = boom
	if _, err := tb.Get(context.Background(), entries[0].Key, nil); !errors.Is(err, boom) || errors.Is(err, ErrCorrupt) {
		t.Fatalf("get: %v", err)
	}
	it := tb.NewIter(context.Background(), nil, nil)
	if it.First() || !errors.Is(it.Err(), boom) {
		t.Fatalf("iter: %v", it.Err())
	}
	if err := it.Close(); !errors.Is(err, boom) {
		t.Fatalf("close: %v", err)
	}
	// The error was not cached: the table reads again once the store recovers.
	r.err = nil
	if got, err := tb.Get(context.Background(), entries[0].Key, nil); err != nil || len(got) != 1 {
		t.Fatalf("get after recovery: %v %v", got, err)
	}
}

// TestConcurrentReaders shares one table and cache between goroutines doing
// Gets and scans; run with -race.
func TestConcurrentReaders(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	entries := genEntries(rng, genSpec{keys: 3000, maxVersions: 3, maxValue: 80})
	data, _ := buildTable(t, entries, DefaultWriterOptions())
	tb, _ := openCounted(t, data, cachetest.NewMap())
	errs := make(chan error, 4)
	for g := range 4 {
		go func() {
			errs <- func() error {
				rng := rand.New(rand.NewPCG(uint64(g), 99))
				var dst []Entry
				for range 300 {
					e := entries[rng.IntN(len(entries))]
					var err error
					if dst, err = tb.Get(context.Background(), e.Key, dst[:0]); err != nil {
						return err
					}
					if len(dst) == 0 || !bytes.Equal(dst[0].Key, e.Key) {
						return fmt.Errorf("get %q: %d entries", e.Key, len(dst))
					}
				}
				lo := rng.IntN(len(entries))
				it := tb.NewIter(context.Background(), entries[lo].Key, nil)
				n := 0
				for ok := it.First(); ok; ok = it.Next() {
					n++
				}
				if err := it.Close(); err != nil {
					return err
				}
				if want := len(entries) - lowerBound(entries, entries[lo].Key); n != want {
					return fmt.Errorf("scan from %d: %d entries, want %d", lo, n, want)
				}
				return nil
			}()
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// detachedCache runs each load on a goroutine of its own and stops waiting
// when the caller's context ends, as the tiered cache does.
type detachedCache struct {
	*cachetest.Map
	wg sync.WaitGroup
}

func (c *detachedCache) GetOrLoad(ctx context.Context, key string, class cache.Class, load func(context.Context) ([]byte, error)) ([]byte, error) {
	if v, ok := c.Get(key); ok {
		return v, nil
	}
	type result struct {
		v   []byte
		err error
	}
	done := make(chan result, 1)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		v, err := load(context.WithoutCancel(ctx))
		if err == nil {
			c.Set(key, v, class)
		}
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// gatedReadable blocks data reads until released.
type gatedReadable struct {
	countingReadable
	metaEnd int64
	started chan struct{}
	release chan struct{}
}

func (r *gatedReadable) ReadAt(ctx context.Context, off, length int64) ([]byte, error) {
	if off+length <= r.metaEnd {
		r.started <- struct{}{}
		<-r.release
	}
	return r.countingReadable.ReadAt(ctx, off, length)
}

// TestLoadOutlivesCaller gives up on a block load while it runs; the load
// finishes later on the cache's goroutine and must not touch the iterator
// (run with -race).
func TestLoadOutlivesCaller(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	entries := genEntries(rng, genSpec{keys: 2000, maxVersions: 1, maxValue: 50})
	data, info := buildTable(t, entries, DefaultWriterOptions())
	r := &gatedReadable{countingReadable: countingReadable{data: data}, metaEnd: info.DataSize, started: make(chan struct{}), release: make(chan struct{})}
	c := &detachedCache{Map: cachetest.NewMap()}
	tb, err := Open(context.Background(), r, "tbl", c)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	it := tb.NewIter(ctx, nil, entries[len(entries)-1].Key)
	go func() {
		<-r.started
		cancel()
	}()
	if it.First() || !errors.Is(it.Err(), context.Canceled) {
		t.Fatalf("first: %v", it.Err())
	}
	if err := it.Close(); !errors.Is(err, context.Canceled) {
		t.Fatalf("close: %v", err)
	}
	close(r.release)
	c.wg.Wait()
	if n := c.Count(cache.ClassData); n < 2 {
		t.Fatalf("the finished run cached %d blocks", n)
	}
	it = tb.NewIter(context.Background(), nil, nil)
	checkEntries(t, "scan", collect(t, it, it.First()), entries)
	it.Close()
}

// TestCompressionBackoff checks that the writer stops trying to compress
// during a run of incompressible blocks and compresses again after it.
func TestCompressionBackoff(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 18))
	var entries []Entry
	add := func(prefix string, n int, value func() []byte) {
		for i := range n {
			entries = append(entries, Entry{Key: fmt.Appendf(nil, "%s%06d", prefix, i), Seq: 1, Kind: KindPut, Value: value()})
		}
	}
	compressible := func() []byte { return bytes.Repeat([]byte("label=value,"), 30) }
	random := func() []byte {
		b := make([]byte, 360)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	add("a", 200, compressible) // about 20 blocks each
	add("b", 400, random)
	add("c", 200, compressible)
	data, _ := buildTable(t, entries, DefaultWriterOptions())
	tb := openTable(t, data, nil)
	var types []Compression
	var firstKeys []string
	for i, h := range tb.ix.handles {
		types = append(types, Compression(data[h.end()-blockTrailerLen]))
		content, err := decodeBlock(data[h.off:h.end()], false)
		if err != nil {
			t.Fatal(err)
		}
		var bi blockIter
		if err := bi.init(content); err != nil || !bi.first() {
			t.Fatalf("block %d: %v", i, err)
		}
		firstKeys = append(firstKeys, string(bi.key[:1]))
	}
	var stored = map[string][2]int{} // region -> [compressed, plain]
	for i, c := range types {
		s := stored[firstKeys[i]]
		if c == CompressionNone {
			s[1]++
		} else {
			s[0]++
		}
		stored[firstKeys[i]] = s
	}
	t.Logf("blocks by region [compressed, plain]: %v", stored)
	if s := stored["a"]; s[1] != 0 {
		t.Fatalf("compressible blocks stored plain: %v", s)
	}
	if s := stored["b"]; s[0] != 0 {
		t.Fatalf("random blocks compressed: %v", s)
	}
	if s := stored["c"]; s[1] > maxCompressionSkip || s[0] < 10 {
		t.Fatalf("compression did not resume after the random run: %v", s)
	}
}

// TestOpenHint opens a table whose index and filter outgrow Open's first
// read: Open needs two reads, OpenHint with Info.MetaSize one, and a wrong
// hint still opens it.
func TestOpenHint(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	entries := genEntries(rng, genSpec{keys: 40000, maxVersions: 1, maxValue: 4})
	data, info := buildTable(t, entries, WriterOptions{BlockSize: 1024, BloomBitsPerKey: 16})
	if info.MetaSize() <= tailReadSize {
		t.Fatalf("meta region of %d bytes fits the first read", info.MetaSize())
	}
	for _, tc := range []struct {
		hint  int64
		reads int
	}{{0, 2}, {info.MetaSize(), 1}, {footerLen, 2}, {info.MetaSize() - 1, 2}, {info.Size * 2, 1}} {
		r := &countingReadable{data: data}
		tb, err := OpenHint(context.Background(), r, "t", nil, tc.hint)
		if err != nil {
			t.Fatalf("hint %d: %v", tc.hint, err)
		}
		if reads, _ := r.stats(); reads != tc.reads {
			t.Fatalf("hint %d: %d reads, want %d", tc.hint, reads, tc.reads)
		}
		if got, err := tb.Get(context.Background(), entries[len(entries)/3].Key, nil); err != nil || len(got) != 1 {
			t.Fatalf("hint %d: get: %v %v", tc.hint, got, err)
		}
	}
}

func TestSeparator(t *testing.T) {
	tests := []struct{ a, b, want string }{
		{"abc", "abd", "abc"},
		{"abc", "abz", "abd"},
		{"abc", "abcd", "abc"},
		{"a\xff", "b", "a\xff"},
		{"a\xffz", "b", "a\xffz"},
		{"", "b", ""},
		{"key", "key", "key"},
		{"series/0001", "series/0100", "series/01"},
		{"ab", "b", "ab"},
		{"ab", "bc", "b"},
		{"abc", "ac", "abc"},
	}
	for _, tc := range tests {
		if got := separator(nil, []byte(tc.a), []byte(tc.b)); string(got) != tc.want {
			t.Errorf("separator(%q, %q) = %q, want %q", tc.a, tc.b, got, tc.want)
		}
	}
	rng := rand.New(rand.NewPCG(25, 26))
	for range 10000 {
		a, b := randBytes(rng, rng.IntN(6)), randBytes(rng, rng.IntN(6))
		if bytes.Compare(a, b) > 0 {
			a, b = b, a
		}
		s := separator(nil, a, b)
		if bytes.Compare(a, s) > 0 || (bytes.Compare(s, b) >= 0 && !bytes.Equal(a, b)) || len(s) > len(a) {
			t.Fatalf("separator(%q, %q) = %q", a, b, s)
		}
	}
}

func TestScanIterBypassesCache(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	// Repetitive values compress; random ones do not: both decode paths.
	entries := genEntries(rng, genSpec{keys: 20000, maxVersions: 2, maxValue: 100, emptyShare: 0.1})
	for i := range entries {
		if i%3 == 0 {
			entries[i].Value = bytes.Repeat([]byte{'v'}, len(entries[i].Value))
		}
	}
	for _, tc := range []struct {
		name         string
		compression  Compression
		lower, upper []byte
	}{
		{"none", CompressionNone, nil, nil},
		{"s2", CompressionS2, nil, nil},
		{"zstd", CompressionZstd, nil, nil},
		{"s2-bounded", CompressionS2, entries[5000].Key, entries[15000].Key},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, info := buildTable(t, entries, WriterOptions{Compression: tc.compression})
			r := &countingReadable{data: data}
			c := cachetest.NewMap()
			tb, err := Open(context.Background(), r, "tbl", c)
			if err != nil {
				t.Fatal(err)
			}
			cachedMeta, loads := c.Count(cache.ClassMeta), c.Loads()
			r.reset()
			it := tb.NewScanIter(context.Background(), tc.lower, tc.upper)
			got := collect(t, it, it.First())
			if err := it.Close(); err != nil {
				t.Fatal(err)
			}
			want := entries
			if tc.lower != nil {
				want = entries[lowerBound(entries, tc.lower):lowerBound(entries, tc.upper)]
			}
			checkEntries(t, "scan", got, want)
			if n := c.Count(cache.ClassData); n != 0 || c.Loads() != loads || c.Count(cache.ClassMeta) != cachedMeta {
				t.Fatalf("scan touched the cache: %d data blocks, %d loads", n, c.Loads()-loads)
			}
			reads, n := r.stats()
			t.Logf("%d blocks, %d bytes: %d reads, %d bytes", info.NumDataBlocks, info.DataSize, reads, n)
			if maxReads := int(info.DataSize/maxReadahead) + 8; reads > maxReads || n > info.DataSize {
				t.Fatalf("%d reads of %d bytes; want at most %d reads of %d bytes", reads, n, maxReads, info.DataSize)
			}
		})
	}
}

// refusingCache keeps meta blocks and turns every data block away, as a
// cache full of blocks used more often does when a query reads more than it
// holds.
type refusingCache struct{ *cachetest.Map }

func (c refusingCache) Set(key string, value []byte, class cache.Class) {
	if class != cache.ClassData {
		c.Map.Set(key, value, class)
	}
}

func (c refusingCache) GetOrLoad(ctx context.Context, key string, class cache.Class, load func(context.Context) ([]byte, error)) ([]byte, error) {
	return cachetest.GetOrLoad(ctx, c, key, class, load)
}

// TestRangeIterReadsOnce: a range iterator reads its range's blocks once,
// in one read, even when the cache keeps none of them, and keeps no block
// after moving past it.
func TestRangeIterReadsOnce(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	entries := genEntries(rng, genSpec{keys: 4000, maxVersions: 1, maxValue: 200})
	data, _ := buildTable(t, entries, WriterOptions{BlockSize: 1024})
	ctx := context.Background()
	tb, r := openCounted(t, data, refusingCache{cachetest.NewMap()})
	lo, hi := 500, 3500
	first, last := tb.BlockSpan(entries[lo].Key, entries[hi].Key)
	if last-first < 100 {
		t.Fatalf("range spans %d blocks, want many", last-first+1)
	}
	for pass := range 2 {
		r.reset()
		it := tb.NewRangeIter(ctx, entries[lo].Key, entries[hi].Key)
		got := collect(t, it, it.First())
		for k, b := range it.pre {
			if b != nil && first+k < it.bi {
				t.Errorf("pass %d: block %d kept after the iterator moved past it", pass, first+k)
			}
		}
		if err := it.Close(); err != nil {
			t.Fatal(err)
		}
		checkEntries(t, "range", got, entries[lo:hi])
		if reads, n := r.stats(); reads != 1 || n != tb.SpanBytes(first, last) {
			t.Errorf("pass %d: %d reads of %d bytes, want one of the span's %d", pass, reads, n, tb.SpanBytes(first, last))
		}
	}
	// Past maxKeptBytes the blocks are left to the cache, which here keeps
	// none: they are read again, and the entries are still all there.
	defer func(n int) { maxKeptBytes = n }(maxKeptBytes)
	maxKeptBytes = int(tb.SpanBytes(first, last) / 4)
	r.reset()
	it := tb.NewRangeIter(ctx, entries[lo].Key, entries[hi].Key)
	ok := it.First()
	kept := len(it.blk.data) // taken by First
	for _, b := range it.pre {
		kept += len(b)
	}
	if kept > maxKeptBytes || kept < maxKeptBytes/2 {
		t.Errorf("%d bytes kept, want up to the bound of %d", kept, maxKeptBytes)
	}
	got := collect(t, it, ok)
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	checkEntries(t, "range past the bound", got, entries[lo:hi])
	if reads, _ := r.stats(); reads < 2 {
		t.Errorf("%d reads past the bound, want the first and more", reads)
	}
}

// TestRangeIterNoFill: a range iterator told not to fill the cache reads
// the blocks the cache holds from it and the others in one read, adds no
// data block to the cache, and past maxKeptBytes reads the rest as it
// reaches them, still without adding any.
func TestRangeIterNoFill(t *testing.T) {
	rng := rand.New(rand.NewPCG(33, 34))
	entries := genEntries(rng, genSpec{keys: 4000, maxVersions: 1, maxValue: 200})
	data, _ := buildTable(t, entries, WriterOptions{BlockSize: 1024})
	ctx := context.Background()
	c := cachetest.NewMap()
	tb, r := openCounted(t, data, c)
	lo, hi := 500, 3500
	first, last := tb.BlockSpan(entries[lo].Key, entries[hi].Key)
	// Every tenth block of the span cached beforehand, by a point read.
	cached := 0
	for i := first + 5; i <= last; i += 10 {
		if _, err := tb.dataBlock(ctx, i, i, 0, nil, nil); err != nil {
			t.Fatal(err)
		}
		cached++
	}
	read := func(what string) (reads int, bytes int64) {
		t.Helper()
		r.reset()
		it := tb.NewRangeIter(ctx, entries[lo].Key, entries[hi].Key)
		it.SetNoFill()
		ok := it.First()
		kept := 0
		for _, b := range it.pre {
			kept += len(b)
		}
		if kept > maxKeptBytes {
			t.Errorf("%s: %d bytes kept, more than %d", what, kept, maxKeptBytes)
		}
		got := collect(t, it, ok)
		if err := it.Close(); err != nil {
			t.Fatal(err)
		}
		checkEntries(t, what, got, entries[lo:hi])
		if n := c.Count(cache.ClassData); n != cached {
			t.Errorf("%s: %d data blocks cached, want the %d cached before", what, n, cached)
		}
		return r.stats()
	}
	uncached := tb.SpanBytes(first, last)
	for i := first + 5; i <= last; i += 10 {
		uncached -= tb.SpanBytes(i, i)
	}
	if reads, n := read("whole"); reads != cached+1 || n != uncached {
		t.Errorf("%d reads of %d bytes, want one a run between cached blocks (%d) of the %d bytes not cached", reads, n, cached+1, uncached)
	}
	defer func(n int) { maxKeptBytes = n }(maxKeptBytes)
	maxKeptBytes = int(tb.SpanBytes(first, last) / 4)
	if reads, n := read("past the bound"); reads > cached+1 || n != uncached {
		t.Errorf("past the bound: %d reads of %d bytes, want at most one a run between cached blocks (%d) of the %d bytes not cached", reads, n, cached+1, uncached)
	}
}

// TestStash checks that the warmer's prefetch puts data blocks in the disk
// tier, not in RAM, and that reads then find them there without the object
// store.
func TestStash(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 9))
	entries := genEntries(rng, genSpec{keys: 5000, maxVersions: 1, maxValue: 60})
	data, _ := buildTable(t, entries, DefaultWriterOptions())
	r := &countingReadable{data: data}
	o := cache.DefaultOptions()
	o.DiskPath = t.TempDir()
	c, err := cache.New(o, cache.Components{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	tb, err := Open(ctx, r, "tbl", c)
	if err != nil {
		t.Fatal(err)
	}
	metaEntries := c.Stats().Memory.Entries
	lower, upper := entries[1000].Key, entries[3000].Key
	r.reset()
	if err := tb.Stash(ctx, lower, upper); err != nil {
		t.Fatal(err)
	}
	c.Flush()
	if reads, _ := r.stats(); reads != 1 {
		t.Fatalf("stash made %d reads, want 1", reads)
	}
	st := c.Stats()
	if st.Memory.Entries != metaEntries || st.Disk.Entries == 0 {
		t.Fatalf("after stash: %d RAM entries (%d before), %d on disk; want data blocks on disk only",
			st.Memory.Entries, metaEntries, st.Disk.Entries)
	}
	r.reset()
	if err := tb.Stash(ctx, lower, upper); err != nil {
		t.Fatal(err)
	}
	for i := 1000; i < 3000; i += 50 {
		if _, err := tb.Get(ctx, entries[i].Key, nil); err != nil {
			t.Fatal(err)
		}
	}
	if reads, _ := r.stats(); reads != 0 {
		t.Fatalf("second stash and reads made %d object reads, want 0", reads)
	}
	if st := c.Stats(); st.Disk.Hits == 0 || st.Memory.Entries == metaEntries {
		t.Fatalf("reads after stash: %d disk hits, %d RAM entries; want blocks promoted from disk", st.Disk.Hits, st.Memory.Entries)
	}
}

// TestPrefetchBlocks: a span whose blocks are missing but for a few cached
// ones is read in one ranged read when the cached ones are few bytes (they
// are read again), and in parallel reads, each missing block once, when
// they are more.
func TestPrefetchBlocks(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	entries := genEntries(rng, genSpec{keys: 5000, maxVersions: 1, maxValue: 60})
	data, _ := buildTable(t, entries, DefaultWriterOptions())
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		cached    func(first, last int) []int // blocks cached before
		wantReads int
	}{
		{"none cached", func(f, l int) []int { return nil }, 1},
		{"one block between", func(f, l int) []int { return []int{f + 5} }, 1},
		{"a few blocks apart", func(f, l int) []int { return []int{f, f + 3, f + 10, l} }, 1},
		// More than bridgeBytes cached between two missing runs.
		{"a long cached stretch", func(f, l int) []int {
			var bs []int
			for i := f + 2; i < l-2; i++ {
				bs = append(bs, i)
			}
			return bs
		}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &countingReadable{data: data}
			c := cachetest.NewMap()
			tb, err := Open(ctx, r, "tbl", c)
			if err != nil {
				t.Fatal(err)
			}
			first, last := tb.BlockSpan(entries[100].Key, entries[4900].Key)
			if last-first < 40 || tb.SpanBytes(first, last) < 2*bridgeBytes {
				t.Fatalf("blocks %d to %d, %d bytes: want a span of more blocks and bytes", first, last, tb.SpanBytes(first, last))
			}
			// Cache the blocks by reading them alone.
			pre := tc.cached(first, last)
			for _, i := range pre {
				if err := tb.PrefetchBlocks(ctx, i, i); err != nil {
					t.Fatal(err)
				}
			}
			r.reset()
			if err := tb.PrefetchBlocks(ctx, first, last); err != nil {
				t.Fatal(err)
			}
			reads, n := r.stats()
			if reads != tc.wantReads {
				t.Errorf("%d reads, want %d", reads, tc.wantReads)
			}
			if !tb.CachedBlocks(first, last) {
				t.Error("not every block of the span is cached")
			}
			var missing int64
			for i := first; i <= last; i++ {
				if !slices.Contains(pre, i) {
					missing += tb.SpanBytes(i, i)
				}
			}
			if n < missing || n > missing+bridgeBytes*int64(len(pre)) {
				t.Errorf("read %d bytes for %d bytes of missing blocks", n, missing)
			}
			r.reset()
			if err := tb.PrefetchBlocks(ctx, first, last); err != nil {
				t.Fatal(err)
			}
			if reads, _ := r.stats(); reads != 0 {
				t.Errorf("a second PrefetchBlocks made %d reads", reads)
			}
		})
	}
}
