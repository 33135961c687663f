package rules

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
)

// Group is a rule group of a rule file: rules evaluated in order at each
// tick of its interval. Its getters may be called from any goroutine.
type Group struct {
	name, file  string
	interval    time.Duration
	queryOffset *time.Duration // nil: the global rule_query_offset
	limit       int
	rules       []Rule
	// batches are the rules' indexes in evaluation order: the rules of a
	// batch of more than one may run at once (see evalOrder).
	batches [][]int
	env     *groupEnv

	// Owned by the group's goroutine (and by a reload once it has
	// stopped): the series each rule wrote at its last evaluation, and
	// series of removed rules to mark stale.
	seriesInPreviousEval []map[string]labels.Labels
	staleSeries          []labels.Labels
	shouldRestore        bool

	mu             sync.Mutex
	evaluationTime time.Duration
	lastEvaluation time.Time
	lastEvalTS     time.Time

	done       chan struct{} // closed to stop the group
	terminated chan struct{} // closed when run returns
	markStale  bool          // set before done when the group is removed
}

// groupEnv is what a group's evaluation uses of its manager.
type groupEnv struct {
	appendable      storage.AppendableV2
	queryable       storage.Queryable
	query           QueryFunc
	notify          func(expr string, alerts []*Alert)
	externalURL     *url.URL
	defaultOffset   func() time.Duration
	outageTolerance time.Duration
	forGracePeriod  time.Duration
	resendDelay     time.Duration
	sema            chan struct{} // nil: rules one after another
	metrics         *metrics
	logger          *slog.Logger
	now             func() time.Time
	managerDone     <-chan struct{}
	staleWG         *sync.WaitGroup
}

func newGroup(name, file string, interval time.Duration, limit int, queryOffset *time.Duration, rules []Rule, env *groupEnv, shouldRestore bool) *Group {
	return &Group{
		name: name, file: file, interval: interval, limit: limit, queryOffset: queryOffset,
		rules:                rules,
		batches:              evalOrder(rules, env.sema != nil),
		env:                  env,
		seriesInPreviousEval: make([]map[string]labels.Labels, len(rules)),
		shouldRestore:        shouldRestore,
		done:                 make(chan struct{}),
		terminated:           make(chan struct{}),
	}
}

var appendOpts = storage.AppendV2Options{RejectOutOfOrder: true}

// key is the group's name in metrics and in the manager: file;name.
func groupKey(file, name string) string { return file + ";" + name }

// Name returns the group's name.
func (g *Group) Name() string { return g.name }

// File returns the rule file the group is in.
func (g *Group) File() string { return g.file }

// Interval returns the group's evaluation interval.
func (g *Group) Interval() time.Duration { return g.interval }

// Limit returns the group's limit (0: none).
func (g *Group) Limit() int { return g.limit }

// Rules returns the group's rules whose labels match any of the matcher
// sets (all of them without a set).
func (g *Group) Rules(matcherSets ...[]*labels.Matcher) []Rule {
	if len(matcherSets) == 0 {
		return g.rules
	}
	var out []Rule
	for _, r := range g.rules {
		ls := r.Labels()
		if slices.ContainsFunc(matcherSets, func(ms []*labels.Matcher) bool {
			for _, m := range ms {
				if !m.Matches(ls.Get(m.Name)) {
					return false
				}
			}
			return true
		}) {
			out = append(out, r)
		}
	}
	return out
}

// GetEvaluationTime returns how long the last evaluation took.
func (g *Group) GetEvaluationTime() time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.evaluationTime
}

// GetLastEvaluation returns when (wall clock) the last evaluation started.
func (g *Group) GetLastEvaluation() time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.lastEvaluation
}

// GetLastEvalTimestamp returns the timestamp of the last evaluation, on
// the group's schedule.
func (g *Group) GetLastEvalTimestamp() time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.lastEvalTS
}

// QueryOffset returns the offset the group's queries are evaluated at.
func (g *Group) QueryOffset() time.Duration {
	if g.queryOffset != nil {
		return *g.queryOffset
	}
	if g.env.defaultOffset != nil {
		return g.env.defaultOffset()
	}
	return 0
}

// EvalTimestamp returns the group's latest evaluation time at or before
// now (ns): groups are spread over their interval by a hash of their name
// and file, the same on every start and as Prometheus 3 spreads them.
func (g *Group) EvalTimestamp(now int64) time.Time {
	iv := int64(g.interval)
	offset := int64(labels.FromStrings("name", g.name, "file", g.file).Hash() % uint64(iv))
	adj := now - offset
	base := adj - adj%iv
	return time.Unix(0, base+offset).UTC()
}

// equal reports whether ng is g's definition, so that a reload keeps g.
func (g *Group) equal(ng *Group) bool {
	if g.name != ng.name || g.file != ng.file || g.interval != ng.interval || g.limit != ng.limit ||
		(g.queryOffset == nil) != (ng.queryOffset == nil) ||
		g.queryOffset != nil && *g.queryOffset != *ng.queryOffset || len(g.rules) != len(ng.rules) {
		return false
	}
	for i, r := range g.rules {
		if r.key() != ng.rules[i].key() {
			return false
		}
	}
	return true
}

// copyState takes the state of from, the group of the same name and file
// before a reload (stopped): timings, the series each rule wrote and the
// alerts of the rules still there; the series of the rules gone are to be
// marked stale.
func (g *Group) copyState(from *Group) {
	g.evaluationTime, g.lastEvaluation = from.GetEvaluationTime(), from.GetLastEvaluation()
	byKey := map[string][]int{}
	for i, r := range from.rules {
		k := r.Name() + r.Labels().String()
		byKey[k] = append(byKey[k], i)
	}
	for i, r := range g.rules {
		k := r.Name() + r.Labels().String()
		idx := byKey[k]
		if len(idx) == 0 {
			continue
		}
		fi := idx[0]
		byKey[k] = idx[1:]
		g.seriesInPreviousEval[i] = from.seriesInPreviousEval[fi]
		if ar, ok := r.(*AlertingRule); ok {
			if far, ok := from.rules[fi].(*AlertingRule); ok {
				ar.copyAlerts(far)
			}
		}
	}
	g.staleSeries = from.staleSeries
	for _, idx := range byKey {
		for _, fi := range idx {
			for _, ls := range from.seriesInPreviousEval[fi] {
				g.staleSeries = append(g.staleSeries, ls)
			}
		}
	}
}

// run evaluates the group at each tick until stopped.
func (g *Group) run(ctx context.Context) {
	defer close(g.terminated)
	env := g.env
	key := groupKey(g.file, g.name)
	evalTS := g.EvalTimestamp(env.now().UnixNano()).Add(g.interval)
	if !g.sleepUntil(evalTS) {
		return
	}
	defer func() {
		if !g.markStale {
			return
		}
		// The group was removed: mark its series stale once a rule that
		// replaces them elsewhere has had time to write (two intervals),
		// unless the manager stops first.
		for _, m := range g.seriesInPreviousEval {
			for _, ls := range m {
				g.staleSeries = append(g.staleSeries, ls)
			}
		}
		g.seriesInPreviousEval = nil
		now := env.now()
		env.staleWG.Add(1)
		go func() {
			defer env.staleWG.Done()
			t := time.NewTimer(2 * g.interval)
			defer t.Stop()
			select {
			case <-env.managerDone:
			case <-t.C:
				g.cleanupStaleSeries(ctx, now)
			}
		}()
	}()

	g.evalIteration(ctx, evalTS)
	for {
		// The next tick on the schedule; ticks missed while evaluating
		// are counted and skipped.
		if !g.sleepUntil(evalTS.Add(g.interval)) {
			return
		}
		missed := env.now().Sub(evalTS)/g.interval - 1
		if missed > 0 {
			env.metrics.iterationsMissed.WithLabelValues(key).Add(float64(missed))
			env.metrics.iterationsScheduled.WithLabelValues(key).Add(float64(missed))
		}
		evalTS = evalTS.Add((missed + 1) * g.interval)
		g.evalIteration(ctx, evalTS)
		if g.shouldRestore {
			// After the second evaluation, as Prometheus: the first has
			// made every alert active again.
			g.RestoreForState(env.now())
		}
	}
}

// sleepUntil waits until t; false when the group is stopped first.
func (g *Group) sleepUntil(t time.Time) bool {
	d := t.Sub(g.env.now())
	if d <= 0 {
		select {
		case <-g.done:
			return false
		default:
			return true
		}
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-g.done:
		return false
	case <-timer.C:
		return true
	}
}

func (g *Group) stop() {
	close(g.done)
	<-g.terminated
}

// evalIteration evaluates the group at ts and records its timings.
func (g *Group) evalIteration(ctx context.Context, ts time.Time) {
	key := groupKey(g.file, g.name)
	m := g.env.metrics
	m.iterationsScheduled.WithLabelValues(key).Inc()
	start := g.env.now()
	g.Eval(ctx, ts)
	d := g.env.now().Sub(start)
	m.iterationDuration.Observe(d.Seconds())
	m.iterationDurationHist.Observe(d.Seconds())
	var sum time.Duration
	for _, r := range g.rules {
		sum += r.GetEvaluationDuration()
	}
	m.groupLastRuleDurationSum.WithLabelValues(key).Set(sum.Seconds())
	m.groupLastDuration.WithLabelValues(key).Set(d.Seconds())
	m.groupLastEvalTime.WithLabelValues(key).Set(float64(start.UnixNano()) / 1e9)
	g.mu.Lock()
	g.evaluationTime, g.lastEvaluation, g.lastEvalTS = d, start, ts
	g.mu.Unlock()
}

// Eval evaluates every rule of the group once at ts, writes their samples
// and stale markers, and sends alerts.
func (g *Group) Eval(ctx context.Context, ts time.Time) {
	var (
		samples atomic.Int64
		wg      sync.WaitGroup
		offset  = g.QueryOffset()
	)
	for _, batch := range g.batches {
		for _, i := range batch {
			select {
			case <-g.done:
				wg.Wait()
				return
			default:
			}
			if len(batch) > 1 && g.env.sema != nil {
				select {
				case g.env.sema <- struct{}{}:
					wg.Add(1)
					go func() {
						defer func() { <-g.env.sema; wg.Done() }()
						samples.Add(int64(g.evalRule(ctx, i, ts, offset)))
					}()
					continue
				default: // no slot free: evaluate it here
				}
			}
			samples.Add(int64(g.evalRule(ctx, i, ts, offset)))
		}
		wg.Wait()
	}
	g.env.metrics.groupSamples.WithLabelValues(groupKey(g.file, g.name)).Set(float64(samples.Load()))
	g.cleanupStaleSeries(ctx, ts)
}

// evalRule evaluates rule i at ts, writes its samples and stale markers for
// the series it no longer produces, and sends its alerts; it returns the
// number of samples.
func (g *Group) evalRule(ctx context.Context, i int, ts time.Time, offset time.Duration) int {
	rule := g.rules[i]
	env := g.env
	key := groupKey(g.file, g.name)
	logger := env.logger.With("file", g.file, "group", g.name, "name", rule.Name(), "index", i)
	start := env.now()
	defer func() {
		d := env.now().Sub(start)
		env.metrics.evalDuration.Observe(d.Seconds())
		env.metrics.evalDurationHist.Observe(d.Seconds())
		rule.status().setTiming(start, d)
	}()
	env.metrics.evalTotal.WithLabelValues(key).Inc()

	vec, err := rule.eval(ctx, ts, offset, env.query, env.externalURL, g.limit)
	if err != nil {
		rule.status().setResult(err)
		env.metrics.evalFailures.WithLabelValues(key).Inc()
		if ctx.Err() == nil { // not canceled by a stop
			logger.Warn("Evaluating rule failed", "rule", rule.Name(), "err", err)
		}
		return 0
	}
	rule.status().setResult(nil)
	if ar, ok := rule.(*AlertingRule); ok {
		if alerts := ar.alertsToSend(ts, env.resendDelay, g.interval); len(alerts) > 0 {
			env.notify(ar.expr.String(), alerts)
		}
	}

	app := env.appendable.AppenderV2(ctx)
	written := make(map[string]labels.Labels, len(g.seriesInPreviousEval[i]))
	var dropped [4]int // out of order, too old, duplicate, over the series limit
	var buf []byte
	for _, s := range vec {
		if _, err := app.Append(0, s.metric, 0, s.t, s.f, nil, s.h, appendOpts); err != nil {
			rule.status().setResult(err)
			switch {
			case errors.Is(err, storage.ErrOutOfOrderSample):
				dropped[0]++
			case errors.Is(err, storage.ErrTooOldSample):
				dropped[1]++
			case errors.Is(err, storage.ErrDuplicateSampleForTimestamp):
				dropped[2]++
			case overSeriesLimit(err):
				// A rule whose result has many new series would otherwise
				// log one line for each at every evaluation.
				dropped[3]++
			default:
				logger.Warn("Rule evaluation result discarded", "err", err, "sample", s.metric.String(), "t", s.t, "value", s.f)
			}
			continue
		}
		buf = s.metric.Bytes(buf)
		written[string(buf)] = s.metric
	}
	for k, what := range []string{"out-of-order", "too old", "duplicate-timestamp", "over-the-series-limit"} {
		if dropped[k] > 0 {
			logger.Warn("Error on ingesting "+what+" results from rule evaluation", "num_dropped", dropped[k])
		}
	}
	stale := math.Float64frombits(value.StaleNaN)
	at := ts.Add(-offset).UnixMilli()
	for k, ls := range g.seriesInPreviousEval[i] {
		if _, ok := written[k]; ok {
			continue
		}
		if _, err := app.Append(0, ls, 0, at, stale, nil, nil, appendOpts); err != nil && !ignorableAppendError(err) {
			logger.Warn("Adding stale sample failed", "sample", ls.String(), "err", err)
		}
	}
	if err := app.Commit(); err != nil {
		rule.status().setResult(err)
		env.metrics.evalFailures.WithLabelValues(key).Inc()
		logger.Warn("Rule sample appending failed", "err", err)
		return len(vec)
	}
	g.seriesInPreviousEval[i] = written
	return len(vec)
}

// overSeriesLimit reports a sample of a new series that the storage refused
// because it holds as many series as it may take (--storage.max-head-series),
// which names it by its reject reason.
func overSeriesLimit(err error) bool {
	var r interface{ RejectReason() string }
	return errors.As(err, &r) && r.RejectReason() == "series_limit"
}

// ignorableAppendError reports an error of a stale marker's append that
// needs no word: a marker that came too late, or one for a series the
// storage no longer holds and has no room to create.
func ignorableAppendError(err error) bool {
	return errors.Is(err, storage.ErrOutOfOrderSample) || errors.Is(err, storage.ErrTooOldSample) ||
		errors.Is(err, storage.ErrDuplicateSampleForTimestamp) || overSeriesLimit(err)
}

// cleanupStaleSeries writes stale markers at ts for the series of rules no
// longer in the group.
func (g *Group) cleanupStaleSeries(ctx context.Context, ts time.Time) {
	if len(g.staleSeries) == 0 {
		return
	}
	app := g.env.appendable.AppenderV2(ctx)
	at := ts.Add(-g.QueryOffset()).UnixMilli()
	stale := math.Float64frombits(value.StaleNaN)
	for _, ls := range g.staleSeries {
		if _, err := app.Append(0, ls, 0, at, stale, nil, nil, appendOpts); err != nil && !ignorableAppendError(err) {
			g.env.logger.Warn("Adding stale sample for previous configuration failed", "sample", ls, "err", err)
		}
	}
	if err := app.Commit(); err != nil {
		g.env.logger.Warn("Stale sample appending for previous configuration failed", "err", err)
		return
	}
	g.staleSeries = nil
}

// RestoreForState gives the group's pending and firing alerts back the
// time they had been active before a restart, from the ALERTS_FOR_STATE
// series of the last OutageTolerance before now, as Prometheus does: the
// time spent down does not count towards 'for'; an alert whose 'for' is at
// least ForGracePeriod fires no sooner than ForGracePeriod after now.
func (g *Group) RestoreForState(now time.Time) {
	env := g.env
	defer func() {
		env.metrics.groupLastRestoreDuration.WithLabelValues(groupKey(g.file, g.name)).Set(env.now().Sub(now).Seconds())
		g.shouldRestore = false
	}()
	logger := env.logger.With("file", g.file, "group", g.name)
	q, err := env.queryable.Querier(now.Add(-env.outageTolerance).UnixMilli(), now.UnixMilli())
	if err != nil {
		logger.Error("Failed to get Querier", "err", err)
		return
	}
	defer func() {
		if err := q.Close(); err != nil {
			logger.Error("Failed to close Querier", "err", err)
		}
	}()
	for _, r := range g.rules {
		ar, ok := r.(*AlertingRule)
		if !ok {
			continue
		}
		g.restoreRule(ar, q, now, logger)
		ar.setRestored()
	}
}

func (g *Group) restoreRule(ar *AlertingRule, q storage.Querier, now time.Time, logger *slog.Logger) {
	ss := q.Select(context.Background(), false, nil, ar.forStateMatchers()...)
	byLabels := map[string]storage.Series{}
	for ss.Next() {
		s := ss.At()
		ls := s.Labels().DropReserved(func(n string) bool { return n == model.MetricNameLabel })
		byLabels[ls.String()] = s
	}
	if err := ss.Err(); err != nil {
		logger.Error("Failed to restore 'for' state", "alertname", ar.name, "stage", "Select", "err", err)
		return
	}
	if len(byLabels) == 0 {
		return
	}
	ar.mu.Lock()
	defer ar.mu.Unlock()
	grace := g.env.forGracePeriod
	for _, a := range ar.active {
		s, ok := byLabels[a.Labels.String()]
		if !ok {
			continue
		}
		var t int64
		var v float64
		it := s.Iterator(nil)
		for it.Next() == chunkenc.ValFloat {
			t, v = it.At()
		}
		if err := it.Err(); err != nil {
			logger.Error("Failed to restore 'for' state", "alertname", ar.name, "stage", "Iterator", "err", err)
			continue
		}
		if value.IsStaleNaN(v) {
			continue // it was not active when the server went down
		}
		downAt := time.Unix(t/1000, 0).UTC()
		activeAt := time.Unix(int64(v), 0).UTC()
		remaining := ar.hold - downAt.Sub(activeAt)
		switch {
		case remaining <= 0:
			// It had been pending for its whole 'for': as it was.
		case ar.hold < grace:
			continue // a short 'for' starts again
		case remaining < grace:
			activeAt = now.Add(grace).Add(-ar.hold)
		default:
			activeAt = activeAt.Add(now.Sub(downAt))
		}
		a.ActiveAt = activeAt
	}
}

// evalOrder returns the batches of rule indexes a group evaluates in turn:
// without concurrency, one rule a batch. With it, the rules that read no
// other rule's output come first, together; then each rule that both reads
// and is read, alone; then the rules nothing reads, together. When a rule
// selects series without a metric name, what it reads cannot be told, and
// every rule is alone.
func evalOrder(rules []Rule, concurrent bool) [][]int {
	seq := func() [][]int {
		out := make([][]int, len(rules))
		for i := range rules {
			out[i] = []int{i}
		}
		return out
	}
	if !concurrent || len(rules) < 2 {
		return seq()
	}
	reads := make([]map[int]bool, len(rules)) // rule -> rules whose output it reads
	readBy := make([]int, len(rules))
	for i, r := range rules {
		reads[i] = map[int]bool{}
		indeterminate := false
		parser.Inspect(r.Query(), func(n parser.Node, _ []parser.Node) error {
			vs, ok := n.(*parser.VectorSelector)
			if !ok || indeterminate {
				return nil
			}
			var name *labels.Matcher
			if vs.Name != "" {
				name = labels.MustNewMatcher(labels.MatchEqual, model.MetricNameLabel, vs.Name)
			} else {
				for _, m := range vs.LabelMatchers {
					if m.Name == model.MetricNameLabel {
						name = m
						break
					}
				}
			}
			if name == nil {
				indeterminate = true
				return nil
			}
			readsAlerts := name.Matches(alertsMetric) || name.Matches(alertsForStateMetric)
			var alertName *labels.Matcher
			for _, m := range vs.LabelMatchers {
				if m.Name == model.AlertNameLabel {
					alertName = m
				}
			}
			// Only the rules before it: a later rule's output is from the
			// previous evaluation whatever the order.
			for j, other := range rules[:i] {
				_, alerting := other.(*AlertingRule)
				if name.Matches(other.Name()) || readsAlerts && alerting && (alertName == nil || alertName.Matches(other.Name())) {
					reads[i][j] = true
				}
			}
			return nil
		})
		if indeterminate {
			return seq()
		}
	}
	for i := range rules {
		for j := range reads[i] {
			readBy[j]++
		}
	}
	var first, last [][]int
	var firstBatch, lastBatch []int
	var middle [][]int
	for i := range rules {
		switch {
		case len(reads[i]) == 0:
			firstBatch = append(firstBatch, i)
		case readBy[i] > 0:
			middle = append(middle, []int{i})
		default:
			lastBatch = append(lastBatch, i)
		}
	}
	if len(firstBatch) > 0 {
		first = append(first, firstBatch)
	}
	if len(lastBatch) > 0 {
		last = append(last, lastBatch)
	}
	return append(append(first, middle...), last...)
}
