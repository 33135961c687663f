package importer_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"

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
	h, err := importer.NewHandler(appendable{s.db}, nil, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
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
	h, err := importer.NewHandler(appendable{s.db}, nil, slog.New(slog.DiscardHandler), nil)
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
	h, err := importer.NewHandler(appendable{s.db}, nil, slog.New(slog.DiscardHandler), nil)
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
	h, err := importer.NewHandler(appendable{s.db}, check, slog.New(slog.DiscardHandler), nil)
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
