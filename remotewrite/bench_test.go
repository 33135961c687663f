package remotewrite

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/golang/snappy"
	remoteapi "github.com/prometheus/client_golang/exp/api/remote"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/exemplar"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"
	"github.com/prometheus/prometheus/storage"
	promremote "github.com/prometheus/prometheus/storage/remote"
	"github.com/shaledb/shale/internal/cputime"
	"github.com/shaledb/shale/internal/e2e"
)

// benchPayloads are the request shapes of the benchmarks: one node_exporter
// scrape per request, and a sender's batch of ten samples per series.
var benchPayloads = []struct {
	name              string
	series, perSeries int
}{
	{"node2000x1", 2000, 1},
	{"batch500x10", 500, 10},
}

func encodeBody(b testing.TB, version int, series []recSeries) []byte {
	if version == 1 {
		return encode(b, toV1(series))
	}
	return encode(b, toV2(series))
}

func contentType(version int) string {
	if version == 1 {
		return ContentTypeV1
	}
	return ContentTypeV2
}

// BenchmarkDecodeAppend measures one core decoding and appending requests
// into an appender that keeps nothing: decoder=shale is the whole handler
// (snappy, decode, validation, append, response); decoder=upstream is the
// upstream Prometheus receiver (storage/remote.NewWriteHandler, the code
// Prometheus 3 runs) over a no-op AppendableV2; decoder=gogo is snappy plus
// the generated gogo types and label building alone, without validation.
//
//	go test -run '^$' -bench BenchmarkDecodeAppend -benchtime 2s -count 6 -cpu 1 ./remotewrite
func BenchmarkDecodeAppend(b *testing.B) {
	for _, version := range []int{1, 2} {
		for _, p := range benchPayloads {
			series := nodePayload(p.series, p.perSeries, testNow-time.Hour.Milliseconds())
			body := encodeBody(b, version, series)
			samples := float64(p.series * p.perSeries)
			name := fmt.Sprintf("version=%d/payload=%s", version, p.name)

			b.Run(name+"/decoder=shale", func(b *testing.B) {
				h, _ := newTestHandler(b, nopAppendable{}, nil)
				benchServe(b, h, version, body, samples, http.StatusNoContent)
			})

			b.Run(name+"/decoder=upstream", func(b *testing.B) {
				h := promremote.NewWriteHandler(slog.New(slog.DiscardHandler), prometheus.NewRegistry(), nopAppendableV2{},
					remoteapi.MessageTypes{remoteapi.WriteV1MessageType, remoteapi.WriteV2MessageType}, false, true)
				benchServe(b, h, version, body, samples, 0)
			})

			b.Run(name+"/decoder=gogo", func(b *testing.B) {
				app := nopAppender{}
				sb := labels.NewScratchBuilder(8)
				b.ReportAllocs()
				b.SetBytes(int64(len(body)))
				cpu0 := cputime.Process()
				for b.Loop() {
					raw, err := snappy.Decode(nil, body)
					if err != nil {
						b.Fatal(err)
					}
					if version == 1 {
						var req prompb.WriteRequest
						if err := req.Unmarshal(raw); err != nil {
							b.Fatal(err)
						}
						for _, ts := range req.Timeseries {
							ls := ts.ToLabels(&sb, nil)
							var ref SeriesRef
							for _, s := range ts.Samples {
								ref, _ = app.Append(ref, ls, 0, s.Timestamp, s.Value)
							}
						}
					} else {
						var req writev2.Request
						if err := req.Unmarshal(raw); err != nil {
							b.Fatal(err)
						}
						for _, ts := range req.Timeseries {
							ls, err := ts.ToLabels(&sb, req.Symbols)
							if err != nil {
								b.Fatal(err)
							}
							var ref SeriesRef
							for _, s := range ts.Samples {
								ref, _ = app.Append(ref, ls, s.StartTimestamp, s.Timestamp, s.Value)
							}
						}
					}
				}
				b.ReportMetric(float64(cputime.Process()-cpu0)/(samples*float64(b.N)), "cpu-ns/sample")
				b.ReportMetric(samples*float64(b.N)/b.Elapsed().Seconds(), "samples/s")
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/samples, "ns/sample")
			})
		}
	}
}

// BenchmarkHTTPIngest posts the same payloads over loopback HTTP, one request
// at a time, to this handler (over an appender that keeps nothing) and to
// Debian's Prometheus 2.42 started with --web.enable-remote-write-receiver,
// which appends to its TSDB head and WAL. Prometheus 2.42 speaks only remote
// write 1.0, so receiver=prometheus runs for version=1 only. Every request
// carries new timestamps so that Prometheus accepts all of it. Both receivers
// run as separate processes (this handler in a child copy of the test
// binary); besides samples/s the benchmark reports each receiver's CPU time
// per sample, read from /proc, which a busy machine disturbs less than wall
// time.
//
//	go test -run '^$' -bench BenchmarkHTTPIngest -benchtime 200x -count 5 ./remotewrite
func BenchmarkHTTPIngest(b *testing.B) {
	type target struct {
		name string
		url  string
		pid  int
	}
	var targets []target
	srvShale, pid := startBenchServer(b)
	targets = append(targets, target{"shale", srvShale + "/api/v1/write", pid})
	if os.Getenv("SHALE_BENCH_NO_PROMETHEUS") == "" {
		addr, p := startPrometheus(b, false, "", "--web.enable-remote-write-receiver")
		targets = append(targets, target{"prometheus", "http://" + addr + "/api/v1/write", p.Cmd.Process.Pid})
	}
	client := &http.Client{Timeout: 30 * time.Second}
	b.Cleanup(client.CloseIdleConnections)

	// Each (target, payload) gets its own series so that timestamps stay
	// increasing per series across sub-benchmarks and repetitions.
	round := 0
	for _, version := range []int{1, 2} {
		for _, p := range benchPayloads {
			for _, tg := range targets {
				if tg.name == "prometheus" && version == 2 {
					continue
				}
				name := fmt.Sprintf("version=%d/payload=%s/receiver=%s", version, p.name, tg.name)
				b.Run(name, func(b *testing.B) {
					round++
					prefix := "r" + strconv.Itoa(round) + "_"
					t0 := time.Now().Add(-30 * time.Minute).UnixMilli()
					samples := float64(p.series * p.perSeries)
					cpu0 := cpuSeconds(b, tg.pid)
					i := 0
					for b.Loop() {
						b.StopTimer()
						series := nodePayload(p.series, p.perSeries, t0+int64(i*p.perSeries)*100)
						for j := range series {
							series[j].Labels = relabel(series[j].Labels, prefix)
							for k := range series[j].Samples {
								series[j].Samples[k].T = t0 + int64(i*p.perSeries+k)*100
							}
						}
						body := encodeBody(b, version, series)
						b.StartTimer()
						postBody(b, client, tg.url, version, body)
						i++
					}
					cpu := cpuSeconds(b, tg.pid) - cpu0
					b.ReportMetric(samples*float64(b.N)/b.Elapsed().Seconds(), "samples/s")
					b.ReportMetric(cpu*1e9/(samples*float64(b.N)), "cpu-ns/sample")
				})
			}
		}
	}
}

func relabel(ls labels.Labels, prefix string) labels.Labels {
	bld := labels.NewBuilder(ls)
	bld.Set(model.MetricNameLabel, prefix+ls.Get(model.MetricNameLabel))
	return bld.Labels()
}

func postBody(b *testing.B, client *http.Client, url string, version int, body []byte) {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("Content-Type", contentType(version))
	req.Header.Set("Content-Encoding", "snappy")
	if version == 1 {
		req.Header.Set("X-Prometheus-Remote-Write-Version", "0.1.0")
	} else {
		req.Header.Set("X-Prometheus-Remote-Write-Version", "2.0.0")
	}
	resp, err := client.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b.Fatalf("%s: %s: %s", url, resp.Status, msg)
	}
}

// benchServerEnv makes the test binary serve the handler, over an appender
// that keeps nothing, on the address it names (see TestBenchServerProcess).
const benchServerEnv = "SHALE_RW_BENCH_SERVER_ADDR"

// startBenchServer runs this test binary as a separate receiver process, so
// that its CPU time can be read like Prometheus'. It returns the base URL and
// the process id.
func startBenchServer(b *testing.B) (string, int) {
	addr := "127.0.0.1:" + strconv.Itoa(e2e.FreePort(b))
	cmd := exec.Command(os.Args[0], "-test.run=^TestBenchServerProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), benchServerEnv+"="+addr)
	p := e2e.StartProcess(b, cmd)
	e2e.WaitHTTP(b, 30*time.Second, "http://"+addr+"/ready")
	return "http://" + addr, p.Cmd.Process.Pid
}

// TestBenchServerProcess is the receiver process of BenchmarkHTTPIngest; it
// does nothing unless SHALE_RW_BENCH_SERVER_ADDR is set, and then serves
// until it is terminated.
func TestBenchServerProcess(t *testing.T) {
	addr := os.Getenv(benchServerEnv)
	if addr == "" {
		t.Skip("only runs as the receiver of BenchmarkHTTPIngest")
	}
	h, _ := newTestHandler(t, nopAppendable{}, nil)
	h.now = time.Now
	mux := http.NewServeMux()
	mux.Handle("POST /api/v1/write", h)
	mux.HandleFunc("GET /ready", func(http.ResponseWriter, *http.Request) {})
	srv := &http.Server{Addr: addr, Handler: mux}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	go func() {
		<-sig
		_ = srv.Close()
	}()
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		t.Fatal(err)
	}
	signal.Stop(sig)
}

// cpuSeconds returns the user+system CPU time of process pid from /proc.
func cpuSeconds(b *testing.B, pid int) float64 {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		b.Fatal(err)
	}
	// Fields after the parenthesised command name; utime and stime are the
	// 14th and 15th fields of the line.
	s := string(raw)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	utime, _ := strconv.ParseFloat(fields[11], 64)
	stime, _ := strconv.ParseFloat(fields[12], 64)
	return (utime + stime) / 100 // USER_HZ
}

// nopAppendableV2 is an upstream AppendableV2 (with ExemplarAppenderV2) that
// keeps nothing, for the upstream receiver.
type nopAppendableV2 struct{}

func (nopAppendableV2) AppenderV2(context.Context) storage.AppenderV2 { return nopAppenderV2{} }

type nopAppenderV2 struct{}

func (nopAppenderV2) Append(storage.SeriesRef, labels.Labels, int64, int64, float64, *histogram.Histogram, *histogram.FloatHistogram, storage.AOptions) (storage.SeriesRef, error) {
	return 1, nil
}

func (nopAppenderV2) AppendExemplars(ref storage.SeriesRef, _ labels.Labels, _ []exemplar.Exemplar) (storage.SeriesRef, error) {
	return ref, nil
}
func (nopAppenderV2) Commit() error   { return nil }
func (nopAppenderV2) Rollback() error { return nil }

// benchServe posts body (samples samples of a request of the given version)
// to h over and over, and reports the CPU and wall time a sample. Every
// answer must have status want, or any 2xx when want is 0.
func benchServe(b *testing.B, h http.Handler, version int, body []byte, samples float64, want int) {
	w := &discardWriter{h: http.Header{}}
	req := httptestNewRequest(http.MethodPost, nil)
	req.Header.Set("Content-Type", contentType(version))
	req.Header.Set("Content-Encoding", "snappy")
	rd := bytes.NewReader(body)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	cpu0 := cputime.Process()
	for b.Loop() {
		rd.Reset(body)
		req.Body = io.NopCloser(rd)
		req.ContentLength = int64(len(body))
		w.code = 0
		h.ServeHTTP(w, req)
		if w.code != want && (want != 0 || w.code/100 != 2) {
			b.Fatalf("status %d", w.code)
		}
	}
	b.ReportMetric(float64(cputime.Process()-cpu0)/(samples*float64(b.N)), "cpu-ns/sample")
	b.ReportMetric(samples*float64(b.N)/b.Elapsed().Seconds(), "samples/s")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/samples, "ns/sample")
}
