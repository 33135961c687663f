package promql

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	upstream "github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/util/teststorage"
	"github.com/stretchr/testify/require"
)

// closeSpy returns db calling onClose when the engine closes a querier, at
// the end of a query's evaluation, while the query holds all it was charged.
func closeSpy(db storage.Queryable, onClose func()) storage.Queryable {
	return wrappedQueryable{db, func(q storage.Querier) storage.Querier { return closeSpyQuerier{q, onClose} }}
}

type closeSpyQuerier struct {
	storage.Querier
	onClose func()
}

func (q closeSpyQuerier) Close() error {
	q.onClose()
	return q.Querier.Close()
}

// appendMetric writes n series of metric with ten samples each, 15 s apart
// from fixtureAt, and returns their labels.
func appendMetric(t *testing.T, db storage.Appendable, metric string, n int) []labels.Labels {
	t.Helper()
	app := db.Appender(context.Background())
	var out []labels.Labels
	for i := range n {
		ls := labels.FromStrings("__name__", metric, "instance", fmt.Sprintf("host-%03d:9100", i), "job", "node")
		for j := range 10 {
			_, err := app.Append(0, ls, (fixtureAt+15*int64(j))*1000, float64(j))
			require.NoError(t, err)
		}
		out = append(out, ls)
	}
	require.NoError(t, app.Commit())
	return out
}

// waitReleased waits until the queries in flight hold nothing: an answer
// reaches the client just before its query is closed.
func waitReleased(t *testing.T, b *memoryBudget) {
	t.Helper()
	for {
		b.mu.Lock()
		inUse, freed := b.inUse, b.freed
		b.mu.Unlock()
		if inUse == 0 {
			return
		}
		await(t, freed, "the queries to give their memory back")
	}
}

// TestMemoryModel shows what a query is charged: for each selected series
// its labels, seriesOverheadBytes and a point per step of its evaluator; for
// a range selector returned as is, every sample read.
func TestMemoryModel(t *testing.T) {
	t.Parallel()
	db := teststorage.New(t)
	series := appendMetric(t, db, "m", 50)
	var labelBytes int64
	for _, ls := range series {
		labelBytes += int64(ls.ByteSize())
	}
	n := int64(len(series))
	charged := make(chan int64, 1)
	var ts *testServer
	ts = newTestServerOn(t, db, func(_ *Options, c *Components) {
		c.Queryable = closeSpy(db, func() { charged <- ts.api.budget.used() })
	})
	perSeries := func(points int64) int64 { return labelBytes + n*(seriesOverheadBytes+pointBytes*points) }
	cases := []struct {
		name, path string
		form       url.Values
		want       int64
	}{
		{"instant: one point per series", "/api/v1/query",
			url.Values{"query": {"count(m)"}, "time": {fmt.Sprint(fixtureAt + 140)}}, perSeries(1)},
		{"range: one point per step per series", "/api/v1/query_range",
			url.Values{"query": {"m"}, "start": {fmt.Sprint(fixtureAt)}, "end": {fmt.Sprint(fixtureAt + 135)}, "step": {"15"}}, perSeries(135/15 + 1)},
		{"a function consumes its window: one point", "/api/v1/query",
			url.Values{"query": {"rate(m[1m])"}, "time": {fmt.Sprint(fixtureAt + 140)}}, perSeries(1)},
		{"subquery: a point per subquery step", "/api/v1/query",
			url.Values{"query": {"max_over_time(m[1m:15s])"}, "time": {fmt.Sprint(fixtureAt + 140)}}, perSeries(60/15 + 1)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, _, body := ts.do(t, "POST", c.path, c.form, nil)
			require.Equal(t, http.StatusOK, code, body)
			require.Equal(t, c.want, await(t, charged, "the query to end"))
			waitReleased(t, ts.api.budget)
		})
	}
	t.Run("a range selector returned as is: every sample", func(t *testing.T) {
		// m[1m] at fixtureAt+140 holds the samples at +90, +105, +120 and +135.
		const samples = 4
		code, _, body := ts.do(t, "POST", "/api/v1/query", url.Values{"query": {"m[1m]"}, "time": {fmt.Sprint(fixtureAt + 140)}}, nil)
		require.Equal(t, http.StatusOK, code, body)
		got := await(t, charged, "the query to end") - perSeries(1)
		// The sample an iterator seeks to is not charged, the others are.
		require.GreaterOrEqual(t, got, n*pointBytes*(samples-1))
		require.LessOrEqual(t, got, n*pointBytes*samples)
		waitReleased(t, ts.api.budget)
	})
}

// barrierQueryable holds the queries of the metric "heavy": each Select
// waits until proceed is closed, and the first series a query reads waits
// until resume is closed.
type barrierQueryable struct {
	storage.Queryable
	entered chan struct{} // a query is in Select
	proceed chan struct{} // closed: Selects return
	holding chan struct{} // a query reads its first series
	resume  chan struct{} // closed: reads go on
}

// newBarrierQueryable wraps db for up to n queries of "heavy" at once.
func newBarrierQueryable(db storage.Queryable, n int) *barrierQueryable {
	b := &barrierQueryable{entered: make(chan struct{}, n), proceed: make(chan struct{}),
		holding: make(chan struct{}, n), resume: make(chan struct{})}
	b.Queryable = selectHook(db, b.selectHeavy)
	return b
}

func (b *barrierQueryable) selectHeavy(ctx context.Context, q storage.Querier, sortSeries bool, hints *storage.SelectHints, ms ...*labels.Matcher) storage.SeriesSet {
	set := q.Select(ctx, sortSeries, hints, ms...)
	for _, m := range ms {
		if m.Name == model.MetricNameLabel && m.Matches("heavy") {
			b.entered <- struct{}{}
			<-b.proceed
			return &barrierSet{SeriesSet: set, hold: sync.OnceFunc(func() {
				b.holding <- struct{}{}
				<-b.resume
			})}
		}
	}
	return set
}

type barrierSet struct {
	storage.SeriesSet
	hold func()
}

func (s *barrierSet) At() storage.Series { return barrierSeries{s.SeriesSet.At(), s.hold} }

type barrierSeries struct {
	storage.Series
	hold func()
}

func (s barrierSeries) Iterator(reuse chunkenc.Iterator) chunkenc.Iterator {
	s.hold()
	return s.Series.Iterator(reuse)
}

// TestMemoryBudgetConcurrent runs heavy queries at once, through the HTTP
// API, whose combined need is beyond a small budget: as many as fit hold
// their memory together, the others fail with 503, and the memory accounted
// never passes the budget.
func TestMemoryBudgetConcurrent(t *testing.T) {
	t.Parallel()
	db := teststorage.New(t)
	appendSeries(t, &testServer{db: db}, time.Unix(fixtureAt, 0), "__name__", "up", "job", "api")
	appendMetric(t, db, "heavy", 100)
	heavy := url.Values{"query": {"heavy"}, "start": {fmt.Sprint(fixtureAt)}, "end": {fmt.Sprint(fixtureAt + 135)}, "step": {"15"}}

	// What one query needs, alone under a large budget.
	charged := make(chan int64, 1)
	var alone *testServer
	alone = newTestServerOn(t, db, func(_ *Options, c *Components) {
		c.Queryable = closeSpy(db, func() { charged <- alone.api.budget.used() })
	})
	code, _, body := alone.do(t, "POST", "/api/v1/query_range", heavy, nil)
	require.Equal(t, http.StatusOK, code, body)
	need := await(t, charged, "the query to end")

	const queries = 6
	limit := need * 5 / 2 // room for two
	bq := newBarrierQueryable(db, queries)
	ts := newTestServerOn(t, db, func(o *Options, c *Components) {
		o.MaxMemory = limit
		o.MaxConcurrentQueries = queries
		c.Queryable = bq
	})
	b := ts.api.budget
	// A failing test must not leave queries blocked: the server's Close
	// waits for them.
	proceed, resume := sync.OnceFunc(func() { close(bq.proceed) }), sync.OnceFunc(func() { close(bq.resume) })
	defer proceed()
	defer resume()

	type answer struct {
		code int
		body string
	}
	answers := make(chan answer, queries)
	for range queries {
		go func() {
			code, body, err := send(context.Background(), ts, queryRequest{"heavy", "POST", "/api/v1/query_range", heavy})
			if err != nil {
				body = err.Error()
			}
			answers <- answer{code, body}
		}()
	}
	for range queries {
		await(t, bq.entered, "every query to be selecting")
	}
	proceed()

	// Each query either holds its memory, reading, or has failed.
	var holding, refused int
	for holding+refused < queries {
		select {
		case <-bq.holding:
			holding++
		case a := <-answers:
			require.Equal(t, http.StatusServiceUnavailable, a.code, a.body)
			got := decodeAnswer(t, a.body)
			require.Equal(t, "execution", got.ErrorType)
			require.Contains(t, got.Error, "query memory budget exhausted")
			refused++
		case <-time.After(30 * time.Second):
			t.Fatalf("%d queries holding, %d refused, of %d", holding, refused, queries)
		}
	}
	require.Greater(t, int64(queries)*need, limit, "the queries together must need more than the budget")
	require.Equal(t, int(limit/need), holding)
	require.Equal(t, int64(holding)*need, b.used())
	b.mu.Lock()
	peak := b.peak
	b.mu.Unlock()
	require.LessOrEqual(t, peak, limit)
	require.Equal(t, float64(refused), testutil.ToFloat64(ts.api.refused.WithLabelValues(refusedMemory)))

	resume()
	for range holding {
		a := await(t, answers, "the holding queries to answer")
		require.Equal(t, http.StatusOK, a.code, a.body)
		require.Contains(t, a.body, `"resultType":"matrix"`)
	}
	waitReleased(t, b)
	requireServes(t, ts)
	require.Equal(t, 0.0, testutil.ToFloat64(b.inUseGauge))
	require.Equal(t, float64(limit), testutil.ToFloat64(b.limitGauge))
}

// TestMemoryBudgetAdmission checks that a query waits to start while the
// budget has less than its share free, starts once memory is given back, and
// gives up, freeing its slot, when its context ends.
func TestMemoryBudgetAdmission(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, err := newMemoryBudget(100, 4, nil, nil) // a query starts with 25 bytes free
		require.NoError(t, err)
		g, err := newQueryGate(4, nil)
		require.NoError(t, err)

		hog := b.newAccount()
		require.NoError(t, hog.charge(80))
		admitted := make(chan error, 1)
		go func() {
			_, err := g.Insert(withAccount(context.Background(), b.newAccount()), "q")
			admitted <- err
		}()
		synctest.Wait()
		select {
		case err := <-admitted:
			t.Fatalf("admitted with 20 of 100 bytes free: %v", err)
		default:
		}
		require.Equal(t, 1.0, testutil.ToFloat64(g.waiting))
		hog.release()
		require.NoError(t, <-admitted)
		require.Equal(t, 0.0, testutil.ToFloat64(g.waiting))
		g.Delete(0)

		// A query without an account (one being parsed) does not wait.
		hog = b.newAccount()
		require.NoError(t, hog.charge(80))
		_, err = g.Insert(context.Background(), "parse")
		require.NoError(t, err)
		g.Delete(0)

		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err = g.Insert(withAccount(ctx, b.newAccount()), "q")
		require.ErrorIs(t, err, context.DeadlineExceeded)
		var timeout upstream.ErrQueryTimeout
		require.ErrorAs(t, err, &timeout)
		require.Empty(t, g.slots, "the slot of a query that gave up is free")
		hog.release()
	})
}

func TestQueryAccount(t *testing.T) {
	b, err := newMemoryBudget(100, 1, nil, nil)
	require.NoError(t, err)
	a, c := b.newAccount(), b.newAccount()
	require.NoError(t, a.charge(60))
	require.NoError(t, c.charge(40))
	require.ErrorIs(t, c.charge(1), ErrMemoryBudget)
	require.ErrorIs(t, c.failed(), ErrMemoryBudget)
	require.Equal(t, int64(100), b.used())
	a.release()
	a.release()
	require.Equal(t, int64(40), b.used())
	require.ErrorIs(t, c.charge(1), ErrMemoryBudget, "a failed query stays failed")
	require.ErrorIs(t, a.charge(1), ErrMemoryBudget, "a closed query is charged nothing more")
	c.release()
	require.Equal(t, int64(0), b.used())
	require.Equal(t, int64(100), b.peak)

	// A charge the budget could never hold, even alone, says so.
	d := b.newAccount()
	require.NoError(t, d.charge(30))
	err = d.charge(71)
	require.ErrorIs(t, err, ErrQueryTooLarge)
	require.NotErrorIs(t, err, ErrMemoryBudget, "not a refusal that waiting would cure")
	require.ErrorIs(t, d.failed(), ErrQueryTooLarge)
	d.release()
	require.Equal(t, int64(0), b.used())

	none, err := newMemoryBudget(0, 1, nil, nil)
	require.NoError(t, err)
	require.Nil(t, none)
	require.Nil(t, none.newAccount())
	var acct *queryAccount
	require.NoError(t, acct.charge(1<<40))
	acct.release()
}
