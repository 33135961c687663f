package promql

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/util/teststorage"
	"github.com/stretchr/testify/require"

	shalestorage "github.com/shaledb/shale/storage"
)

// testDB is a storage a test server queries and tests append to.
type testDB interface {
	storage.Storage
	storage.ExemplarQueryable
}

// testServer is an API over a storage, served on 127.0.0.1.
type testServer struct {
	api    *API
	db     testDB
	srv    *httptest.Server
	client *http.Client
	reg    *prometheus.Registry
}

// newTestServer builds an API over a fresh test storage; edit may change the
// options and components before the API is built.
func newTestServer(t testing.TB, edit func(*Options, *Components)) *testServer {
	t.Helper()
	return newTestServerOn(t, teststorage.New(t), edit)
}

// newTestServerOn is newTestServer over an existing storage.
func newTestServerOn(t testing.TB, db testDB, edit func(*Options, *Components)) *testServer {
	t.Helper()
	reg := prometheus.NewRegistry()
	opts := DefaultOptions()
	comps := Components{
		Queryable:         db,
		ExemplarQueryable: db,
		Registerer:        reg,
		Gatherer:          reg,
	}
	switch db := db.(type) {
	case *teststorage.TestStorage:
		comps.Cardinality = tsdbCardinality{db}
	case *shalestorage.DB:
		comps.Cardinality = HeadCardinality{DB: db}
		comps.Metadata = db
		comps.Deleter = db
		comps.Changes = db
	}
	if edit != nil {
		edit(&opts, &comps)
	}
	api, err := NewAPI(opts, comps)
	require.NoError(t, err)
	mux := http.NewServeMux()
	api.Register(mux)
	srv := httptest.NewServer(mux)
	client := &http.Client{}
	t.Cleanup(func() {
		client.CloseIdleConnections()
		srv.Close()
		require.NoError(t, api.Close())
	})
	return &testServer{api: api, db: db, srv: srv, client: client, reg: reg}
}

// do sends one request and returns status, headers and body.
func (s *testServer) do(t testing.TB, method, path string, form url.Values, header http.Header) (int, http.Header, string) {
	t.Helper()
	return doRequest(t, s.client, s.srv.URL, method, path, form, header)
}

func doRequest(t testing.TB, client *http.Client, base, method, path string, form url.Values, header http.Header) (int, http.Header, string) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, base+path, body)
	require.NoError(t, err)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, vs := range header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header, string(b)
}

// tsdbCardinality serves cardinality statistics from the upstream head, as
// Prometheus does.
type tsdbCardinality struct{ db *teststorage.TestStorage }

func (c tsdbCardinality) Cardinality(_ context.Context, limit int) (Cardinality, error) {
	s := c.db.Head().Stats(model.MetricNameLabel, limit)
	return Cardinality{
		NumSeries:                   s.NumSeries,
		NumLabelPairs:               s.IndexPostingStats.NumLabelPairs,
		MinTime:                     s.MinTime,
		MaxTime:                     s.MaxTime,
		SeriesCountByMetricName:     nameCounts(s.IndexPostingStats.CardinalityMetricsStats),
		LabelValueCountByLabelName:  nameCounts(s.IndexPostingStats.CardinalityLabelStats),
		MemoryInBytesByLabelName:    nameCounts(s.IndexPostingStats.LabelValueStats),
		SeriesCountByLabelValuePair: nameCounts(s.IndexPostingStats.LabelValuePairsStats),
	}, nil
}

// newShaleServer builds an API over Shale's storage engine (in-memory bucket).
func newShaleServer(t testing.TB, edit func(*Options, *Components)) *testServer {
	t.Helper()
	return newTestServerOn(t, newTestStorage(t).(*shalestorage.DB), edit)
}

// wrappedQueryable serves the queriers of a Queryable passed through wrap.
type wrappedQueryable struct {
	storage.Queryable
	wrap func(storage.Querier) storage.Querier
}

func (w wrappedQueryable) Querier(mint, maxt int64) (storage.Querier, error) {
	q, err := w.Queryable.Querier(mint, maxt)
	if err != nil {
		return nil, err
	}
	return w.wrap(q), nil
}

// selectFunc serves a Select in place of q, the querier that would have.
type selectFunc func(ctx context.Context, q storage.Querier, sortSeries bool, hints *storage.SelectHints, ms ...*labels.Matcher) storage.SeriesSet

// selectHook returns db with every Select of its queriers handed to hook.
func selectHook(db storage.Queryable, hook selectFunc) storage.Queryable {
	return wrappedQueryable{db, func(q storage.Querier) storage.Querier { return hookedQuerier{q, hook} }}
}

type hookedQuerier struct {
	storage.Querier
	hook selectFunc
}

func (q hookedQuerier) Select(ctx context.Context, sortSeries bool, hints *storage.SelectHints, ms ...*labels.Matcher) storage.SeriesSet {
	return q.hook(ctx, q.Querier, sortSeries, hints, ms...)
}

// emptyQueryable is a storage without data, for tests of answers that read none.
var emptyQueryable = storage.QueryableFunc(func(int64, int64) (storage.Querier, error) {
	return storage.NoopQuerier(), nil
})
