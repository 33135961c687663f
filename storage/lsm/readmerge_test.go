package lsm

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shaledb/shale/cache/cachetest"
)

// joinMerge frames operands with '|' instead of merging them.
func joinMerge(_, existing []byte, operands [][]byte) ([]byte, error) {
	parts := []string{}
	if existing != nil {
		parts = append(parts, string(existing))
	}
	for _, op := range operands {
		parts = append(parts, string(op))
	}
	return []byte(strings.Join(parts, "|")), nil
}

// TestReadMerge: reads use Components.ReadMerge, compaction uses Merge.
func TestReadMerge(t *testing.T) {
	ctx := context.Background()
	comp := Components{Merge: concatMerge, ReadMerge: joinMerge}
	db, b := openMemDB(t, testOptions(), comp)
	for _, op := range []string{"a", "b", "c", "d"} {
		if err := db.Merge(ctx, []byte("k"), []byte(op)); err != nil {
			t.Fatal(err)
		}
		if err := db.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if v, ok := mustGet(t, db, "k"); !ok || v != "a|b|c|d" {
		t.Fatalf("get before compaction: %q,%v", v, ok)
	}
	rdr, err := OpenReader(ctx, b, "db", ReaderOptions{ReplayWAL: true, RetryBackoff: time.Millisecond}, comp)
	if err != nil {
		t.Fatal(err)
	}
	defer rdr.Close()
	if v, ok := mustGet(t, rdr, "k"); !ok || v != "a|b|c|d" {
		t.Fatalf("reader get: %q,%v", v, ok)
	}
	if err := db.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	it, err := db.NewIterator(ctx, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	if !it.First() || string(it.Value()) != "abcd" {
		t.Fatalf("after compaction (Merge): %q", it.Value())
	}
}

// TestCompactionDropsReplacedBlocks: once a compaction's manifest commits,
// the block cache no longer holds data blocks of the tables it replaced.
func TestCompactionDropsReplacedBlocks(t *testing.T) {
	ctx := context.Background()
	c := cachetest.NewMap()
	db, _ := openMemDB(t, testOptions(), Components{Cache: c})
	// Four tables over one range: the compaction merges them.
	for range 4 {
		flushKeys(t, db, "r-", 50)
	}
	before := db.viewp.Load().man.tableIDs()
	for _, k := range []string{"r-0007", "r-0042"} {
		if _, ok := mustGet(t, db, k); !ok {
			t.Fatal("key missing")
		}
	}
	if err := db.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	after := db.viewp.Load().man.tableIDs()
	replaced := 0
	for id := range before {
		if !after[id] {
			replaced++
		}
	}
	if replaced == 0 {
		t.Fatal("the compaction replaced no table")
	}
	for _, k := range c.Keys() {
		name, _, _ := strings.Cut(k, "#")
		id, ok := db.s.paths.parseSST(name)
		if !ok {
			t.Fatalf("cache key %q does not name a table", k)
		}
		if before[id] && !after[id] {
			t.Fatalf("block %s of a replaced table still cached", k)
		}
	}
}

// TestIteratorFilter: a filtered iterator yields exactly the wanted live
// keys with their merged values, asks about each key once in order, and
// never merges the versions of a key it skips.
func TestIteratorFilter(t *testing.T) {
	ctx := context.Background()
	merged := map[string]int{}
	comp := Components{Merge: concatMerge, ReadMerge: func(key, existing []byte, ops [][]byte) ([]byte, error) {
		merged[string(key)]++
		return joinMerge(key, existing, ops)
	}}
	db, _ := openMemDB(t, testOptions(), comp)
	key := func(i int) []byte { return fmt.Appendf(nil, "k%03d", i) }
	// Every key gets a merge operand in each of three L0 tables and the
	// memtable; every fifth is deleted in the memtable.
	for round := range 4 {
		for i := range 40 {
			if err := db.Merge(ctx, key(i), fmt.Appendf(nil, "%d", round)); err != nil {
				t.Fatal(err)
			}
		}
		if round < 3 {
			if err := db.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := 0; i < 40; i += 5 {
		if err := db.Delete(ctx, key(i)); err != nil {
			t.Fatal(err)
		}
	}
	it, err := db.NewIterator(ctx, key(3), key(37))
	if err != nil {
		t.Fatal(err)
	}
	var asked []string
	it.SetFilter(func(k []byte) bool {
		asked = append(asked, string(k))
		var i int
		fmt.Sscanf(string(k), "k%d", &i)
		return i%2 == 0
	})
	var got []string
	for ok := it.First(); ok; ok = it.Next() {
		got = append(got, string(it.Key())+"="+string(it.Value()))
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	var wantGot, wantAsked []string
	for i := 3; i < 37; i++ {
		wantAsked = append(wantAsked, string(key(i)))
		if i%2 == 0 && i%5 != 0 {
			wantGot = append(wantGot, string(key(i))+"=0|1|2|3")
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(wantGot) {
		t.Fatalf("filtered scan = %v\nwant %v", got, wantGot)
	}
	if fmt.Sprint(asked) != fmt.Sprint(wantAsked) {
		t.Fatalf("filter asked about %v\nwant %v", asked, wantAsked)
	}
	for k, n := range merged {
		var i int
		fmt.Sscanf(k, "k%d", &i)
		if i%2 != 0 || n != 1 {
			t.Errorf("key %s merged %d times", k, n)
		}
	}
}

// TestIteratorValueFilter: an iterator with a value filter resolves the
// versions it rejects as empty (a Put's value and merge operands alike),
// and its own merge operator replaces the DB's; on the writer and on a
// reader, over L0 tables, the memtable and a compacted run.
func TestIteratorValueFilter(t *testing.T) {
	ctx := context.Background()
	comp := Components{Merge: concatMerge, ReadMerge: func(_, _ []byte, _ [][]byte) ([]byte, error) {
		return nil, fmt.Errorf("the DB's read merge operator was called")
	}}
	db, b := openMemDB(t, testOptions(), comp)
	key := func(i int) []byte { return fmt.Appendf(nil, "k%02d", i) }
	// k00-k09 get a put "p" then merge operands "a".."c", one a table, the
	// last in the memtable; k10-k19 merge operands only; the first ten are
	// compacted into a run first.
	for i := range 10 {
		if err := db.Put(ctx, key(i), []byte("p")); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := db.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	for r, op := range []string{"a", "b", "c"} {
		for i := range 20 {
			if err := db.Merge(ctx, key(i), []byte(op)); err != nil {
				t.Fatal(err)
			}
		}
		if r < 2 {
			if err := db.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The filter keeps "a" and "c", and the put of even keys only; the
	// merge operator shows the operands it got, "_" for an empty one.
	keep := func(k, v []byte) bool {
		var i int
		fmt.Sscanf(string(k), "k%d", &i)
		return string(v) != "b" && (string(v) != "p" || i%2 == 0)
	}
	show := func(_, existing []byte, ops [][]byte) ([]byte, error) {
		out := fmt.Appendf(nil, "[%s]", existing)
		for _, op := range ops {
			if len(op) == 0 {
				op = []byte("_")
			}
			out = append(out, op...)
		}
		return out, nil
	}
	var want []string
	for i := range 20 {
		switch {
		case i < 10 && i%2 == 0:
			want = append(want, fmt.Sprintf("%s=[p]a_c", key(i)))
		default:
			want = append(want, fmt.Sprintf("%s=[]a_c", key(i)))
		}
	}
	rdr, err := OpenReader(ctx, b, "db", ReaderOptions{ReplayWAL: true, RetryBackoff: time.Millisecond}, comp)
	if err != nil {
		t.Fatal(err)
	}
	defer rdr.Close()
	for name, v := range map[string]View{"writer": db, "reader": rdr} {
		it, err := v.NewIterator(ctx, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		it.SetValueFilter(keep)
		it.SetMerge(show)
		var got []string
		for ok := it.First(); ok; ok = it.Next() {
			got = append(got, string(it.Key())+"="+string(it.Value()))
		}
		if err := it.Close(); err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: filtered scan = %v\nwant %v", name, got, want)
		}
	}
	// SetMerge(nil) restores the DB's operator.
	it, err := db.NewIterator(ctx, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	it.SetMerge(show)
	it.SetMerge(nil)
	if it.First() || it.Err() == nil || !strings.Contains(it.Err().Error(), "read merge operator was called") {
		t.Errorf("after SetMerge(nil): valid %v, err %v; want the DB's read merge operator's error", it.Valid(), it.Err())
	}
	_ = it.Close()
}
