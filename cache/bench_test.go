package cache

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shaledb/shale/internal/cputime"
)

// Run with:
//
//	go test -run '^$' -bench . -benchtime 1s -count 6 ./cache/ | tee bench.txt
//	benchstat -col /impl bench.txt   # for the hit path against a plain map
//
// Disk tier reads come from the page cache here: the figures are the cost of
// the tier's own work (syscall, checksum, allocation), not of the device.
//
// cpu-ns/op is the process's CPU time (getrusage) over the timed loop divided
// by b.N. On a machine shared with other work it is steadier than ns/op,
// which counts the time other processes hold the cores.

var benchSizes = []int{4 << 10, 64 << 10}

const benchKeys = 1024

// cpuMeter reports cpu-ns/op for the loop run between its creation and done.
type cpuMeter struct{ start time.Duration }

func startCPU() cpuMeter { return cpuMeter{cputime.Process()} }

func (m cpuMeter) done(b *testing.B) {
	if used := cputime.Process() - m.start; m.start > 0 && b.N > 0 {
		b.ReportMetric(float64(used.Nanoseconds())/float64(b.N), "cpu-ns/op")
	}
}

func benchKeyList() []string {
	keys := make([]string, benchKeys)
	for i := range keys {
		keys[i] = testKey(i)
	}
	return keys
}

func BenchmarkGet(b *testing.B) {
	keys := benchKeyList()
	for _, size := range benchSizes {
		value := make([]byte, size)
		o := DefaultOptions()
		o.MemoryBytes = int64(2 * benchKeys * (size + 256))
		c := newTestCache(b, o)
		for _, k := range keys {
			c.Set(k, value, ClassData)
		}
		b.Run(fmt.Sprintf("tier=memory/op=Get/size=%d", size), func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			cpu := startCPU()
			for b.Loop() {
				if _, ok := c.Get(keys[i%benchKeys]); !ok {
					b.Fatal("miss")
				}
				i++
			}
			cpu.done(b)
		})
		// GetOrLoad knows the class: one pool to look in.
		b.Run(fmt.Sprintf("tier=memory/op=GetOrLoad/size=%d", size), func(b *testing.B) {
			ctx := context.Background()
			load := loadFails(b, "any")
			b.ReportAllocs()
			i := 0
			cpu := startCPU()
			for b.Loop() {
				if _, err := c.GetOrLoad(ctx, keys[i%benchKeys], ClassData, load); err != nil {
					b.Fatal(err)
				}
				i++
			}
			cpu.done(b)
		})
	}
}

// BenchmarkDiskRead measures a disk tier hit (read, checksum, key check)
// against the simplest alternative layout, one file per block read with
// os.ReadFile.
func BenchmarkDiskRead(b *testing.B) {
	keys := benchKeyList()
	for _, size := range benchSizes {
		value := make([]byte, size)
		b.Run(fmt.Sprintf("size=%d/impl=segment", size), func(b *testing.B) {
			o := diskOptions(b)
			o.DiskBytes = int64(4 * benchKeys * (size + 256))
			c := newTestCache(b, o)
			for i, k := range keys {
				c.Set(k, value, ClassData)
				if i%64 == 63 {
					c.Flush()
				}
			}
			c.Flush()
			if s := c.Stats(); s.Disk.Entries != benchKeys {
				b.Fatalf("%d blocks on disk, want %d", s.Disk.Entries, benchKeys)
			}
			b.ReportAllocs()
			i := 0
			cpu := startCPU()
			for b.Loop() {
				if _, _, ok := c.disk.get(keys[i%benchKeys]); !ok {
					b.Fatal("miss")
				}
				i++
			}
			cpu.done(b)
		})
		b.Run(fmt.Sprintf("size=%d/impl=file-per-block", size), func(b *testing.B) {
			dir := b.TempDir()
			paths := make([]string, benchKeys)
			for i := range paths {
				paths[i] = filepath.Join(dir, strconv.Itoa(i))
				if err := os.WriteFile(paths[i], value, 0o644); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			i := 0
			cpu := startCPU()
			for b.Loop() {
				if _, err := os.ReadFile(paths[i%benchKeys]); err != nil {
					b.Fatal(err)
				}
				i++
			}
			cpu.done(b)
		})
	}
}

// BenchmarkGetOrLoadMiss measures what the cache adds to a load that costs
// nothing: lookups in every tier, the shared flight, inserting the block and
// queueing it for disk.
func BenchmarkGetOrLoadMiss(b *testing.B) {
	value := make([]byte, 4<<10)
	load := func(context.Context) ([]byte, error) { return value, nil }
	for _, disk := range []bool{false, true} {
		b.Run(fmt.Sprintf("disk=%v", disk), func(b *testing.B) {
			o := DefaultOptions()
			o.MemoryBytes = 64 << 20
			if disk {
				o = diskOptions(b)
				o.MemoryBytes = 64 << 20
				o.DiskBytes = 256 << 20
			}
			c := newTestCache(b, o)
			ctx := context.Background()
			b.ReportAllocs()
			i := 0
			cpu := startCPU()
			for b.Loop() {
				if _, err := c.GetOrLoad(ctx, "miss-"+strconv.Itoa(i), ClassData, load); err != nil {
					b.Fatal(err)
				}
				i++
			}
			cpu.done(b)
			b.StopTimer()
			c.Flush()
			s := c.Stats()
			b.ReportMetric(float64(s.DiskWriteDrops)/float64(b.N), "drops/op")
		})
	}
}

// BenchmarkGetParallel measures hit throughput with every core reading, the
// cache's RAM tier against a map behind a sync.RWMutex.
func BenchmarkGetParallel(b *testing.B) {
	keys := benchKeyList()
	value := make([]byte, 4<<10)
	run := func(b *testing.B, get func(string) ([]byte, bool)) {
		b.ReportAllocs()
		var seed atomic.Uint64
		cpu := startCPU()
		b.RunParallel(func(pb *testing.PB) {
			i := int(seed.Add(7919))
			for pb.Next() {
				if _, ok := get(keys[i%benchKeys]); !ok {
					b.Error("miss")
					return
				}
				i++
			}
			cpu.done(b)
		})
		cpu.done(b)
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "hits/s")
	}
	b.Run("impl=tiered", func(b *testing.B) {
		o := DefaultOptions()
		o.MemoryBytes = 64 << 20
		c := newTestCache(b, o)
		for _, k := range keys {
			c.Set(k, value, ClassData)
		}
		run(b, c.Get)
	})
	b.Run("impl=rwmutex-map", func(b *testing.B) {
		var mu sync.RWMutex
		m := make(map[string][]byte, benchKeys)
		for _, k := range keys {
			m[k] = value
		}
		run(b, func(k string) ([]byte, bool) {
			mu.RLock()
			v, ok := m[k]
			mu.RUnlock()
			return v, ok
		})
	})
}

// BenchmarkOpen measures opening a full disk tier: reading the segment
// footers (footer=intact) against reading every record header and key, as
// the tier does when footers are damaged (footer=damaged).
func BenchmarkOpen(b *testing.B) {
	const size = 4 << 10
	for _, intact := range []bool{true, false} {
		name := "footer=intact"
		if !intact {
			name = "footer=damaged"
		}
		b.Run(name, func(b *testing.B) {
			o := diskOptions(b)
			o.DiskBytes = 32 << 20
			o.DiskSegmentBytes = 4 << 20
			c := newTestCache(b, o)
			value := make([]byte, size)
			blocks := 0
			for i := 0; c.Stats().Disk.Bytes < o.DiskBytes*3/4; i++ {
				c.Set("block-"+strconv.Itoa(i), value, ClassData)
				if i%256 == 255 {
					c.Flush()
				}
				blocks = i + 1
			}
			c.Close()
			if !intact {
				segs, err := filepath.Glob(filepath.Join(o.DiskPath, "*"+segmentSuffix))
				if err != nil {
					b.Fatal(err)
				}
				for _, seg := range segs {
					if err := os.Truncate(seg, fileSize(b, seg)-1); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportAllocs()
			cpu := startCPU()
			for b.Loop() {
				c, err := New(o, Components{})
				if err != nil {
					b.Fatal(err)
				}
				if n := c.Stats().Disk.Entries; n < int64(blocks)*9/10 {
					b.Fatalf("%d of %d blocks indexed", n, blocks)
				}
				c.Close()
			}
			cpu.done(b)
			b.ReportMetric(float64(blocks), "blocks")
		})
	}
}

func fileSize(b *testing.B, path string) int64 {
	b.Helper()
	info, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	return info.Size()
}
