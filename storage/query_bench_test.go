//go:build unix

package storage

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"

	"github.com/shaledb/shale/storage/objstore"
)

// BenchmarkQueryWarm runs dashboard range queries through the upstream
// PromQL engine over 24 h of 15 s counters (decimal values, as exporters
// report them) held the way a server holds them right after an ingest: the
// head flushed every 30 min of data, so each series' sample key holds a
// few merge operands, and a block cache in RAM. state=head leaves the open
// partition in the head with its last 20 min not flushed yet;
// state=flushed closes every partition. cpu-ms/op is the process CPU time of
// one query, all goroutines: steadier than latency on a shared machine.
// range=instant is an alerting rule's instant query of 100 series.
//
//	go test -run '^$' -bench BenchmarkQueryWarm -benchtime 20x -count 6 ./storage/ | tee warm.txt
//	benchstat -col /state warm.txt
func BenchmarkQueryWarm(b *testing.B) {
	const series = 1000
	for _, state := range []string{"head", "flushed"} {
		b.Run("state="+state, func(b *testing.B) {
			db := warmQueryDB(b, series, state == "flushed")
			eng := promql.NewEngine(promql.EngineOpts{MaxSamples: 100_000_000, Timeout: time.Minute, LookbackDelta: 5 * time.Minute})
			end := time.UnixMilli(db.head.maxT.Load())
			b.Run("range=instant/query=rate", func(b *testing.B) {
				loopCPU(b, func() {
					qry, err := eng.NewInstantQuery(context.Background(), db, nil, `rate(x{job="job-1"}[5m])`, end)
					if err != nil {
						b.Fatal(err)
					}
					res := qry.Exec(context.Background())
					if v, err := res.Vector(); err != nil || len(v) != series/10 {
						b.Fatalf("%d series in the result (%v), want %d", len(v), err, series/10)
					}
					qry.Close()
				})
			})
			for _, rng := range []time.Duration{time.Hour, 6 * time.Hour, 24 * time.Hour} {
				for _, q := range []struct{ name, expr string }{
					{"sum_rate", `sum by (job) (rate(x[5m]))`},
					{"count", `count by (job) (x)`},
				} {
					b.Run(fmt.Sprintf("range=%dh/query=%s", int(rng.Hours()), q.name), func(b *testing.B) {
						run := func() {
							qry, err := eng.NewRangeQuery(context.Background(), db, nil, q.expr, end.Add(-rng), end, rng/240)
							if err != nil {
								b.Fatal(err)
							}
							res := qry.Exec(context.Background())
							if res.Err != nil {
								b.Fatal(res.Err)
							}
							if m, err := res.Matrix(); err != nil || len(m) != 10 {
								b.Fatalf("%d series in the result (%v), want 10", len(m), err)
							}
							qry.Close()
						}
						run()
						loopCPU(b, run)
					})
				}
			}
		})
	}
}

// warmQueryDB returns a DB with 24 h of n counters at 15 s, see
// BenchmarkQueryWarm.
func warmQueryDB(b *testing.B, n int, closeAll_ bool) *DB {
	b.Helper()
	db := benchQueryDB(b, objstore.NewMemoryBucket(), 1<<30)
	lsets, vals := benchCounters("x", n), make([]float64, n)
	rng := rand.New(rand.NewPCG(1, 2))
	const step = 15_000
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	end := start + 24*time.Hour.Milliseconds()
	for t := start; t <= end; t += step {
		app := db.Appender(context.Background())
		for i, l := range lsets {
			vals[i] += float64(rng.IntN(10000)) / 100
			if _, err := app.Append(0, l, t+int64(rng.IntN(5)), vals[i]); err != nil {
				b.Fatal(err)
			}
		}
		if err := app.Commit(); err != nil {
			b.Fatal(err)
		}
		if (t-start)%(30*time.Minute).Milliseconds() == 0 && end-t > (20*time.Minute).Milliseconds() {
			if err := db.Flush(context.Background()); err != nil {
				b.Fatal(err)
			}
		}
	}
	if closeAll_ {
		if err := db.flushHead(context.Background(), closeAll); err != nil {
			b.Fatal(err)
		}
	}
	return db
}

// benchQueryDB opens a writer on bucket for the query benchmarks: WAL off, no
// retention, no early flush, a RAM block cache of cacheBytes.
func benchQueryDB(b *testing.B, bucket objstore.Bucket, cacheBytes int64) *DB {
	b.Helper()
	c := newTestCache(b, cacheBytes)
	opts := coldOptions()
	opts.HeadFlushSamples = 0
	db, err := openOn(context.Background(), bucket, "tsdb", opts, testLSMOptions(), c, Components{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	return db
}

// benchCounters returns the label sets of n series of the metric name, one
// per instance, over 10 jobs.
func benchCounters(name string, n int) []labels.Labels {
	lsets := make([]labels.Labels, n)
	for i := range lsets {
		lsets[i] = labels.FromStrings("__name__", name, "instance", "host-"+strconv.Itoa(i), "job", "job-"+strconv.Itoa(i%10))
	}
	return lsets
}
