package remotewrite

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"go.opentelemetry.io/collector/pdata/pmetric"
)

// BenchmarkOTLP measures a whole OTLP request (decode, translate, check,
// append to an appender that keeps nothing) of series gauge and counter
// points of one resource, against remote write 2.0 of the same samples in
// BenchmarkHandler. Run with
//
//	go test -run '^$' -bench BenchmarkOTLP -benchmem -count 6 ./remotewrite
func BenchmarkOTLP(b *testing.B) {
	for _, series := range []int{100, 2000} {
		for _, enc := range []string{"protobuf", "json"} {
			b.Run(fmt.Sprintf("series=%d/encoding=%s", series, enc), func(b *testing.B) {
				md := benchOTLPMetrics(series)
				ct, body := ContentTypeOTLPProto, otlpProto(b, md)
				if enc == "json" {
					ct, body = ContentTypeOTLPJSON, otlpJSON(b, md)
				}
				benchOTLPPosts(b, ct, body, series)
			})
		}
	}
}

// BenchmarkOTLPNode measures the receiver (as BenchmarkOTLP, over an
// appender that keeps nothing) on 2,000 gauge points shaped like a
// node_exporter's series: six attributes a point, every key already a
// valid label name (cpu, device, instance, job, mode, collector), as
// tsdb-bench's OTLP load sends them.
//
//	go test -run '^$' -bench BenchmarkOTLPNode -benchmem -count 6 ./remotewrite
func BenchmarkOTLPNode(b *testing.B) {
	md := pmetric.NewMetrics()
	ms := md.ResourceMetrics().AppendEmpty().ScopeMetrics().AppendEmpty().Metrics()
	for m := range 20 {
		metric := ms.AppendEmpty()
		metric.SetName("node_metric_" + strconv.Itoa(m))
		g := metric.SetEmptyGauge()
		for i := range 100 {
			dp := g.DataPoints().AppendEmpty()
			dp.SetTimestamp(otlpTS(testNow - 1000))
			dp.SetDoubleValue(float64(i) / 4)
			a := dp.Attributes()
			a.PutStr("collector", "c"+strconv.Itoa(i%7))
			a.PutStr("cpu", strconv.Itoa(i%4))
			a.PutStr("device", "sd"+strconv.Itoa(i%3))
			a.PutStr("instance", "host-"+strconv.Itoa(i)+":9100")
			a.PutStr("job", "node")
			a.PutStr("mode", []string{"idle", "user", "system"}[i%3])
		}
	}
	benchOTLPPosts(b, ContentTypeOTLPProto, otlpProto(b, md), 2000)
}

// benchOTLPPosts posts body, of points data points, to a receiver over an
// appender that keeps nothing, once an iteration.
func benchOTLPPosts(b *testing.B, contentType string, body []byte, points int) {
	oh, _ := newOTLPHandler(b, nopAppendable{}, nil, nil)
	postEach(b, oh, contentType, body, http.StatusOK)
	b.ReportMetric(float64(points)*float64(b.N)/b.Elapsed().Seconds(), "samples/s")
}

// postEach posts body to oh once an iteration; each must be answered code.
func postEach(b *testing.B, oh *OTLPHandler, contentType string, body []byte, code int) {
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		req := httptest.NewRequest(http.MethodPost, OTLPPath, bytesReader(body))
		req.Header.Set("Content-Type", contentType)
		w := httptest.NewRecorder()
		oh.ServeHTTP(w, req)
		if w.Code != code {
			b.Fatalf("status %d: %.300s", w.Code, w.Body)
		}
	}
}

// benchOTLPMetrics is the request of BenchmarkOTLP: series points of one
// resource, a hundred per counter.
func benchOTLPMetrics(series int) pmetric.Metrics {
	md := pmetric.NewMetrics()
	rm := md.ResourceMetrics().AppendEmpty()
	rm.Resource().Attributes().PutStr("service.name", "bench")
	rm.Resource().Attributes().PutStr("service.instance.id", "i1")
	ms := rm.ScopeMetrics().AppendEmpty().Metrics()
	for m := range series / 100 {
		metric := ms.AppendEmpty()
		metric.SetName("bench.metric." + strconv.Itoa(m))
		s := metric.SetEmptySum()
		s.SetIsMonotonic(true)
		s.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
		for i := range 100 {
			dp := s.DataPoints().AppendEmpty()
			dp.SetTimestamp(otlpTS(testNow - 1000))
			dp.SetDoubleValue(float64(i))
			dp.Attributes().PutStr("instance.label", strconv.Itoa(i))
			dp.Attributes().PutStr("http.method", "GET")
		}
	}
	return md
}

// BenchmarkOTLPDecode measures the protobuf decoder alone on the requests
// of BenchmarkOTLP.
//
//	go test -run '^$' -bench BenchmarkOTLPDecode -benchmem -count 6 ./remotewrite
func BenchmarkOTLPDecode(b *testing.B) {
	for _, series := range []int{100, 2000} {
		b.Run(fmt.Sprintf("series=%d", series), func(b *testing.B) {
			body := otlpProto(b, benchOTLPMetrics(series))
			var m otlpMetrics
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if err := decodeOTLPProto(&m, body); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(series)*float64(b.N)/b.Elapsed().Seconds(), "samples/s")
		})
	}
}

// BenchmarkOTLPPromoteAll measures the receiver on 2,000 points of a
// resource of 24 attributes, as a Kubernetes workload's resource has, with
// promote_all_resource_attributes: every point's series gets them all, more
// labels than the label builder looks through one by one.
//
//	go test -run '^$' -bench BenchmarkOTLPPromoteAll -benchmem -count 6 ./remotewrite
func BenchmarkOTLPPromoteAll(b *testing.B) {
	md := benchOTLPMetrics(2000)
	attrs := md.ResourceMetrics().At(0).Resource().Attributes()
	for i := range 22 {
		attrs.PutStr(fmt.Sprintf("k8s.attribute.%d", i), "value-"+strconv.Itoa(i))
	}
	oh, _ := newOTLPHandler(b, nopAppendable{}, nil, func(o *OTLPOptions) { o.PromoteAllResourceAttributes = true })
	postEach(b, oh, ContentTypeOTLPProto, otlpProto(b, md), http.StatusOK)
	b.ReportMetric(2000*float64(b.N)/b.Elapsed().Seconds(), "samples/s")
}
