package rules

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	prules "github.com/prometheus/prometheus/rules"
	"github.com/prometheus/prometheus/util/teststorage"
	"github.com/stretchr/testify/require"
)

// orderRules are groups whose rules read each other in the ways that
// decide what may run at once.
const orderRules = `groups:
- name: independent
  rules:
  - {record: a, expr: sum(x)}
  - {record: b, expr: sum(y)}
  - {alert: C, expr: z > 1}
- name: chain
  rules:
  - {record: a, expr: sum(x)}
  - {record: b, expr: sum(a)}
  - {record: c, expr: sum(b)}
  - {record: d, expr: sum(y)}
  - {record: e, expr: 'sum({__name__="a"})'}
- name: alerts read
  rules:
  - {alert: A, expr: x > 1}
  - {alert: B, expr: y > 1}
  - {record: count, expr: 'count(ALERTS{alertname="A"})'}
  - {record: all, expr: count(ALERTS_FOR_STATE)}
  - {record: other, expr: sum(w)}
- name: regex name
  rules:
  - {record: job:a, expr: sum(x)}
  - {record: job:b, expr: 'sum({__name__=~"job:.*"})'}
  - {record: c, expr: sum(v)}
- name: later rule read
  rules:
  - {record: a, expr: sum(b)}
  - {record: b, expr: sum(x)}
- name: no name
  rules:
  - {record: a, expr: sum(x)}
  - {record: b, expr: 'sum({job="j"})'}
  - {record: c, expr: sum(y)}
- name: one
  rules:
  - {record: a, expr: sum(x)}
`

// TestEvalOrderAsPrometheus compares the batches of rules a group
// evaluates in turn with those of Prometheus' concurrent rule evaluation.
func TestEvalOrderAsPrometheus(t *testing.T) {
	file := filepath.Join(t.TempDir(), "order.yml")
	require.NoError(t, os.WriteFile(file, []byte(orderRules), 0o644))
	opts := &prules.ManagerOptions{ConcurrentEvalsEnabled: true, MaxConcurrentEvals: 4, Registerer: prometheus.NewRegistry()}
	um := prules.NewManager(opts)
	theirs, errs := um.LoadGroups(time.Minute, labels.EmptyLabels(), "", nil, false, file)
	require.Empty(t, errs)

	cfg := DefaultConfig()
	cfg.RuleFiles = []string{file}
	p := parser.NewParser(parser.Options{})
	files, err := loadRuleFiles(cfg, p, nil)
	require.NoError(t, err)
	st := teststorage.New(t)
	m, err := New(Options{NotificationQueueCapacity: 1, MaxConcurrentEvals: 4}, Components{
		Appendable: st, Queryable: st, Parser: p,
		QueryFunc: func(context.Context, string, time.Time) (promql.Vector, error) { return nil, nil },
	})
	require.NoError(t, err)
	defer m.Stop()
	ours, err := m.buildGroups(cfg, files)
	require.NoError(t, err)
	require.Len(t, ours, len(theirs))
	for key, ug := range theirs {
		var want [][]int
		for _, b := range opts.RuleConcurrencyController.SplitGroupIntoBatches(t.Context(), ug) {
			want = append(want, []int(b))
		}
		require.Equal(t, want, ours[key].batches, "group %s", key)
	}
	require.Equal(t, [][]int{{0, 1, 2}}, ours[groupKey(file, "independent")].batches)

	// Without concurrency, one rule a batch.
	require.Equal(t, [][]int{{0}, {1}, {2}}, evalOrder(ours[groupKey(file, "independent")].rules, false))
}

// TestEvalTimestampAsPrometheus: a group's evaluations fall at the same
// phase of its interval as in Prometheus, for any name, file and interval.
func TestEvalTimestampAsPrometheus(t *testing.T) {
	now := time.Date(2026, 7, 8, 9, 10, 11, 123456789, time.UTC)
	for _, name := range []string{"", "a", "group with spaces", "é"} {
		for _, file := range []string{"", "/etc/rules/a.yml", "rules/b.yml"} {
			for _, iv := range []time.Duration{time.Second, 15 * time.Second, time.Minute, 90 * time.Second, time.Hour} {
				ug := prules.NewGroup(prules.GroupOptions{Name: name, File: file, Interval: iv, Opts: &prules.ManagerOptions{}})
				og := &Group{name: name, file: file, interval: iv}
				for _, at := range []time.Time{now, now.Add(time.Hour + 7*time.Millisecond)} {
					want := ug.EvalTimestamp(at.UnixNano())
					got := og.EvalTimestamp(at.UnixNano())
					require.Equal(t, want, got, "%q %q %v", name, file, iv)
					require.False(t, got.After(at))
					require.Less(t, at.Sub(got), iv)
				}
			}
		}
	}
}
