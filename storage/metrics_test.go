package storage

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/prometheus/model/labels"

	"github.com/shaledb/shale/storage/objstore"
)

// A second DB open on a registry fails to open (its head gauges would read
// the first DB) rather than panic; once the first is closed, a DB opened on
// the registry continues the counters.
func TestMetricsRegistry(t *testing.T) {
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	open := func(b objstore.Bucket) (*DB, error) {
		return openOn(ctx, b, "tsdb", DefaultOptions(), testLSMOptions(), nil, Components{Registerer: reg})
	}
	first, err := open(objstore.NewMemoryBucket())
	if err != nil {
		t.Fatal(err)
	}
	appendFloats(t, first, labels.FromStrings("__name__", "x"), tsample{1000, 1})
	if db, err := open(objstore.NewMemoryBucket()); err == nil {
		db.Close()
		t.Fatal("a second DB opened on the registry of an open one")
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	again, err := open(objstore.NewMemoryBucket())
	if err != nil {
		t.Fatalf("open after the first DB closed: %v", err)
	}
	defer again.Close()
	appendFloats(t, again, labels.FromStrings("__name__", "x"), tsample{1000, 1})
	if n := testutil.ToFloat64(again.metrics.appended); n != 2 {
		t.Fatalf("shale_storage_samples_appended_total = %v, want 2 (both DBs' samples)", n)
	}
	if n := testutil.CollectAndCount(reg, "shale_storage_head_series"); n != 1 {
		t.Fatalf("%d shale_storage_head_series series, want 1", n)
	}
}
