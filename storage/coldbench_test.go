//go:build unix

package storage

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/prometheus/promql"

	"github.com/shaledb/shale/internal/cputime"
)

// BenchmarkColdWarmQuery runs a 6 h `sum by (job) (rate(x[5m]))` range query
// (step 60 s) through the upstream PromQL engine against a read-only DB over
// a bucket that adds 50 ms to every request. The data set has as many
// series of another metric, y, interleaved with x's in every partition.
// cache=cold opens a fresh DB with an empty cache for every query (the open
// is not timed); cache=warm asks the same query again of a DB whose cache
// holds what the first asking read. Besides the latency it reports the
// object-store requests and bytes of one query, the process CPU time of one
// query (all goroutines: a fairer figure than latency on a loaded machine),
// and the ratio of data-block bytes read to the bytes of the LSM entries the
// query needs (meta-bytes are the tails of tables: footer, index, filter).
//
//	go test -run '^$' -bench BenchmarkColdWarmQuery -benchtime 5x -count 3 ./storage/ | tee cold.txt
//	benchstat -col /cache cold.txt
func BenchmarkColdWarmQuery(b *testing.B) {
	const latency = 50 * time.Millisecond
	span := 6 * time.Hour
	for _, n := range []int{10, 100, 500, 5000} {
		spec := coldSpec{series: n, span: span, interval: 30 * time.Second}
		bucket := coldBucket(b, spec)
		start, end := time.UnixMilli(coldBase), time.UnixMilli(coldBase+span.Milliseconds())
		eng := promql.NewEngine(promql.EngineOpts{MaxSamples: 100_000_000, Timeout: time.Minute, LookbackDelta: 5 * time.Minute})
		run := func(b *testing.B, db *DB) {
			b.Helper()
			q, err := eng.NewRangeQuery(context.Background(), db, nil, "sum by (job) (rate(x[5m]))", start, end, time.Minute)
			if err != nil {
				b.Fatal(err)
			}
			defer q.Close()
			res := q.Exec(context.Background())
			if res.Err != nil {
				b.Fatal(res.Err)
			}
			m, err := res.Matrix()
			if err != nil {
				b.Fatal(err)
			}
			if want := min(n, 10); len(m) != want {
				b.Fatalf("%d series in the result, want %d", len(m), want)
			}
		}
		needed := func() int64 {
			db, _, _ := coldDB(b, bucket, 0, 0)
			return neededBytes(b, db, "x", coldBase, coldBase+span.Milliseconds())
		}()
		for _, mode := range []string{"cold", "warm"} {
			b.Run("series="+strconv.Itoa(n)+"/cache="+mode, func(b *testing.B) {
				b.ReportAllocs()
				var reqs, data, meta int64
				var cpu time.Duration
				var db *DB
				var cb *countingBucket
				if mode == "warm" {
					db, _, cb = coldDB(b, bucket, latency, 512<<20)
					run(b, db)
				}
				for b.Loop() {
					if mode == "cold" {
						b.StopTimer()
						db, _, cb = coldDB(b, bucket, latency, 512<<20)
						b.StartTimer()
					}
					cb.reset()
					c0 := cputime.Process()
					run(b, db)
					cpu += cputime.Process() - c0
					reqs += cb.requests.Load()
					data += cb.dataBytes.Load()
					meta += cb.metaBytes.Load()
					if mode == "cold" {
						b.StopTimer()
						db.Close()
						b.StartTimer()
					}
				}
				runs := float64(b.N)
				b.ReportMetric(float64(reqs)/runs, "requests/op")
				b.ReportMetric(float64(data+meta)/runs, "bytes/op")
				b.ReportMetric(float64(meta)/runs, "meta-bytes/op")
				b.ReportMetric(float64(needed), "needed-bytes")
				b.ReportMetric(float64(cpu.Milliseconds())/runs, "cpu-ms/op")
				if mode == "cold" {
					b.ReportMetric(float64(data)/runs/float64(needed), "data/needed")
				}
			})
		}
	}
}

// loopCPU runs op in b.Loop with allocations reported and reports the
// process CPU time of one op, all goroutines, as cpu-ms/op.
func loopCPU(b *testing.B, op func()) {
	b.Helper()
	b.ReportAllocs()
	var cpu time.Duration
	for b.Loop() {
		c0 := cputime.Process()
		op()
		cpu += cputime.Process() - c0
	}
	b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu-ms/op")
}
