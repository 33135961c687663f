package promql

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/util/teststorage"
	"github.com/stretchr/testify/require"
)

// blockingQueryable reads db, except that a Select of the metric "block"
// waits until its context ends, and then reports the context's error.
type blockingQueryable struct {
	storage.Queryable
	started chan struct{} // a blocking Select began
	stopped chan error    // a blocking Select saw its context end
}

func newBlockingQueryable(db storage.Queryable) *blockingQueryable {
	q := &blockingQueryable{started: make(chan struct{}, 16), stopped: make(chan error, 16)}
	q.Queryable = selectHook(db, q.selectBlock)
	return q
}

func (q *blockingQueryable) selectBlock(ctx context.Context, in storage.Querier, sortSeries bool, hints *storage.SelectHints, ms ...*labels.Matcher) storage.SeriesSet {
	for _, m := range ms {
		if m.Name == model.MetricNameLabel && m.Matches("block") {
			q.started <- struct{}{}
			<-ctx.Done()
			q.stopped <- ctx.Err()
			return storage.ErrSeriesSet(ctx.Err())
		}
	}
	return in.Select(ctx, sortSeries, hints, ms...)
}

// await returns the next value of c, failing the test if none comes.
func await[T any](t *testing.T, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("gave up waiting: %s", what)
		var zero T
		return zero
	}
}

// send sends r with ctx and returns the status code and body.
func send(ctx context.Context, ts *testServer, r queryRequest) (int, string, error) {
	var body io.Reader
	if r.form != nil {
		body = strings.NewReader(r.form.Encode())
	}
	req, err := http.NewRequestWithContext(ctx, r.method, ts.srv.URL+r.path, body)
	if err != nil {
		return 0, "", err
	}
	if r.form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := ts.client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// TestClientDisconnectStopsQuery checks that a query stops reading the
// storage when its client goes away: the upstream API evaluates under the
// request's context, which the HTTP server cancels when the connection
// closes.
func TestClientDisconnectStopsQuery(t *testing.T) {
	t.Parallel()
	db := teststorage.New(t)
	appendSeries(t, &testServer{db: db}, time.Unix(fixtureAt, 0), "__name__", "up", "job", "api")
	bq := newBlockingQueryable(db)
	ts := newTestServerOn(t, db, func(_ *Options, c *Components) { c.Queryable = bq })

	for _, r := range queryRequests("block", instantParams, rangeParams) {
		t.Run(r.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() {
				_, _, err := send(ctx, ts, r)
				done <- err
			}()
			await(t, bq.started, "the query to read the storage")
			cancel()
			require.ErrorIs(t, await(t, bq.stopped, "the storage to see the cancellation"), context.Canceled)
			require.ErrorIs(t, await(t, done, "the client to give up"), context.Canceled)
			requireServes(t, ts)
		})
	}
}

// TestTimeoutStopsQuery checks that a query stops at its timeout, evaluating
// or waiting for a slot, and is answered 503 with errorType timeout.
func TestTimeoutStopsQuery(t *testing.T) {
	t.Parallel()
	db := teststorage.New(t)
	appendSeries(t, &testServer{db: db}, time.Unix(fixtureAt, 0), "__name__", "up", "job", "api")
	bq := newBlockingQueryable(db)
	ts := newTestServerOn(t, db, func(o *Options, c *Components) {
		c.Queryable = bq
		o.MaxConcurrentQueries = 1
	})
	with := func(a url.Values) url.Values {
		out := url.Values{"timeout": {"50ms"}}
		for k, v := range a {
			out[k] = v
		}
		return out
	}

	t.Run("evaluating", func(t *testing.T) {
		for _, r := range queryRequests("block", with(instantParams), with(rangeParams)) {
			code, body, err := send(context.Background(), ts, r)
			require.NoError(t, err)
			require.Equal(t, http.StatusServiceUnavailable, code, "%s: %s", r.name, body)
			require.Equal(t, "timeout", decodeAnswer(t, body).ErrorType, r.name)
			await(t, bq.started, "the query to read the storage")
			require.ErrorIs(t, await(t, bq.stopped, "the storage to see the deadline"), context.DeadlineExceeded)
			requireServes(t, ts)
		}
	})

	t.Run("waiting for a slot", func(t *testing.T) {
		// The only slot is taken by a query that blocks until its client leaves.
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan error, 1)
		go func() {
			_, _, err := send(ctx, ts, queryRequest{"hog", "GET", "/api/v1/query?query=block", nil})
			done <- err
		}()
		await(t, bq.started, "the first query to take the slot")
		for _, r := range queryRequests("up", with(instantParams), with(rangeParams)) {
			code, body, err := send(context.Background(), ts, r)
			require.NoError(t, err)
			require.Equal(t, http.StatusServiceUnavailable, code, "%s: %s", r.name, body)
			a := decodeAnswer(t, body)
			require.Equal(t, "timeout", a.ErrorType, r.name)
			require.Contains(t, a.Error, "query timed out in query queue", r.name)
		}
		cancel()
		require.ErrorIs(t, await(t, bq.stopped, "the first query to stop"), context.Canceled)
		await(t, done, "the first client to give up")
		requireServes(t, ts)
	})
}
