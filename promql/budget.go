package promql

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"
	upstream "github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/util/annotations"
)

// The memory budget bounds what all queries in flight hold together
// (Options.MaxMemory). The engine's own limit, MaxSamples, bounds the points
// one query holds at once; nothing upstream bounds the sum over concurrent
// queries, and at 1M series 40 heavy queries grew the process to 5.9 GB.
//
// What a query holds, and what the budget charges for it (the model):
//
//   - Every series a selector returns, for the whole query: its labels, the
//     storage's per-series structures and the engine's (the storage.Series in
//     the selector, the Series of the output matrix). Charged as
//     labels.ByteSize() + seriesOverheadBytes, when Select returns.
//   - The points the engine keeps for it: a selector evaluated over a range
//     (a range query, or inside a subquery) yields one point per step for
//     each series, kept in a matrix until its parent has consumed it; this is
//     what the engine's currentSamples counts and what dominates a range
//     query over many series. Charged as pointBytes per step per series, the
//     steps taken from the SelectHints the engine passes to Select.
//   - A range selector read at one instant keeps only a window per series
//     while a function such as rate consumes it, one series at a time; but a
//     range selector returned as the answer (x[5m] in an instant query) keeps
//     every sample. Charged as pointBytes per sample read, in that case only.
//
// It is charged when loaded: the selector's series and points at once, right
// after Select, before the next selector is read; samples as iterators read
// them, a batch at a time.
// Charges fail, rather than wait, once the budget is used up: a query that
// waited while holding memory could wait for one that waits for it. A query
// whose charge fails stops with ErrMemoryBudget (HTTP 503), or with
// ErrQueryTooLarge (HTTP 422) when it alone would need more than the whole
// budget, and gives all it holds back; so does every query when closed,
// after its answer is written.
//
// Admission: a query starts evaluating only while at least
// MaxMemory/MaxConcurrentQueries bytes are free, and otherwise waits in the
// queue of the concurrency gate, like a query beyond the concurrency limit,
// until others give memory back or its timeout passes. Nothing estimates a
// query's need before it runs: the number of series a selector matches is
// only known once it is read.
//
// Not charged, and so to be left as headroom beside the budget: the blocks
// the storage reads for the series (Shale's Select fetches all of them
// before it returns; ~1.3-2 bytes a sample, or 16 bytes a sample in the
// range where it keeps a short range's samples decoded instead of a long
// block, storage's rangeCutter), matrices the engine derives from
// a selector's (an expression holds at most a few at once, each no larger
// than MaxSamples), the parsed query and the encoded answer.
//
// TestMemoryModel shows the charges on a fixture; TestMemoryBudget* show the
// sum never passes the budget.

const (
	// pointBytes is the size of a float point the engine keeps, FPoint.
	// Histogram points are larger; they are charged as floats.
	pointBytes = 16
	// seriesOverheadBytes is the storage's and the engine's memory per
	// selected series apart from its labels and points. Measured on Shale's
	// storage (BenchmarkQueryMemory), a selected series held 300-550 bytes
	// at the end of an instant query, ~60 of them labels: more when it is
	// in the answer, less when read from flushed partitions.
	seriesOverheadBytes = 384
	// chargeBatch is how many bytes of samples an iterator reads before it
	// charges them, so that a sample costs no lock.
	chargeBatch = 64 << 10
)

// ErrMemoryBudget is returned for a query that would take the memory of the
// queries in flight beyond Options.MaxMemory. The same query may succeed when
// fewer run at once; the HTTP API answers it with 503.
var ErrMemoryBudget = errors.New("query memory budget exhausted")

// ErrQueryTooLarge is returned for a query that alone would hold more than
// Options.MaxMemory: unlike ErrMemoryBudget it can never succeed, and the
// HTTP API answers it with 422, as Prometheus answers a query that would
// load too many samples.
var ErrQueryTooLarge = errors.New("query too large for the query memory budget")

// memoryBudget is the memory the queries in flight may hold together.
// Its methods are safe for concurrent use; a nil budget is no budget.
type memoryBudget struct {
	limit     int64
	admission int64 // the free bytes a query needs to start
	refused   *prometheus.CounterVec

	mu    sync.Mutex
	inUse int64
	peak  int64         // the most inUse has been
	freed chan struct{} // closed, and replaced, whenever memory is given back

	limitGauge prometheus.Gauge
	inUseGauge prometheus.Gauge
}

func newMemoryBudget(limit int64, maxConcurrent int, refused *prometheus.CounterVec, reg prometheus.Registerer) (*memoryBudget, error) {
	if limit <= 0 {
		return nil, nil
	}
	b := &memoryBudget{
		limit:     limit,
		admission: limit / int64(max(maxConcurrent, 1)),
		refused:   refused,
		freed:     make(chan struct{}),
		limitGauge: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "shale_promql_memory_budget_bytes",
			Help: "Memory the queries in flight may hold together (--query.max-memory).",
		}),
		inUseGauge: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "shale_promql_memory_budget_in_use_bytes",
			Help: "Memory the queries in flight hold, as the query memory budget accounts it.",
		}),
	}
	b.limitGauge.Set(float64(limit))
	if reg != nil {
		for _, c := range []prometheus.Collector{b.limitGauge, b.inUseGauge} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("register query memory budget metrics: %w", err)
			}
		}
	}
	return b, nil
}

// used returns the bytes in use.
func (b *memoryBudget) used() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.inUse
}

// hasRoom reports whether a query may start now.
func (b *memoryBudget) hasRoom() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.limit-b.inUse >= b.admission
}

// admit waits until the budget has room for a query to start, or ctx ends.
func (b *memoryBudget) admit(ctx context.Context) error {
	for {
		b.mu.Lock()
		if b.limit-b.inUse >= b.admission {
			b.mu.Unlock()
			return nil
		}
		freed := b.freed
		b.mu.Unlock()
		select {
		case <-freed:
		case <-ctx.Done():
			return queueError(ctx.Err(), "waiting for query memory")
		}
	}
}

// take charges n bytes if they fit.
func (b *memoryBudget) take(n int64) (ok bool, inUse int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n > b.limit-b.inUse {
		return false, b.inUse
	}
	b.inUse += n
	b.peak = max(b.peak, b.inUse)
	b.inUseGauge.Set(float64(b.inUse))
	return true, b.inUse
}

func (b *memoryBudget) give(n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.inUse -= n
	b.inUseGauge.Set(float64(b.inUse))
	close(b.freed)
	b.freed = make(chan struct{})
}

func (b *memoryBudget) newAccount() *queryAccount {
	if b == nil {
		return nil
	}
	return &queryAccount{b: b}
}

// queryAccount is what one query holds of the budget. A nil account charges
// nothing. Safe for concurrent use.
type queryAccount struct {
	b *memoryBudget

	mu       sync.Mutex
	held     int64
	err      error // the first failed charge; every later one fails too
	released bool
}

// charge takes n more bytes from the budget for the query, or fails with
// ErrMemoryBudget, after which the query should stop.
func (a *queryAccount) charge(n int64) error {
	if a == nil || n <= 0 {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.err != nil {
		return a.err
	}
	if a.released {
		a.err = fmt.Errorf("%w: the query was closed", ErrMemoryBudget)
		return a.err
	}
	if a.held+n > a.b.limit {
		a.err = fmt.Errorf("%w: the query alone needs at least %d bytes, and --query.max-memory allows %d bytes to all queries together; select fewer series or a shorter range, or use a larger step",
			ErrQueryTooLarge, a.held+n, a.b.limit)
		countRefusal(a.b.refused, refusedMemory)
		return a.err
	}
	ok, inUse := a.b.take(n)
	if !ok {
		a.err = fmt.Errorf("%w: the query needs %d bytes more than the %d it holds, and the queries in flight hold %d of the %d bytes allowed (--query.max-memory); retry later, or select fewer series or a shorter range",
			ErrMemoryBudget, n, a.held, inUse, a.b.limit)
		countRefusal(a.b.refused, refusedMemory)
		return a.err
	}
	a.held += n
	return nil
}

// failed returns the error of a failed charge, if any.
func (a *queryAccount) failed() error {
	if a == nil {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.err
}

// release gives back all the query holds; later charges fail.
func (a *queryAccount) release() {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.released {
		return
	}
	a.released = true
	a.b.give(a.held)
	a.held = 0
}

type accountKey struct{}

// withAccount carries a query's account to the concurrency gate, which
// admits the query only when the budget has room.
func withAccount(ctx context.Context, a *queryAccount) context.Context {
	return context.WithValue(ctx, accountKey{}, a)
}

func accountFrom(ctx context.Context) *queryAccount {
	a, _ := ctx.Value(accountKey{}).(*queryAccount)
	return a
}

// queueError says why a query stopped waiting to start, as the engine says
// why one stopped running, so that the API answers a timeout with 503.
func queueError(err error, where string) error {
	switch {
	case errors.Is(err, context.Canceled):
		return fmt.Errorf("%w: %w", upstream.ErrQueryCanceled(where), err)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%w: %w", upstream.ErrQueryTimeout(where), err)
	}
	return err
}

// queryable returns q charging the account for what it loads.
func (a *queryAccount) queryable(q storage.Queryable) storage.Queryable {
	if a == nil {
		return q
	}
	return accountedQueryable{q: q, acct: a}
}

type accountedQueryable struct {
	q    storage.Queryable
	acct *queryAccount
}

func (q accountedQueryable) Querier(mint, maxt int64) (storage.Querier, error) {
	inner, err := q.q.Querier(mint, maxt)
	if err != nil {
		return nil, err
	}
	return accountedQuerier{Querier: inner, acct: q.acct}, nil
}

type accountedQuerier struct {
	storage.Querier
	acct *queryAccount
}

// Select reads the whole set, as the engine would, charging its series and
// the points the engine will keep for them; a set over the budget is an error.
func (q accountedQuerier) Select(ctx context.Context, sortSeries bool, hints *storage.SelectHints, ms ...*labels.Matcher) storage.SeriesSet {
	if err := q.acct.failed(); err != nil {
		// An earlier selector of the query failed: read nothing more.
		return storage.ErrSeriesSet(err)
	}
	set := q.Querier.Select(ctx, sortSeries, hints, ms...)
	perSeries := seriesOverheadBytes + pointBytes*pointsPerSeries(hints)
	keepsWindow := hints != nil && hints.Step == 0 && hints.Range > 0 && hints.Func == ""
	var (
		series []storage.Series
		bytes  int64
	)
	if l, ok := set.(interface{ Len() int }); ok {
		// Shale's storage knows how many series it selected: appending
		// 700k of them one by one allocated five times the slice.
		series = make([]storage.Series, 0, l.Len())
	}
	for set.Next() {
		s := set.At()
		bytes += int64(s.Labels().ByteSize()) + perSeries
		if keepsWindow {
			s = &accountedSeries{Series: s, acct: q.acct}
		}
		series = append(series, s)
	}
	if err := set.Err(); err != nil {
		return storage.ErrSeriesSet(err)
	}
	if err := q.acct.charge(bytes); err != nil {
		return storage.ErrSeriesSet(err)
	}
	return &seriesSlice{series: series, i: -1, warnings: set.Warnings()}
}

// pointsPerSeries is how many points the engine keeps for each series of a
// selector: one per step of the evaluator it is in (the query's, or a
// subquery's), from the range the engine asked for less the lookback or the
// range before the first step. hints.Step is 0 in an instant evaluation.
func pointsPerSeries(hints *storage.SelectHints) int64 {
	if hints == nil || hints.Step <= 0 {
		return 1
	}
	// The engine asks for (start-range, end] or (start-lookback, end].
	span := hints.End - hints.Start + 1 - hints.Range
	if hints.Range == 0 {
		span -= defaultLookbackMs
	}
	return max(span, 0)/hints.Step + 1
}

// defaultLookbackMs is Prometheus' lookback delta: a query with a longer one
// has its first steps' points under-charged, not its later ones.
const defaultLookbackMs = 5 * 60 * 1000

// seriesSlice is a read series set.
type seriesSlice struct {
	series   []storage.Series
	i        int
	warnings annotations.Annotations
}

func (s *seriesSlice) Next() bool {
	s.i++
	return s.i < len(s.series)
}

func (s *seriesSlice) At() storage.Series                { return s.series[s.i] }
func (s *seriesSlice) Err() error                        { return nil }
func (s *seriesSlice) Warnings() annotations.Annotations { return s.warnings }

// accountedSeries charges for every sample read: the engine keeps them all.
type accountedSeries struct {
	storage.Series
	acct *queryAccount
}

func (s *accountedSeries) Iterator(reuse chunkenc.Iterator) chunkenc.Iterator {
	it, ok := reuse.(*accountedIterator)
	if !ok {
		it = &accountedIterator{}
	} else {
		it.flush()
		reuse = it.Iterator
	}
	it.Iterator, it.acct, it.err = s.Series.Iterator(reuse), s.acct, nil
	return it
}

type accountedIterator struct {
	chunkenc.Iterator
	acct    *queryAccount
	pending int64
	err     error
}

func (it *accountedIterator) Next() chunkenc.ValueType {
	if it.err != nil {
		return chunkenc.ValNone
	}
	vt := it.Iterator.Next()
	if vt == chunkenc.ValNone {
		it.flush()
		return vt
	}
	it.pending += pointBytes
	if it.pending >= chargeBatch && !it.flush() {
		return chunkenc.ValNone
	}
	return vt
}

// flush charges what was read since the last charge.
func (it *accountedIterator) flush() bool {
	if it.err == nil && it.pending > 0 {
		it.err = it.acct.charge(it.pending)
		it.pending = 0
	}
	return it.err == nil
}

func (it *accountedIterator) Err() error {
	if it.err != nil {
		return it.err
	}
	return it.Iterator.Err()
}
