package rules

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/storage"
	"github.com/stretchr/testify/require"
)

// seriesLimitErr is how a storage names a sample refused for its series
// limit (Shale's storage.ErrSeriesLimit).
type seriesLimitErr struct{}

func (seriesLimitErr) Error() string        { return "series limit reached" }
func (seriesLimitErr) RejectReason() string { return "series_limit" }

// fullStorage refuses every sample: it holds as many series as it may.
type fullStorage struct{ memStorage }

func (s *fullStorage) AppenderV2(context.Context) storage.AppenderV2 { return &fullAppender{} }

type fullAppender struct{ memAppender }

func (*fullAppender) Append(storage.SeriesRef, labels.Labels, int64, int64, float64, *histogram.Histogram, *histogram.FloatHistogram, storage.AppendV2Options) (storage.SeriesRef, error) {
	return 0, seriesLimitErr{}
}

func (*fullAppender) Commit() error { return nil }

// TestRuleOverSeriesLimit: a recording rule whose result the storage refuses
// for its series limit logs one line with the count, not one per series,
// and the rule's health says why.
func TestRuleOverSeriesLimit(t *testing.T) {
	dir := t.TempDir()
	rulePath := filepath.Join(dir, "r.yml")
	require.NoError(t, os.WriteFile(rulePath, []byte("groups:\n- name: g\n  rules:\n  - {record: r, expr: x}\n"), 0o644))
	const n = 50
	query := func(_ context.Context, _ string, ts time.Time) (promql.Vector, error) {
		var v promql.Vector
		for i := range n {
			v = append(v, promql.Sample{Metric: labels.FromStrings("i", strconv.Itoa(i)), T: ts.UnixMilli(), F: 1})
		}
		return v, nil
	}
	var logs bytes.Buffer
	st := &fullStorage{}
	m, err := New(DefaultOptions(), Components{Appendable: st, Queryable: st, QueryFunc: query,
		Parser: parser.NewParser(parser.Options{}), Registerer: prometheus.NewRegistry(),
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, err)
	defer m.Stop()
	cfg := DefaultConfig()
	cfg.RuleFiles = []string{rulePath}
	require.NoError(t, m.ApplyConfig(cfg))
	groups := m.RuleGroups()
	require.Len(t, groups, 1)
	groups[0].Eval(context.Background(), time.Now())

	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	require.Len(t, lines, 1, logs.String())
	require.Contains(t, lines[0], "over-the-series-limit")
	require.Contains(t, lines[0], "num_dropped=50")
	r := groups[0].Rules()[0]
	require.Equal(t, HealthBad, r.Health())
	require.True(t, errors.Is(r.LastError(), seriesLimitErr{}), "%v", r.LastError())
}
