package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/golang/snappy"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/prometheus/prompb"

	"github.com/shaledb/shale/remotewrite"
	"github.com/shaledb/shale/storage"
	"github.com/shaledb/shale/storage/lsm"
	"github.com/shaledb/shale/storage/objstore"
)

// TestRejectedReasonsAgree sends samples the storage refuses, one out of
// bounds (older than retention), one out of order (out-of-order samples
// off) and one too far in the future (a timestamp in nanoseconds), and checks that the receiver's and the storage's rejected counters
// give each the same reason.
func TestRejectedReasonsAgree(t *testing.T) {
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	lopts := lsm.DefaultOptions()
	lopts.CompactionInterval, lopts.GCInterval = 0, 0
	sopts := storage.DefaultOptions()
	sopts.PartitionDuration, sopts.OutOfOrderWindow, sopts.Retention = 2*time.Hour, 0, 24*time.Hour
	db, err := openWriter(ctx, objstore.NewMemoryBucket(), "", sopts, lopts, nil, storage.Components{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	h, err := remotewrite.NewHandler(ingestAppendable{db}, remotewrite.DefaultOptions(), remotewrite.Components{Logger: slog.New(slog.DiscardHandler), Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().UnixMilli()
	series := func(name string, ts int64) prompb.TimeSeries {
		return prompb.TimeSeries{
			Labels:  []prompb.Label{{Name: "__name__", Value: name}},
			Samples: []prompb.Sample{{Value: 1, Timestamp: ts}},
		}
	}
	write := func(want int, ts ...prompb.TimeSeries) {
		t.Helper()
		b, err := (&prompb.WriteRequest{Timeseries: ts}).Marshal()
		if err != nil {
			t.Fatal(err)
		}
		req := httptest.NewRequest(http.MethodPost, "/api/v1/write", bytes.NewReader(snappy.Encode(nil, b)))
		req.Header.Set("Content-Type", remotewrite.ContentTypeV1)
		req.Header.Set("Content-Encoding", "snappy")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != want {
			t.Fatalf("status %d, want %d: %s", rec.Code, want, rec.Body)
		}
	}
	write(http.StatusNoContent, series("a", t0), series("b", t0))
	write(http.StatusBadRequest,
		series("a", t0-(48*time.Hour).Milliseconds()), // older than the retention of a day
		series("b", t0-time.Minute.Milliseconds()),    // older than b's newest sample
		series("c", t0*1_000_000),                     // nanoseconds: 57,000 years ahead
	)
	// The sample far ahead did not become the newest: samples on time are
	// still taken.
	write(http.StatusNoContent, series("a", t0+1000), series("c", t0))

	want := `
# HELP shale_remotewrite_samples_rejected_total Float samples received but not written, by reason.
# TYPE shale_remotewrite_samples_rejected_total counter
shale_remotewrite_samples_rejected_total{reason="out_of_bounds"} 1
shale_remotewrite_samples_rejected_total{reason="out_of_order"} 1
shale_remotewrite_samples_rejected_total{reason="too_far_in_future"} 1
# HELP shale_storage_samples_rejected_total Samples refused, by reason.
# TYPE shale_storage_samples_rejected_total counter
shale_storage_samples_rejected_total{reason="out_of_bounds"} 1
shale_storage_samples_rejected_total{reason="out_of_order"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"shale_remotewrite_samples_rejected_total", "shale_storage_samples_rejected_total"); err != nil {
		t.Fatal(err)
	}
}

// TestMaxHeadSeriesEndToEnd: a server started with --storage.max-head-series
// answers a request that brings more new series than the limit with 400
// naming the limit, writes the series it has room for, keeps taking samples
// of those, and counts the refused ones as series_limit.
func TestMaxHeadSeriesEndToEnd(t *testing.T) {
	skipEndToEnd(t)
	s := startShale(t, "--storage.path="+t.TempDir(), "--storage.max-head-series=100")
	defer s.stop(t)
	ts := time.Now().Add(-time.Minute).UnixMilli()
	batch := loadSeries(150)
	for i := range batch {
		batch[i].Samples[0] = prompb.Sample{Timestamp: ts, Value: float64(i)}
	}
	code, body, err := remoteWrite(s.url, batch)
	if err != nil {
		t.Fatal(err)
	}
	if code != http.StatusBadRequest || !strings.Contains(body, "series limit reached") || !strings.Contains(body, "holds 100 series") {
		t.Fatalf("150 new series at a limit of 100: %d %q, want 400 naming the limit", code, body)
	}
	var vec []struct {
		Value [2]any `json:"value"`
	}
	queryResult(t, s.url, "/api/v1/query", url.Values{"query": {"count(e2e_load)"}, "time": {fmt.Sprintf("%.3f", float64(ts)/1000)}}, &vec)
	if len(vec) != 1 || vec[0].Value[1] != "100" {
		t.Fatalf("count(e2e_load) = %v, want 100", vec)
	}
	// The series held take samples; the limit does not stop the sender.
	held := batch[:100]
	for i := range held {
		held[i].Samples[0].Timestamp = ts + 15_000
	}
	if code, body, err := remoteWrite(s.url, held); err != nil || code != http.StatusNoContent {
		t.Fatalf("samples of the series held: %d %q %v, want 204", code, body, err)
	}
	for name, want := range map[string]string{
		`shale_remotewrite_samples_rejected_total{reason="series_limit"}`: "50",
		`shale_storage_samples_rejected_total{reason="series_limit"}`:     "50",
		"shale_storage_head_series_limit":                                 "100",
	} {
		if got := metricValue(t, s.url, name); got != want {
			t.Errorf("%s = %q, want %s", name, got, want)
		}
	}
}
