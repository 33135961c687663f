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
