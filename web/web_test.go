package web

import (
	"bytes"
	"compress/gzip"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func get(t *testing.T, h http.Handler, path string, hdr ...string) *http.Response {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Result()
}

func TestHandler(t *testing.T) {
	h := Handler(Options{})
	if r := get(t, h, "/"); r.StatusCode != http.StatusFound || r.Header.Get("Location") != "query" {
		t.Fatalf("GET / = %d Location %q, want 302 to query", r.StatusCode, r.Header.Get("Location"))
	}
	if r := get(t, Handler(Options{ExternalPath: "/shale/"}), "/"); r.Header.Get("Location") != "/shale/query" {
		t.Fatalf("GET / with external path: Location %q, want /shale/query", r.Header.Get("Location"))
	}
	for _, p := range Pages {
		r := get(t, h, "/"+p)
		body, _ := io.ReadAll(r.Body)
		if r.StatusCode != 200 || !strings.Contains(string(body), `src="static/app.js"`) {
			t.Fatalf("GET /%s = %d %q", p, r.StatusCode, body)
		}
	}
	for _, p := range []string{"/nope", "/static/", "/static/index.html", "/static/nope.js", "/query/x"} {
		if r := get(t, h, p); r.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s = %d, want 404", p, r.StatusCode)
		}
	}
}

func TestAssetsGzip(t *testing.T) {
	h := Handler(Options{})
	want, err := fs.ReadFile(files, "static/app.js")
	if err != nil {
		t.Fatal(err)
	}
	plain := get(t, h, "/static/app.js")
	b, _ := io.ReadAll(plain.Body)
	if plain.StatusCode != 200 || !bytes.Equal(b, want) || plain.Header.Get("Content-Encoding") != "" {
		t.Fatalf("plain app.js: %d, %d bytes, encoding %q", plain.StatusCode, len(b), plain.Header.Get("Content-Encoding"))
	}
	zr := get(t, h, "/static/app.js", "Accept-Encoding", "gzip, deflate")
	if zr.Header.Get("Content-Encoding") != "gzip" || !strings.HasPrefix(zr.Header.Get("Content-Type"), "text/javascript") {
		t.Fatalf("gzip app.js: encoding %q type %q", zr.Header.Get("Content-Encoding"), zr.Header.Get("Content-Type"))
	}
	gr, err := gzip.NewReader(zr.Body)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(gr)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("gunzipped app.js differs (%v)", err)
	}
	if etag := zr.Header.Get("ETag"); etag == "" || etag == plain.Header.Get("ETag") {
		t.Fatalf("ETags plain %q gzip %q: want distinct", plain.Header.Get("ETag"), etag)
	}
	if r := get(t, h, "/static/app.js", "If-None-Match", plain.Header.Get("ETag")); r.StatusCode != http.StatusNotModified {
		t.Fatalf("revalidation = %d, want 304", r.StatusCode)
	}
}

// TestBundleSize keeps the bundle within its goal: 500 KB gzipped.
func TestBundleSize(t *testing.T) {
	var total int
	for _, name := range []string{"static/app.js", "static/app.css", "static/index.html"} {
		b, err := fs.ReadFile(files, name)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		zw.Write(b)
		zw.Close()
		total += buf.Len()
	}
	t.Logf("bundle: %d bytes gzipped", total)
	if total > 500_000 {
		t.Fatalf("bundle is %d bytes gzipped, over 500 KB", total)
	}
}
