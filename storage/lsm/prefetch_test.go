package lsm

import (
	"context"
	"fmt"
	"testing"

	"github.com/shaledb/shale/storage/objstore"
)

// TestPrefetchRanges checks that PrefetchRanges loads into the cache the
// blocks of every table, L0 and sorted runs, that the ranges need, leaves
// the others alone, and reads nothing the second time.
func TestPrefetchRanges(t *testing.T) {
	ctx := context.Background()
	b := objstore.NewMemoryBucket()
	opts := testOptions()
	opts.TargetTableBytes = 4 << 10 // runs of several tables
	db := openDB(t, b, opts, Components{})
	key := func(i int) []byte { return fmt.Appendf(nil, "k%05d", i) }
	val := make([]byte, 100)
	for round := range 6 {
		batch := NewBatch(400, 400*110)
		for i := range 400 {
			val[0] = byte(round)
			batch.Put(key(i), val)
		}
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
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	c := newMapCache()
	cb := &countingBucket{Bucket: b}
	db = openDB(t, cb, opts, Components{Cache: c})
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
