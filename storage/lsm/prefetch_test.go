package lsm

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/shaledb/shale/cache/cachetest"
	"github.com/shaledb/shale/storage/objstore"
)

// TestPrefetchRanges checks that PrefetchRanges loads into the cache the
// blocks of every table, L0 and sorted runs, that the ranges need, leaves
// the others alone, and reads nothing the second time.
func TestPrefetchRanges(t *testing.T) {
	ctx := context.Background()
	key := roundKey
	b, opts := closedRounds(t, func(round int, batch *Batch, val []byte) {
		for i := range 400 {
			batch.Put(key(i), val)
		}
	})

	c := cachetest.NewMap()
	cb := &countingBucket{Bucket: b}
	db := openDB(t, cb, opts, Components{Cache: c})
	defer db.Close()
	v, _ := db.snapshot()
	if len(v.man.L0) == 0 || len(v.man.Runs) == 0 || len(v.man.Runs[0].Tables) < 2 {
		t.Fatalf("want L0 tables and a run of several tables, have %d L0 and runs %v", len(v.man.L0), v.man.Runs)
	}
	point := KeyRange{Lower: key(50), Upper: append(key(50), 0)}
	span := KeyRange{Lower: key(300), Upper: key(310)}
	far := KeyRange{Lower: key(170), Upper: append(key(170), 0)}
	if err := db.PrefetchRanges(ctx, []KeyRange{point, span}, 4); err != nil {
		t.Fatal(err)
	}
	var tables []*tableMeta
	for i := range v.man.L0 {
		tables = append(tables, &v.man.L0[i])
	}
	for i := range v.man.Runs {
		for j := range v.man.Runs[i].Tables {
			tables = append(tables, &v.man.Runs[i].Tables[j])
		}
	}
	covered := map[string]int{}
	for _, tm := range tables {
		h, err := db.s.table(ctx, tm)
		if err != nil {
			t.Fatal(err)
		}
		for name, r := range map[string]KeyRange{"point": point, "span": span, "far": far} {
			if !overlaps(tm, r.Lower, r.Upper) {
				continue
			}
			cached := h.Cached(r.Lower, r.Upper)
			if name == "far" && cached {
				t.Errorf("table %s: the blocks of %s, not asked for, are cached", tm.ID, r.Lower)
			}
			if name != "far" && !cached {
				t.Errorf("table %s: the blocks of %s range %s are not cached", tm.ID, name, r.Lower)
			}
			if cached {
				covered[name]++
			}
		}
	}
	// Every round wrote every key: each range is in the L0 tables and the run.
	if covered["point"] < len(v.man.L0)+1 || covered["span"] < len(v.man.L0)+1 {
		t.Errorf("ranges cached in %v tables, want at least %d each", covered, len(v.man.L0)+1)
	}
	before := cb.n.Load()
	if err := db.PrefetchRanges(ctx, []KeyRange{point, span}, 4); err != nil {
		t.Fatal(err)
	}
	if n := cb.n.Load() - before; n != 0 {
		t.Errorf("a second prefetch of cached ranges made %d object-store requests", n)
	}
}

// rangeBucket records the ranged reads of every object.
type rangeBucket struct {
	objstore.Bucket
	mu    sync.Mutex
	reads map[string][][2]int64 // name -> [off, end)
}

func (b *rangeBucket) GetRange(ctx context.Context, name string, off, length int64) (io.ReadCloser, error) {
	b.mu.Lock()
	b.reads[name] = append(b.reads[name], [2]int64{off, off + length})
	b.mu.Unlock()
	return b.Bucket.GetRange(ctx, name, off, length)
}

// TestPrefetchRangesReadsEachBlockOnce: ranges whose blocks overlap (one
// ending in the block the next starts in, ranges within one block, the
// same range twice) are read ahead with no byte of a table's data read
// twice, and every block they need ends up cached.
func TestPrefetchRangesReadsEachBlockOnce(t *testing.T) {
	ctx := context.Background()
	b := objstore.NewMemoryBucket()
	opts := testOptions()
	db := openDB(t, b, opts, Components{})
	key := func(i int) []byte { return fmt.Appendf(nil, "k%05d", i) }
	val := make([]byte, 100)
	batch := NewBatch(2000, 2000*110)
	for i := range 2000 {
		batch.Put(key(i), val)
	}
	if err := db.Write(ctx, batch, db.DefaultWriteOptions()); err != nil {
		t.Fatal(err)
	}
	if err := db.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	// Reads take a while, as they do on S3: reads of a block that are not
	// kept apart run at the same time.
	fb := objstore.NewFaultBucket(b)
	fb.SetOpLatency(objstore.OpGetRange, 20*time.Millisecond)
	rb := &rangeBucket{Bucket: fb, reads: map[string][][2]int64{}}
	db = openDB(t, rb, opts, Components{Cache: cachetest.NewMap()})
	defer db.Close()
	v, _ := db.snapshot()
	if len(v.man.L0) != 1 {
		t.Fatalf("%d L0 tables, want 1", len(v.man.L0))
	}
	h, err := db.s.table(ctx, &v.man.L0[0])
	if err != nil {
		t.Fatal(err)
	}
	if first, last := h.BlockSpan(key(0), key(2000)); last-first < 20 {
		t.Fatalf("blocks %d to %d: want a table of many blocks", first, last)
	}
	rb.mu.Lock()
	clear(rb.reads) // the table's meta
	rb.mu.Unlock()
	var ranges []KeyRange
	for lo := 0; lo < 1500; lo += 37 { // neighbours share a block
		ranges = append(ranges, KeyRange{Lower: key(lo), Upper: key(lo + 37)})
	}
	ranges = append(ranges,
		KeyRange{Lower: key(1600), Upper: key(1602)}, // within one block
		KeyRange{Lower: key(1601), Upper: key(1603)},
		KeyRange{Lower: key(1700), Upper: key(1800)}, // twice
		KeyRange{Lower: key(1700), Upper: key(1800)},
		KeyRange{Lower: key(1750), Upper: append(key(1750), 0)}, // a point within
	)
	if err := db.PrefetchRanges(ctx, ranges, 8); err != nil {
		t.Fatal(err)
	}
	rb.mu.Lock()
	reads := rb.reads[db.s.paths.sst(v.man.L0[0].ID)]
	rb.mu.Unlock()
	if len(reads) == 0 {
		t.Fatal("no ranged reads")
	}
	slices.SortFunc(reads, func(a, b [2]int64) int { return int(a[0] - b[0]) })
	for i := 1; i < len(reads); i++ {
		if reads[i][0] < reads[i-1][1] {
			t.Errorf("reads [%d,%d) and [%d,%d) overlap", reads[i-1][0], reads[i-1][1], reads[i][0], reads[i][1])
		}
	}
	for _, r := range ranges {
		if !h.Cached(r.Lower, r.Upper) {
			t.Errorf("range %s-%s not cached", r.Lower, r.Upper)
		}
	}
	if h.Cached(key(1900), key(1999)) {
		t.Error("blocks no range asked for are cached")
	}
}
