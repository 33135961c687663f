package main

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
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
