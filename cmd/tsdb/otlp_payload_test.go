package main

import (
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
)

// OTLP payloads of the golden comparison with Prometheus 3. Every time in
// them is an offset from t0 (ms), so that the same payload can be made
// again now and compared with what was stored then.

func nanos(t0, offMs int64) pcommon.Timestamp {
	return pcommon.Timestamp(time.UnixMilli(t0 + offMs).UnixNano())
}

// addMetric appends the metric name to sm, with its unit and description
// ("" for none).
func addMetric(sm pmetric.ScopeMetrics, name, unit, description string) pmetric.Metric {
	m := sm.Metrics().AppendEmpty()
	m.SetName(name)
	m.SetUnit(unit)
	m.SetDescription(description)
	return m
}

// goldenPayload is the payload of the golden cases: two resources (one with
// a service namespace and identifying attributes, one with none), every
// metric type, units that become suffixes, dotted and UTF-8 names,
// exemplars, a stale point (no recorded value), start timestamps.
func goldenPayload(t0 int64) pmetric.Metrics {
	md := pmetric.NewMetrics()

	rm := md.ResourceMetrics().AppendEmpty()
	ra := rm.Resource().Attributes()
	ra.PutStr("service.name", "checkout")
	ra.PutStr("service.namespace", "shop")
	ra.PutStr("service.instance.id", "pod-1")
	ra.PutStr("deployment.environment", "prod")
	ra.PutStr("k8s.pod.name", "checkout-7f9")
	ra.PutStr("host.name", "node-a")
	ra.PutInt("process.pid", 4242)
	sm := rm.ScopeMetrics().AppendEmpty()
	sm.Scope().SetName("io.shop/checkout")
	sm.Scope().SetVersion("1.2.3")
	sm.Scope().Attributes().PutStr("library.lang", "go")
	sm.SetSchemaUrl("https://opentelemetry.io/schemas/1.26.0")

	// A monotonic counter with start time, exemplars and a stale point.
	sum := addMetric(sm, "http.server.requests", "{request}", "Requests served.").SetEmptySum()
	sum.SetIsMonotonic(true)
	sum.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
	for i, v := range []int64{3, 7, 12} {
		for _, code := range []string{"200", "500"} {
			dp := sum.DataPoints().AppendEmpty()
			dp.SetStartTimestamp(nanos(t0, -30_000))
			dp.SetTimestamp(nanos(t0, int64(i)*30_000))
			dp.SetIntValue(v)
			if code == "500" {
				dp.SetIntValue(v / 3)
			}
			dp.Attributes().PutStr("http.response.status_code", code)
			dp.Attributes().PutStr("http.request.method", "GET")
			if i == 1 && code == "200" {
				ex := dp.Exemplars().AppendEmpty()
				ex.SetTimestamp(nanos(t0, 29_000))
				ex.SetIntValue(1)
				ex.SetTraceID(pcommon.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16})
				ex.SetSpanID(pcommon.SpanID{1, 2, 3, 4, 5, 6, 7, 8})
				ex.FilteredAttributes().PutStr("user", "u1")
			}
		}
	}
	stale := sum.DataPoints().AppendEmpty()
	stale.SetStartTimestamp(nanos(t0, -30_000))
	stale.SetTimestamp(nanos(t0, 90_000))
	stale.Attributes().PutStr("http.response.status_code", "200")
	stale.Attributes().PutStr("http.request.method", "GET")
	stale.SetFlags(pmetric.DefaultDataPointFlags.WithNoRecordedValue(true))

	// A gauge in a unit that becomes a suffix, with a label name that
	// starts with an underscore and one with an empty value.
	g := addMetric(sm, "process.memory.usage", "By", "Memory in use.").SetEmptyGauge()
	for i, v := range []float64{1.5e6, 2.25e6} {
		dp := g.DataPoints().AppendEmpty()
		dp.SetTimestamp(nanos(t0, int64(i)*30_000))
		dp.SetDoubleValue(v)
		dp.Attributes().PutStr("_kind", "heap")
		dp.Attributes().PutStr("empty", "")
		dp.Attributes().PutStr("memory.type", "heap")
	}

	// A non-monotonic sum (an up-down counter): a gauge in Prometheus.
	s2 := addMetric(sm, "queue.length", "1", "Jobs waiting.").SetEmptySum()
	s2.SetIsMonotonic(false)
	s2.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
	for i, v := range []int64{5, -2} {
		dp := s2.DataPoints().AppendEmpty()
		dp.SetTimestamp(nanos(t0, int64(i)*30_000))
		dp.SetIntValue(v)
	}

	// An explicit-bucket histogram with start time, min/max and an
	// exemplar.
	hist := addMetric(sm, "http.server.request.duration", "s", "Request latency.").SetEmptyHistogram()
	hist.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
	for i := range 2 {
		dp := hist.DataPoints().AppendEmpty()
		dp.SetStartTimestamp(nanos(t0, -30_000))
		dp.SetTimestamp(nanos(t0, int64(i)*30_000))
		dp.ExplicitBounds().FromRaw([]float64{0.005, 0.01, 0.1, 1})
		counts := []uint64{1, 2, uint64(3 + i), 0, uint64(1 + i)}
		dp.BucketCounts().FromRaw(counts)
		var n uint64
		for _, c := range counts {
			n += c
		}
		dp.SetCount(n)
		dp.SetSum(2.5 + float64(i))
		dp.SetMin(0.001)
		dp.SetMax(3)
		dp.Attributes().PutStr("http.route", "/cart")
		if i == 1 {
			ex := dp.Exemplars().AppendEmpty()
			ex.SetTimestamp(nanos(t0, 25_000))
			ex.SetDoubleValue(0.05)
			ex.SetTraceID(pcommon.TraceID{16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1})
		}
	}

	// An exponential histogram: a native histogram.
	eh := addMetric(sm, "rpc.client.duration", "ms", "RPC latency.").SetEmptyExponentialHistogram()
	eh.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
	for i := range 2 {
		dp := eh.DataPoints().AppendEmpty()
		dp.SetStartTimestamp(nanos(t0, -30_000))
		dp.SetTimestamp(nanos(t0, int64(i)*30_000))
		dp.SetScale(2)
		dp.SetZeroCount(uint64(1 + i))
		dp.SetZeroThreshold(0.001)
		dp.Positive().SetOffset(3)
		dp.Positive().BucketCounts().FromRaw([]uint64{1, 0, uint64(2 + i), 4})
		dp.Negative().SetOffset(-1)
		dp.Negative().BucketCounts().FromRaw([]uint64{uint64(1 + i)})
		dp.SetCount(uint64(1+i) + 1 + uint64(2+i) + 4 + uint64(1+i))
		dp.SetSum(42.5 + float64(i))
		dp.Attributes().PutStr("rpc.method", "Get")
	}
	// A scale beyond what native histograms take: the translator scales
	// it down.
	eh = addMetric(sm, "fine.grained", "", "").SetEmptyExponentialHistogram()
	eh.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
	dp := eh.DataPoints().AppendEmpty()
	dp.SetTimestamp(nanos(t0, 0))
	dp.SetScale(10)
	dp.Positive().SetOffset(5)
	dp.Positive().BucketCounts().FromRaw([]uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10})
	dp.SetCount(55)
	dp.SetSum(60)

	// A summary.
	sq := addMetric(sm, "gc.pause", "s", "GC pauses.").SetEmptySummary()
	sdp := sq.DataPoints().AppendEmpty()
	sdp.SetTimestamp(nanos(t0, 0))
	sdp.SetStartTimestamp(nanos(t0, -30_000))
	sdp.SetCount(10)
	sdp.SetSum(0.75)
	for _, q := range [][2]float64{{0, 0.01}, {0.5, 0.05}, {0.99, 0.2}, {1, 0.3}} {
		qv := sdp.QuantileValues().AppendEmpty()
		qv.SetQuantile(q[0])
		qv.SetValue(q[1])
	}

	// A name with characters only UTF-8 strategies keep.
	g = addMetric(sm, "température.ambiante", "Cel", "").SetEmptyGauge()
	gdp := g.DataPoints().AppendEmpty()
	gdp.SetTimestamp(nanos(t0, 0))
	gdp.SetDoubleValue(21.5)
	gdp.Attributes().PutStr("pièce", "salon")
	gdp.Attributes().PutStr("sensor..id", "s__1")

	// A second resource, with no service attributes, in another scope.
	rm = md.ResourceMetrics().AppendEmpty()
	rm.Resource().Attributes().PutStr("host.name", "node-b")
	rm.Resource().Attributes().PutStr("deployment.environment", "staging")
	sm = rm.ScopeMetrics().AppendEmpty()
	sum = addMetric(sm, "system.cpu.time", "s", "CPU time.").SetEmptySum()
	sum.SetIsMonotonic(true)
	sum.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
	for i, v := range []float64{100.25, 130.5} {
		for _, state := range []string{"user", "system"} {
			dp := sum.DataPoints().AppendEmpty()
			dp.SetTimestamp(nanos(t0, int64(i)*30_000))
			dp.SetDoubleValue(v)
			dp.Attributes().PutStr("cpu.state", state)
		}
	}
	return md
}

// deltaPayload has delta-temporality sums and histograms.
func deltaPayload(t0 int64) pmetric.Metrics {
	md := pmetric.NewMetrics()
	rm := md.ResourceMetrics().AppendEmpty()
	rm.Resource().Attributes().PutStr("service.name", "batch")
	sm := rm.ScopeMetrics().AppendEmpty()

	sum := addMetric(sm, "jobs.processed", "", "Jobs processed in the interval.").SetEmptySum()
	sum.SetIsMonotonic(true)
	sum.SetAggregationTemporality(pmetric.AggregationTemporalityDelta)
	for i, v := range []int64{4, 0, 9} {
		dp := sum.DataPoints().AppendEmpty()
		dp.SetStartTimestamp(nanos(t0, int64(i-1)*30_000))
		dp.SetTimestamp(nanos(t0, int64(i)*30_000))
		dp.SetIntValue(v)
	}

	h := addMetric(sm, "job.duration", "s", "").SetEmptyHistogram()
	h.SetAggregationTemporality(pmetric.AggregationTemporalityDelta)
	for i := range 2 {
		dp := h.DataPoints().AppendEmpty()
		dp.SetStartTimestamp(nanos(t0, int64(i-1)*30_000))
		dp.SetTimestamp(nanos(t0, int64(i)*30_000))
		dp.ExplicitBounds().FromRaw([]float64{1, 10})
		dp.BucketCounts().FromRaw([]uint64{uint64(i), 2, 1})
		dp.SetCount(uint64(i) + 3)
		dp.SetSum(float64(20 + i))
	}

	eh := addMetric(sm, "job.size", "By", "").SetEmptyExponentialHistogram()
	eh.SetAggregationTemporality(pmetric.AggregationTemporalityDelta)
	dp := eh.DataPoints().AppendEmpty()
	dp.SetStartTimestamp(nanos(t0, -30_000))
	dp.SetTimestamp(nanos(t0, 0))
	dp.SetScale(0)
	dp.Positive().SetOffset(1)
	dp.Positive().BucketCounts().FromRaw([]uint64{2, 3})
	dp.SetCount(5)
	dp.SetSum(30)
	return md
}
