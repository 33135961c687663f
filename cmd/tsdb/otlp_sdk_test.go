package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"path/filepath"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/resource"
)

// TestOTLPSDKExporter sends counters, gauges, up-down counters, histograms
// and exponential histograms with resource attributes from the
// OpenTelemetry Go SDK's OTLP/HTTP exporter (protobuf, gzip and not) to a
// running Shale, and reads back through the query API what was stored.
func TestOTLPSDKExporter(t *testing.T) {
	for _, gz := range []bool{false, true} {
		name := "compression=none"
		if gz {
			name = "compression=gzip"
		}
		t.Run(name, func(t *testing.T) { testSDKExporter(t, gz) })
	}
}

func testSDKExporter(t *testing.T, gz bool) {
	dir := t.TempDir()
	cfgFile := writeFile(t, dir, "shale.yml", "otlp:\n  promote_resource_attributes: [deployment.environment]\n")
	s := startShale(t, "--storage.path="+filepath.Join(dir, "data"), "--config.file="+cfgFile)
	defer s.stop(t)

	ctx := context.Background()
	u, err := url.Parse(s.url)
	if err != nil {
		t.Fatal(err)
	}
	opts := []otlpmetrichttp.Option{
		otlpmetrichttp.WithEndpoint(u.Host),
		otlpmetrichttp.WithURLPath("/api/v1/otlp/v1/metrics"),
		otlpmetrichttp.WithInsecure(),
		otlpmetrichttp.WithRetry(otlpmetrichttp.RetryConfig{Enabled: false}),
	}
	if gz {
		opts = append(opts, otlpmetrichttp.WithCompression(otlpmetrichttp.GzipCompression))
	}
	exp, err := otlpmetrichttp.New(ctx, opts...)
	if err != nil {
		t.Fatal(err)
	}
	res := resource.NewSchemaless(
		attribute.String("service.name", "sdk-test"),
		attribute.String("service.instance.id", "i-1"),
		attribute.String("deployment.environment", "test"),
		attribute.String("host.arch", "amd64"),
	)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(
		sdkmetric.WithResource(res),
		sdkmetric.WithReader(reader),
		sdkmetric.WithView(sdkmetric.NewView(
			sdkmetric.Instrument{Name: "payload.size"},
			sdkmetric.Stream{Aggregation: sdkmetric.AggregationBase2ExponentialHistogram{MaxSize: 160, MaxScale: 20}},
		)),
	)
	defer func() {
		if err := mp.Shutdown(ctx); err != nil {
			t.Error(err)
		}
	}()
	meter := mp.Meter("shale.test/sdk")

	requests, err := meter.Int64Counter("http.requests", metric.WithUnit("{request}"), metric.WithDescription("Requests."))
	if err != nil {
		t.Fatal(err)
	}
	temp, err := meter.Float64Gauge("room.temperature", metric.WithUnit("Cel"))
	if err != nil {
		t.Fatal(err)
	}
	inflight, err := meter.Int64UpDownCounter("jobs.inflight")
	if err != nil {
		t.Fatal(err)
	}
	latency, err := meter.Float64Histogram("http.latency", metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(0.1, 1, 10))
	if err != nil {
		t.Fatal(err)
	}
	size, err := meter.Float64Histogram("payload.size", metric.WithUnit("By"))
	if err != nil {
		t.Fatal(err)
	}

	get := metric.WithAttributes(attribute.String("method", "GET"))
	requests.Add(ctx, 5, get)
	requests.Add(ctx, 2, metric.WithAttributes(attribute.String("method", "POST")))
	temp.Record(ctx, 21.5)
	inflight.Add(ctx, 3)
	inflight.Add(ctx, -1)
	for _, v := range []float64{0.05, 0.5, 0.7, 5, 50} {
		latency.Record(ctx, v, get)
	}
	for _, v := range []float64{100, 200, 400, 800} {
		size.Record(ctx, v)
	}
	export := func() {
		t.Helper()
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(ctx, &rm); err != nil {
			t.Fatal(err)
		}
		if err := exp.Export(ctx, &rm); err != nil {
			t.Fatalf("export: %v", err)
		}
	}
	export()
	requests.Add(ctx, 1, get)
	export()

	instant := func(q string) []vectorSample {
		t.Helper()
		var v []vectorSample
		queryResult(t, s.url, "/api/v1/query", url.Values{"query": {q}}, &v)
		return v
	}
	want := map[string]string{
		`http_requests_total{method="GET",job="sdk-test",instance="i-1",deployment_environment="test"}`: "6",
		`http_requests_total{method="POST"}`:                           "2",
		`room_temperature_celsius`:                                     "21.5",
		`jobs_inflight`:                                                "2",
		`http_latency_seconds_count{method="GET"}`:                     "5",
		`http_latency_seconds_bucket{method="GET",le="1"}`:             "3",
		`http_latency_seconds_bucket{method="GET",le="+Inf"}`:          "5",
		`http_latency_seconds_sum{method="GET"}`:                       "56.25",
		`histogram_count(payload_size_bytes)`:                          "4",
		`histogram_sum(payload_size_bytes)`:                            "1500",
		`target_info{job="sdk-test",instance="i-1",host_arch="amd64"}`: "1",
	}
	for q, w := range want {
		v := instant(q)
		if len(v) != 1 {
			t.Errorf("%s: %d results, want 1: %v", q, len(v), v)
			continue
		}
		if got := v[0].Value[1]; got != w {
			t.Errorf("%s = %v, want %s", q, got, w)
		}
	}
	// The exponential histogram is a native histogram, not _bucket series.
	if v := instant(`{__name__=~"payload_size_bytes_.*"}`); len(v) != 0 {
		t.Errorf("exponential histogram stored as classic series: %v", v)
	}
	var md map[string][]struct {
		Type, Help, Unit string
	}
	resp, err := http.Get(s.url + "/api/v1/metadata")
	if err != nil {
		t.Fatal(err)
	}
	var r apiResponse
	err = json.NewDecoder(resp.Body).Decode(&r)
	resp.Body.Close()
	if err != nil || r.Status != "success" {
		t.Fatalf("metadata: %v %+v", err, r)
	}
	if err := json.Unmarshal(r.Data, &md); err != nil {
		t.Fatal(err)
	}
	for name, typ := range map[string]string{
		"http_requests_total": "counter", "room_temperature_celsius": "gauge", "jobs_inflight": "gauge",
		"http_latency_seconds": "histogram", "payload_size_bytes": "histogram",
	} {
		if len(md[name]) != 1 || md[name][0].Type != typ {
			t.Errorf("metadata of %s: %+v, want type %s", name, md[name], typ)
		}
	}
	if m := md["http_requests_total"]; len(m) == 1 && m[0].Help != "Requests." {
		t.Errorf("metadata of http_requests_total: %+v", m[0])
	}
	if err := exp.Shutdown(ctx); err != nil {
		t.Error(err)
	}
}
