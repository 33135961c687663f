package httpcompress

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/prometheus/util/httputil"
)

// body writes a response as the API does: headers, a status, a JSON body.
func body(code int, b []byte) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		w.WriteHeader(code)
		if len(b) > 0 {
			_, _ = w.Write(b)
		}
	}
}

func serve(h http.Handler, acceptEncoding string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, "/api/v1/query", nil)
	if acceptEncoding != "" {
		r.Header.Set("Accept-Encoding", acceptEncoding)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func decode(t *testing.T, enc string, b []byte) []byte {
	t.Helper()
	var r io.Reader = bytes.NewReader(b)
	var err error
	switch enc {
	case "gzip":
		r, err = gzip.NewReader(r)
	case "deflate":
		r, err = zlib.NewReader(r)
	}
	if err != nil {
		t.Fatalf("%s body: %v", enc, err)
	}
	out, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("%s body: %v", enc, err)
	}
	return out
}

// TestSameAsUpstream: for every Accept-Encoding, the response is the one
// Prometheus' own handler gives, status, headers and the body once decoded
// (the compressed bytes differ: another level), also when the pooled
// compressors have served other responses before.
func TestSameAsUpstream(t *testing.T) {
	large := []byte(`{"status":"success","data":{"resultType":"vector","result":[` + strings.Repeat(`{"metric":{"__name__":"up","job":"node"},"value":[1700000000,"1"]},`, 500) + `{}]}}`)
	cases := map[string]struct {
		code int
		body []byte
	}{
		"small":      {http.StatusOK, []byte(`{"status":"success","data":[]}`)},
		"large":      {http.StatusOK, large},
		"error":      {http.StatusBadRequest, []byte(`{"status":"error","errorType":"bad_data","error":"parse error"}`)},
		"no content": {http.StatusNoContent, nil},
	}
	encodings := []string{"", "gzip", "deflate", "gzip, deflate", "deflate, gzip", "br, gzip", " identity , deflate", "identity", "gzip;q=1.0", "br", ",,"}
	for round := range 3 {
		for name, c := range cases {
			h := body(c.code, c.body)
			for _, ae := range encodings {
				want := serve(httputil.CompressionHandler{Handler: h}, ae)
				got := serve(Handler(h), ae)
				what := fmt.Sprintf("round %d, %s, Accept-Encoding %q", round, name, ae)
				if got.Code != want.Code {
					t.Errorf("%s: status %d, upstream %d", what, got.Code, want.Code)
				}
				for _, k := range []string{"Vary", "Content-Encoding", "Content-Length", "Content-Type"} {
					if g, w := got.Header().Values(k), want.Header().Values(k); fmt.Sprint(g) != fmt.Sprint(w) {
						t.Errorf("%s: %s %q, upstream %q", what, k, g, w)
					}
				}
				if c.code == http.StatusNoContent {
					// An empty stream's framing, which net/http drops for 204.
					if got.Body.Len() != want.Body.Len() {
						t.Errorf("%s: body of %d bytes, upstream %d", what, got.Body.Len(), want.Body.Len())
					}
					continue
				}
				if plain := decode(t, got.Header().Get("Content-Encoding"), got.Body.Bytes()); !bytes.Equal(plain, c.body) {
					t.Errorf("%s: the body decodes to %d bytes, not the %d written", what, len(plain), len(c.body))
				}
				if plain := decode(t, want.Header().Get("Content-Encoding"), want.Body.Bytes()); !bytes.Equal(plain, c.body) {
					t.Errorf("%s: upstream's body decodes to %d bytes, not the %d written", what, len(plain), len(c.body))
				}
			}
		}
	}
}

// TestConcurrentResponses: responses compressed at the same time with
// pooled compressors each decode to their own body.
func TestConcurrentResponses(t *testing.T) {
	h := Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write(bytes.Repeat([]byte(r.URL.Query().Get("v")), 1000))
	}))
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				v := fmt.Sprintf("<%d.%d>", g, i)
				enc := []string{"gzip", "deflate"}[i%2]
				r := httptest.NewRequest(http.MethodGet, "/?v="+v, nil)
				r.Header.Set("Accept-Encoding", enc)
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				var rd io.Reader
				var err error
				if enc == "gzip" {
					rd, err = gzip.NewReader(w.Body)
				} else {
					rd, err = zlib.NewReader(w.Body)
				}
				if err != nil {
					t.Errorf("%s: %v", v, err)
					return
				}
				got, err := io.ReadAll(rd)
				if err != nil || !bytes.Equal(got, bytes.Repeat([]byte(v), 1000)) {
					t.Errorf("%s: decoded %d bytes (%v), want its own 1000 repeats", v, len(got), err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// BenchmarkHandler compares the CPU, the bytes allocated and the size
// of a compressed response (ratio: compressed/plain) with Prometheus'
// handler's, for a small answer and a query_range answer of 20 series of
// 241 points:
//
//	go test -run '^$' -bench . -benchmem ./internal/httpcompress/
func BenchmarkHandler(b *testing.B) {
	for _, payload := range [][]byte{rangeAnswer(1, 2), rangeAnswer(20, 241)} {
		for name, h := range map[string]http.Handler{
			"upstream": httputil.CompressionHandler{Handler: body(http.StatusOK, payload)},
			"pooled":   Handler(body(http.StatusOK, payload)),
		} {
			b.Run(fmt.Sprintf("size=%d/handler=%s", len(payload), name), func(b *testing.B) {
				r := httptest.NewRequest(http.MethodGet, "/api/v1/query_range", nil)
				r.Header.Set("Accept-Encoding", "gzip")
				b.SetBytes(int64(len(payload)))
				b.ReportAllocs()
				var out int
				for b.Loop() {
					w := httptest.NewRecorder()
					h.ServeHTTP(w, r)
					out = w.Body.Len()
				}
				b.ReportMetric(float64(out)/float64(len(payload)), "ratio")
			})
		}
	}
}

// rangeAnswer is a query_range answer of n series of points points each,
// with values as a counter's rate gives them.
func rangeAnswer(n, points int) []byte {
	var sb strings.Builder
	sb.WriteString(`{"status":"success","data":{"resultType":"matrix","result":[`)
	x := uint64(1)
	for i := range n {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `{"metric":{"instance":"host-%05d-a:9100","job":"node"},"values":[`, i)
		for p := range points {
			if p > 0 {
				sb.WriteByte(',')
			}
			x = x*6364136223846793005 + 1442695040888963407
			fmt.Fprintf(&sb, `[%d,"%s"]`, 1796586000+15*p, strconv.FormatFloat(0.5+float64(x>>40)/(1<<24), 'f', -1, 64))
		}
		sb.WriteString("]}")
	}
	sb.WriteString("]}}")
	return []byte(sb.String())
}
