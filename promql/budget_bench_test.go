package promql

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	upstream "github.com/prometheus/prometheus/promql"

	shalestorage "github.com/shaledb/shale/storage"
)

// BenchmarkQueryMemory compares what the memory budget charges a query with
// the heap it holds, over Shale's storage: 20,000 series of an hour of 15 s
// samples, in the head (data=head) or flushed to sample blocks
// (data=flushed). live-B/series is the live heap when the engine closes the
// querier, at the end of evaluation, less the live heap before the query;
// charged-B/series is what the budget accounts then. Evaluation peaks in
// between are not seen by live-B/series: sum(rate(...)) holds rate's matrix
// before it sums it, and is charged for it.
//
// Run with:
//
//	go test -run '^$' -bench BenchmarkQueryMemory -benchtime 3x ./promql/
func BenchmarkQueryMemory(b *testing.B) {
	const n = 20_000
	base := time.Unix(1_700_000_000, 0)
	end := base.Add(time.Hour)
	queries := []struct {
		name, expr string
		step       time.Duration // 0: instant
	}{
		{"count", "count(x)", 0},
		{"instant", "x", 0},
		{"range_1m", "x", time.Minute},
		{"range_15s", "x", 15 * time.Second},
		{"sum_rate", "sum(rate(x[5m]))", 15 * time.Second},
		{"raw_1h", "x[1h]", 0},
		{"max_over_time_1h", "max_over_time(x[1h])", 0},
	}
	for _, flush := range []bool{false, true} {
		db := newTestStorage(b).(*shalestorage.DB)
		app := db.Appender(context.Background())
		for i := range n {
			ls := labels.FromStrings("__name__", "x", "job", "api", "instance", fmt.Sprintf("host-%06d:9100", i), "pod", fmt.Sprintf("pod-%06d", i))
			for j := range 240 {
				if _, err := app.Append(0, ls, base.Add(time.Duration(j)*15*time.Second).UnixMilli(), float64(j)); err != nil {
					b.Fatal(err)
				}
			}
		}
		if err := app.Commit(); err != nil {
			b.Fatal(err)
		}
		data := "head"
		if flush {
			data = "flushed"
			if err := db.Flush(context.Background()); err != nil {
				b.Fatal(err)
			}
		}
		opts := DefaultOptions()
		opts.MaxMemory = 1 << 40
		ng, err := newEngine(opts, nil, nil, nil, nil)
		if err != nil {
			b.Fatal(err)
		}
		budget, err := newMemoryBudget(opts.MaxMemory, opts.MaxConcurrentQueries, nil, nil)
		if err != nil {
			b.Fatal(err)
		}
		le := &limitedEngine{ng: ng, maxSubquerySteps: opts.MaxSubquerySteps, budget: budget}
		for _, q := range queries {
			b.Run(fmt.Sprintf("data=%s/query=%s", data, q.name), func(b *testing.B) {
				var live, charged int64
				for b.Loop() {
					before := liveHeap()
					spy := closeSpy(db, func() {
						live += int64(liveHeap()) - int64(before)
						charged += budget.used()
					})
					var qry interface {
						Exec(context.Context) *upstream.Result
						Close()
					}
					if q.step == 0 {
						qry, err = le.NewInstantQuery(context.Background(), spy, nil, q.expr, end)
					} else {
						qry, err = le.NewRangeQuery(context.Background(), spy, nil, q.expr, end.Add(-time.Hour), end, q.step)
					}
					if err != nil {
						b.Fatal(err)
					}
					if res := qry.Exec(context.Background()); res.Err != nil {
						b.Fatal(res.Err)
					}
					qry.Close()
				}
				b.ReportMetric(float64(live)/float64(b.N)/n, "live-B/series")
				b.ReportMetric(float64(charged)/float64(b.N)/n, "charged-B/series")
			})
		}
		if err := ng.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

// liveHeap returns the bytes of live heap objects.
func liveHeap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}
