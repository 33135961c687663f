//go:build unix

package storage

import (
	"context"
	"math/rand/v2"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	promstorage "github.com/prometheus/prometheus/storage"

	"github.com/shaledb/shale/storage/objstore"
)

// BenchmarkRangeCost compares the CPU of queries over short and long ranges
// of the same series: an alerting rule's instant query over [5m] against a
// 2 h range query (step 30 s) and an instant query over [2h], all
// `sum by (job) (rate(x_total[...]))` over every series of x_total (a
// counter's name: the engine annotates every series of a rate over any other
// name as possibly not a counter, as it did when the metric was called x).
// The data is 3 h 10 min of 15 s counters written as a server writes them:
// the head flushed (closing the partitions no sample can land in) every
// 30 min of data, the last 10 min not flushed, a local folder, a RAM block
// cache of about the data's size (1 KiB a series, at least 256 MiB). A
// seventh of the series stopped an hour before the end (churn). at=head
// queries at the newest sample, at=closed at the end of the first
// partition, closed. cpu-ms/op is the process CPU time of one query, all
// goroutines; held-B/series (instant queries) what the query's Select holds
// a series until the query ends, measured once on a query of its own.
//
// SHALE_BENCH_SERIES sets the series count (default 10000). At 1M series
// the instant query over [2h] needs more memory than 24 GB leave (the
// engine holds every series' 2 h of points), so that run leaves it out, and
// GOMEMLIMIT keeps the collector's headroom within the machine:
//
//	go test -run '^$' -bench BenchmarkRangeCost -benchtime 5x -count 5 ./storage/ | tee range.txt
//	SHALE_BENCH_SERIES=1000000 GOMEMLIMIT=14GiB go test -run '^$' -bench 'BenchmarkRangeCost/.*/.*/query=(instant_5m|range_2h)' -benchtime 3x -timeout 3h ./storage/
//	benchstat -col /query range.txt
func BenchmarkRangeCost(b *testing.B) {
	n := benchSeries(b, 10_000, 10)
	db, newest := rangeCostDB(b, n)
	eng := promql.NewEngine(promql.EngineOpts{MaxSamples: 1 << 40, Timeout: 10 * time.Minute, LookbackDelta: 5 * time.Minute})
	// at=head asks at the newest sample, whose partition is in the head
	// (the previous one closed); at=closed at the end of the first
	// partition, written out and closed (a block a series per head flush);
	// at=compacted the same after a compaction, which merges each series'
	// blocks of the partition into one 2 h block.
	closedEnd := time.Date(2026, 1, 1, 2, 0, 0, 0, time.UTC).Add(-time.Millisecond)
	for _, at := range []struct {
		name string
		end  time.Time
	}{{"head", newest}, {"closed", closedEnd}, {"compacted", closedEnd}} {
		end := at.end
		if at.name == "compacted" {
			if err := db.w.Compact(context.Background()); err != nil {
				b.Fatal(err)
			}
		}
		b.Run("series="+strconv.Itoa(n)+"/at="+at.name, func(b *testing.B) {
			for _, q := range []struct {
				name  string
				expr  string
				rng   time.Duration
				steps int
			}{
				{"instant_5m", `sum by (job) (rate(x_total[5m]))`, 0, 1},
				{"instant_2h", `sum by (job) (rate(x_total[2h]))`, 0, 1},
				{"range_2h", `sum by (job) (rate(x_total[5m]))`, 2 * time.Hour, 241},
			} {
				b.Run("query="+q.name, func(b *testing.B) {
					run := func() {
						var (
							qry promql.Query
							err error
						)
						if q.rng == 0 {
							qry, err = eng.NewInstantQuery(context.Background(), db, nil, q.expr, end)
						} else {
							qry, err = eng.NewRangeQuery(context.Background(), db, nil, q.expr, end.Add(-q.rng), end, 30*time.Second)
						}
						if err != nil {
							b.Fatal(err)
						}
						defer qry.Close()
						res := qry.Exec(context.Background())
						if res.Err != nil {
							b.Fatal(res.Err)
						}
						m, err := res.Matrix()
						if q.rng == 0 {
							v, verr := res.Vector()
							if verr != nil || len(v) != 10 {
								b.Fatalf("%d series in the result (%v), want 10", len(v), verr)
							}
							return
						}
						if err != nil || len(m) != 10 || len(m[0].Floats) < q.steps-1 { // a first step before the first sample
							b.Fatalf("result %d series (%v), want 10 of %d steps", len(m), err, q.steps)
						}
					}
					run()
					var held int64
					if q.rng == 0 {
						qry, err := eng.NewInstantQuery(context.Background(), holdQueryable{db: db, held: &held}, nil, q.expr, end)
						if err != nil {
							b.Fatal(err)
						}
						if res := qry.Exec(context.Background()); res.Err != nil {
							b.Fatal(res.Err)
						}
						qry.Close()
					}
					loopCPU(b, run)
					if q.rng == 0 { // reported after the loop, which deletes earlier reports
						b.ReportMetric(float64(held)/float64(n), "held-B/series")
					}
				})
			}
		})
	}
}

// holdQueryable is db with each Select measured: *held is set to the bytes
// the heap grew by across it, what the Select holds for the rest of the
// query (its series, their labels and their sample blocks or samples, less
// blocks the cache holds anyway), with a collection on either side.
type holdQueryable struct {
	db   *DB
	held *int64
}

func (h holdQueryable) Querier(mint, maxt int64) (promstorage.Querier, error) {
	q, err := h.db.Querier(mint, maxt)
	return holdQuerier{Querier: q, held: h.held}, err
}

type holdQuerier struct {
	promstorage.Querier
	held *int64
}

func (h holdQuerier) Select(ctx context.Context, sorted bool, hints *promstorage.SelectHints, ms ...*labels.Matcher) promstorage.SeriesSet {
	before := liveHeap()
	set := h.Querier.Select(ctx, sorted, hints, ms...)
	*h.held = liveHeap() - before
	return set
}

// liveHeap collects and returns the bytes of the heap in use.
func liveHeap() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// rangeCostDB returns a DB holding the data of BenchmarkRangeCost for n
// series, and the time of the newest sample.
func rangeCostDB(b *testing.B, n int) (*DB, time.Time) {
	b.Helper()
	// A local folder, as a server keeps by default: the stored objects stay
	// out of the Go heap, where at 1M series they would need several times
	// this machine's memory (a memory bucket holds them, and the collector
	// lets the heap grow to twice what is live).
	bucket, err := objstore.NewFilesystemBucket(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	// A RAM block cache about the size of the data (a 2 h block of a
	// series is about 1 KiB), so that it holds what the queries read
	// without growing the heap by gigabytes at 1M series.
	db := benchQueryDB(b, bucket, max(256<<20, int64(n)<<10))
	lsets, vals := benchCounters("x_total", n), make([]float64, n)
	rng := rand.New(rand.NewPCG(1, 2))
	const step = 15_000
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	end := start + (3*time.Hour + 10*time.Minute).Milliseconds()
	churnAt := end - time.Hour.Milliseconds()
	for t := start; t <= end; t += step {
		app := db.Appender(context.Background())
		for i, l := range lsets {
			if i%7 == 6 && t > churnAt {
				continue
			}
			vals[i] += float64(rng.IntN(10000)) / 100
			if _, err := app.Append(0, l, t+int64(rng.IntN(5)), vals[i]); err != nil {
				b.Fatal(err)
			}
		}
		if err := app.Commit(); err != nil {
			b.Fatal(err)
		}
		if (t-start)%(30*time.Minute).Milliseconds() == 0 && end-t > (10*time.Minute).Milliseconds() {
			if err := db.flushHead(context.Background(), closeOld); err != nil {
				b.Fatal(err)
			}
		}
	}
	return db, time.UnixMilli(db.head.maxT.Load())
}
