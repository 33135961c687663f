package promql

import (
	"bytes"
	"compress/gzip"
	_ "embed" // the OpenAPI documents
	"io"
	"net/http"
	"sync"
)

// The OpenAPI documents of the endpoints this API answers, as Prometheus
// serves them at /api/v1/openapi.yaml, gzipped (half a megabyte of YAML
// compresses twelvefold). TestOpenAPIDocuments writes them from the upstream
// builder (go test ./promql -run OpenAPI -update) and checks they are current.
var (
	//go:embed openapi/openapi-3.1.yaml.gz
	openAPI31gz []byte
	//go:embed openapi/openapi-3.2.yaml.gz
	openAPI32gz []byte

	openAPI31 = sync.OnceValue(func() []byte { return gunzip(openAPI31gz) })
	openAPI32 = sync.OnceValue(func() []byte { return gunzip(openAPI32gz) })
)

// openAPIPaths are the path prefixes the documents describe.
var openAPIPaths = []string{
	"/query", "/series", "/label", "/metadata", "/status", "/format_query", "/parse_query",
	"/targets", "/scrape_pools", "/rules", "/alerts", "/alertmanagers", "/admin", "/read",
	"/features", "/notifications",
}

func gunzip(b []byte) []byte {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		panic(err) // embedded at build time: checked by TestOpenAPIDocuments
	}
	out, err := io.ReadAll(zr)
	if err != nil {
		panic(err)
	}
	return out
}

func serveOpenAPI(w http.ResponseWriter, r *http.Request) {
	doc := openAPI31
	switch r.URL.Query().Get("openapi_version") {
	case "3.2", "3.2.0":
		doc = openAPI32
	}
	w.Header().Set("Content-Type", "application/yaml; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache, no-store, must-revalidate")
	w.WriteHeader(http.StatusOK)
	w.Write(doc()) //nolint:errcheck // the client is gone
}
