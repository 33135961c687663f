package promql

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	upstream "github.com/prometheus/prometheus/promql"
	prules "github.com/prometheus/prometheus/rules"
	"github.com/prometheus/prometheus/util/teststorage"
	"github.com/stretchr/testify/require"
)

// TestEngineQueryFuncAsPrometheus: a vector is the result, a scalar a
// vector of one sample without labels, anything else or a failed query an
// error, as with Prometheus' rules.EngineQueryFunc.
func TestEngineQueryFuncAsPrometheus(t *testing.T) {
	st := teststorage.New(t)
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	app := st.Appender(t.Context())
	for _, i := range []string{"a", "b"} {
		_, err := app.Append(0, labels.FromStrings("__name__", "m", "i", i), now.Add(-time.Minute).UnixMilli(), 2)
		require.NoError(t, err)
	}
	require.NoError(t, app.Commit())
	ng := upstream.NewEngine(upstream.EngineOpts{MaxSamples: 1e6, Timeout: time.Minute, LookbackDelta: 5 * time.Minute})
	defer ng.Close()
	ours, theirs := EngineQueryFunc(ng, st), prules.EngineQueryFunc(ng, st)
	for _, q := range []string{`m`, `sum(m)`, `scalar(sum(m))`, `1.5`, `"text"`, `m[5m]`, `nothing`, `sum(`, `rate(m)`} {
		want, werr := theirs(t.Context(), q, now)
		got, gerr := ours(t.Context(), q, now)
		require.Equal(t, fmt.Sprint(werr), fmt.Sprint(gerr), q)
		require.Equal(t, want.String(), got.String(), q)
		require.Equal(t, len(want), len(got), q)
	}
}
