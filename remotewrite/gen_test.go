package remotewrite

import (
	"math"
	"strconv"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/exemplar"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/metadata"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/prompb"
	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"
)

// testNow is the receiver clock in tests (ms).
const testNow = int64(1_750_000_000_000)

var nodeMetrics = []string{
	"node_cpu_seconds_total", "node_disk_read_bytes_total", "node_disk_written_bytes_total",
	"node_filesystem_avail_bytes", "node_filesystem_size_bytes", "node_memory_MemAvailable_bytes",
	"node_network_receive_bytes_total", "node_network_transmit_bytes_total", "node_load1",
	"node_context_switches_total", "node_interrupts_total", "node_vmstat_pgfault",
}

// nodePayload returns series shaped like a node_exporter scrape: six or seven
// labels, values that change a little, timestamps 15 s apart.
func nodePayload(nSeries, nSamples int, t0 int64) []recSeries {
	out := make([]recSeries, nSeries)
	for i := range out {
		name := nodeMetrics[i%len(nodeMetrics)]
		lbls := labels.FromStrings(
			model.MetricNameLabel, name,
			"instance", "host-"+strconv.Itoa(i/400)+".example.org:9100",
			"job", "node",
			"cpu", strconv.Itoa(i%64),
			"mode", []string{"idle", "user", "system", "iowait", "irq"}[i%5],
			"device", "dev"+strconv.Itoa(i%7),
		)
		s := recSeries{Labels: lbls}
		for j := range nSamples {
			s.Samples = append(s.Samples, recSample{T: t0 + int64(j)*15_000, V: float64(i*1000+j) + 0.25})
		}
		out[i] = s
	}
	return out
}

func intHistogram(i int) *histogram.Histogram {
	return &histogram.Histogram{
		CounterResetHint: histogram.NotCounterReset,
		Schema:           1,
		ZeroThreshold:    0.001,
		ZeroCount:        uint64(2 + i),
		Count:            uint64(5*i + 9),
		Sum:              18.4 * float64(i+1),
		PositiveSpans:    []histogram.Span{{Offset: 0, Length: 2}, {Offset: 1, Length: 2}},
		PositiveBuckets:  []int64{int64(i + 1), 1, -1, 0},
		NegativeSpans:    []histogram.Span{{Offset: 0, Length: 1}},
		NegativeBuckets:  []int64{2},
	}
}

func floatHistogram(i int) *histogram.FloatHistogram {
	return &histogram.FloatHistogram{
		CounterResetHint: histogram.GaugeType,
		Schema:           0,
		ZeroThreshold:    0.01,
		ZeroCount:        1.5,
		Count:            11 + float64(i),
		Sum:              100.25,
		PositiveSpans:    []histogram.Span{{Offset: -1, Length: 3}},
		PositiveBuckets:  []float64{1, 2.5, float64(5 + i)},
		NegativeSpans:    []histogram.Span{{Offset: 2, Length: 1}},
		NegativeBuckets:  []float64{1},
	}
}

// nhcbHistogram is a native histogram with custom buckets (schema -53).
func nhcbHistogram(i int) *histogram.Histogram {
	return &histogram.Histogram{
		Schema:          histogram.CustomBucketsSchema,
		Count:           uint64(9 + i),
		Sum:             42.5,
		PositiveSpans:   []histogram.Span{{Offset: 0, Length: 2}, {Offset: 1, Length: 1}},
		PositiveBuckets: []int64{3, 1, int64(i) - 2},
		CustomValues:    []float64{0.1, 0.5, 1, 5},
	}
}

func nhcbFloatHistogram(i int) *histogram.FloatHistogram {
	return &histogram.FloatHistogram{
		Schema:          histogram.CustomBucketsSchema,
		Count:           float64(7 + i),
		Sum:             3.5,
		PositiveSpans:   []histogram.Span{{Offset: 1, Length: 2}},
		PositiveBuckets: []float64{3, float64(4 + i)},
		CustomValues:    []float64{1, 2, 3},
	}
}

// richPayload has float series with special values, start timestamps and
// exemplars, and histogram series of every kind, with metadata. v1 carries
// neither start timestamps nor per-series metadata, so withV2Only controls
// whether they are set.
func richPayload(t0 int64, withV2Only bool) []recSeries {
	st := func(v int64) int64 {
		if withV2Only {
			return v
		}
		return 0
	}
	var out []recSeries
	out = append(out, recSeries{
		Labels: labels.FromStrings(model.MetricNameLabel, "http_requests_total", "code", "200", "job", "api"),
		Samples: []recSample{
			{ST: st(t0 - 60_000), T: t0, V: 1},
			{ST: st(t0 - 60_000), T: t0 + 1000, V: math.Inf(1)},
			{ST: st(t0 - 60_000), T: t0 + 2000, V: math.Float64frombits(value.StaleNaN)},
			{ST: st(t0 - 60_000), T: t0 + 3000, V: math.Inf(-1)},
		},
		Exemplars: []exemplar.Exemplar{
			{Labels: labels.FromStrings("trace_id", "abc123"), Value: 0.5, Ts: t0, HasTs: true},
			{Labels: labels.FromStrings("span_id", "s1", "trace_id", "def456"), Value: 1.5, Ts: t0 + 1000, HasTs: true},
		},
	})
	out = append(out, recSeries{
		Labels:  labels.FromStrings(model.MetricNameLabel, "temperature_celsius", "room", "kitchen"),
		Samples: []recSample{{T: t0, V: -3.25}},
	})
	hists := []struct {
		name string
		h    *histogram.Histogram
		fh   *histogram.FloatHistogram
	}{
		{name: "rpc_latency_seconds", h: intHistogram(0)},
		{name: "queue_size", fh: floatHistogram(0)},
		{name: "request_size_bytes", h: nhcbHistogram(3)},
		{name: "response_size_bytes", fh: nhcbFloatHistogram(0)},
	}
	for i, hs := range hists {
		s := recSeries{Labels: labels.FromStrings(model.MetricNameLabel, hs.name, "job", "api")}
		for j := range 2 {
			rh := recHist{ST: st(t0 - 30_000), T: t0 + int64(j)*1000}
			if hs.h != nil {
				rh.H = intHistogram(j)
				if i == 2 {
					rh.H = nhcbHistogram(j + 3)
				}
			} else {
				rh.FH = floatHistogram(j)
				if i == 3 {
					rh.FH = nhcbFloatHistogram(j)
				}
			}
			s.Hists = append(s.Hists, rh)
		}
		if i == 0 {
			s.Exemplars = []exemplar.Exemplar{{Labels: labels.FromStrings("trace_id", "h1"), Value: 0.02, Ts: t0, HasTs: true}}
		}
		out = append(out, s)
	}
	if withV2Only {
		out[0].Meta = metadata.Metadata{Type: model.MetricTypeCounter, Help: "Requests served.", Unit: ""}
		out[1].Meta = metadata.Metadata{Type: model.MetricTypeGauge, Help: "Temperature.", Unit: "celsius"}
		out[2].Meta = metadata.Metadata{Type: model.MetricTypeHistogram, Help: "RPC latency.", Unit: "seconds"}
		out[3].Meta = metadata.Metadata{Type: model.MetricTypeGaugeHistogram, Help: "Queue size."}
	}
	return out
}

// toV1 encodes series as a 1.0 request.
func toV1(series []recSeries) *prompb.WriteRequest {
	req := &prompb.WriteRequest{}
	for _, s := range series {
		ts := prompb.TimeSeries{Labels: prompb.FromLabels(s.Labels, nil)}
		for _, smp := range s.Samples {
			ts.Samples = append(ts.Samples, prompb.Sample{Value: smp.V, Timestamp: smp.T})
		}
		for _, h := range s.Hists {
			if h.H != nil {
				ts.Histograms = append(ts.Histograms, prompb.FromIntHistogram(h.T, h.H))
			} else {
				ts.Histograms = append(ts.Histograms, prompb.FromFloatHistogram(h.T, h.FH))
			}
		}
		for _, e := range s.Exemplars {
			ts.Exemplars = append(ts.Exemplars, prompb.Exemplar{Labels: prompb.FromLabels(e.Labels, nil), Value: e.Value, Timestamp: e.Ts})
		}
		req.Timeseries = append(req.Timeseries, ts)
	}
	return req
}

// toV2 encodes series as a 2.0 request, one TimeSeries per series (two when
// a series has both samples and histograms).
func toV2(series []recSeries) *writev2.Request {
	st := writev2.NewSymbolTable()
	req := &writev2.Request{}
	for _, s := range series {
		ts := writev2.TimeSeries{LabelsRefs: st.SymbolizeLabels(s.Labels, nil)}
		for _, smp := range s.Samples {
			ts.Samples = append(ts.Samples, writev2.Sample{Value: smp.V, Timestamp: smp.T, StartTimestamp: smp.ST})
		}
		for _, h := range s.Hists {
			if h.H != nil {
				ts.Histograms = append(ts.Histograms, writev2.FromIntHistogram(h.ST, h.T, h.H))
			} else {
				ts.Histograms = append(ts.Histograms, writev2.FromFloatHistogram(h.ST, h.T, h.FH))
			}
		}
		for _, e := range s.Exemplars {
			ts.Exemplars = append(ts.Exemplars, writev2.Exemplar{LabelsRefs: st.SymbolizeLabels(e.Labels, nil), Value: e.Value, Timestamp: e.Ts})
		}
		if !s.Meta.IsEmpty() {
			ts.Metadata = writev2.Metadata{
				Type:    writev2.FromMetadataType(s.Meta.Type),
				HelpRef: st.Symbolize(s.Meta.Help),
				UnitRef: st.Symbolize(s.Meta.Unit),
			}
		}
		req.Timeseries = append(req.Timeseries, ts)
	}
	req.Symbols = st.Symbols()
	return req
}
