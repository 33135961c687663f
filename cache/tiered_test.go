package cache

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestConcurrentUse runs many goroutines over small budgets, with a disk
// tier that evicts all the time, and checks every block returned.
func TestConcurrentUse(t *testing.T) {
	o := diskOptions(t)
	o.MemoryBytes = 32 << 10
	o.DiskBytes = 128 << 10
	o.DiskSegmentBytes = 8 << 10
	o.DiskWriteQueue = 8
	c := newTestCache(t, o)

	const goroutines, ops, keys = 16, 1000, 300
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for range ops {
				i := rng.IntN(keys)
				key, want := testKey(i), testValue(i, 200+i%5*300)
				class := Class(i % 2)
				switch rng.IntN(5) {
				case 0:
					c.Set(key, want, class)
				case 1:
					if v, ok := c.Get(key); ok && !bytes.Equal(v, want) {
						t.Errorf("Get(%q): wrong bytes", key)
						return
					}
				case 2:
					if rng.IntN(50) == 0 {
						c.Flush()
					}
				default:
					v, err := c.GetOrLoad(context.Background(), key, class, func(context.Context) ([]byte, error) {
						if i%37 == 0 {
							return nil, fmt.Errorf("load %d failed", i)
						}
						return testValue(i, 200+i%5*300), nil
					})
					if i%37 == 0 && err != nil {
						continue
					}
					if err != nil || !bytes.Equal(v, want) {
						t.Errorf("GetOrLoad(%q): err %v, right bytes %v", key, err, bytes.Equal(v, want))
						return
					}
				}
			}
		})
	}
	wg.Wait()
	c.Flush()
	c.mem.cleanUp()
	s := c.Stats()
	if s.Memory.Bytes > o.MemoryBytes || s.Disk.Bytes > o.DiskBytes {
		t.Errorf("over budget: memory %d of %d, disk %d of %d", s.Memory.Bytes, o.MemoryBytes, s.Disk.Bytes, o.DiskBytes)
	}
	if s.DiskCorruptions != 0 {
		t.Errorf("%d corruptions reported: reads racing evictions must be plain misses", s.DiskCorruptions)
	}
	if s.Memory.Evictions == 0 || s.Disk.Evictions == 0 || s.Disk.Hits == 0 {
		t.Errorf("the test did not reach what it is for: %+v", s)
	}
	t.Logf("%+v", s)
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	o := diskOptions(t)
	c, err := New(o, Components{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	load := func(context.Context) ([]byte, error) { return []byte("block"), nil }
	c.GetOrLoad(ctx, "m", ClassMeta, load) // memory miss, disk miss, load
	c.GetOrLoad(ctx, "m", ClassMeta, load) // memory hit
	c.GetOrLoad(ctx, "d", ClassData, load)
	c.Get("d")       // memory hit
	c.Get("nothing") // misses with class unknown
	c.Flush()

	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Fatalf("metric lint: %v %v", problems, err)
	}
	want := `
# HELP shale_cache_hits_total Lookups answered by a tier, by tier and block class.
# TYPE shale_cache_hits_total counter
shale_cache_hits_total{class="data",tier="disk"} 0
shale_cache_hits_total{class="data",tier="memory"} 1
shale_cache_hits_total{class="meta",tier="disk"} 0
shale_cache_hits_total{class="meta",tier="memory"} 1
shale_cache_hits_total{class="unknown",tier="disk"} 0
shale_cache_hits_total{class="unknown",tier="memory"} 0
# HELP shale_cache_misses_total Lookups a tier could not answer, by tier and block class (unknown for Get, which is not told the class).
# TYPE shale_cache_misses_total counter
shale_cache_misses_total{class="data",tier="disk"} 1
shale_cache_misses_total{class="data",tier="memory"} 1
shale_cache_misses_total{class="meta",tier="disk"} 1
shale_cache_misses_total{class="meta",tier="memory"} 1
shale_cache_misses_total{class="unknown",tier="disk"} 1
shale_cache_misses_total{class="unknown",tier="memory"} 1
# HELP shale_cache_disk_writes_total Blocks written to the disk tier.
# TYPE shale_cache_disk_writes_total counter
shale_cache_disk_writes_total 2
# HELP shale_cache_entries Blocks held by a tier.
# TYPE shale_cache_entries gauge
shale_cache_entries{tier="disk"} 2
shale_cache_entries{tier="memory"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"shale_cache_hits_total", "shale_cache_misses_total", "shale_cache_disk_writes_total", "shale_cache_entries"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(c.metrics, "shale_cache_load_duration_seconds"); n != 2 {
		t.Fatalf("%d load duration series, want 2 (meta and data)", n)
	}

	// Close unregisters, so a reopened cache can register again.
	c.Close()
	c2, err := New(o, Components{Registerer: reg})
	if err != nil {
		t.Fatalf("reopen with the same registry: %v", err)
	}
	defer c2.Close()
	if _, err := New(o, Components{Registerer: reg}); err == nil {
		t.Fatal("a second cache registered the same metrics")
	}
}

func TestMemoryOnly(t *testing.T) {
	c := newTestCache(t, DefaultOptions())
	c.Set("a", []byte("1"), ClassMeta)
	c.Set("b", []byte("2"), ClassData)
	c.Flush() // no disk tier: returns at once
	mustGet(t, c, "a", []byte("1"))
	mustGet(t, c, "b", []byte("2"))
	if _, ok := c.Get("c"); ok {
		t.Fatal("hit on a key never set")
	}
	if s := c.Stats(); s.Memory.Hits != 2 || s.Memory.Misses != 1 || s.Disk != (TierStats{}) {
		t.Fatalf("stats %+v", s)
	}
}

// TestCapacity: what the cache can hold is its RAM tier's budget, lowered
// while memory is short, plus its disk tier's.
func TestCapacity(t *testing.T) {
	mem := newTestCache(t, DefaultOptions())
	if got, want := mem.Capacity(), DefaultOptions().MemoryBytes; got != want {
		t.Errorf("memory only: capacity %d, want %d", got, want)
	}
	o := diskOptions(t)
	c := newTestCache(t, o)
	if got, want := c.Capacity(), o.MemoryBytes+o.DiskBytes; got != want {
		t.Errorf("with a disk tier: capacity %d, want %d", got, want)
	}
	budget := c.LimitMemory(o.MemoryBytes / 4)
	if got, want := c.Capacity(), budget+o.DiskBytes; got != want || budget >= o.MemoryBytes {
		t.Errorf("memory limited to %d: capacity %d, want %d", budget, got, want)
	}
}

func TestNewRejectsInvalidOptions(t *testing.T) {
	o := DefaultOptions()
	o.MetaShare = 2
	if _, err := New(o, Components{}); err == nil {
		t.Fatal("New accepted MetaShare 2")
	}
}

func TestDrop(t *testing.T) {
	c := newTestCache(t, DefaultOptions())
	c.Set("a", []byte("1"), ClassMeta)
	c.Set("b", []byte("2"), ClassData)
	c.Drop("b")
	c.Drop("never-set")
	mustGet(t, c, "a", []byte("1"))
	if _, ok := c.Get("b"); ok {
		t.Fatal("dropped block still in the RAM tier")
	}
}

func TestStash(t *testing.T) {
	ctx := context.Background()
	t.Run("disk tier", func(t *testing.T) {
		o := diskOptions(t)
		o.DiskWriteQueueBytes = 100 // smaller than one block: Stash must wait, not drop
		c := newTestCache(t, o)
		for i := range 10 {
			c.Stash(ctx, testKey(i), testValue(i, 500), ClassData)
		}
		c.Flush()
		s := c.Stats()
		if s.DiskWriteDrops != 0 || s.DiskWrites != 10 {
			t.Fatalf("drops %d writes %d, want 0 and 10", s.DiskWriteDrops, s.DiskWrites)
		}
		if s.Memory.Entries != 0 {
			t.Fatalf("stashed blocks took %d RAM entries, want 0", s.Memory.Entries)
		}
		for i := range 10 {
			if !c.Holds(testKey(i)) {
				t.Fatalf("Holds(%q) = false after Stash", testKey(i))
			}
		}
		if s := c.Stats(); s.Memory.Hits+s.Memory.Misses+s.Disk.Hits+s.Disk.Misses != 0 {
			t.Fatalf("Holds counted lookups: %+v", s)
		}
		mustGet(t, c, testKey(4), testValue(4, 500))
		if s := c.Stats(); s.Memory.Entries != 1 || s.Disk.Hits != 1 {
			t.Fatalf("after a read: %d RAM entries, %d disk hits; want the block promoted", s.Memory.Entries, s.Disk.Hits)
		}
		if c.Holds("never-set") {
			t.Fatal("Holds reports a block never set")
		}
	})
	t.Run("memory only", func(t *testing.T) {
		c := newTestCache(t, DefaultOptions())
		c.Stash(ctx, "a", []byte("1"), ClassData)
		if !c.Holds("a") {
			t.Fatal("Holds = false after Stash without a disk tier")
		}
		mustGet(t, c, "a", []byte("1"))
	})
	t.Run("cancelled", func(t *testing.T) {
		o := diskOptions(t)
		c := newTestCache(t, o)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		c.Stash(cctx, "a", []byte("1"), ClassData) // must return
		c.Flush()
	})
}

// TestPeek: Peek answers from RAM without keeping its key, counts a hit and
// leaves a miss for GetOrLoad to count.
func TestPeek(t *testing.T) {
	c, err := New(diskOptions(t), Components{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	load := func(context.Context) ([]byte, error) { return []byte("block"), nil }
	if _, err := c.GetOrLoad(ctx, "t#1", ClassData, load); err != nil {
		t.Fatal(err)
	}
	before := c.Stats()
	buf := []byte("t#1")
	v, ok := c.Peek(string(buf), ClassData)
	if !ok || string(v) != "block" {
		t.Fatalf("Peek = %q, %v; want the block", v, ok)
	}
	if _, ok := c.Peek("t#2", ClassData); ok {
		t.Fatal("Peek found a block never stored")
	}
	after := c.Stats()
	if hits, misses := after.Memory.Hits-before.Memory.Hits, after.Memory.Misses-before.Memory.Misses; hits != 1 || misses != 0 {
		t.Fatalf("Peek counted %d hits and %d misses, want 1 and 0", hits, misses)
	}
	// A key in a buffer the caller reuses: the cache must not keep it.
	key := []byte("t#3")
	if _, ok := c.Peek(unsafe.String(unsafe.SliceData(key), len(key)), ClassData); ok {
		t.Fatal("Peek found t#3 before it was stored")
	}
	copy(key, "zzz")
	if _, err := c.GetOrLoad(ctx, "t#3", ClassData, load); err != nil {
		t.Fatal(err)
	}
	if v, ok := c.Get("t#3"); !ok || string(v) != "block" {
		t.Fatalf("t#3 after a Peek with a reused buffer: %q, %v", v, ok)
	}
	if _, ok := c.Get("zzz"); ok {
		t.Fatal("the cache kept the buffer Peek was given")
	}
}
