package rules

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/storage"
	"github.com/stretchr/testify/require"
)

// memStorage keeps the samples committed to it, in order; its querier
// holds nothing.
type memStorage struct {
	mu      sync.Mutex
	samples []string
}

func (s *memStorage) AppenderV2(context.Context) storage.AppenderV2 { return &memAppender{s: s} }

func (s *memStorage) Querier(int64, int64) (storage.Querier, error) {
	return storage.NoopQuerier(), nil
}

// matching returns the samples whose text contains sub.
func (s *memStorage) matching(sub string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, x := range s.samples {
		if strings.Contains(x, sub) {
			out = append(out, x)
		}
	}
	return out
}

type memAppender struct {
	s       *memStorage
	pending []string
}

func (a *memAppender) Append(_ storage.SeriesRef, ls labels.Labels, _, t int64, v float64, _ *histogram.Histogram, _ *histogram.FloatHistogram, _ storage.AppendV2Options) (storage.SeriesRef, error) {
	s := fmt.Sprint(v)
	if value.IsStaleNaN(v) {
		s = "stale"
	}
	a.pending = append(a.pending, fmt.Sprintf("%s @%s = %s", ls, time.UnixMilli(t).UTC().Format("15:04:05.000"), s))
	return 0, nil
}

func (a *memAppender) Commit() error {
	a.s.mu.Lock()
	a.s.samples = append(a.s.samples, a.pending...)
	a.s.mu.Unlock()
	return nil
}

func (a *memAppender) Rollback() error { return nil }

// TestManagerRuns runs a manager on the fake clock: groups evaluate at
// their phase of the interval; a reload keeps an unchanged group as it is,
// hands a changed group's alerts over to its successor, and marks the
// series of a removed group stale two intervals later; a stop ends every
// goroutine.
func TestManagerRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		rulePath := filepath.Join(dir, "r.yml")
		write := func(text string) {
			require.NoError(t, os.WriteFile(rulePath, []byte(text), 0o644))
		}
		const (
			kept    = "- name: kept\n  rules:\n  - {record: kept, expr: vector(1)}\n"
			changed = "- name: changed\n  rules:\n  - {alert: Up, expr: vector(1), for: 1h}\n"
			removed = "- name: removed\n  interval: 5s\n  rules:\n  - {record: removed, expr: vector(1)}\n"
		)
		write("groups:\n" + kept + changed + removed)
		st := &memStorage{}
		query := func(_ context.Context, q string, ts time.Time) (promql.Vector, error) {
			return promql.Vector{{Metric: labels.EmptyLabels(), T: ts.UnixMilli(), F: 1}}, nil
		}
		reg := prometheus.NewRegistry()
		m, err := New(DefaultOptions(), Components{Appendable: st, Queryable: st, QueryFunc: query, Parser: parser.NewParser(parser.Options{}), Registerer: reg})
		require.NoError(t, err)
		defer m.Stop()
		cfg := DefaultConfig()
		cfg.Global.EvaluationInterval = 10_000_000_000 // 10s
		cfg.RuleFiles = []string{rulePath}
		require.NoError(t, m.ApplyConfig(cfg))
		start := time.Now()
		m.Run()
		time.Sleep(61 * time.Second)
		synctest.Wait()

		groups := map[string]*Group{}
		for _, g := range m.RuleGroups() {
			groups[g.Name()] = g
		}
		require.Len(t, groups, 3)
		// An evaluation of each 10s group every 10s at its phase, the first
		// one interval after the start.
		k := groups["kept"]
		var want []string
		last := time.Time{}
		for ts := k.EvalTimestamp(start.UnixNano()).Add(10 * time.Second); !ts.After(time.Now()); ts = ts.Add(10 * time.Second) {
			want = append(want, fmt.Sprintf(`{__name__="kept"} @%s = 1`, ts.UTC().Format("15:04:05.000")))
			last = ts
		}
		require.GreaterOrEqual(t, len(want), 6) // 7 when the phase is under a second
		require.Equal(t, want, st.matching(`"kept"`))
		require.Equal(t, last, k.GetLastEvalTimestamp())
		require.Equal(t, float64(len(want)), testutil.ToFloat64(m.metrics.iterationsScheduled.WithLabelValues(groupKey(rulePath, "kept"))))
		// The 'for' state was restored after the second evaluation: from
		// the third on ALERTS is written.
		evals := int(testutil.ToFloat64(m.metrics.iterationsScheduled.WithLabelValues(groupKey(rulePath, "changed"))))
		require.Len(t, st.matching(`"ALERTS"`), evals-2)
		up := groups["changed"].rules[0].(*AlertingRule).ActiveAlerts()
		require.Len(t, up, 1)
		require.Equal(t, StatePending, up[0].State)

		write("groups:\n" + kept + strings.Replace(changed, "for: 1h", "for: 2h", 1))
		require.NoError(t, m.ApplyConfig(cfg))
		reloaded := time.Now()
		after := map[string]*Group{}
		for _, g := range m.RuleGroups() {
			after[g.Name()] = g
		}
		require.Len(t, after, 2)
		require.Same(t, k, after["kept"], "an unchanged group goes on")
		require.NotSame(t, groups["changed"], after["changed"])
		moved := after["changed"].rules[0].(*AlertingRule).ActiveAlerts()
		require.Len(t, moved, 1)
		require.Equal(t, up[0].ActiveAt, moved[0].ActiveAt, "the changed group's alert keeps its activeAt")
		require.Equal(t, 2, testutil.CollectAndCount(reg, "prometheus_rule_group_rules"))

		// The removed group's series go stale two of its intervals later.
		time.Sleep(10*time.Second - time.Millisecond)
		synctest.Wait()
		require.Empty(t, st.matching("stale"))
		time.Sleep(2 * time.Millisecond)
		synctest.Wait()
		require.Equal(t, []string{`{__name__="removed"} @` + reloaded.UTC().Format("15:04:05.000") + " = stale"}, st.matching("stale"))
		m.Stop()
	})
}

// TestManagerStopBeforeRun: a manager stopped without running ends its
// goroutines and applies no config afterwards.
func TestManagerStopBeforeRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rulePath := filepath.Join(t.TempDir(), "r.yml")
		require.NoError(t, os.WriteFile(rulePath, []byte("groups:\n- name: g\n  rules:\n  - {record: r, expr: vector(1)}\n"), 0o644))
		st := &memStorage{}
		m, err := New(DefaultOptions(), Components{Appendable: st, Queryable: st, Parser: parser.NewParser(parser.Options{}),
			QueryFunc: func(context.Context, string, time.Time) (promql.Vector, error) { return nil, nil }})
		require.NoError(t, err)
		cfg := DefaultConfig()
		cfg.RuleFiles = []string{rulePath}
		require.NoError(t, m.ApplyConfig(cfg))
		m.Stop()
		require.NoError(t, m.ApplyConfig(cfg))
		require.Len(t, m.RuleGroups(), 1)
		time.Sleep(time.Hour)
		synctest.Wait()
		require.Empty(t, st.matching(""))
	})
}

// TestConcurrentEvaluationBound: the independent rules of a group run at
// once up to MaxConcurrentEvals beside the group's own goroutine; 0 runs
// them one after another.
func TestConcurrentEvaluationBound(t *testing.T) {
	for _, c := range []struct {
		max  int64
		peak int64
	}{{0, 1}, {1, 2}, {2, 3}, {16, 6}} {
		t.Run(fmt.Sprint(c.max), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rulePath := filepath.Join(t.TempDir(), "r.yml")
				text := "groups:\n- name: g\n  rules:\n"
				for i := range 6 {
					text += fmt.Sprintf("  - {record: r%d, expr: sum(x%d)}\n", i, i)
				}
				require.NoError(t, os.WriteFile(rulePath, []byte(text), 0o644))
				var inFlight, peak atomic.Int64
				query := func(context.Context, string, time.Time) (promql.Vector, error) {
					n := inFlight.Add(1)
					for {
						p := peak.Load()
						if n <= p || peak.CompareAndSwap(p, n) {
							break
						}
					}
					time.Sleep(time.Second)
					inFlight.Add(-1)
					return nil, nil
				}
				st := &memStorage{}
				opts := DefaultOptions()
				opts.MaxConcurrentEvals = c.max
				m, err := New(opts, Components{Appendable: st, Queryable: st, QueryFunc: query, Parser: parser.NewParser(parser.Options{})})
				require.NoError(t, err)
				cfg := DefaultConfig()
				cfg.RuleFiles = []string{rulePath}
				require.NoError(t, m.ApplyConfig(cfg))
				m.Run()
				time.Sleep(3 * time.Minute)
				synctest.Wait()
				m.Stop()
				require.Equal(t, c.peak, peak.Load())
			})
		})
	}
}
