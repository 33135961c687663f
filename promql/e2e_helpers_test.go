package promql

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/klauspost/compress/snappy"
	"github.com/prometheus/prometheus/prompb"
	"github.com/stretchr/testify/require"

	"github.com/shaledb/shale/internal/e2e"
)

const prometheusInstallHint = "apt-get update && apt-get install -y prometheus"

// findBinary returns the path of a program of Debian's prometheus package, or
// skips the test naming the install step (fails with SHALE_REQUIRE_E2E=1).
func findBinary(t testing.TB, name string) string {
	t.Helper()
	return e2e.RequireBinary(t, name, prometheusInstallHint)
}

// startPrometheus runs Debian's prometheus on a free port with a fresh data
// directory and the remote-write receiver on, waits until it is ready and
// stops it when the test ends. It returns the base URL.
func startPrometheus(t testing.TB) string {
	t.Helper()
	base, _ := startPrometheusPID(t)
	return base
}

// startPrometheusPID is startPrometheus that also returns the process id.
func startPrometheusPID(t testing.TB) (string, int) {
	t.Helper()
	bin := findBinary(t, "prometheus")
	dir := t.TempDir()
	cfg := filepath.Join(dir, "prometheus.yml")
	require.NoError(t, os.WriteFile(cfg, []byte("global:\n  scrape_interval: 15s\n"), 0o600))
	addr := "127.0.0.1:" + strconv.Itoa(e2e.FreePort(t))
	p := e2e.StartProcess(t, exec.Command(bin,
		"--config.file="+cfg,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
		"--web.enable-remote-write-receiver",
		"--enable-feature=native-histograms",
		"--log.level=warn",
	))
	base := "http://" + addr
	e2e.WaitHTTP(t, 30*time.Second, base+"/-/ready")
	return base, p.Cmd.Process.Pid
}

// remoteWrite sends a remote-write 1.0 request.
func remoteWrite(t testing.TB, client *http.Client, url string, req *prompb.WriteRequest) {
	t.Helper()
	raw, err := req.Marshal()
	require.NoError(t, err)
	hreq, err := http.NewRequestWithContext(context.Background(), http.MethodPost, url, bytes.NewReader(snappy.Encode(nil, raw)))
	require.NoError(t, err)
	hreq.Header.Set("Content-Encoding", "snappy")
	hreq.Header.Set("Content-Type", "application/x-protobuf")
	hreq.Header.Set("X-Prometheus-Remote-Write-Version", "0.1.0")
	resp, err := client.Do(hreq)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusNoContent, resp.StatusCode, "remote write: %s", body)
}
