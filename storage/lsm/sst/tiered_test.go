package sst

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/shaledb/shale/cache"
)

// TestWithTieredCache reads through Shale's real block cache, RAM and disk
// tiers: loads run on the cache's goroutines, and a second pass reads nothing.
func TestWithTieredCache(t *testing.T) {
	c := newTieredCache(t, true)

	rng := rand.New(rand.NewPCG(19, 20))
	entries := genEntries(rng, genSpec{keys: 1500, maxVersions: 3, maxValue: 60})
	data, _ := buildTable(t, entries, DefaultWriterOptions())
	r := &countingReadable{data: data}
	ctx := context.Background()
	tb, err := Open(ctx, r, "tiered/t1.sst", c)
	if err != nil {
		t.Fatal(err)
	}
	checkTable(t, tb, entries, rng)
	cold, _ := r.stats()

	r.reset()
	tb2, err := Open(ctx, r, "tiered/t1.sst", c)
	if err != nil {
		t.Fatal(err)
	}
	it := tb2.NewIter(ctx, nil, nil)
	checkEntries(t, "warm scan", collect(t, it, it.First()), entries)
	it.Close()
	for i := 0; i < len(entries); i += 97 {
		if got, err := tb2.Get(ctx, entries[i].Key, nil); err != nil || len(got) == 0 {
			t.Fatalf("get %q: %v %v", entries[i].Key, got, err)
		}
	}
	if reads, _ := r.stats(); reads != 0 {
		t.Fatalf("warm pass made %d reads (cold pass %d)", reads, cold)
	}

	// A cancelled caller gets its context's error, not corruption.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	tb3, err := Open(ctx, &countingReadable{data: data}, "tiered/t2.sst", c)
	if err != nil {
		t.Fatal(err)
	}
	it = tb3.NewIter(cctx, nil, nil)
	if it.First() {
		t.Fatal("iterator with a cancelled context found an entry in an uncached table")
	}
	if err := it.Close(); !errors.Is(err, context.Canceled) || errors.Is(err, ErrCorrupt) {
		t.Fatalf("cancelled iterator: %v", err)
	}
}

// TestCachedBlockReadAllocatesNothing: a data block the cache's RAM tier
// holds is read, and found cached, without building its key anew (Peeker,
// Stasher.Holds).
func TestCachedBlockReadAllocatesNothing(t *testing.T) {
	c := newTieredCache(t, false)
	rng := rand.New(rand.NewPCG(21, 22))
	entries := genEntries(rng, genSpec{keys: 500, maxVersions: 1, maxValue: 60})
	data, _ := buildTable(t, entries, DefaultWriterOptions())
	ctx := context.Background()
	tb, err := Open(ctx, &countingReadable{data: data}, "peek/t1.sst", c)
	if err != nil {
		t.Fatal(err)
	}
	want, err := tb.dataBlock(ctx, 0, 0, 0, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	before := c.Stats()
	allocs := testing.AllocsPerRun(100, func() {
		got, err := tb.dataBlock(ctx, 0, 0, 0, nil, nil)
		if err != nil || len(got) != len(want) {
			t.Fatalf("cached block: %d bytes, %v; want %d", len(got), err, len(want))
		}
	})
	if allocs != 0 {
		t.Fatalf("a cached block read made %.1f allocations", allocs)
	}
	if hits := c.Stats().Memory.Hits - before.Memory.Hits; hits != 101 {
		t.Fatalf("%d memory hits counted for 101 reads", hits)
	}
	// Nor does asking whether the block is cached (read-ahead planning).
	allocs = testing.AllocsPerRun(100, func() {
		if !tb.CachedBlocks(0, 0) {
			t.Fatal("block 0 not cached")
		}
	})
	if allocs != 0 {
		t.Fatalf("checking that a block is cached made %.1f allocations", allocs)
	}
}

// newTieredCache returns Shale's block cache with 8 MiB of RAM and, with
// disk, a 64 MiB disk tier, closed when the test ends.
func newTieredCache(t *testing.T, disk bool) *cache.Tiered {
	t.Helper()
	opts := cache.DefaultOptions()
	opts.MemoryBytes = 8 << 20
	if disk {
		opts.DiskPath = t.TempDir()
		opts.DiskBytes = 64 << 20
	}
	c, err := cache.New(opts, cache.Components{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
