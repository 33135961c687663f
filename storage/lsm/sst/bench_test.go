package sst

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/golang/snappy"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"

	"github.com/shaledb/shale/cache/cachetest"
	"github.com/shaledb/shale/internal/cputime"
)

// Run with:
//
//	go test -run '^$' -bench . -benchtime 200x -count 1 ./storage/lsm/sst/
//
// Compare codecs with benchstat -col /codec; docs/benchmarks.md keeps results.

var benchData = map[string]func() []Entry{
	"index":   func() []Entry { return indexEntries(rand.New(rand.NewPCG(1, 1)), 20000) },
	"gorilla": func() []Entry { return gorillaEntries(rand.New(rand.NewPCG(2, 2)), 4000, 240) },
}

var benchDataOrder = []string{"index", "gorilla"}

// cpuMeter reports CPU time per op (cpu-ns/op) and, given bytes per op, CPU
// throughput (cpu-MB/s): on a shared machine these are steadier than wall
// time. Start it right before b.Loop and stop it right after.
type cpuMeter struct{ start time.Duration }

func startCPU() cpuMeter { return cpuMeter{cputime.Process()} }

func (m cpuMeter) report(b *testing.B, bytesPerOp int64) time.Duration {
	used := cputime.Process() - m.start
	if used <= 0 || b.N == 0 {
		return 0
	}
	b.ReportMetric(float64(used.Nanoseconds())/float64(b.N), "cpu-ns/op")
	if bytesPerOp > 0 {
		b.ReportMetric(float64(bytesPerOp)*float64(b.N)/used.Seconds()/1e6, "cpu-MB/s")
	}
	return used
}

func entryBytes(entries []Entry) int64 {
	n := int64(0)
	for _, e := range entries {
		n += int64(len(e.Key) + len(e.Value))
	}
	return n
}

type blockCodec struct {
	name   string
	encode func(dst, src []byte) []byte
	decode func(dst, src []byte) ([]byte, error)
}

func benchCodecs(b *testing.B) []blockCodec {
	zf, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderCRC(false), zstd.WithLowerEncoderMem(true))
	if err != nil {
		b.Fatal(err)
	}
	zd, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderCRC(false), zstd.WithLowerEncoderMem(true))
	if err != nil {
		b.Fatal(err)
	}
	zdec, err := zstd.NewReader(nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { zf.Close(); zd.Close(); zdec.Close() })
	zstdDecode := func(dst, src []byte) ([]byte, error) { return zdec.DecodeAll(src, dst[:0]) }
	return []blockCodec{
		{"none", func(dst, src []byte) []byte { return append(dst[:0], src...) }, func(dst, src []byte) ([]byte, error) { return append(dst[:0], src...), nil }},
		{"snappy", snappy.Encode, snappy.Decode},
		{"s2", s2.Encode, s2.Decode},
		{"s2-better", s2.EncodeBetter, s2.Decode},
		{"zstd-fastest", func(dst, src []byte) []byte { return zf.EncodeAll(src, dst[:0]) }, zstdDecode},
		{"zstd-default", func(dst, src []byte) []byte { return zd.EncodeAll(src, dst[:0]) }, zstdDecode},
	}
}

// BenchmarkCodec compresses and decompresses 4 KiB data blocks of each kind
// of data with each codec; MB/s is of uncompressed bytes and ratio is
// uncompressed/compressed.
func BenchmarkCodec(b *testing.B) {
	for _, data := range benchDataOrder {
		blocks := blocksOf(benchData[data](), 4096)
		total := 0
		for _, blk := range blocks {
			total += len(blk)
		}
		for _, c := range benchCodecs(b) {
			enc := make([][]byte, len(blocks))
			compressed := 0
			for i, blk := range blocks {
				enc[i] = c.encode(make([]byte, s2.MaxEncodedLen(len(blk))+64), blk)
				compressed += len(enc[i])
				if got, err := c.decode(make([]byte, len(blk)), enc[i]); err != nil || !bytes.Equal(got, blk) {
					b.Fatalf("%s does not round-trip: %v", c.name, err)
				}
			}
			ratio := float64(total) / float64(compressed)
			b.Run(fmt.Sprintf("data=%s/codec=%s/op=encode", data, c.name), func(b *testing.B) {
				dst := make([]byte, s2.MaxEncodedLen(8192)+64)
				b.SetBytes(int64(total))
				b.ReportAllocs()
				cpu := startCPU()
				for b.Loop() {
					for _, blk := range blocks {
						dst = c.encode(dst[:cap(dst)], blk)
					}
				}
				cpu.report(b, int64(total))
				b.ReportMetric(ratio, "ratio")
			})
			b.Run(fmt.Sprintf("data=%s/codec=%s/op=decode", data, c.name), func(b *testing.B) {
				dst := make([]byte, 8192)
				b.SetBytes(int64(total))
				b.ReportAllocs()
				cpu := startCPU()
				for b.Loop() {
					for _, e := range enc {
						var err error
						if dst, err = c.decode(dst[:cap(dst)], e); err != nil {
							b.Fatal(err)
						}
					}
				}
				cpu.report(b, int64(total))
				b.ReportMetric(ratio, "ratio")
			})
		}
	}
}

var benchCompressions = []Compression{CompressionNone, CompressionS2, CompressionZstd}

// BenchmarkWrite builds whole tables; ns/entry and bytes/entry are per entry
// and ratio is entry bytes over table bytes.
func BenchmarkWrite(b *testing.B) {
	for _, data := range benchDataOrder {
		entries := benchData[data]()
		raw := entryBytes(entries)
		for _, c := range benchCompressions {
			b.Run(fmt.Sprintf("data=%s/compression=%s", data, c), func(b *testing.B) {
				opts := DefaultWriterOptions()
				opts.Compression = c
				var buf bytes.Buffer
				var info Info
				b.SetBytes(raw)
				b.ReportAllocs()
				cpu := startCPU()
				for b.Loop() {
					buf.Reset()
					w := NewWriter(&buf, opts)
					for _, e := range entries {
						if err := w.Add(e); err != nil {
							b.Fatal(err)
						}
					}
					var err error
					if info, err = w.Finish(); err != nil {
						b.Fatal(err)
					}
				}
				used := cpu.report(b, raw)
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(entries)), "ns/entry")
				b.ReportMetric(float64(used.Nanoseconds())/float64(b.N*len(entries)), "cpu-ns/entry")
				b.ReportMetric(float64(info.Size)/float64(len(entries)), "bytes/entry")
				b.ReportMetric(float64(raw)/float64(info.Size), "ratio")
			})
		}
	}
}

// BenchmarkGet looks up present keys in random order. cache=warm serves
// blocks from a cache holding the whole table; cache=none reads and decodes
// the block from memory on every Get.
func BenchmarkGet(b *testing.B) {
	forEachTable(b, func(b *testing.B, entries []Entry, table []byte, cached bool) {
		var tb *Table
		if cached {
			tb = openTable(b, table, cachetest.NewMap())
			it := tb.NewIter(context.Background(), nil, nil)
			for ok := it.First(); ok; ok = it.Next() {
			}
			it.Close()
		} else {
			tb = openTable(b, table, nil)
		}
		rng := rand.New(rand.NewPCG(3, 3))
		var dst []Entry
		b.ReportAllocs()
		cpu := startCPU()
		for b.Loop() {
			var err error
			dst, err = tb.Get(context.Background(), entries[rng.IntN(len(entries))].Key, dst[:0])
			if err != nil || len(dst) == 0 {
				b.Fatal("get failed", err)
			}
		}
		cpu.report(b, 0)
	})
}

// forEachTable runs bench as sub-benchmarks data=/compression=/cache=, over
// a table of each data set written with each compression, with cached
// telling whether the table is to be opened with a cache (cache=warm) or
// without (cache=none).
func forEachTable(b *testing.B, bench func(b *testing.B, entries []Entry, table []byte, cached bool)) {
	for _, data := range benchDataOrder {
		entries := benchData[data]()
		for _, c := range benchCompressions {
			opts := DefaultWriterOptions()
			opts.Compression = c
			table, _ := buildTable(b, entries, opts)
			for _, cached := range []bool{true, false} {
				name := map[bool]string{true: "warm", false: "none"}[cached]
				b.Run(fmt.Sprintf("data=%s/compression=%s/cache=%s", data, c, name), func(b *testing.B) {
					bench(b, entries, table, cached)
				})
			}
		}
	}
}

// BenchmarkGetAbsent looks up absent keys: the bloom filter answers.
func BenchmarkGetAbsent(b *testing.B) {
	entries := benchData["index"]()
	table, _ := buildTable(b, entries, DefaultWriterOptions())
	tb := openTable(b, table, nil)
	keys := make([][]byte, 1024)
	for i := range keys {
		keys[i] = append(bytes.Clone(entries[i*len(entries)/len(keys)].Key), 0)
	}
	b.ReportAllocs()
	i := 0
	cpu := startCPU()
	for b.Loop() {
		if dst, err := tb.Get(context.Background(), keys[i%len(keys)], nil); err != nil || len(dst) != 0 {
			b.Fatal(err)
		}
		i++
	}
	cpu.report(b, 0)
}

// BenchmarkIterate scans whole tables; MB/s is of keys plus values.
func BenchmarkIterate(b *testing.B) {
	forEachTable(b, func(b *testing.B, entries []Entry, table []byte, cached bool) {
		raw := entryBytes(entries)
		var tb *Table
		if cached {
			tb = openTable(b, table, cachetest.NewMap())
		} else {
			tb = openTable(b, table, nil)
		}
		b.SetBytes(raw)
		b.ReportAllocs()
		cpu := startCPU()
		for b.Loop() {
			it := tb.NewIter(context.Background(), nil, nil)
			n := 0
			for ok := it.First(); ok; ok = it.Next() {
				n++
			}
			if err := it.Close(); err != nil || n != len(entries) {
				b.Fatal(n, err)
			}
		}
		cpu.report(b, raw)
	})
}

// BenchmarkOpen opens a table with a cold cache (reads and decodes footer,
// index and filter) and a warm one (decodes only).
func BenchmarkOpen(b *testing.B) {
	entries := benchData["index"]()
	table, info := buildTable(b, entries, DefaultWriterOptions())
	for _, warm := range []bool{false, true} {
		b.Run(fmt.Sprintf("cache=%v", map[bool]string{true: "warm", false: "cold"}[warm]), func(b *testing.B) {
			c := cachetest.NewMap()
			if warm {
				openTable(b, table, c)
			}
			b.ReportAllocs()
			cpu := startCPU()
			for b.Loop() {
				if !warm {
					c = cachetest.NewMap()
				}
				openTable(b, table, c)
			}
			cpu.report(b, 0)
			b.ReportMetric(float64(info.NumDataBlocks), "blocks")
		})
	}
}

// BenchmarkColdScan scans a whole 1 MB index table with an empty cache and
// reports the ranged reads it took (reads/op): against an object store with
// 50 ms first-byte latency, each read is a round trip.
func BenchmarkColdScan(b *testing.B) {
	entries := benchData["index"]()
	table, info := buildTable(b, entries, DefaultWriterOptions())
	for _, bounded := range []bool{true, false} {
		b.Run(fmt.Sprintf("bounded=%v", bounded), func(b *testing.B) {
			var upper []byte
			if bounded {
				upper = append(bytes.Clone(entries[len(entries)-1].Key), 0)
			}
			r := &countingReadable{data: table}
			b.SetBytes(info.DataSize)
			b.ReportAllocs()
			cpu := startCPU()
			for b.Loop() {
				tb, err := Open(context.Background(), r, "t", cachetest.NewMap())
				if err != nil {
					b.Fatal(err)
				}
				it := tb.NewIter(context.Background(), nil, upper)
				for ok := it.First(); ok; ok = it.Next() {
				}
				if err := it.Close(); err != nil {
					b.Fatal(err)
				}
			}
			cpu.report(b, info.DataSize)
			reads, _ := r.stats()
			b.ReportMetric(float64(reads)/float64(b.N), "reads/op")
			b.ReportMetric(float64(info.NumDataBlocks), "blocks")
		})
	}
}
