// Package web serves Shale's built-in UI: the static bundle built from
// ui/ (see `make ui`), embedded in the binary. The UI speaks to the server
// only through its HTTP API, with URLs relative to the page, so it works at
// any route prefix and behind a reverse proxy at a sub-path.
package web

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
	"time"
)

//go:embed static
var files embed.FS

// Pages are the UI's pages, each served at /<page> under the route prefix.
var Pages = []string{"query", "explore", "alerts", "rules", "status", "storage"}

// Options say where the UI is.
type Options struct {
	// ExternalPath is the path under which users reach the server (the
	// path of --web.external-url, without its trailing slash): "/"
	// redirects to ExternalPath + "/query", or to "query" (relative) when
	// it is empty.
	ExternalPath string
}

// Handler serves the UI on a mux whose paths have the route prefix
// stripped: GET / redirects to the query page, the pages answer with the
// UI's HTML, /static/ with the bundle. Every other path is 404.
func Handler(opts Options) http.Handler {
	static, err := fs.Sub(files, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	index, err := fs.ReadFile(static, "index.html")
	if err != nil {
		panic(err)
	}
	assets := newAssets(static)
	mux := http.NewServeMux()
	// Relative to <prefix>/ when the external path is not known, so that
	// it resolves under the route prefix.
	home := "query"
	if p := strings.TrimSuffix(opts.ExternalPath, "/"); p != "" {
		home = p + "/query"
	}
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		// Not http.Redirect: it would make a relative target absolute
		// from the path seen here, without the route prefix.
		w.Header().Set("Location", home)
		w.WriteHeader(http.StatusFound)
	})
	page := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		http.ServeContent(w, r, "index.html", time.Time{}, bytes.NewReader(index))
	}
	for _, p := range Pages {
		mux.HandleFunc("GET /"+p, page)
	}
	mux.Handle("GET /static/", assets)
	return mux
}

// assets serves the bundle with an ETag of its contents; browsers
// revalidate (the names carry no hash), which costs a 304.
type assets struct {
	fs   fs.FS
	etag map[string]string
	// gz holds the gzip-compressed scripts and styles, made once.
	gz map[string][]byte
}

func newAssets(static fs.FS) *assets {
	a := &assets{fs: static, etag: map[string]string{}, gz: map[string][]byte{}}
	_ = fs.WalkDir(static, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(static, p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		a.etag[p] = `"` + hex.EncodeToString(sum[:8]) + `"`
		if strings.HasSuffix(p, ".js") || strings.HasSuffix(p, ".css") {
			var buf bytes.Buffer
			zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
			_, _ = zw.Write(b)
			_ = zw.Close()
			a.gz[p] = buf.Bytes()
		}
		return nil
	})
	return a
}

func (a *assets) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(path.Clean(r.URL.Path), "/static/")
	etag, ok := a.etag[name]
	if !ok || name == "index.html" {
		http.NotFound(w, r)
		return
	}
	b, err := fs.ReadFile(a.fs, name)
	if err != nil {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Add("Vary", "Accept-Encoding")
	if gz, ok := a.gz[name]; ok && acceptsGzip(r) {
		w.Header().Set("Content-Encoding", "gzip")
		w.Header().Set("Content-Type", mime.TypeByExtension(path.Ext(name)))
		b = gz
		etag = strings.TrimSuffix(etag, `"`) + `-gzip"`
	}
	w.Header().Set("ETag", etag)
	http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(b))
}

func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		enc, q, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.TrimSpace(enc) == "gzip" && strings.TrimSpace(q) != "q=0" {
			return true
		}
	}
	return false
}
