package promql

import (
	"container/list"
	"context"
	"errors"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"
	upstream "github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/util/annotations"

	"github.com/shaledb/shale/internal/promreg"
)

// The range-query results cache keeps, per expression and step, the result
// of a run of evaluation steps, so that a dashboard refreshed with its window
// moved forward evaluates only the steps it has not seen.
//
// A range query's value at step t depends only on the samples in a window
// [t+lo, t+hi] fixed by the expression (ranges, lookback, offsets; see
// upstream.FindMinMaxTime), so cached steps stay right until data in their
// window changes. Two rules keep them right:
//
//   - Steps whose window reaches into the last Freshness before now are never
//     kept: that is where samples are still arriving.
//   - Storage reports every change to data (commits, backfill, deletes,
//     retention; on a reader, what it sees of the writer's) with its time
//     range, and the steps whose window overlaps it are dropped.
//
// Expressions whose result at a step depends on the query's range rather than
// the step (@ modifiers, duration expressions, step() and range()) are not
// cached, nor are requests for statistics.

// ResultsCacheOptions sizes the cache.
type ResultsCacheOptions struct {
	// MaxBytes is the memory the cached results may take, as estimated; the
	// least recently used expressions go first. 0 disables the cache.
	MaxBytes int64
	// Freshness is how far behind now a step's data must end for it to be
	// kept.
	Freshness time.Duration
}

// maxCachedSteps bounds one entry: the most points Prometheus returns per
// series.
const maxCachedSteps = 11000

// rangeRun evaluates the expression at the steps start, start+step, ...,
// end. It returns the result and a release func that frees it once read.
type rangeRun func(ctx context.Context, start, end int64) (upstream.Matrix, annotations.Annotations, func(), error)

type resultsCache struct {
	opts ResultsCacheOptions
	now  func() time.Time

	mu      sync.Mutex
	entries map[cacheKey]*cacheEntry
	lru     list.List // of *cacheEntry, most recently used first
	bytes   int64

	// horizon is the newest data time any entry, or any evaluation whose
	// result may be kept, depends on. A change entirely after it touches
	// nothing: that is every ordinary write, found without the lock.
	horizon atomic.Int64
	// changes counts the changes at or before horizon: an evaluation keeps
	// its result only if none happened while it ran.
	changes atomic.Uint64

	steps         *prometheus.CounterVec
	invalidations prometheus.Counter
	evictions     prometheus.Counter
	sizeBytes     prometheus.GaugeFunc
	entriesGauge  prometheus.GaugeFunc
}

type cacheKey struct {
	expr     string
	step     int64
	phase    int64 // start mod step: steps of two requests coincide only if equal
	lookback int64
}

// cacheEntry is the result at the steps first, first+step, ..., last.
type cacheEntry struct {
	key         cacheKey
	first, last int64
	lo, hi      int64 // the data of step t is in [t+lo, t+hi]
	series      []cachedSeries
	annos       annotations.Annotations
	size        int64
	elem        *list.Element
}

type cachedSeries struct {
	metric labels.Labels
	floats []upstream.FPoint
	hists  []upstream.HPoint
}

func newResultsCache(opts ResultsCacheOptions, now func() time.Time, reg prometheus.Registerer) (*resultsCache, error) {
	c := &resultsCache{opts: opts, now: now, entries: map[cacheKey]*cacheEntry{}}
	c.horizon.Store(math.MinInt64)
	set := promreg.NewSet(reg)
	c.steps = set.CounterVec("shale_query_results_cache_steps_total",
		"Evaluation steps of range queries the results cache was asked for, by result: hit (served from the cache) or miss (evaluated).", "result")
	c.invalidations = set.Counter("shale_query_results_cache_invalidations_total",
		"Cached results dropped because data in their time range changed (backfill, late samples, deletes, retention).")
	c.evictions = set.Counter("shale_query_results_cache_evictions_total",
		"Cached results dropped to stay within the memory budget.")
	if err := set.Err(); err != nil {
		return nil, err
	}
	c.sizeBytes = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "shale_query_results_cache_bytes",
		Help: "Estimated memory held by the range-query results cache.",
	}, func() float64 { c.mu.Lock(); defer c.mu.Unlock(); return float64(c.bytes) })
	c.entriesGauge = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "shale_query_results_cache_entries",
		Help: "Expressions with results in the range-query results cache.",
	}, func() float64 { c.mu.Lock(); defer c.mu.Unlock(); return float64(len(c.entries)) })
	c.steps.WithLabelValues("hit")
	c.steps.WithLabelValues("miss")
	for _, err := range []error{
		promreg.Register(reg, &c.sizeBytes),
		promreg.Register(reg, &c.entriesGauge),
	} {
		if err != nil {
			return nil, err
		}
	}
	return c, nil
}

// cacheable reports whether expr's value at a step depends only on the step
// and the data, and not on the query's start or end.
func cacheable(expr parser.Expr) bool {
	ok := true
	parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
		switch n := node.(type) {
		case *parser.VectorSelector:
			if n.Timestamp != nil || n.StartOrEnd != 0 || n.OriginalOffsetExpr != nil {
				ok = false
			}
		case *parser.SubqueryExpr:
			if n.Timestamp != nil || n.StartOrEnd != 0 || n.OriginalOffsetExpr != nil || n.RangeExpr != nil || n.StepExpr != nil {
				ok = false
			}
		case *parser.MatrixSelector:
			if n.RangeExpr != nil {
				ok = false
			}
		case *parser.DurationExpr, *parser.StepInvariantExpr:
			ok = false
		case *parser.Call:
			switch n.Func.Name {
			case "step", "range", "info":
				ok = false
			}
		}
		if !ok {
			return errStopInspect
		}
		return nil
	})
	return ok
}

// errStopInspect ends parser.Inspect at the first node that rules caching out.
var errStopInspect = errors.New("stop")

// window returns lo and hi such that the data of the step at t is in
// [t+lo, t+hi].
func window(expr parser.Expr, lookback time.Duration) (lo, hi int64) {
	const t = int64(1) << 40 // any time far from the ends of int64
	mint, maxt := upstream.FindMinMaxTime(&parser.EvalStmt{Expr: expr, Start: time.UnixMilli(t), End: time.UnixMilli(t), LookbackDelta: lookback})
	if mint == 0 && maxt == 0 { // no selector: nothing the data can change
		return 0, 0
	}
	return mint - t, maxt - t
}

// query answers a range query over [start, end] at step from the cache where
// it can, evaluating the steps it lacks with run. The matrix returned is the
// caller's and sorted by labels.
func (c *resultsCache) query(ctx context.Context, expr parser.Expr, qs string, start, end, step int64, lookback time.Duration, run rangeRun) (upstream.Matrix, annotations.Annotations, error) {
	if c == nil || step <= 0 || (end-start)/step >= maxCachedSteps || !cacheable(expr) {
		return c.runAll(ctx, start, end, step, run)
	}
	end = start + (end-start)/step*step // the last step
	key := cacheKey{expr: qs, step: step, phase: mod(start, step), lookback: int64(lookback)}
	lo, hi := window(expr, lookback)
	// The last step whose data ends before the fresh part.
	cutoff := c.now().Add(-c.opts.Freshness).UnixMilli()
	lastKeep := min(end, start+floorDiv(cutoff-hi-start, step)*step)

	// Announce what this evaluation will depend on before reading the
	// cache or the data: a change from now on either shows in its reads or
	// in c.changes.
	if lastKeep >= start {
		c.raiseHorizon(lastKeep + hi)
	}
	changes0 := c.changes.Load()

	c.mu.Lock()
	e := c.entries[key]
	var have []cachedSeries
	var haveAnnos annotations.Annotations
	var hFirst, hLast int64
	if e != nil && e.first <= end && e.last >= start {
		hFirst, hLast = max(start, e.first), min(end, e.last)
		have, haveAnnos = e.slice(hFirst, hLast), cloneAnnos(e.annos)
		c.lru.MoveToFront(e.elem)
	}
	c.mu.Unlock()

	var before, after upstream.Matrix
	annos := haveAnnos
	if annos == nil {
		annos = annotations.Annotations{}
	}
	if have == nil {
		m, a, err := c.runAll(ctx, start, end, step, run)
		if err != nil {
			return nil, a, err
		}
		annos.Merge(a)
		after = m
	} else {
		c.steps.WithLabelValues("hit").Add(float64((hLast-hFirst)/step + 1))
		if hFirst > start {
			m, a, err := c.runAll(ctx, start, hFirst-step, step, run)
			if err != nil {
				return nil, a, err
			}
			annos.Merge(a)
			before = m
		}
		if hLast < end {
			m, a, err := c.runAll(ctx, hLast+step, end, step, run)
			if err != nil {
				return nil, a, err
			}
			annos.Merge(a)
			after = m
		}
	}
	out := joinResults(before, have, after)

	if lastKeep >= start {
		c.store(key, lo, hi, start, lastKeep, out, annos, changes0)
	}
	return toMatrix(out), annos, nil
}

// runAll evaluates [start, end] with run and copies the result out.
func (c *resultsCache) runAll(ctx context.Context, start, end, step int64, run rangeRun) (upstream.Matrix, annotations.Annotations, error) {
	m, annos, release, err := run(ctx, start, end)
	if release != nil {
		defer release()
	}
	if err != nil {
		return nil, annos, err
	}
	if c != nil && step > 0 {
		c.steps.WithLabelValues("miss").Add(float64((end-start)/step + 1))
	}
	out := make(upstream.Matrix, len(m))
	for i, s := range m {
		out[i] = upstream.Series{Metric: s.Metric, Floats: append([]upstream.FPoint(nil), s.Floats...), Histograms: append([]upstream.HPoint(nil), s.Histograms...)}
	}
	return out, annos, nil
}

func (c *resultsCache) raiseHorizon(t int64) {
	for {
		cur := c.horizon.Load()
		if t <= cur || c.horizon.CompareAndSwap(cur, t) {
			return
		}
	}
}

// Changed drops the cached steps whose data overlaps [mint, maxt]. Storage
// calls it for every change (storage.DB.OnChange).
func (c *resultsCache) Changed(mint, maxt int64) {
	if c == nil || mint > c.horizon.Load() {
		return
	}
	c.changes.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.entries {
		// Steps t with [t+lo, t+hi] overlapping [mint, maxt].
		if e.last+e.hi < mint || e.first+e.lo > maxt {
			continue
		}
		c.invalidations.Inc()
		firstHit := mint - e.hi // the earliest step affected, unaligned
		keep := e.first + floorDiv(firstHit-e.first-1, e.key.step)*e.key.step
		if firstHit <= e.first || keep < e.first {
			c.removeLocked(e)
			continue
		}
		c.bytes -= e.size
		e.series = e.slice(e.first, keep)
		e.last = keep
		e.size = e.estimate()
		c.bytes += e.size
	}
}

// store keeps the steps [first, last] of res for key, joined to what the
// entry already holds where they touch, unless data changed (c.changes moved
// from changes0) since the evaluation began.
func (c *resultsCache) store(key cacheKey, lo, hi, first, last int64, res []cachedSeries, annos annotations.Annotations, changes0 uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.changes.Load() != changes0 {
		return
	}
	cur := c.entries[key]
	series := sliceSeries(res, first, last)
	if cur != nil && cur.first < first && cur.last >= first-key.step {
		// Keep the older steps the entry has before this request.
		series = joinResults(nil, cur.slice(cur.first, first-key.step), toMatrix(series))
		first = cur.first
	}
	if n := (last-first)/key.step + 1; n > maxCachedSteps {
		first += (n - maxCachedSteps) * key.step
		series = sliceSeries(series, first, last)
	}
	if cur != nil {
		c.removeLocked(cur)
	}
	e := &cacheEntry{key: key, first: first, last: last, lo: lo, hi: hi, series: series, annos: cloneAnnos(annos)}
	e.size = e.estimate()
	if e.size > c.opts.MaxBytes/4 {
		return // one result would crowd out the others
	}
	e.elem = c.lru.PushFront(e)
	c.entries[key] = e
	c.bytes += e.size
	for c.bytes > c.opts.MaxBytes {
		old := c.lru.Back().Value.(*cacheEntry)
		c.removeLocked(old)
		c.evictions.Inc()
	}
}

func (c *resultsCache) removeLocked(e *cacheEntry) {
	c.lru.Remove(e.elem)
	delete(c.entries, e.key)
	c.bytes -= e.size
}

// slice returns the entry's points in [first, last]; the slices share its
// arrays, which are never written after the entry is built.
func (e *cacheEntry) slice(first, last int64) []cachedSeries {
	return sliceSeries(e.series, first, last)
}

func sliceSeries(in []cachedSeries, first, last int64) []cachedSeries {
	out := make([]cachedSeries, 0, len(in))
	for _, s := range in {
		f := s.floats[sort.Search(len(s.floats), func(i int) bool { return s.floats[i].T >= first }):]
		f = f[:sort.Search(len(f), func(i int) bool { return f[i].T > last })]
		h := s.hists[sort.Search(len(s.hists), func(i int) bool { return s.hists[i].T >= first }):]
		h = h[:sort.Search(len(h), func(i int) bool { return h[i].T > last })]
		if len(f) == 0 && len(h) == 0 {
			continue
		}
		out = append(out, cachedSeries{metric: s.metric, floats: f[:len(f):len(f)], hists: h[:len(h):len(h)]})
	}
	return out
}

// estimate is the entry's memory: points, histograms and labels.
func (e *cacheEntry) estimate() int64 {
	n := int64(200 + len(e.key.expr))
	for _, s := range e.series {
		n += 64 + int64(s.metric.ByteSize()) + 16*int64(len(s.floats)) + 16*int64(len(s.hists))
		for _, p := range s.hists {
			n += 128 + 8*int64(len(p.H.PositiveBuckets)+len(p.H.NegativeBuckets)+len(p.H.PositiveSpans)+len(p.H.NegativeSpans)+len(p.H.CustomValues))
		}
	}
	return n
}

// joinResults joins three time-ordered pieces of one query's result (each
// piece's steps before the next's) into one, series matched by labels,
// sorted by labels (joinMatrices). The points are copied, so that the result
// shares no array with a cache entry.
func joinResults(before upstream.Matrix, mid []cachedSeries, after upstream.Matrix) []cachedSeries {
	m := joinMatrices([]upstream.Matrix{before, toMatrix(mid), after})
	out := make([]cachedSeries, len(m))
	for i, s := range m {
		out[i] = cachedSeries{metric: s.Metric, floats: s.Floats, hists: s.Histograms}
	}
	return out
}

func toMatrix(in []cachedSeries) upstream.Matrix {
	out := make(upstream.Matrix, len(in))
	for i, s := range in {
		out[i] = upstream.Series{Metric: s.metric, Floats: s.floats, Histograms: s.hists}
	}
	return out
}

func cloneAnnos(a annotations.Annotations) annotations.Annotations {
	if len(a) == 0 {
		return nil
	}
	out := make(annotations.Annotations, len(a))
	for k, v := range a {
		out[k] = v
	}
	return out
}

// floorDiv is a/b rounded towards minus infinity (b > 0).
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

func mod(a, b int64) int64 { return a - floorDiv(a, b)*b }
