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
// bounds and one too old, and checks that the receiver's and the storage's
// rejected counters give each the same reason.
func TestRejectedReasonsAgree(t *testing.T) {
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	lopts := lsm.DefaultOptions()
	lopts.CompactionInterval, lopts.GCInterval = 0, 0
	sopts := storage.DefaultOptions()
	sopts.PartitionDuration, sopts.OutOfOrderWindow = 2*time.Hour, 10*time.Minute
	db, err := openWriter(ctx, objstore.NewMemoryBucket(), "", sopts, lopts, nil, storage.Components{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	h, err := remotewrite.NewHandler(ingestAppendable{db}, remotewrite.DefaultOptions(), remotewrite.Components{Logger: slog.New(slog.DiscardHandler), Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	// t0 is an hour into a partition, so that t0-30m is in the same one:
	// an old sample for a series' first in a partition is not out of order.
	part := sopts.PartitionDuration.Milliseconds()
	t0 := time.Now().UnixMilli()/part*part - part/2
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
	write(http.StatusOK, series("a", t0), series("b", t0))
	write(http.StatusBadRequest,
		series("a", t0-(3*time.Hour).Milliseconds()),    // behind the head by more than half a partition
		series("b", t0-(30*time.Minute).Milliseconds()), // within that, but outside the out-of-order window
	)

	want := `
# HELP shale_remotewrite_samples_rejected_total Float samples received but not written, by reason.
# TYPE shale_remotewrite_samples_rejected_total counter
shale_remotewrite_samples_rejected_total{reason="out_of_bounds"} 1
shale_remotewrite_samples_rejected_total{reason="too_old"} 1
# HELP shale_storage_samples_rejected_total Samples refused, by reason.
# TYPE shale_storage_samples_rejected_total counter
shale_storage_samples_rejected_total{reason="out_of_bounds"} 1
shale_storage_samples_rejected_total{reason="too_old"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"shale_remotewrite_samples_rejected_total", "shale_storage_samples_rejected_total"); err != nil {
		t.Fatal(err)
	}
}
