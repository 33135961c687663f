package lsm

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shaledb/shale/storage/objstore"
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
	b := objstore.NewMemoryBucket()
	comp := Components{Merge: concatMerge, ReadMerge: joinMerge}
	db := openDB(t, b, testOptions(), comp)
	defer db.Close()
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
	c := newMapCache()
	db := openDB(t, objstore.NewMemoryBucket(), testOptions(), Components{Cache: c})
	defer db.Close()
	for round := 0; round < 4; round++ {
		writeKeys(t, db, fmt.Sprintf("r%d-", round), 50)
		if err := db.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	before := db.viewp.Load().man.tableIDs()
	for round := 0; round < 4; round++ {
		if _, ok := mustGet(t, db, fmt.Sprintf("r%d-0007", round)); !ok {
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
	for _, k := range c.keys() {
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
	db := openDB(t, objstore.NewMemoryBucket(), testOptions(), comp)
	defer db.Close()
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
