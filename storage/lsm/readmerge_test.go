package lsm

import (
	"context"
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
