package promql

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/prompb"
	"github.com/prometheus/prometheus/storage"
	"github.com/stretchr/testify/require"
)

// fixture is a small data set written identically to every storage that a
// comparison test reads back.
type fixture struct {
	start  time.Time // first sample is at start + fixtureOffset
	series []fixtureSeries
}

type fixtureSeries struct {
	lset    labels.Labels
	samples []fixtureSample
}

type fixtureSample struct {
	t int64
	v float64
	h *histogram.Histogram // a native histogram sample when set
}

const (
	fixtureStep    = 15 * time.Second
	fixturePoints  = 240 // one hour
	fixtureOffset  = 7 * time.Second
	fixtureHistory = time.Duration(fixturePoints) * fixtureStep
)

// newFixture builds an hour of data ending before end. Sample times sit 7 s
// off the minute so that no sample falls on the boundary of a range that
// starts on a whole minute: Prometheus 3 ranges are left-open, 2.x closed.
func newFixture(end time.Time) *fixture {
	start := end.Truncate(time.Minute).Add(-fixtureHistory - time.Minute)
	f := &fixture{start: start}
	ts := func(i int) int64 { return start.Add(fixtureOffset + time.Duration(i)*fixtureStep).UnixMilli() }

	for ji, job := range []string{"api", "web"} {
		for ii, inst := range []string{"a:9090", "b:9090"} {
			for mi, method := range []string{"GET", "POST"} {
				s := fixtureSeries{lset: labels.FromStrings("__name__", "http_requests_total", "job", job, "instance", inst, "method", method)}
				rate := float64(1 + ji + 2*ii + 4*mi)
				v := 0.0
				for i := range fixturePoints {
					if ji == 1 && ii == 1 && mi == 1 && i == 120 {
						v = 0 // a counter reset
					}
					v += rate * float64(1+i%3)
					s.samples = append(s.samples, fixtureSample{t: ts(i), v: v})
				}
				f.series = append(f.series, s)
			}
			up := fixtureSeries{lset: labels.FromStrings("__name__", "up", "job", job, "instance", inst)}
			temp := fixtureSeries{lset: labels.FromStrings("__name__", "temperature_celsius", "job", job, "instance", inst)}
			for i := range fixturePoints {
				up.samples = append(up.samples, fixtureSample{t: ts(i), v: 1})
				temp.samples = append(temp.samples, fixtureSample{t: ts(i), v: 20 + 5*math.Sin(float64(i+7*ji+3*ii)/10)})
			}
			f.series = append(f.series, up, temp)
		}
	}

	// A classic histogram.
	bounds := []string{"0.1", "0.5", "1", "+Inf"}
	for _, job := range []string{"api", "web"} {
		var counts [4]float64
		bucketSeries := make([]fixtureSeries, len(bounds))
		for b, le := range bounds {
			bucketSeries[b].lset = labels.FromStrings("__name__", "request_duration_seconds_bucket", "job", job, "le", le)
		}
		sum := fixtureSeries{lset: labels.FromStrings("__name__", "request_duration_seconds_sum", "job", job)}
		count := fixtureSeries{lset: labels.FromStrings("__name__", "request_duration_seconds_count", "job", job)}
		total := 0.0
		for i := range fixturePoints {
			inc := [4]float64{float64(i % 5), 3, float64(i % 2), 1}
			cum := 0.0
			for b := range bounds {
				cum += inc[b]
				counts[b] += cum
				bucketSeries[b].samples = append(bucketSeries[b].samples, fixtureSample{t: ts(i), v: counts[b]})
			}
			total += cum * 0.3
			sum.samples = append(sum.samples, fixtureSample{t: ts(i), v: total})
			count.samples = append(count.samples, fixtureSample{t: ts(i), v: counts[3]})
		}
		f.series = append(f.series, bucketSeries...)
		f.series = append(f.series, sum, count)
	}

	// A native histogram.
	nh := fixtureSeries{lset: labels.FromStrings("__name__", "rpc_duration_seconds", "job", "api")}
	for i := range fixturePoints {
		n := uint64(i + 1)
		nh.samples = append(nh.samples, fixtureSample{t: ts(i), h: &histogram.Histogram{
			Schema:          0,
			Count:           9 * n,
			Sum:             float64(n) * 3.5,
			ZeroThreshold:   0.001,
			ZeroCount:       n,
			PositiveSpans:   []histogram.Span{{Offset: 0, Length: 3}},
			PositiveBuckets: []int64{int64(n), int64(n), 0}, // deltas: n, 2n, 2n
			NegativeSpans:   []histogram.Span{{Offset: 1, Length: 2}},
			NegativeBuckets: []int64{int64(n) * 2, -int64(n)}, // 2n, n
		}})
	}
	f.series = append(f.series, nh)

	// Special values and a series that goes stale half way.
	for _, kv := range []struct {
		kind string
		v    float64
	}{{"inf", math.Inf(1)}, {"neginf", math.Inf(-1)}, {"nan", math.NaN()}} {
		s := fixtureSeries{lset: labels.FromStrings("__name__", "special_value", "kind", kv.kind)}
		for i := range fixturePoints {
			s.samples = append(s.samples, fixtureSample{t: ts(i), v: kv.v})
		}
		f.series = append(f.series, s)
	}
	gone := fixtureSeries{lset: labels.FromStrings("__name__", "short_lived", "job", "batch")}
	for i := range fixturePoints / 2 {
		gone.samples = append(gone.samples, fixtureSample{t: ts(i), v: float64(i)})
	}
	gone.samples = append(gone.samples, fixtureSample{t: ts(fixturePoints / 2), v: math.Float64frombits(value.StaleNaN)})
	f.series = append(f.series, gone)
	return f
}

// at returns the fixture's start plus d, in the form the API takes.
func (f *fixture) at(d time.Duration) string {
	return fmt.Sprintf("%d", f.start.Add(d).Unix())
}

// appendTo writes the fixture through an appender.
func (f *fixture) appendTo(t testing.TB, db storage.Appendable) {
	t.Helper()
	app := db.Appender(context.Background())
	for _, s := range f.series {
		for _, smp := range s.samples {
			var err error
			if smp.h != nil {
				_, err = app.AppendHistogram(0, s.lset, smp.t, smp.h, nil)
			} else {
				_, err = app.Append(0, s.lset, smp.t, smp.v)
			}
			require.NoError(t, err, "append %s at %d", s.lset, smp.t)
		}
	}
	require.NoError(t, app.Commit())
}

// writeRequest returns the fixture as a remote-write 1.0 request body.
func (f *fixture) writeRequest(t testing.TB) *prompb.WriteRequest {
	t.Helper()
	req := &prompb.WriteRequest{}
	for _, s := range f.series {
		ts := prompb.TimeSeries{}
		s.lset.Range(func(l labels.Label) {
			ts.Labels = append(ts.Labels, prompb.Label{Name: l.Name, Value: l.Value})
		})
		for _, smp := range s.samples {
			if smp.h != nil {
				ts.Histograms = append(ts.Histograms, prompb.FromIntHistogram(smp.t, smp.h))
			} else {
				ts.Samples = append(ts.Samples, prompb.Sample{Timestamp: smp.t, Value: smp.v})
			}
		}
		req.Timeseries = append(req.Timeseries, ts)
	}
	return req
}
