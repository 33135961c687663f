package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang/snappy"
	"github.com/prometheus/prometheus/prompb"
	"golang.org/x/crypto/bcrypt"

	"github.com/shaledb/shale/internal/e2e"
	"github.com/shaledb/shale/internal/versitygw"
	"github.com/shaledb/shale/storage/objstore/objstoretest"
)

// tsdbBinary is the server built once for the end-to-end tests.
var tsdbBinary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "shale-e2e-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	tsdbBinary = filepath.Join(dir, "tsdb")
	build := exec.Command("go", "build", "-o", tsdbBinary, ".")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build tsdb:", err)
		os.Exit(1)
	}
	code := m.Run()
	objstoretest.StopServer()
	os.RemoveAll(dir)
	os.Exit(code)
}

// shale is a running bin/tsdb.
type shale struct {
	url  string
	proc *e2e.Process
}

// startShale starts bin/tsdb with args, logging at debug level, and waits
// until it is ready.
func startShale(t testing.TB, args ...string) *shale {
	t.Helper()
	return startShaleAt(t, "", append([]string{"--log.level=debug"}, args...)...)
}

// startShaleAt starts bin/tsdb with args and waits until it is ready under
// the route prefix ("" for none).
func startShaleAt(t testing.TB, prefix string, args ...string) *shale {
	t.Helper()
	return startShaleOn(t, fmt.Sprintf("127.0.0.1:%d", e2e.FreePort(t)), prefix, args...)
}

// startShaleOn is startShaleAt listening on addr (host:port), so that a
// server started again after a crash is where its senders left it.
func startShaleOn(t testing.TB, addr, prefix string, args ...string) *shale {
	t.Helper()
	cmd := exec.Command(tsdbBinary, append([]string{"--web.listen-address=" + addr}, args...)...)
	s := &shale{url: "http://" + addr, proc: e2e.StartProcess(t, cmd)}
	waitReady(t, s.proc, "tsdb", addr+prefix)
	return s
}

// waitReady waits until http://<at>/-/ready answers 200 and fails the test
// with the output of p, the program name, if it exits first.
func waitReady(t testing.TB, p *e2e.Process, name, at string) {
	t.Helper()
	e2e.Eventually(t, 60*time.Second, func() bool {
		if exited, _ := p.Exited(); exited {
			t.Fatalf("%s exited early:\n%s", name, p.Output())
		}
		resp, err := http.Get("http://" + at + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, "%s at %s to be ready", name, at)
}

// skipEndToEnd skips a test that runs the server (or another program) under
// -short.
func skipEndToEnd(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("end to end")
	}
}

// stop sends SIGTERM and waits; it fails the test if the exit is not clean.
func (s *shale) stop(t *testing.T) {
	t.Helper()
	s.proc.Stop()
	if _, err := s.proc.Exited(); err != nil {
		t.Fatalf("tsdb did not exit cleanly: %v\n%s", err, s.proc.Output())
	}
}

func (s *shale) kill(t *testing.T) {
	t.Helper()
	_ = s.proc.Cmd.Process.Kill()
	s.proc.Stop()
}

// remoteWrite sends one remote write 1.0 request and returns the status.
func remoteWrite(baseURL string, series []prompb.TimeSeries) (int, string, error) {
	code, _, body, err := remoteWriteHeaders(baseURL, series)
	return code, body, err
}

// remoteWriteHeaders is remoteWrite that also returns the answer's headers.
func remoteWriteHeaders(baseURL string, series []prompb.TimeSeries) (int, http.Header, string, error) {
	return rawRemoteWrite(baseURL, &prompb.WriteRequest{Timeseries: series})
}

// rawRemoteWrite sends req as a remote write 1.0 request and returns the
// status, headers and body of the answer.
func rawRemoteWrite(base string, req *prompb.WriteRequest) (int, http.Header, string, error) {
	raw, err := req.Marshal()
	if err != nil {
		return 0, nil, "", err
	}
	return postSnappy(base+"/api/v1/write", raw)
}

// snappyWriteRequest is a POST to u of a marshalled 1.0 write request,
// snappy-compressed.
func snappyWriteRequest(u string, raw []byte) (*http.Request, error) {
	hreq, err := http.NewRequest(http.MethodPost, u, bytes.NewReader(snappy.Encode(nil, raw)))
	if err != nil {
		return nil, err
	}
	hreq.Header.Set("Content-Type", "application/x-protobuf")
	hreq.Header.Set("Content-Encoding", "snappy")
	hreq.Header.Set("X-Prometheus-Remote-Write-Version", "0.1.0")
	return hreq, nil
}

// postSnappy posts a marshalled 1.0 write request, snappy-compressed.
func postSnappy(u string, raw []byte) (int, http.Header, string, error) {
	hreq, err := snappyWriteRequest(u, raw)
	if err != nil {
		return 0, nil, "", err
	}
	resp, err := http.DefaultClient.Do(hreq)
	if err != nil {
		return 0, nil, "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(body), nil
}

// send sends req and returns the answer's status and body; a request that
// gets no answer fails the test.
func send(t testing.TB, req *http.Request) (int, string) {
	t.Helper()
	return sendWith(t, http.DefaultClient, req)
}

// sendWith is send through c.
func sendWith(t testing.TB, c *http.Client, req *http.Request) (int, string) {
	t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// sendGet GETs u and returns the answer's status and body.
func sendGet(t testing.TB, u string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	return send(t, req)
}

// sendPost POSTs body to u and returns the answer's status and body.
func sendPost(t testing.TB, u, contentType string, body io.Reader) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, u, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", contentType)
	return send(t, req)
}

type apiResponse struct {
	Status string          `json:"status"`
	Data   json.RawMessage `json:"data"`
	Error  string          `json:"error"`
}

type vectorSample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

type matrixSeries struct {
	Metric map[string]string `json:"metric"`
	Values [][2]any          `json:"values"`
}

// queryResult decodes the result of /api/v1/query or /api/v1/query_range.
func queryResult(t *testing.T, baseURL, path string, params url.Values, out any) {
	t.Helper()
	var data struct {
		Result json.RawMessage `json:"result"`
	}
	query(t, baseURL, path, params, &data)
	if err := json.Unmarshal(data.Result, out); err != nil {
		t.Fatalf("decode result of %s: %v", path, err)
	}
}

func query(t *testing.T, baseURL, path string, params url.Values, out any) {
	t.Helper()
	resp, err := http.PostForm(baseURL+path, params)
	if err != nil {
		t.Fatalf("query %s: %v", path, err)
	}
	decodeAnswer(t, resp, path, params, out)
}

// decodeAnswer decodes the data of an API answer into out; an answer other
// than success fails the test.
func decodeAnswer(t testing.TB, resp *http.Response, path string, params url.Values, out any) {
	t.Helper()
	defer resp.Body.Close()
	var r apiResponse
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatalf("decode %s: %v", path, err)
	}
	if r.Status != "success" {
		t.Fatalf("%s %v: %s", path, params, r.Error)
	}
	if err := json.Unmarshal(r.Data, out); err != nil {
		t.Fatalf("decode data of %s: %v", path, err)
	}
}

// maxLoadBatches bounds a load run: batches are 1 s apart in sample time,
// starting from base, so the samples stay behind the receiver's clock.
const maxLoadBatches = 1500

// loadBase is the sample time of the first batch of a load run.
func loadBase() int64 { return time.Now().Add(-30 * time.Minute).UnixMilli() }

// loadSeries are the series the load generator writes.
func loadSeries(n int) []prompb.TimeSeries {
	ts := make([]prompb.TimeSeries, n)
	for i := range ts {
		ts[i].Labels = []prompb.Label{
			{Name: "__name__", Value: "e2e_load"},
			{Name: "series", Value: strconv.Itoa(i)},
		}
		ts[i].Samples = make([]prompb.Sample, 1)
	}
	return ts
}

// writeLoad sends batches with increasing timestamps from several workers
// until ctx ends, and returns the highest batch number each worker got a 2xx
// for (-1 if none). Batch b of worker w holds the sample (base+b*1000, b) of
// series w*perWorker..(w+1)*perWorker-1.
func writeLoad(ctx context.Context, t *testing.T, baseURL string, workers, perWorker int, base int64) []int {
	acked := make([]int, workers)
	var wg sync.WaitGroup
	for w := range workers {
		acked[w] = -1
		wg.Add(1)
		go func() {
			defer wg.Done()
			series := loadSeries(workers * perWorker)[w*perWorker : (w+1)*perWorker]
			for b := 0; ctx.Err() == nil && b < maxLoadBatches; b++ {
				for i := range series {
					series[i].Samples[0] = prompb.Sample{Timestamp: base + int64(b)*1000, Value: float64(b)}
				}
				code, body, err := remoteWrite(baseURL, series)
				if err != nil {
					return // the server went away
				}
				if code/100 != 2 {
					t.Errorf("worker %d batch %d: status %d: %s", w, b, code, body)
					return
				}
				acked[w] = b
			}
		}()
	}
	wg.Wait()
	return acked
}

// writeLoadFor is writeLoad for the duration d.
func writeLoadFor(t *testing.T, d time.Duration, baseURL string, workers, perWorker int, base int64) []int {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return writeLoad(ctx, t, baseURL, workers, perWorker, base)
}

// checkLoad verifies that every acknowledged batch is readable.
func checkLoad(t *testing.T, baseURL string, acked []int, perWorker int, base int64) {
	t.Helper()
	last := 0
	for _, a := range acked {
		last = max(last, a)
	}
	var res []matrixSeries
	queryResult(t, baseURL, "/api/v1/query_range", url.Values{
		"query": {"e2e_load"},
		"start": {strconv.FormatFloat(float64(base)/1000, 'f', 3, 64)},
		"end":   {strconv.FormatFloat(float64(base+int64(last)*1000)/1000, 'f', 3, 64)},
		"step":  {"1"},
	}, &res)
	// Evaluation steps fall on the sample times, so each step shows the
	// sample written for it.
	got := map[string]map[int64]string{}
	for _, s := range res {
		m := map[int64]string{}
		for _, v := range s.Values {
			ts, _ := v[0].(float64)
			m[int64(math.Round(ts*1000))] = fmt.Sprint(v[1])
		}
		got[s.Metric["series"]] = m
	}
	for w, a := range acked {
		for i := w * perWorker; i < (w+1)*perWorker; i++ {
			for b := 0; b <= a; b++ {
				ts := base + int64(b)*1000
				if v, ok := got[strconv.Itoa(i)][ts]; !ok || v != strconv.Itoa(b) {
					t.Fatalf("series %d: acknowledged sample (%d, %d) of batch %d of worker %d: got %q (present %v)", i, ts, b, b, w, v, ok)
				}
			}
		}
	}
}

// checkLoadAfterRestart starts the server again with args, checks that
// every acknowledged batch of a load survived, and stops it.
func checkLoadAfterRestart(t *testing.T, args []string, acked []int, perWorker int, base int64) {
	t.Helper()
	s := startShale(t, args...)
	checkLoad(t, s.url, acked, perWorker, base)
	s.stop(t)
}

// TestCrashUnderLoadWALOn kills the server with SIGKILL while senders write
// and checks that every acknowledged sample survives the restart.
func TestCrashUnderLoadWALOn(t *testing.T) {
	skipEndToEnd(t)
	args := []string{"--storage.path=" + t.TempDir(), "--storage.wal=true"}
	base := loadBase()
	s := startShale(t, args...)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan []int)
	go func() { done <- writeLoad(ctx, t, s.url, 4, 25, base) }()
	// Let the load run until some batches are acknowledged, then crash.
	e2e.Eventually(t, 30*time.Second, func() bool {
		var res []vectorSample
		queryResult(t, s.url, "/api/v1/query", url.Values{"query": {"count(count_over_time(e2e_load[1h]))"}}, &res)
		return len(res) == 1 && res[0].Value[1] == "100"
	}, "load to reach the server")
	time.Sleep(500 * time.Millisecond) // more load in flight at the moment of the crash
	s.kill(t)
	cancel()
	checkLoadAfterRestart(t, args, <-done, 25, base)
}

// TestRestartWALOffAfterSIGTERM checks that a clean shutdown with the WAL off
// flushes everything.
func TestRestartWALOffAfterSIGTERM(t *testing.T) {
	skipEndToEnd(t)
	args := []string{"--storage.path=" + t.TempDir(), "--storage.wal=false"}
	base := loadBase()
	s := startShale(t, args...)
	acked := writeLoadFor(t, 2*time.Second, s.url, 2, 10, base)
	s.stop(t)
	checkLoadAfterRestart(t, args, acked, 10, base)
}

// TestReaderReplica checks that a reader on the same folder serves what the
// writer flushed, and refuses writes.
func TestReaderReplica(t *testing.T) {
	skipEndToEnd(t)
	dir := t.TempDir()
	base := loadBase()
	w := startShale(t, "--storage.path="+dir, "--storage.head-flush-interval=1s")
	acked := writeLoadFor(t, time.Second, w.url, 1, 10, base)
	r := startShale(t, "--storage.path="+dir, "--mode=reader", "--storage.reader.poll-interval=200ms")
	e2e.Eventually(t, 30*time.Second, func() bool {
		var res []vectorSample
		queryResult(t, r.url, "/api/v1/query", url.Values{
			"query": {"count(count_over_time(e2e_load[10m]))"},
			"time":  {strconv.FormatFloat(float64(base+int64(acked[0])*1000)/1000, 'f', 3, 64)},
		}, &res)
		return len(res) == 1 && res[0].Value[1] == "10"
	}, "the reader to see the writer's series")
	e2e.Eventually(t, 30*time.Second, func() bool {
		var res []matrixSeries
		queryResult(t, r.url, "/api/v1/query_range", url.Values{
			"query": {"e2e_load"}, "step": {"1"},
			"start": {strconv.FormatFloat(float64(base)/1000, 'f', 3, 64)},
			"end":   {strconv.FormatFloat(float64(base+int64(acked[0])*1000)/1000, 'f', 3, 64)},
		}, &res)
		return len(res) == 10 && len(res[0].Values) == acked[0]+1
	}, "the reader to see every flushed sample")
	code, hdr, body, err := remoteWriteHeaders(r.url, loadSeries(1))
	port := w.url[strings.LastIndex(w.url, ":"):]
	if err != nil || code != http.StatusMethodNotAllowed || hdr.Get("Allow") != http.MethodPost || !strings.Contains(body, port) {
		t.Fatalf("a write to the reader: status %d, Allow %q, %q, %v; want 405, Allow: POST and the writer's address (port %s)",
			code, hdr.Get("Allow"), body, err, port)
	}
	r.stop(t)
	w.stop(t)
}

// TestSecondWriterFencesFirst starts two writers on one folder. Started by
// accident, the second refuses, naming the live one, which carries on. Taking
// over on purpose, the first must stop with a clear message and a non-zero
// exit, and the data stays readable through the second.
func TestSecondWriterFencesFirst(t *testing.T) {
	skipEndToEnd(t)
	dir := t.TempDir()
	base := loadBase()
	first := startShale(t, "--storage.path="+dir)
	acked := writeLoadFor(t, time.Second, first.url, 1, 5, base)
	out, err := exec.Command(tsdbBinary, "--storage.path="+dir, fmt.Sprintf("--web.listen-address=127.0.0.1:%d", e2e.FreePort(t))).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), "another writer is live") || !strings.Contains(string(out), "--storage.take-over") {
		t.Fatalf("a second writer started by accident: %v\n%s", err, out)
	}
	probe := loadSeries(1)
	probe[0].Samples[0] = prompb.Sample{Timestamp: base + 900_000, Value: 1}
	if code, body, err := remoteWrite(first.url, probe); err != nil || code/100 != 2 {
		t.Fatalf("the live writer after a refused second one: %d %s %v", code, body, err)
	}
	second := startShale(t, "--storage.path="+dir, "--storage.take-over")
	// The first writer learns it is fenced at its next write.
	e2e.Eventually(t, 30*time.Second, func() bool {
		// Nothing is written to it: it must find out by itself.
		exited, _ := first.proc.Exited()
		return exited
	}, "the fenced writer to exit")
	_, err = first.proc.Exited()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != exitFenced {
		t.Fatalf("fenced writer: exit %v, want code %d\n%s", err, exitFenced, first.proc.Output())
	}
	if !strings.Contains(first.proc.Output(), "fenced") {
		t.Fatalf("fenced writer did not say why it stopped:\n%s", first.proc.Output())
	}
	checkLoad(t, second.url, acked, 5, base)
	second.stop(t)
}

// promtoolQuery runs promtool query with args and returns its output.
func promtoolQuery(t *testing.T, promtool string, args ...string) []byte {
	t.Helper()
	out, err := exec.Command(promtool, append([]string{"query"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool query %v: %v\n%s", args, err, out)
	}
	return out
}

// promtoolJSON runs promtool query with JSON output.
func promtoolJSON(t *testing.T, promtool string, args ...string) any {
	t.Helper()
	out := promtoolQuery(t, promtool, args...)
	var v any
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("promtool query %v: not JSON: %v\n%s", args, err, out)
	}
	return v
}

// TestPrometheusEndToEnd runs Debian's prometheus scraping itself and a node
// exporter and remote-writing to Shale, then compares promtool answers of
// both for the same queries.
func TestPrometheusEndToEnd(t *testing.T) {
	skipEndToEnd(t)
	t.Parallel()
	runPrometheusEndToEnd(t)
}

// TestPrometheusEndToEndS3 is TestPrometheusEndToEnd with Shale's data in a
// real S3-compatible server (versitygw) instead of a local folder.
func TestPrometheusEndToEndS3(t *testing.T) {
	skipEndToEnd(t)
	t.Parallel()
	path := s3ConfigFile(t, "", "shale-e2e")
	runPrometheusEndToEnd(t, "--objstore.config-file="+path)
}

// s3ConfigFile creates a bucket on the test binary's versitygw and writes an
// --objstore.config-file for it under prefix, reached at endpoint (a proxy;
// empty: the server itself). It returns the file's path.
func s3ConfigFile(t *testing.T, endpoint, prefix string) string {
	t.Helper()
	srv := objstoretest.Server(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bucket, err := srv.CreateBucket(ctx)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "objstore.yml")
	if err := os.WriteFile(path, []byte(versitygw.ObjstoreYAML(srv.S3Config(bucket, endpoint), prefix)), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func runPrometheusEndToEnd(t *testing.T, shaleArgs ...string) {
	prom := e2e.RequireBinary(t, "prometheus", "apt-get install prometheus")
	promtool := e2e.RequireBinary(t, "promtool", "apt-get install prometheus")
	nodeExporter := e2e.RequireBinary(t, "prometheus-node-exporter", "apt-get install prometheus-node-exporter")
	dir := t.TempDir()

	s := startShale(t, append([]string{"--storage.path=" + filepath.Join(dir, "shale")}, shaleArgs...)...)
	nodePort := e2e.FreePort(t)
	e2e.StartProcess(t, exec.Command(nodeExporter, fmt.Sprintf("--web.listen-address=127.0.0.1:%d", nodePort),
		"--no-collector.hwmon", "--no-collector.thermal_zone"))
	promPort := e2e.FreePort(t)
	promURL := fmt.Sprintf("http://127.0.0.1:%d", promPort)
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: prometheus
    static_configs: [{targets: ['127.0.0.1:%d']}]
  - job_name: node
    static_configs: [{targets: ['127.0.0.1:%d']}]
remote_write:
  - url: %s/api/v1/write
    queue_config: {batch_send_deadline: 500ms, max_samples_per_send: 5000}
    metadata_config: {send_interval: 5s}
`, promPort, nodePort, s.url)
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	e2e.StartProcess(t, exec.Command(prom, "--config.file="+cfgPath, "--web.listen-address="+fmt.Sprintf("127.0.0.1:%d", promPort),
		"--storage.tsdb.path="+filepath.Join(dir, "prom")))
	e2e.WaitHTTP(t, 60*time.Second, promURL+"/-/ready")

	// A minute of scrapes, then compare at a time both have fully.
	start := time.Now()
	time.Sleep(time.Minute)
	at := time.Now().Add(-10 * time.Second)
	e2e.Eventually(t, 60*time.Second, func() bool {
		var res []vectorSample
		queryResult(t, s.url, "/api/v1/query", url.Values{"query": {"timestamp(up)"}}, &res)
		if len(res) != 2 {
			return false
		}
		for _, r := range res {
			if f, _ := strconv.ParseFloat(fmt.Sprint(r.Value[1]), 64); f < float64(at.Unix()+2) {
				return false
			}
		}
		return true
	}, "Shale to hold samples past the comparison time")

	atArg := "--time=" + at.UTC().Format(time.RFC3339)
	for _, q := range []string{
		"up",
		"prometheus_build_info",
		"count by (job) ({__name__=~\".+\"})",
		"sum by (job) (scrape_samples_scraped)",
		"node_cpu_seconds_total",
		"rate(prometheus_http_requests_total[30s])",
		"node_memory_MemTotal_bytes",
	} {
		want := promtoolJSON(t, promtool, "instant", "-o", "json", atArg, promURL, q)
		got := promtoolJSON(t, promtool, "instant", "-o", "json", atArg, s.url, q)
		if !sameJSON(want, got) {
			t.Errorf("query %q at %s:\nprometheus: %s\nshale:      %s", q, at.UTC(), jsonString(want), jsonString(got))
		}
	}
	rangeArgs := []string{"--start=" + start.Add(15*time.Second).UTC().Format(time.RFC3339), "--end=" + at.UTC().Format(time.RFC3339), "--step=5s"}
	for _, q := range []string{"up", "sum(rate(node_cpu_seconds_total[15s]))"} {
		want := promtoolJSON(t, promtool, append(append([]string{"range", "-o", "json"}, rangeArgs...), promURL, q)...)
		got := promtoolJSON(t, promtool, append(append([]string{"range", "-o", "json"}, rangeArgs...), s.url, q)...)
		if !sameJSON(want, got) {
			t.Errorf("range query %q:\nprometheus: %s\nshale:      %s", q, jsonString(want), jsonString(got))
		}
	}
	seriesArgs := []string{"--match=up", "--start=" + start.UTC().Format(time.RFC3339), "--end=" + at.UTC().Format(time.RFC3339)}
	want := promtoolOut(t, promtool, append(append([]string{"series"}, seriesArgs...), promURL)...)
	got := promtoolOut(t, promtool, append(append([]string{"series"}, seriesArgs...), s.url)...)
	if want != got {
		t.Errorf("promtool query series:\nprometheus: %s\nshale:      %s", want, got)
	}
	want = promtoolOut(t, promtool, "labels", promURL, "job")
	got = promtoolOut(t, promtool, "labels", s.url, "job")
	if want != got {
		t.Errorf("promtool query labels job:\nprometheus: %s\nshale:      %s", want, got)
	}
	s.stop(t)
}

// promtoolOut runs promtool query and returns its output's lines, sorted.
func promtoolOut(t *testing.T, promtool string, args ...string) string {
	t.Helper()
	out := promtoolQuery(t, promtool, args...)
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// sameJSON compares query results as sets of series. Sample values may
// differ in the last bits: sums add series in storage order, which differs
// between the two servers.
func sameJSON(a, b any) bool { return canonical(roundValues(a)) == canonical(roundValues(b)) }

// roundValues rounds every numeric string to 12 significant digits.
func roundValues(v any) any {
	switch x := v.(type) {
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = roundValues(e)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			if k == "metric" {
				out[k] = e
				continue
			}
			out[k] = roundValues(e)
		}
		return out
	case string:
		if f, err := strconv.ParseFloat(x, 64); err == nil {
			return strconv.FormatFloat(f, 'g', 12, 64)
		}
	}
	return v
}

func canonical(v any) string {
	arr, ok := v.([]any)
	if !ok {
		return jsonString(v)
	}
	parts := make([]string, len(arr))
	for i, x := range arr {
		parts[i] = jsonString(x)
	}
	sort.Strings(parts)
	return strings.Join(parts, "\n")
}

func jsonString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestWebConfigBasicAuth starts the server with a Prometheus web config file
// that requires basic auth, and checks that requests without the password are
// refused while the health check, writes and queries with it work.
func TestWebConfigBasicAuth(t *testing.T) {
	skipEndToEnd(t)
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "web.yml")
	if err := os.WriteFile(cfg, []byte("basic_auth_users:\n  admin: "+string(hash)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	port := e2e.FreePort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	p := e2e.StartProcess(t, exec.Command(tsdbBinary, "--web.listen-address="+addr, "--web.config.file="+cfg, "--storage.path="+filepath.Join(dir, "data")))
	get := func(path, user, pass string) int {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
		if user != "" {
			req.SetBasicAuth(user, pass)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	e2e.Eventually(t, 30*time.Second, func() bool {
		if exited, _ := p.Exited(); exited {
			t.Fatalf("tsdb exited:\n%s", p.Output())
		}
		return get("/-/ready", "admin", "s3cret") == 200
	}, "tsdb with basic auth to be ready")
	if code := get("/api/v1/query?query=1", "", ""); code != http.StatusUnauthorized {
		t.Fatalf("query without credentials: %d, want 401", code)
	}
	if code := get("/api/v1/query?query=1", "admin", "wrong"); code != http.StatusUnauthorized {
		t.Fatalf("query with a wrong password: %d, want 401", code)
	}
	if code := get("/api/v1/query?query=1", "admin", "s3cret"); code != 200 {
		t.Fatalf("query with the password: %d, want 200", code)
	}
}
