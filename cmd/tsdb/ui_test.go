package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestExternalURLAndRoutePrefix(t *testing.T) {
	for _, tc := range []struct {
		ext, prefix string
		wantPath    string
		wantPrefix  string
		wantErr     bool
	}{
		{ext: "http://example.com/shale/", wantPath: "/shale", wantPrefix: "/shale"},
		{ext: "http://example.com/a/b", wantPath: "/a/b", wantPrefix: "/a/b"},
		{ext: "http://example.com/shale/", prefix: "/", wantPath: "/shale", wantPrefix: "/"},
		{ext: "http://example.com", prefix: "shale/", wantPath: "", wantPrefix: "/shale"},
		{ext: "", wantPath: "", wantPrefix: "/"},
		{ext: `"http://example.com/"`, wantErr: true},
		{ext: "example.com/shale", wantErr: true},
	} {
		u, err := externalURL(tc.ext, "127.0.0.1:9292")
		if tc.wantErr {
			if err == nil {
				t.Errorf("externalURL(%q) = %v, want an error", tc.ext, u)
			}
			continue
		}
		if err != nil {
			t.Fatalf("externalURL(%q): %v", tc.ext, err)
		}
		if u.Path != tc.wantPath {
			t.Errorf("externalURL(%q).Path = %q, want %q", tc.ext, u.Path, tc.wantPath)
		}
		if p := routePrefix(tc.prefix, u); p != tc.wantPrefix {
			t.Errorf("routePrefix(%q, %q) = %q, want %q", tc.prefix, tc.ext, p, tc.wantPrefix)
		}
	}
}

func TestWithRoutePrefix(t *testing.T) {
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.URL.Path)
	})
	h := withRoutePrefix("/shale", inner)
	for _, tc := range []struct {
		path, body, location string
		code                 int
	}{
		{path: "/shale/api/v1/query", code: 200, body: "/api/v1/query"},
		{path: "/shale/", code: 200, body: "/"},
		{path: "/shale", code: 302, location: "/shale/"},
		{path: "/", code: 302, location: "/shale/"},
		{path: "/shalex/api", code: 404},
		{path: "/api/v1/query", code: 404},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tc.path, nil))
		if rec.Code != tc.code || (tc.body != "" && rec.Body.String() != tc.body) || rec.Header().Get("Location") != tc.location {
			t.Errorf("GET %s = %d %q Location %q, want %d %q %q", tc.path, rec.Code, rec.Body.String(), rec.Header().Get("Location"), tc.code, tc.body, tc.location)
		}
	}
	if withRoutePrefix("/", inner) == nil {
		t.Fatal("nil handler")
	}
}
