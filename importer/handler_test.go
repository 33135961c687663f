package importer_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"
	promstorage "github.com/prometheus/prometheus/storage"

	"github.com/shaledb/shale/importer"
	"github.com/shaledb/shale/internal/seriestest"
	"github.com/shaledb/shale/storage"
)

func post(t *testing.T, h http.Handler, body []byte, hdr map[string]string) (int, string) {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, importer.ImportPath, bytes.NewReader(body))
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	b, _ := io.ReadAll(rec.Body)
	return rec.Code, string(b)
}

func TestHandler(t *testing.T) {
	opts := testStorageOptions()
	opts.Retention = 3 * time.Hour
	s := openStore(t, t.TempDir(), opts)
	defer s.stop()
	h, err := importer.NewHandler(appendable{s.db}, importer.HandlerOptions{}, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	now := int64(1_700_000_000_000)
	line := func(name string, vals string, ts ...int64) string {
		var tss []string
		for _, t := range ts {
			tss = append(tss, itoa(t))
		}
		return `{"metric":{"__name__":"` + name + `","job":"j"},"values":[` + vals + `],"timestamps":[` + strings.Join(tss, ",") + "]}\n"
	}
	good := line("a", `1,2,"Infinity"`, now, now+1000, now+2000) + "\n" + line("b", "3", now)

	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(line("c", "4,5", now, now+1000)))
	zw.Close()

	for _, tc := range []struct {
		name   string
		body   []byte
		hdr    map[string]string
		code   int
		msg    string
		stored map[string]int // series -> samples afterwards
	}{
		{name: "good", body: []byte(good), code: 204, stored: map[string]int{`{__name__="a", job="j"}`: 3, `{__name__="b", job="j"}`: 1}},
		{name: "gzip", body: gz.Bytes(), hdr: map[string]string{"Content-Encoding": "gzip"}, code: 204, stored: map[string]int{`{__name__="c", job="j"}`: 2}},
		{name: "malformed line 2", body: []byte(line("d", "1", now) + "{\"metric\":{\"__name__\":\"e\"},\"values\":[1,2],\"timestamps\":[1]}\n" + line("f", "1", now)),
			code: 400, msg: "line 2: ", stored: map[string]int{`{__name__="d", job="j"}`: 1, `{__name__="e"}`: 0, `{__name__="f", job="j"}`: 0}},
		{name: "not json", body: []byte("hello\n"), code: 400, msg: "line 1: invalid JSON"},
		{name: "unknown field", body: []byte(`{"metric":{"a":"b"},"values":[1],"timestamps":[1],"x":1}`), code: 400, msg: "line 1: "},
		{name: "null value", body: []byte(`{"metric":{"a":"b"},"values":[null],"timestamps":[1]}`), code: 400, msg: "null"},
		{name: "bad gzip", body: []byte("not gzip"), hdr: map[string]string{"Content-Encoding": "gzip"}, code: 400, msg: "gzip"},
		{name: "unknown encoding", body: []byte(good), hdr: map[string]string{"Content-Encoding": "br"}, code: 415},
		{name: "too far in the future", body: []byte(line("h", "1", now*1_000_000)), code: 400, msg: "1 samples refused (1 too far in the future)", stored: map[string]int{`{__name__="h", job="j"}`: 0}},
		{name: "older than retention", body: []byte(line("g", "1,2", now-4*3600_000, now)), code: 400, msg: "1 samples refused (1 older than the retention)", stored: map[string]int{`{__name__="g", job="j"}`: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, msg := post(t, h, tc.body, tc.hdr)
			if code != tc.code || !strings.Contains(msg, tc.msg) {
				t.Fatalf("got %d %q, want %d with %q", code, msg, tc.code, tc.msg)
			}
			if len(tc.stored) == 0 {
				return
			}
			q, err := s.db.Querier(math.MinInt64, math.MaxInt64)
			if err != nil {
				t.Fatal(err)
			}
			defer q.Close()
			got := seriestest.ReadAll(t, q)
			for k, n := range tc.stored {
				if len(got[k]) != n {
					t.Errorf("%s: %d samples stored, want %d", k, len(got[k]), n)
				}
			}
		})
	}

	req := httptest.NewRequest(http.MethodGet, importer.ImportPath, nil)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != 405 || rec.Header().Get("Allow") != "POST" {
		t.Errorf("GET: %d, Allow %q", rec.Code, rec.Header().Get("Allow"))
	}
}

// TestHandlerClosedStorage: a storage that cannot take samples is a 5xx,
// never a 204.
func TestHandlerClosedStorage(t *testing.T) {
	s := openStore(t, t.TempDir(), testStorageOptions())
	s.stop()
	h, err := importer.NewHandler(appendable{s.db}, importer.HandlerOptions{}, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	code, msg := post(t, h, []byte(`{"metric":{"a":"b"},"values":[1],"timestamps":[1]}`), nil)
	if code/100 != 5 || !strings.Contains(msg, storage.ErrClosed.Error()) {
		t.Fatalf("got %d %q", code, msg)
	}
}

// cutBody returns data, then fails as a body that stopped arriving does,
// cancelling the request as the server does on a read error.
type cutBody struct {
	r      io.Reader
	cancel context.CancelFunc
}

func (b *cutBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err == io.EOF {
		b.cancel()
		return n, os.ErrDeadlineExceeded
	}
	return n, err
}

// TestHandlerBodyCut: a body that stops arriving (--web.read-timeout) gets
// 400 naming the read error, and the lines before it are stored.
func TestHandlerBodyCut(t *testing.T) {
	s := openStore(t, t.TempDir(), testStorageOptions())
	defer s.stop()
	h, err := importer.NewHandler(appendable{s.db}, importer.HandlerOptions{}, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	body := `{"metric":{"__name__":"cut"},"values":[1,2],"timestamps":[1000,2000]}` + "\n"
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, importer.ImportPath, &cutBody{r: strings.NewReader(body), cancel: cancel})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "i/o timeout") {
		t.Fatalf("got %d %q, want 400 naming the timeout", rec.Code, rec.Body.String())
	}
	q, err := s.db.Querier(math.MinInt64, math.MaxInt64)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if got := seriestest.ReadAll(t, q)[`{__name__="cut"}`]; len(got) != 2 {
		t.Fatalf("stored %d samples of the line before the cut, want 2", len(got))
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// TestHandlerLabelCheck: a series the label check refuses is counted by
// the check's reason, named in the answer and not stored; the rest is.
func TestHandlerLabelCheck(t *testing.T) {
	s := openStore(t, t.TempDir(), testStorageOptions())
	defer s.stop()
	check := func(l labels.Labels) (string, error) {
		if l.Has("bad") {
			return "bad_label", errors.New("has a bad label")
		}
		return "", nil
	}
	h, err := importer.NewHandler(appendable{s.db}, importer.HandlerOptions{Check: check}, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixMilli()
	body := fmt.Sprintf(`{"metric":{"__name__":"a","bad":"1"},"values":[1,2],"timestamps":[%d,%d]}
{"metric":{"__name__":"b"},"values":[3],"timestamps":[%d]}
`, now, now+1, now)
	code, msg := post(t, h, []byte(body), nil)
	if want := `2 samples refused (2 bad_label); the other 1 are stored; the first: series {__name__="a", bad="1"}: has a bad label`; code != 400 || !strings.Contains(msg, want) {
		t.Fatalf("got %d %q, want 400 with %q", code, msg, want)
	}
	q, err := s.db.Querier(math.MinInt64, math.MaxInt64)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	got := seriestest.ReadAll(t, q)
	if len(got) != 1 || len(got[`{__name__="b"}`]) != 1 {
		t.Errorf("stored %v", got)
	}
}

// commitCounter records the samples of each committed transaction.
type commitCounter struct {
	importer.Appendable
	mu      sync.Mutex
	commits []int
}

func (c *commitCounter) Appender(ctx context.Context) importer.Appender {
	return &countingAppender{Appender: c.Appendable.Appender(ctx), c: c}
}

type countingAppender struct {
	importer.Appender
	c *commitCounter
	n int
}

func (a *countingAppender) Append(ref promstorage.SeriesRef, l labels.Labels, st, t int64, v float64) (promstorage.SeriesRef, error) {
	a.n++
	return a.Appender.Append(ref, l, st, t, v)
}

func (a *countingAppender) Commit() error {
	a.c.mu.Lock()
	a.c.commits = append(a.c.commits, a.n)
	a.c.mu.Unlock()
	return a.Appender.Commit()
}

// TestHandlerLongLine: a line of one series' whole history (here 40,000
// samples) is committed in transactions of at most 16,384 samples, so that
// what a commit holds (and the WAL object it makes) stays bounded; every
// sample is stored.
func TestHandlerLongLine(t *testing.T) {
	s := openStore(t, t.TempDir(), testStorageOptions())
	defer s.stop()
	cc := &commitCounter{Appendable: appendable{s.db}}
	h, err := importer.NewHandler(cc, importer.HandlerOptions{}, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	const n = 40_000
	var vals, ts []string
	for i := range n {
		vals = append(vals, strconv.Itoa(i))
		ts = append(ts, itoa(1_700_000_000_000+int64(i)*1000))
	}
	body := `{"metric":{"__name__":"long"},"values":[` + strings.Join(vals, ",") + `],"timestamps":[` + strings.Join(ts, ",") + "]}\n" +
		`{"metric":{"__name__":"short"},"values":[1],"timestamps":[1700000000000]}` + "\n"
	if code, msg := post(t, h, []byte(body), nil); code != http.StatusNoContent {
		t.Fatalf("got %d %q", code, msg)
	}
	if want := []int{16384, 16384, 7232, 1}; !slices.Equal(cc.commits, want) {
		t.Errorf("commits of %v samples, want %v", cc.commits, want)
	}
	q, err := s.db.Querier(math.MinInt64, math.MaxInt64)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	got := seriestest.ReadAll(t, q)
	if len(got[`{__name__="long"}`]) != n || len(got[`{__name__="short"}`]) != 1 {
		t.Fatalf("stored %d and %d samples, want %d and 1", len(got[`{__name__="long"}`]), len(got[`{__name__="short"}`]), n)
	}
}

// TestHandlerTurns: no more imports run at once than MaxConcurrent; one
// beyond waits for a turn and runs when a running one ends, or gets 503
// with Retry-After (nothing read, nothing stored) when its wait runs out or
// its sender goes away.
func TestHandlerTurns(t *testing.T) {
	s := openStore(t, t.TempDir(), testStorageOptions())
	defer s.stop()
	line := func(name string) string {
		return `{"metric":{"__name__":"` + name + `"},"values":[1],"timestamps":[1700000000000]}` + "\n"
	}
	serve := func(h http.Handler, ctx context.Context, body io.Reader) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequestWithContext(ctx, http.MethodPost, importer.ImportPath, body))
		return rec
	}
	// hold starts an import that takes h's only turn and keeps it until
	// the returned func ends its body; its first bytes are read only once
	// it runs.
	hold := func(h http.Handler, name string) (end func() *httptest.ResponseRecorder) {
		pr, pw := io.Pipe()
		done := make(chan *httptest.ResponseRecorder, 1)
		go func() { done <- serve(h, context.Background(), pr) }()
		if _, err := io.WriteString(pw, `{"metric":{"__name__":"`+name+`"},`); err != nil {
			t.Fatal(err)
		}
		return func() *httptest.ResponseRecorder {
			if _, err := io.WriteString(pw, `"values":[1],"timestamps":[1700000000000]}`+"\n"); err != nil {
				t.Fatal(err)
			}
			pw.Close()
			return <-done
		}
	}
	ctx := context.Background()

	short, err := importer.NewHandler(appendable{s.db}, importer.HandlerOptions{MaxConcurrent: 1, QueueWait: time.Nanosecond},
		slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	end := hold(short, "first")
	rec := serve(short, ctx, strings.NewReader(line("late")))
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" || !strings.Contains(rec.Body.String(), "too many imports at once") {
		t.Fatalf("import beyond the limit: %d %q (Retry-After %q)", rec.Code, rec.Body.String(), rec.Header().Get("Retry-After"))
	}
	if rec := end(); rec.Code != http.StatusNoContent {
		t.Fatalf("first import: %d %q", rec.Code, rec.Body.String())
	}

	reg := prometheus.NewRegistry()
	long, err := importer.NewHandler(appendable{s.db}, importer.HandlerOptions{MaxConcurrent: 1, QueueWait: time.Hour},
		slog.New(slog.DiscardHandler), reg)
	if err != nil {
		t.Fatal(err)
	}
	end = hold(long, "second")
	gone, cancel := context.WithCancel(ctx)
	cancel()
	rec = serve(long, gone, strings.NewReader(line("gone")))
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "context canceled") {
		t.Fatalf("import whose sender is gone: %d %q", rec.Code, rec.Body.String())
	}
	waiter := make(chan *httptest.ResponseRecorder, 1)
	go func() { waiter <- serve(long, ctx, strings.NewReader(line("waited"))) }()
	for gaugeValue(t, reg, "shale_import_waiting_requests") != 1 {
		runtime.Gosched()
	}
	if got := gaugeValue(t, reg, "shale_import_running_requests"); got != 1 {
		t.Errorf("shale_import_running_requests %v while one runs, want 1", got)
	}
	if rec := end(); rec.Code != http.StatusNoContent {
		t.Fatalf("second import: %d %q", rec.Code, rec.Body.String())
	}
	if rec := <-waiter; rec.Code != http.StatusNoContent {
		t.Fatalf("import that waited for its turn: %d %q", rec.Code, rec.Body.String())
	}

	q, err := s.db.Querier(math.MinInt64, math.MaxInt64)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	got := seriestest.ReadAll(t, q)
	for name, n := range map[string]int{"first": 1, "second": 1, "waited": 1, "late": 0, "gone": 0} {
		if k := `{__name__="` + name + `"}`; len(got[k]) != n {
			t.Errorf("%s: %d samples stored, want %d", name, len(got[k]), n)
		}
	}
}

// gaugeValue returns the value of the gauge name in reg.
func gaugeValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// TestHandlerExtraLabels: extra_label=name=value arguments (VictoriaMetrics',
// which vmctl --vm-extra-label sends) set a label on every series
// imported, replacing one of the same name; a malformed one is 400 and
// stores nothing.
func TestHandlerExtraLabels(t *testing.T) {
	s := openStore(t, t.TempDir(), testStorageOptions())
	defer s.stop()
	h, err := importer.NewHandler(appendable{s.db}, importer.HandlerOptions{}, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	body := `{"metric":{"__name__":"a","job":"j"},"values":[1],"timestamps":[1700000000000]}
{"metric":{"__name__":"b"},"values":[2],"timestamps":[1700000000000]}
`
	do := func(query string) (int, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, importer.ImportPath+"?"+query, strings.NewReader(body)))
		return rec.Code, rec.Body.String()
	}
	for _, q := range []string{"extra_label=noequals", "extra_label==v", "extra_label=a=1&extra_label=" + url.QueryEscape("\xff=1")} {
		if code, msg := do(q); code != http.StatusBadRequest || !strings.Contains(msg, "extra_label") {
			t.Errorf("%s: %d %q, want 400 naming extra_label", q, code, msg)
		}
	}
	if code, msg := do("extra_label=env=prod&extra_label=job=override&extra_label=job=last"); code != http.StatusNoContent {
		t.Fatalf("%d %q", code, msg)
	}
	q, err := s.db.Querier(math.MinInt64, math.MaxInt64)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	got := seriestest.ReadAll(t, q)
	want := []string{`{__name__="a", env="prod", job="last"}`, `{__name__="b", env="prod", job="last"}`}
	if len(got) != len(want) {
		t.Fatalf("stored %v, want %v", slices.Collect(maps.Keys(got)), want)
	}
	for _, k := range want {
		if len(got[k]) != 1 {
			t.Errorf("%s: %d samples, want 1 (stored: %v)", k, len(got[k]), slices.Collect(maps.Keys(got)))
		}
	}
}
