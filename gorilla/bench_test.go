package gorilla

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/prometheus/prometheus/tsdb/chunkenc"
)

// The codec benchmarks run Shale's blocks and Prometheus' XOR chunks side by
// side on the same samples cut into the same units (one block or chunk per
// unit). Run with:
//
//	go test -run '^$' -bench 'BenchmarkCodec' -benchtime 0.5s -count 6 ./gorilla/ | tee /tmp/codec.txt
//	.tools/benchstat -col /codec /tmp/codec.txt
//
// data=counter|gauge|const are synthetic: 100 series at a 15 s interval with
// realistic scrape jitter, 120 samples per unit as Prometheus cuts chunks.
// data=real-chunks cuts the real block's series exactly like its XOR chunks;
// data=real-series encodes each whole series as one unit.

type unit struct {
	ts []int64
	vs []float64
}

func syntheticUnits(kind string) []unit {
	rng := rand.New(rand.NewPCG(7, 11))
	var us []unit
	for s := range 100 {
		ts := make([]int64, 120)
		vs := make([]float64, 120)
		t := int64(1796014800000 + s*37)
		v := float64(rng.IntN(1 << 20))
		for i := range ts {
			ts[i] = t
			t += 15000
			if rng.IntN(10) == 0 { // now and then a scrape lands a few ms off
				t += rng.Int64N(7) - 3
			}
			switch kind {
			case "counter":
				v += float64(rng.IntN(5000))
			case "gauge":
				v = math.Round(500+100*math.Sin(float64(i)/10)+rng.NormFloat64()*20) / 100
			case "const":
				v = float64(s)
			}
			vs[i] = v
		}
		us = append(us, unit{ts, vs})
	}
	return us
}

func realUnits(b *testing.B, whole bool) []unit {
	var us []unit
	for _, s := range loadReal(b) {
		if whole {
			us = append(us, unit{s.ts, s.vs})
			continue
		}
		off := 0
		for _, n := range s.counts {
			us = append(us, unit{s.ts[off : off+n], s.vs[off : off+n]})
			off += n
		}
	}
	return us
}

// benchDataSets name the data the codec benchmarks run on: synthetic units
// of each kind, and the real series in their chunks or whole.
var benchDataSets = []string{"counter", "gauge", "const", "real-chunks", "real-series"}

// benchUnits returns the units of the data set named data.
func benchUnits(b *testing.B, data string) []unit {
	switch data {
	case "real-chunks":
		return realUnits(b, false)
	case "real-series":
		return realUnits(b, true)
	}
	return syntheticUnits(data)
}

func BenchmarkCodec(b *testing.B) {
	for _, data := range benchDataSets {
		b.Run("data="+data, func(b *testing.B) {
			us := benchUnits(b, data)
			samples := 0
			for _, u := range us {
				samples += len(u.ts)
			}
			b.Run("codec=gorilla", func(b *testing.B) { benchGorilla(b, us, samples) })
			b.Run("codec=xor", func(b *testing.B) { benchXOR(b, us, samples) })
		})
	}
}

func reportPerSample(b *testing.B, samples, bytes int) {
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(samples), "ns/sample")
	b.ReportMetric(float64(bytes)/float64(samples), "bytes/sample")
	b.ReportMetric(0, "ns/op")
}

func benchGorilla(b *testing.B, us []unit, samples int) {
	blocks := make([][]byte, len(us))
	size := 0
	for i, u := range us {
		var err error
		if blocks[i], err = Encode(nil, u.ts, u.vs); err != nil {
			b.Fatal(err)
		}
		size += len(blocks[i])
	}
	b.Run("op=encode", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for b.Loop() {
			for _, u := range us {
				buf, _ = Encode(buf[:0], u.ts, u.vs)
			}
		}
		reportPerSample(b, samples, size)
	})
	b.Run("op=append", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for b.Loop() {
			for _, u := range us {
				var a Appender
				for i, t := range u.ts {
					_ = a.Append(t, u.vs[i])
				}
				buf = a.AppendBlock(buf[:0])
			}
		}
		reportPerSample(b, samples, size)
	})
	b.Run("op=decode", func(b *testing.B) {
		b.ReportAllocs()
		var gi Iterator
		var it chunkenc.Iterator = &gi // as the query engine sees it
		var sum float64
		for b.Loop() {
			for _, blk := range blocks {
				if err := gi.Reset(blk); err != nil {
					b.Fatal(err)
				}
				for it.Next() == chunkenc.ValFloat {
					_, v := it.At()
					sum += v
				}
			}
		}
		reportPerSample(b, samples, size)
	})
}

func benchXOR(b *testing.B, us []unit, samples int) {
	chunks := make([]*chunkenc.XORChunk, len(us))
	size := 0
	for i, u := range us {
		chunks[i] = xorEncode(u)
		size += len(chunks[i].Bytes())
	}
	encode := func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for _, u := range us {
				xorEncode(u)
			}
		}
		reportPerSample(b, samples, size)
	}
	// XOR chunks are built by appending; both names measure the same thing.
	b.Run("op=encode", encode)
	b.Run("op=append", encode)
	b.Run("op=decode", func(b *testing.B) {
		b.ReportAllocs()
		var it chunkenc.Iterator
		var sum float64
		for b.Loop() {
			for _, c := range chunks {
				it = c.Iterator(it)
				for it.Next() == chunkenc.ValFloat {
					_, v := it.At()
					sum += v
				}
			}
		}
		reportPerSample(b, samples, size)
	})
}

func xorEncode(u unit) *chunkenc.XORChunk {
	c := chunkenc.NewXORChunk()
	app, _ := c.Appender()
	for i, t := range u.ts {
		app.Append(0, t, u.vs[i])
	}
	return c
}

// BenchmarkPaired runs both codecs on the same units in turn within each
// iteration and reports each codec's time per sample, so that both see the
// same machine load; on a shared machine this ratio is steadier than two
// separate benchmarks. Encoding is Encode for Shale and appending to a new
// chunk for XOR. Run with:
//
//	go test -run '^$' -bench 'BenchmarkPaired' -benchtime 0.5s -count 6 ./gorilla/
func BenchmarkPaired(b *testing.B) {
	for _, data := range benchDataSets {
		b.Run("data="+data, func(b *testing.B) {
			us := benchUnits(b, data)
			samples := 0
			blocks := make([][]byte, len(us))
			chunks := make([]*chunkenc.XORChunk, len(us))
			for i, u := range us {
				samples += len(u.ts)
				var err error
				if blocks[i], err = Encode(nil, u.ts, u.vs); err != nil {
					b.Fatal(err)
				}
				chunks[i] = xorEncode(u)
			}
			b.Run("op=encode", func(b *testing.B) {
				var buf []byte
				var gd, xd time.Duration
				for b.Loop() {
					st := time.Now()
					for _, u := range us {
						buf, _ = Encode(buf[:0], u.ts, u.vs)
					}
					mid := time.Now()
					for _, u := range us {
						xorEncode(u)
					}
					gd += mid.Sub(st)
					xd += time.Since(mid)
				}
				reportPaired(b, gd, xd, samples)
			})
			b.Run("op=decode", func(b *testing.B) {
				var gi Iterator
				var git chunkenc.Iterator = &gi
				var xit chunkenc.Iterator
				var sum float64
				var gd, xd time.Duration
				for b.Loop() {
					st := time.Now()
					for _, blk := range blocks {
						if err := gi.Reset(blk); err != nil {
							b.Fatal(err)
						}
						for git.Next() == chunkenc.ValFloat {
							_, v := git.At()
							sum += v
						}
					}
					mid := time.Now()
					for _, c := range chunks {
						xit = c.Iterator(xit)
						for xit.Next() == chunkenc.ValFloat {
							_, v := xit.At()
							sum += v
						}
					}
					gd += mid.Sub(st)
					xd += time.Since(mid)
				}
				reportPaired(b, gd, xd, samples)
			})
		})
	}
}

func reportPaired(b *testing.B, gd, xd time.Duration, samples int) {
	n := float64(b.N) * float64(samples)
	b.ReportMetric(float64(gd.Nanoseconds())/n, "gorilla-ns/sample")
	b.ReportMetric(float64(xd.Nanoseconds())/n, "xor-ns/sample")
	b.ReportMetric(float64(gd)/float64(xd), "gorilla/xor")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkMerge merges two blocks per real series: its first and second
// halves (case=disjoint, the flush-after-flush case) or its even and odd
// samples (case=interleaved, out-of-order data). Run with:
//
//	go test -run '^$' -bench 'BenchmarkMerge' -count 6 ./gorilla/
func BenchmarkMerge(b *testing.B) {
	data := loadReal(b)
	for _, kind := range []string{"disjoint", "interleaved"} {
		b.Run("case="+kind, func(b *testing.B) {
			var pairs [][2][]byte
			samples := 0
			for _, s := range data {
				if len(s.ts) < 4 {
					continue
				}
				var a, c unit
				if kind == "disjoint" {
					h := len(s.ts) / 2
					a, c = unit{s.ts[:h], s.vs[:h]}, unit{s.ts[h:], s.vs[h:]}
				} else {
					for i := range s.ts {
						u := &a
						if i%2 == 1 {
							u = &c
						}
						u.ts = append(u.ts, s.ts[i])
						u.vs = append(u.vs, s.vs[i])
					}
				}
				ab, err := Encode(nil, a.ts, a.vs)
				if err != nil {
					b.Fatal(err)
				}
				cb, err := Encode(nil, c.ts, c.vs)
				if err != nil {
					b.Fatal(err)
				}
				pairs = append(pairs, [2][]byte{ab, cb})
				samples += len(s.ts)
			}
			b.ReportAllocs()
			var buf []byte
			for b.Loop() {
				for _, p := range pairs {
					var err error
					if buf, err = Merge(buf[:0], p[0], p[1]); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(samples), "ns/sample")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// BenchmarkAppenderRange reads the last hour, or the last 5 minutes, of an
// appender holding 6 h of a 15 s counter (1,440 samples: five sealed
// blocks and a stream), as a query of a head that took a backfill does:
// range=all decodes everything (Iterator), the others only the blocks and
// stream that reach into the range (IteratorRange).
//
//	go test -run '^$' -bench BenchmarkAppenderRange -count 6 ./gorilla/ | tee /tmp/apprange.txt
//	.tools/benchstat -col /range /tmp/apprange.txt
func BenchmarkAppenderRange(b *testing.B) {
	const step, n = 15_000, 6 * 240
	a := NewAppender()
	v := 0.0
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range n {
		v += float64(rng.IntN(1000)) / 100
		if err := a.Append(int64(i)*step, v); err != nil {
			b.Fatal(err)
		}
	}
	last := int64(n-1) * step
	for _, r := range []struct {
		name string
		mint int64
	}{{"all", math.MinInt64}, {"1h", last - time.Hour.Milliseconds()}, {"5m", last - 5*time.Minute.Milliseconds()}} {
		b.Run("range="+r.name, func(b *testing.B) {
			var it Iterator
			for b.Loop() {
				a.IteratorRange(&it, r.mint, last)
				got := 0
				for vt := it.Seek(r.mint); vt != chunkenc.ValNone; vt = it.Next() {
					got++
				}
				if got == 0 || it.Err() != nil {
					b.Fatalf("%d samples, err %v", got, it.Err())
				}
			}
		})
	}
}

// BenchmarkAppenderStream reads an appender whose samples are all in its
// stream (239 of a 15 s series, just under a seal), as a query of the head's
// last hour does, reads its first half (op=half: the earlier of a query's two
// time shards, whose decode stops at the shard's end), and seals one (the
// ingest's share of the stream's decode):
// data=int is a counter of whole numbers, decimal a counter of values with
// two decimals (decimal stream), large the same beyond 2^51 hundredths
// (where the reader recomputes each value's integer), gauge noisy floats
// (XOR stream).
//
//	go test -run '^$' -bench BenchmarkAppenderStream -count 6 ./gorilla/
func BenchmarkAppenderStream(b *testing.B) {
	const step, n = 15_000, sealSamples - 1
	for _, d := range []struct {
		name string
		next func(rng *rand.Rand, m int64) (int64, float64)
	}{
		{"int", func(rng *rand.Rand, m int64) (int64, float64) { m += rng.Int64N(1000); return m, float64(m) }},
		{"decimal", func(rng *rand.Rand, m int64) (int64, float64) { m += rng.Int64N(100_000); return m, decimalValue(m, 2) }},
		{"large", func(rng *rand.Rand, m int64) (int64, float64) {
			m = max(m, 1<<51) + rng.Int64N(100_000)
			return m, decimalValue(m, 2)
		}},
		{"gauge", func(rng *rand.Rand, m int64) (int64, float64) { return m, rng.Float64() * 100 }},
	} {
		rng := rand.New(rand.NewPCG(11, 12))
		a := NewAppender()
		var m int64
		for i := range n {
			var v float64
			m, v = d.next(rng, m)
			if err := a.Append(int64(i)*step, v); err != nil {
				b.Fatal(err)
			}
		}
		for _, r := range []struct {
			op   string
			want int // samples read: all, or the first half
		}{{"read", n}, {"half", n / 2}} {
			b.Run("data="+d.name+"/op="+r.op, func(b *testing.B) {
				var it Iterator
				for b.Loop() {
					a.IteratorRange(&it, 0, int64(r.want-1)*step)
					got := 0
					for vt := it.Next(); vt != chunkenc.ValNone; vt = it.Next() {
						got++
					}
					if got != r.want || it.Err() != nil {
						b.Fatalf("%d samples, want %d, err %v", got, r.want, it.Err())
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/sample")
			})
		}
		b.Run("data="+d.name+"/op=seal", func(b *testing.B) {
			var dec floatDecoder
			for b.Loop() {
				dec.ts, dec.vs = dec.ts[:0], dec.vs[:0]
				if err := a.decodeStream(&dec, n, math.MaxInt64); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/sample")
		})
	}
}

// BenchmarkSeekRange reads the last 5 minutes, the last hour and the whole of
// 2 h blocks (480 samples at 15 s) through ResetRange: a block with a seek
// table is decoded from the point before the range. data=counter are
// integer counters, gauge noisy floats (XOR), jitter counters whose every
// timestamp is 0-4 ms off the grid (a timestamp table), real the real series cut into
// 480-sample blocks (most of them constant or sparse, with no table).
//
//	go test -run '^$' -bench BenchmarkSeekRange -count 6 ./gorilla/
func BenchmarkSeekRange(b *testing.B) {
	const step, n = 15_000, 480
	rng := rand.New(rand.NewPCG(9, 10))
	blocks := map[string][][]byte{}
	for _, kind := range []string{"counter", "gauge", "jitter"} {
		for range 50 {
			ts, vs := make([]int64, n), make([]float64, n)
			v := 0.0
			for i := range ts {
				ts[i] = int64(i) * step
				switch {
				case kind == "jitter": // every scrape lands 0-4 ms off the grid: dense timestamps
					ts[i] += rng.Int64N(5)
				case rng.IntN(10) == 0: // now and then a scrape lands a few ms off
					ts[i] += rng.Int64N(7) - 3
				}
				if kind != "gauge" {
					v += float64(rng.IntN(5000))
				} else {
					v = rng.NormFloat64()
				}
				vs[i] = v
			}
			blocks[kind] = append(blocks[kind], mustEncode(b, ts, vs))
		}
	}
	for _, s := range loadReal(b) {
		for i := 0; i < len(s.ts); i += n {
			j := min(i+n, len(s.ts))
			blocks["real"] = append(blocks["real"], mustEncode(b, s.ts[i:j], s.vs[i:j]))
		}
	}
	for _, data := range []string{"counter", "gauge", "jitter", "real"} {
		for _, r := range []struct {
			name string
			back time.Duration
		}{{"all", 0}, {"1h", time.Hour}, {"5m", 5 * time.Minute}} {
			b.Run("data="+data+"/range="+r.name, func(b *testing.B) {
				var it Iterator
				bs := blocks[data]
				for b.Loop() {
					for _, blk := range bs {
						m, _ := ReadMeta(blk)
						mint := int64(math.MinInt64)
						if r.back > 0 {
							mint = m.MaxTime - r.back.Milliseconds()
						}
						if err := it.ResetRange(blk, mint, m.MaxTime); err != nil {
							b.Fatal(err)
						}
						for vt := it.Seek(mint); vt != chunkenc.ValNone; vt = it.Next() {
						}
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(bs)), "ns/block")
			})
		}
	}
}

// BenchmarkSeekSteps seeks through decoded blocks (480 samples 15 s apart)
// as the engine evaluates an instant selector at every step of a range
// query: one Seek a step, step 15 s (the next sample), 90 s (six ahead) or
// 10 min (40 ahead).
func BenchmarkSeekSteps(b *testing.B) {
	const step, n = 15_000, 480
	rng := rand.New(rand.NewPCG(11, 12))
	var blocks [][]byte
	for range 50 {
		ts, vs := make([]int64, n), make([]float64, n)
		for i := range ts {
			ts[i] = int64(i)*step + rng.Int64N(5)
			vs[i] = float64(i)
		}
		blocks = append(blocks, mustEncode(b, ts, vs))
	}
	for _, every := range []time.Duration{15 * time.Second, 90 * time.Second, 10 * time.Minute} {
		b.Run("step="+every.String(), func(b *testing.B) {
			var it Iterator
			seeks := 0
			for b.Loop() {
				seeks = 0
				for _, blk := range blocks {
					if err := it.Reset(blk); err != nil {
						b.Fatal(err)
					}
					for t := int64(0); it.Seek(t) != chunkenc.ValNone; t += every.Milliseconds() {
						seeks++
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*seeks), "ns/seek")
		})
	}
}
