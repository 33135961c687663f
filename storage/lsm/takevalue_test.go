package lsm

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/shaledb/shale/cache/cachetest"
)

// TestTakeValue: values taken while iterating keep their bytes after the
// iteration goes on, whether the value is a put's (in the iterator's
// buffer), a merge's fresh result, or a merge operand returned as is.
func TestTakeValue(t *testing.T) {
	// A single operand over nothing comes back as is (aliasing the
	// iterator's buffer); anything else is concatenated into a new slice.
	merge := func(key, existing []byte, operands [][]byte) ([]byte, error) {
		if existing == nil && len(operands) == 1 {
			return operands[0], nil
		}
		return concatMerge(key, existing, operands)
	}
	ctx := context.Background()
	db, _ := openMemDB(t, testOptions(), Components{Merge: merge})
	want := map[string]string{}
	b := &Batch{}
	for i := range 300 {
		k := fmt.Sprintf("k%04d", i)
		switch i % 3 {
		case 0:
			b.Put([]byte(k), []byte("put-"+k))
			want[k] = "put-" + k
		case 1:
			b.Put([]byte(k), []byte("base-"+k))
			b.Merge([]byte(k), []byte("+op"))
			want[k] = "base-" + k + "+op"
		case 2:
			b.Merge([]byte(k), []byte("alone-"+k))
			want[k] = "alone-" + k
		}
		if i == 150 { // half from a table, half from the memtable
			if err := db.Write(ctx, b, WriteOptions{}); err != nil {
				t.Fatal(err)
			}
			if err := db.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			b = &Batch{}
		}
	}
	if err := db.Write(ctx, b, WriteOptions{}); err != nil {
		t.Fatal(err)
	}

	it, err := db.NewIterator(ctx, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	taken := map[string][]byte{}
	for ok := it.First(); ok; ok = it.Next() {
		taken[string(it.Key())] = it.TakeValue()
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	if len(taken) != len(want) {
		t.Fatalf("%d keys, want %d", len(taken), len(want))
	}
	// Values taken from the iterator's buffers share slabs: appending to
	// one must not write over the next.
	for _, v := range taken {
		_ = append(v, "overwritten"...)
	}
	for k, v := range want {
		if string(taken[k]) != v {
			t.Errorf("%s: taken value %q after iterating on, want %q", k, taken[k], v)
		}
	}
}

// TestTakeValueOfTables: a table's values are taken without a copy (they
// lie in immutable data blocks), so that a scan keeping every value
// allocates no more than one reading them; appending to a value taken
// leaves the block, and the values after it, as they were.
func TestTakeValueOfTables(t *testing.T) {
	ctx := context.Background()
	db, _ := openMemDB(t, testOptions(), Components{Merge: concatMerge, Cache: cachetest.NewMap()})
	b := &Batch{}
	for i := range 500 {
		b.Put(fmt.Appendf(nil, "k%04d", i), fmt.Appendf(nil, "value-%04d-%090d", i, i))
	}
	if err := db.Write(ctx, b, WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := db.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	scan := func(take bool) [][]byte {
		it, err := db.NewIterator(ctx, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		var out [][]byte
		for ok := it.First(); ok; ok = it.Next() {
			if take {
				out = append(out, it.TakeValue())
			}
		}
		if err := it.Close(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	taken := scan(true)
	if len(taken) != 500 {
		t.Fatalf("%d values, want 500", len(taken))
	}
	for _, v := range taken {
		_ = append(v, "overwritten"...)
	}
	for i, v := range scan(true) {
		if want := fmt.Sprintf("value-%04d-%090d", i, i); string(v) != want || string(taken[i]) != want {
			t.Fatalf("value %d: %q taken, %q read again; want %q", i, taken[i], v, want)
		}
	}
	// The slice of 500 values aside, taking them allocates nothing.
	// AllocsPerRun counts the process' allocations, background work's
	// too, so each side takes the least of a few measurements; a copy per
	// value taken would add 500.
	least := func(take bool) float64 {
		n := math.Inf(1)
		for range 5 {
			n = min(n, testing.AllocsPerRun(10, func() { scan(take) }))
		}
		return n
	}
	read, took := least(false), least(true)
	if extra := took - read - 11; extra > 0 { // append's growth of out
		t.Errorf("a scan taking its values made %.0f allocations, one reading them %.0f", took, read)
	}
}
