package lsm

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/shaledb/shale/storage/objstore"
)

// Two DBs on one registry share their series; a registry that holds another
// metric of one of the LSM's names makes Open fail rather than leave the
// LSM's metric out.
func TestMetricsRegistry(t *testing.T) {
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	opts := testOptions()
	a, _ := openMemDB(t, opts, Components{Registerer: reg})
	b, _ := openMemDB(t, opts, Components{Registerer: reg})
	for _, db := range []*DB{a, b} {
		if err := db.Put(ctx, []byte("k"), []byte("v")); err != nil {
			t.Fatal(err)
		}
		if err := db.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP shale_lsm_flushes_total Memtables flushed to L0 tables.
# TYPE shale_lsm_flushes_total counter
shale_lsm_flushes_total 2
`), "shale_lsm_flushes_total"); err != nil {
		t.Fatal(err)
	}

	other := prometheus.NewRegistry()
	other.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "shale_lsm_flushes_total", Help: "someone else's"}))
	if db, err := Open(ctx, objstore.NewMemoryBucket(), "db", opts, Components{Registerer: other}); err == nil {
		db.Close()
		t.Fatal("Open succeeded on a registry with a conflicting metric")
	}
}
