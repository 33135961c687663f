package promql

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/prometheus/prometheus/storage"
	"github.com/stretchr/testify/require"

	"github.com/shaledb/shale/internal/promqlsuite"
	"github.com/shaledb/shale/internal/race"
	shalestorage "github.com/shaledb/shale/storage"
	"github.com/shaledb/shale/storage/lsm"
	"github.com/shaledb/shale/storage/objstore"
)

// testEngineOptions are the settings the upstream test files expect: every
// experimental language feature on and the 10000-sample limit some files test.
func testEngineOptions() Options {
	o := DefaultOptions()
	o.MaxSamples = promqltest.DefaultMaxSamplesPerQuery
	o.QueryTimeout = 100 * time.Second
	o.EnableExperimentalFunctions = true
	o.EnableBinopFillModifiers = true
	o.EnableUnquotedUTF8Names = true
	o.EnableDelayedNameRemoval = true
	o.UseStartTimestamps = true
	return o
}

// newTestStorage is the storage the engine tests run against: Shale's
// storage engine on an in-memory bucket, accepting whole histories at once.
func newTestStorage(t testing.TB) storage.Storage {
	t.Helper()
	opts := shalestorage.DefaultOptions()
	opts.OutOfOrderWindow = 1000 * 24 * time.Hour
	opts.Retention = 0
	lopts := lsm.DefaultOptions()
	lopts.WALFlushInterval = 2 * time.Millisecond
	lopts.CompactionInterval, lopts.GCInterval, lopts.MemtableMaxAge = 0, 0, 0
	w, err := lsm.Open(context.Background(), objstore.NewMemoryBucket(), "", shalestorage.LSMOptions(opts, lopts), shalestorage.LSMComponents(lsm.Components{}))
	require.NoError(t, err)
	db, err := shalestorage.Open(context.Background(), w, opts, shalestorage.Components{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	return db
}

// TestUpstreamPromQL runs the upstream PromQL test files through an engine
// built from this package's options, over Shale's storage.
func TestUpstreamPromQL(t *testing.T) {
	// The suite evaluates upstream code on upstream test storage for ~10 s;
	// the race detector makes that ~110 s, beyond this package's budget.
	// Shale's own concurrent code (the query gate, the handlers) is raced
	// by the other tests; set SHALE_PROMQLTEST_RACE=1 to race the suite too.
	if race.Enabled && os.Getenv("SHALE_PROMQLTEST_RACE") != "1" {
		t.Skip("upstream PromQL suite skipped under -race; run without -race or set SHALE_PROMQLTEST_RACE=1")
	}
	opts := testEngineOptions()
	ng, err := NewEngine(opts, nil, nil, nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, ng.Close()) })
	promqlsuite.Run(t, func(t *testing.T, script string) {
		promqltest.RunTestWithStorage(t, script, ng, newTestStorage)
	})
}
