package promql

import (
	"testing"
	"time"

	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/prometheus/prometheus/storage"
	"github.com/stretchr/testify/require"
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

// newTestStorage is the storage the engine tests run against. Shale's storage
// replaces it here once it implements storage.Storage: the adapter is any
// func(testing.TB) storage.Storage.
func newTestStorage(t testing.TB) storage.Storage {
	return promqltest.NewBuiltinTestStorage(t)
}

// TestUpstreamPromQL runs the upstream PromQL test files through an engine
// built from this package's options.
func TestUpstreamPromQL(t *testing.T) {
	opts := testEngineOptions()
	ng, err := NewEngine(opts, nil, nil, nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, ng.Close()) })
	promqltest.RunBuiltinTestsWithStorage(t, ng, newTestStorage)
}
