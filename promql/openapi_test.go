package promql

import (
	"bytes"
	"compress/gzip"
	"flag"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"

	v1 "github.com/prometheus/prometheus/web/api/v1"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite the OpenAPI documents from the upstream builder")

// TestOpenAPIDocuments checks that the served documents are those the
// upstream builder makes for the paths this API answers.
func TestOpenAPIDocuments(t *testing.T) {
	b := v1.NewOpenAPIBuilder(v1.OpenAPIOptions{IncludePaths: openAPIPaths}, slog.New(slog.DiscardHandler))
	for _, c := range []struct {
		version, file string
		served        func() []byte
	}{
		{"3.1", "openapi/openapi-3.1.yaml.gz", openAPI31},
		{"3.2", "openapi/openapi-3.2.yaml.gz", openAPI32},
	} {
		rec := httptest.NewRecorder()
		b.ServeOpenAPI(rec, httptest.NewRequest(http.MethodGet, "/openapi.yaml?openapi_version="+c.version, nil))
		want, err := io.ReadAll(rec.Body)
		require.NoError(t, err)
		if *update {
			var buf bytes.Buffer
			zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
			require.NoError(t, err)
			_, err = zw.Write(want)
			require.NoError(t, err)
			require.NoError(t, zw.Close())
			require.NoError(t, os.WriteFile(c.file, buf.Bytes(), 0o644))
			continue
		}
		require.Equal(t, string(want), string(c.served()), "%s is stale: go test ./promql -run OpenAPI -update", c.file)

		mine := httptest.NewRecorder()
		serveOpenAPI(mine, httptest.NewRequest(http.MethodGet, "/openapi.yaml?openapi_version="+c.version, nil))
		require.Equal(t, rec.Header(), mine.Header())
		require.Equal(t, string(want), mine.Body.String())
	}
}
