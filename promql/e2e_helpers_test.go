package promql

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
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
)

// findBinary returns the path of an external program, or skips the test with
// the step that installs it; with SHALE_REQUIRE_E2E=1 it fails instead.
func findBinary(t testing.TB, name string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	if p := filepath.Join("/usr/bin", name); fileExists(p) {
		return p
	}
	msg := fmt.Sprintf("%s not found; install it with: apt-get update && apt-get install -y prometheus", name)
	if os.Getenv("SHALE_REQUIRE_E2E") == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	return port
}

// startPrometheus runs Debian's prometheus on a free port with a fresh data
// directory and the remote-write receiver on, waits until it is ready and
// stops it when the test ends. It returns the base URL.
func startPrometheus(t testing.TB) string {
	t.Helper()
	bin := findBinary(t, "prometheus")
	dir := t.TempDir()
	cfg := filepath.Join(dir, "prometheus.yml")
	require.NoError(t, os.WriteFile(cfg, []byte("global:\n  scrape_interval: 15s\n"), 0o600))
	addr := "127.0.0.1:" + strconv.Itoa(freePort(t))

	var logs bytes.Buffer
	cmd := exec.Command(bin,
		"--config.file="+cfg,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
		"--web.enable-remote-write-receiver",
		"--enable-feature=native-histograms",
		"--log.level=warn",
	)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("prometheus output:\n%s", logs.String())
		}
	})

	base := "http://" + addr
	waitReady(t, base+"/-/ready", exited, 30*time.Second)
	return base
}

// waitReady polls url until it answers 200, the process exits, or the
// deadline passes.
func waitReady(t testing.TB, url string, exited <-chan error, timeout time.Duration) {
	t.Helper()
	client := &http.Client{Timeout: time.Second}
	defer client.CloseIdleConnections()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		resp, err := client.Get(url)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case err := <-exited:
			t.Fatalf("process exited before %s was ready: %v", url, err)
		case <-deadline.C:
			t.Fatalf("%s not ready after %s (last error: %v)", url, timeout, err)
		case <-tick.C:
		}
	}
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
