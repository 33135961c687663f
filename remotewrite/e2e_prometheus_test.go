package remotewrite

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/golang/snappy"

	"github.com/prometheus/common/model"
	"github.com/shaledb/shale/internal/e2e"
	"github.com/shaledb/shale/internal/fuzzseed"
)

// startPrometheus runs the prometheus binary on a free loopback port with a
// temporary data directory, a configuration that scrapes itself every second
// (when scrapeSelf) followed by extraConfig, and the given flags. It returns
// the listen address and the process.
func startPrometheus(t testing.TB, scrapeSelf bool, extraConfig string, flags ...string) (string, *e2e.Process) {
	t.Helper()
	bin := e2e.RequireBinary(t, "prometheus", "apt-get install prometheus")
	dir := t.TempDir()
	addr := "127.0.0.1:" + strconv.Itoa(e2e.FreePort(t))
	cfg := "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
	if scrapeSelf {
		cfg += fmt.Sprintf("scrape_configs:\n  - job_name: prometheus\n    static_configs:\n      - targets: [%q]\n", addr)
	}
	cfg += extraConfig
	cfgFile := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	args := append([]string{
		"--config.file=" + cfgFile,
		"--storage.tsdb.path=" + filepath.Join(dir, "data"),
		"--web.listen-address=" + addr,
		"--log.level=warn",
	}, flags...)
	p := e2e.StartProcess(t, exec.Command(bin, args...))
	e2e.WaitHTTP(t, 30*time.Second, "http://"+addr+"/-/ready")
	return addr, p
}

// TestPrometheusRemoteWrite1 has Debian's Prometheus (a 1.0 sender) scrape
// itself every second and remote-write to the handler, and waits until its
// samples and metadata arrive.
func TestPrometheusRemoteWrite1(t *testing.T) {
	if testing.Short() {
		t.Skip("starts prometheus")
	}
	rcv := newReceiver(t)
	srv, h := startServer(t, rcv, true, captureSeed(t))
	addr, _ := startPrometheus(t, true, fmt.Sprintf(`remote_write:
  - url: %s/api/v1/write
    queue_config:
      batch_send_deadline: 100ms
      min_backoff: 20ms
      max_backoff: 200ms
    metadata_config:
      send_interval: 1s
`, srv.URL))

	var build, up *recSeries
	e2e.Eventually(t, 60*time.Second, func() bool {
		for _, s := range rcv.all() {
			switch {
			case s.Labels.Get(model.MetricNameLabel) == "prometheus_build_info" && s.Labels.Get("instance") == addr:
				build = s
			case s.Labels.Get(model.MetricNameLabel) == "up" && s.Labels.Get("job") == "prometheus":
				up = s
			}
		}
		return build != nil && up != nil && len(up.Samples) >= 2
	}, "prometheus_build_info and two samples of up from %s", addr)

	if build.Labels.Get("version") == "" || build.Labels.Get("job") != "prometheus" {
		t.Fatalf("prometheus_build_info labels %s", build.Labels)
	}
	for _, s := range up.Samples {
		if s.V != 1 {
			t.Fatalf("up = %v", s.V)
		}
		if d := time.Since(time.UnixMilli(s.T)); d < -time.Minute || d > 5*time.Minute {
			t.Fatalf("sample time %v is not now", time.UnixMilli(s.T))
		}
	}
	e2e.Eventually(t, 30*time.Second, func() bool {
		rcv.mu.Lock()
		defer rcv.mu.Unlock()
		m, ok := rcv.family["prometheus_build_info"]
		return ok && m.Type == model.MetricTypeGauge && m.Help != ""
	}, "metadata of prometheus_build_info")
	if len(rcv.refErrors) > 0 {
		t.Fatalf("ref contract violated: %v", rcv.refErrors)
	}
	_ = h
}

// captureSeed returns a middleware that, with SHALE_WRITE_FUZZ_SEEDS=1, saves
// the first request Prometheus sends as a fuzz seed for the 1.0 decoder and
// the append path.
func captureSeed(t *testing.T) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		if os.Getenv("SHALE_WRITE_FUZZ_SEEDS") == "" {
			return next
		}
		var once sync.Once
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, err := io.ReadAll(r.Body)
			if err != nil {
				t.Error(err)
				return
			}
			once.Do(func() {
				raw, err := snappy.Decode(nil, body)
				if err != nil {
					t.Error(err)
					return
				}
				for target, seed := range map[string][]byte{
					"FuzzDecodeV1": raw,
					"FuzzIngest":   append([]byte{1}, raw...),
				} {
					if err := fuzzseed.Write(target, "prometheus-2.42", seed); err != nil {
						t.Error(err)
					}
				}
			})
			r.Body = io.NopCloser(bytes.NewReader(body))
			next.ServeHTTP(w, r)
		})
	}
}
