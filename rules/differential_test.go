package rules

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	prules "github.com/prometheus/prometheus/rules"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/util/teststorage"
	"github.com/stretchr/testify/require"

	shalepromql "github.com/shaledb/shale/promql"
)

// recorder is a storage whose appenders note every sample they commit.
type recorder struct {
	storage.Storage
	mu      sync.Mutex
	written []string
}

func (r *recorder) AppenderV2(ctx context.Context) storage.AppenderV2 {
	return &recordingAppender{AppenderV2: r.Storage.AppenderV2(ctx), r: r}
}

// take returns the samples committed since the last call, sorted.
func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.written
	r.written = nil
	sort.Strings(out)
	return out
}

type recordingAppender struct {
	storage.AppenderV2
	r       *recorder
	pending []string
}

func (a *recordingAppender) Append(ref storage.SeriesRef, ls labels.Labels, st, t int64, v float64, h *histogram.Histogram, fh *histogram.FloatHistogram, opts storage.AppendV2Options) (storage.SeriesRef, error) {
	ref, err := a.AppenderV2.Append(ref, ls, st, t, v, h, fh, opts)
	if err == nil {
		s := fmt.Sprint(v)
		if value.IsStaleNaN(v) {
			s = "stale"
		}
		a.pending = append(a.pending, fmt.Sprintf("%s @%d = %s", ls, t, s))
	}
	return ref, err
}

func (a *recordingAppender) Commit() error {
	if err := a.AppenderV2.Commit(); err != nil {
		return err
	}
	a.r.mu.Lock()
	a.r.written = append(a.r.written, a.pending...)
	a.r.mu.Unlock()
	return nil
}

// differentialRules exercise what rules do: recording (with group labels,
// a scalar, a duplicate label set, a non-vector result, a series coming and
// going, a limit), alerting (for, keep_firing_for, templates with $labels,
// $value and $externalLabels, a limit, a rule reading ALERTS), a query
// offset, and independent rules evaluated concurrently.
const differentialRules = `groups:
- name: record
  interval: 30s
  labels: {team: infra}
  rules:
  - record: room:temp:sum
    expr: sum by (room) (temp)
  - record: hot:temp
    expr: temp > 50
  - record: total:temp
    expr: scalar(sum(temp))
  - record: same:temp
    expr: label_replace(temp, "room", "same", "room", ".*")
  - record: same:room
    expr: temp
    labels: {room: same}
  - record: text
    expr: '"not a vector"'
  - record: hot:count
    expr: count(hot:temp)
    labels: {team: other}
- name: limited
  interval: 30s
  limit: 2
  rules:
  - record: limited:temp
    expr: temp > 20
  - alert: LimitedHot
    expr: temp > 20
- name: alerts
  interval: 1m
  rules:
  - alert: Hot
    expr: temp > 50
    for: 2m
    keep_firing_for: 2m
    labels: {severity: page, room_copy: '{{ $labels.room }}'}
    annotations:
      summary: '{{ $labels.room }} at {{ $value }} in {{ $externalLabels.cluster }}'
      link: '{{ $externalURL }}/alerts'
      rooms: '{{ with query "count(temp)" }}{{ . | first | value }}{{ end }} rooms'
      bad: '{{ "notanumber" | humanize }}'
  - alert: Warm
    expr: temp > 30
    labels: {severity: ticket}
  - alert: LongHot
    expr: temp > 70
    for: 30m
  - alert: MediumHot
    expr: temp > 70
    for: 16m
  - record: alerts:firing
    expr: count by (alertname) (ALERTS{alertstate="firing"})
- name: offset
  interval: 45s
  query_offset: 1m
  rules:
  - alert: Cold
    expr: temp < 5
    for: 1m
  - record: offset:temp
    expr: temp
`

// tempAt is the input: temp{room} at step k (15 s a step); NaN: absent.
func tempAt(room string, k int) float64 {
	switch room {
	case "a": // warm, then hot for a while, then cool
		switch {
		case k < 12:
			return 10
		case k < 140:
			return 80
		case k < 146:
			return 40
		default:
			return 3
		}
	case "b": // hot in short bursts
		if k%20 >= 14 {
			return 60
		}
		return 25
	case "c": // appears, disappears
		if k >= 30 && k < 70 {
			return 35
		}
		return math.NaN()
	}
	return math.NaN()
}

// differentialStorage returns a storage with temp over [start, start+steps x 15s].
func differentialStorage(t *testing.T, start time.Time, steps int) *recorder {
	t.Helper()
	st := teststorage.New(t)
	app := st.AppenderV2(t.Context())
	for k := 0; k <= steps; k++ {
		ts := start.Add(time.Duration(k) * 15 * time.Second).UnixMilli()
		for _, room := range []string{"a", "b", "c"} {
			if v := tempAt(room, k); !math.IsNaN(v) {
				_, err := app.Append(0, labels.FromStrings("__name__", "temp", "room", room), 0, ts, v, nil, nil, storage.AppendV2Options{})
				require.NoError(t, err)
			}
		}
	}
	require.NoError(t, app.Commit())
	return &recorder{Storage: st}
}

// alertString is an alert's state as both managers have it.
func alertString(ls, anns labels.Labels, state string, v float64, active, fired, resolved, keep time.Time) string {
	ts := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.UTC().Format(time.RFC3339)
	}
	return fmt.Sprintf("%s %s %s value=%v active=%s fired=%s resolved=%s keep=%s", ls, anns, state, v, ts(active), ts(fired), ts(resolved), ts(keep))
}

// sides are the two managers' groups over their own storages, keyed alike.
type sides struct {
	theirs  map[string]*prules.Group
	ours    map[string]*Group
	upSt    *recorder
	ourSt   *recorder
	upSent  []string
	ourSent []string
	mu      sync.Mutex
	// seen notes what the comparison went through, so that the test
	// fails when the fixture stops reaching a case.
	seen      map[string]int
	hotAlerts int
	// checkRestored, when set, checks a group of ours just restored.
	checkRestored func(t *testing.T, g *Group, now time.Time)
}

const (
	diffOutage = 30 * time.Minute
	diffGrace  = 2 * time.Minute
	diffResend = 2 * time.Minute
)

// load builds the groups of the rule file on both sides, as a (re)started
// server does: they restore the 'for' state after their second evaluation.
func (s *sides) load(t *testing.T, offset time.Duration, ruleFiles ...string) {
	t.Helper()
	ext := labels.FromStrings("cluster", "diff")
	extURL := &url.URL{Scheme: "http", Host: "shale:9090"}
	p := parser.NewParser(parser.Options{})
	ng := promql.NewEngine(promql.EngineOpts{MaxSamples: 1e6, Timeout: time.Minute, LookbackDelta: 5 * time.Minute})
	t.Cleanup(func() { ng.Close() })

	send := func(into *[]string, ls, anns labels.Labels, start, end time.Time, gen string) {
		s.mu.Lock()
		defer s.mu.Unlock()
		*into = append(*into, fmt.Sprintf("%s %s %s..%s %s", ls, anns, start.UTC().Format(time.RFC3339), end.UTC().Format(time.RFC3339), gen))
	}
	opts := &prules.ManagerOptions{
		ExternalURL: extURL, QueryFunc: prules.EngineQueryFunc(ng, s.upSt), AppendableV2: s.upSt, Queryable: s.upSt,
		Context: t.Context(), Logger: slog.New(slog.DiscardHandler), Registerer: prometheus.NewRegistry(), Parser: p,
		OutageTolerance: diffOutage, ForGracePeriod: diffGrace, ResendDelay: diffResend,
		ConcurrentEvalsEnabled: true, MaxConcurrentEvals: 4,
		DefaultRuleQueryOffset: func() time.Duration { return offset },
		NotifyFunc: func(_ context.Context, expr string, alerts ...*prules.Alert) {
			for _, a := range alerts {
				end := a.ValidUntil
				if !a.ResolvedAt.IsZero() {
					end = a.ResolvedAt
				}
				send(&s.upSent, a.Labels, a.Annotations, a.FiredAt, end, extURL.String()+"/graph?g0.expr="+url.QueryEscape(expr)+"&g0.tab=1")
			}
		},
	}
	um := prules.NewManager(opts)
	groups, errs := um.LoadGroups(time.Minute, ext, extURL.String(), nil, false, ruleFiles...)
	require.Empty(t, errs)
	s.theirs = groups

	m, err := New(Options{
		OutageTolerance: diffOutage, ForGracePeriod: diffGrace, ResendDelay: diffResend,
		NotificationQueueCapacity: 10, MaxConcurrentEvals: 4,
	}, Components{
		Appendable: s.ourSt, Queryable: s.ourSt, QueryFunc: shalepromql.EngineQueryFunc(ng, s.ourSt), Parser: p,
		ExternalURL: extURL, Registerer: prometheus.NewRegistry(),
	})
	require.NoError(t, err)
	t.Cleanup(m.Stop)
	m.queryOffset.Store(int64(offset))
	m.env.notify = func(expr string, alerts []*Alert) {
		for _, a := range toNotifierAlerts(extURL.String(), expr, alerts) {
			send(&s.ourSent, a.Labels, a.Annotations, a.StartsAt, a.EndsAt, a.GeneratorURL)
		}
	}
	cfg := DefaultConfig()
	cfg.Global.ExternalLabels = ext
	cfg.RuleFiles = ruleFiles
	files, err := loadRuleFiles(cfg, p, nil)
	require.NoError(t, err)
	s.ours, err = m.buildGroups(cfg, files)
	require.NoError(t, err)
	require.Len(t, s.ours, len(s.theirs))
}

// step evaluates group key at ts on both sides and compares what they
// wrote, sent, and hold.
func (s *sides) step(t *testing.T, key string, ts time.Time, restore bool) {
	t.Helper()
	ug, og := s.theirs[key], s.ours[key]
	prules.DefaultEvalIterationFunc(t.Context(), ug, ts)
	og.evalIteration(t.Context(), ts)
	if restore {
		now := ts.Add(time.Second)
		ug.RestoreForState(now)
		og.RestoreForState(now)
		if s.checkRestored != nil {
			s.checkRestored(t, og, now)
		}
	}
	at := fmt.Sprintf("%s at %s", key, ts.Format(time.RFC3339))
	written := s.upSt.take()
	require.Equal(t, written, s.ourSt.take(), "samples written by %s", at)
	for _, w := range written {
		s.seen["sample"]++
		if strings.HasSuffix(w, "= stale") {
			s.seen["stale marker"]++
		}
		if strings.HasPrefix(w, `{__name__="ALERTS_FOR_STATE"`) {
			s.seen["ALERTS_FOR_STATE"]++
		}
	}
	s.mu.Lock()
	up, our := s.upSent, s.ourSent
	s.upSent, s.ourSent = nil, nil
	s.mu.Unlock()
	sort.Strings(up)
	sort.Strings(our)
	require.Equal(t, up, our, "alerts sent by %s", at)
	s.seen["sent"] += len(up)
	for _, a := range up {
		for _, k := range []string{`link="http://shale:9090/alerts"`, `rooms="3 rooms"`, `bad="<error expanding template: `, `summary="a at 80 in diff"`} {
			if strings.Contains(a, k) {
				s.seen["sent "+k]++
			}
		}
	}

	ur, or := ug.Rules(), og.Rules()
	require.Len(t, or, len(ur))
	for i := range ur {
		what := fmt.Sprintf("rule %s of %s", ur[i].Name(), at)
		require.Equal(t, ur[i].Name(), or[i].Name())
		require.Equal(t, string(ur[i].Health()), string(or[i].Health()), what)
		require.Equal(t, fmt.Sprint(ur[i].LastError()), fmt.Sprint(or[i].LastError()), what)
		if err := ur[i].LastError(); err != nil {
			s.seen["error "+err.Error()]++
		}
		ua, ok := ur[i].(*prules.AlertingRule)
		if !ok {
			continue
		}
		oa := or[i].(*AlertingRule)
		require.Equal(t, ua.State().String(), oa.State().String(), what)
		var want, got []string
		for _, a := range ua.ActiveAlerts() {
			s.seen["alert "+a.State.String()]++
			if !a.KeepFiringSince.IsZero() {
				s.seen["kept firing"]++
			}
			want = append(want, alertString(a.Labels, a.Annotations, a.State.String(), a.Value, a.ActiveAt, a.FiredAt, a.ResolvedAt, a.KeepFiringSince))
		}
		for _, a := range oa.ActiveAlerts() {
			got = append(got, alertString(a.Labels, a.Annotations, a.State.String(), a.Value, a.ActiveAt, a.FiredAt, a.ResolvedAt, a.KeepFiringSince))
		}
		sort.Strings(want)
		sort.Strings(got)
		// Resolved alerts are kept (and sent) for 15 minutes.
		oa.mu.Lock()
		kept := len(oa.active)
		oa.mu.Unlock()
		require.Equal(t, ua.ActiveAlertsCount(), kept, "alerts, resolved included, of %s", what)
		if ua.Name() == "Hot" {
			if s.hotAlerts > 0 && kept == 0 {
				s.seen["resolved alert forgotten"]++
			}
			s.hotAlerts = kept
		}
		require.Equal(t, want, got, "alerts of %s", what)
	}
}

// run evaluates every group on its own schedule over [from, to), in time
// order, restoring after each group's second evaluation.
func (s *sides) run(t *testing.T, from, to time.Time) (evaluations int) {
	t.Helper()
	type next struct {
		key string
		ts  time.Time
		n   int
	}
	var queue []next
	for key, g := range s.theirs {
		// Both sides place the group at the same phase of its interval.
		first := g.EvalTimestamp(from.UnixNano())
		require.Equal(t, first, s.ours[key].EvalTimestamp(from.UnixNano()), "evaluation timestamp of %s", key)
		if first.Before(from) {
			first = first.Add(g.Interval())
		}
		queue = append(queue, next{key, first, 0})
	}
	for {
		slices.SortFunc(queue, func(a, b next) int {
			if c := a.ts.Compare(b.ts); c != 0 {
				return c
			}
			return strings.Compare(a.key, b.key)
		})
		if !queue[0].ts.Before(to) {
			return evaluations
		}
		n := &queue[0]
		s.step(t, n.key, n.ts, n.n == 1)
		evaluations++
		n.n++
		n.ts = n.ts.Add(s.theirs[n.key].Interval())
	}
}

// TestSameAsUpstreamManager evaluates one rule file with Prometheus' rule
// manager and with Shale's, over the same input samples and each over its
// own copy of the storage, group evaluation by group evaluation: the
// samples written (stale markers included), the alerts sent with their
// start and end, the rules' health and errors and their alerts' states and
// times must be the same after each. Then both restart after an outage and
// restore the alerts' 'for' state from what they wrote.
func TestSameAsUpstreamManager(t *testing.T) {
	dir := t.TempDir()
	ruleFile := filepath.Join(dir, "diff.rules.yml")
	require.NoError(t, os.WriteFile(ruleFile, []byte(differentialRules), 0o644))

	start := time.Date(2026, 5, 6, 7, 0, 0, 0, time.UTC)
	const steps = 232 // 58 minutes of input
	stop, restart := start.Add(20*time.Minute), start.Add(25*time.Minute)

	// Alerts that are pending at the last evaluation L before the stop,
	// since the one before (L-1m), with each 'for' that takes another way
	// of restoring: long finished, shorter than the grace period, ending
	// within the grace period after the restart, and ending later.
	restoreFile := filepath.Join(dir, "restore.rules.yml")
	last := (&Group{name: "restore", file: restoreFile, interval: time.Minute}).EvalTimestamp(stop.UnixNano() - 1)
	since := float64(last.Add(-90*time.Second).UnixNano()) / 1e9
	text := "groups:\n- name: restore\n  rules:\n"
	for _, hold := range []string{"30s", "90s", "150s", "10m"} {
		text += fmt.Sprintf("  - alert: For%s\n    expr: vector(time()) > %f\n    for: %s\n", hold, since, hold)
	}
	// And one that was pending early on, went away before the stop (its
	// series ends with a stale marker) and is back after the restart.
	text += fmt.Sprintf("  - alert: Back\n    expr: vector(time()) < %f or vector(time()) > %f\n    for: 10m\n",
		float64(last.Add(-5*time.Minute).UnixNano())/1e9, float64(stop.Unix()))
	require.NoError(t, os.WriteFile(restoreFile, []byte(text), 0o644))

	s := &sides{upSt: differentialStorage(t, start, steps), ourSt: differentialStorage(t, start, steps), seen: map[string]int{}}
	s.load(t, 0, ruleFile, restoreFile)
	// Evaluations begin 5 minutes into the data, so that ranges are full.
	n := s.run(t, start.Add(5*time.Minute), stop)

	// A restart 5 minutes later (within the outage tolerance): new groups
	// restore the 'for' state from ALERTS_FOR_STATE. From then on the
	// global rule_query_offset is 30s.
	s.load(t, 30*time.Second, ruleFile, restoreFile)
	s.checkRestored = func(t *testing.T, g *Group, now time.Time) {
		if g.name != "restore" {
			return
		}
		// ALERTS_FOR_STATE holds whole seconds.
		downAt := time.Unix(last.Unix(), 0)
		activeAt := time.Unix(last.Add(-time.Minute).Unix(), 0)
		first := now.Add(-time.Second - time.Minute) // the evaluation before the restore
		want := map[string]time.Time{
			"For30s":  activeAt,                                   // fired before the stop: as it was
			"For90s":  first,                                      // shorter than the grace period: anew
			"For150s": now.Add(diffGrace).Add(-150 * time.Second), // fires a grace period after the restart
			"For10m":  activeAt.Add(now.Sub(downAt)),              // the time down does not count
			"Back":    first,                                      // not active at the stop: anew
		}
		for _, r := range g.rules {
			as := r.(*AlertingRule).ActiveAlerts()
			require.Len(t, as, 1, r.Name())
			require.Equal(t, want[r.Name()].UTC(), as[0].ActiveAt.UTC(), "restored activeAt of %s", r.Name())
			s.seen["restored "+r.Name()]++
		}
	}
	n += s.run(t, restart, start.Add(57*time.Minute))
	t.Logf("%d group evaluations compared", n)
	if n < 100 {
		t.Fatalf("only %d evaluations", n)
	}
	t.Logf("%v", s.seen)
	for _, k := range []string{
		"sample", "stale marker", "ALERTS_FOR_STATE", "sent", "alert pending", "alert firing", "kept firing",
		"error exceeded limit of 2 with 3 series", "error exceeded limit of 2 with 3 alerts",
		"restored For30s", "restored For90s", "restored For150s", "restored For10m", "restored Back", "resolved alert forgotten",
		"error vector contains metrics with the same labelset after applying rule labels",
		"error rule result is not a vector or scalar",
		`sent link="http://shale:9090/alerts"`, `sent rooms="3 rooms"`, `sent bad="<error expanding template: `, `sent summary="a at 80 in diff"`,
	} {
		if s.seen[k] == 0 {
			t.Errorf("the fixture never reached %q", k)
		}
	}
}
