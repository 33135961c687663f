package main

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang/snappy"
	"github.com/prometheus/prometheus/model/labels"
	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"

	"github.com/shaledb/shale/internal/e2e"
)

// The golden comparison of the OTLP receiver with Prometheus 3: each case
// posts a payload to Shale, with an otlp section in --config.file, and
// compares what Shale then serves (status, series with their samples and
// histograms, exemplars) with what Prometheus 3.16 served for the same
// payload and settings, kept in testdata/otlp/<case>.json. Regenerate the
// golden files with
//
//	SHALE_WRITE_OTLP_GOLDEN=1 go test -run TestOTLPGolden ./cmd/tsdb
//
// which starts .tools/prometheus-3.16 (make peers builds it) with
// --web.enable-otlp-receiver and the case's settings.

const goldenEnv = "SHALE_WRITE_OTLP_GOLDEN"

var prometheus3 = flag.String("prometheus3", "../../.tools/prometheus-3.16", "Prometheus 3 binary that makes the OTLP golden files")

type otlpCase struct {
	name string
	// otlp is the otlp section both servers get.
	otlp string
	// shaleOTLP are Shale's keys of the section that Prometheus sets with
	// features (promFeatures).
	shaleOTLP    string
	promFeatures []string
	payload      func(t0 int64) pmetric.Metrics
	json, gzip   bool
}

var otlpCases = []otlpCase{
	{name: "default", payload: goldenPayload},
	{name: "default-json-gzip", payload: goldenPayload, json: true, gzip: true},
	{
		name: "promote-nhcb-scope",
		otlp: `
  promote_resource_attributes: [deployment.environment, " k8s.pod.name", process.pid]
  keep_identifying_resource_attributes: true
  convert_histograms_to_nhcb: true
  promote_scope_metadata: true
`,
		payload: goldenPayload, gzip: true,
	},
	{
		name: "promote-all",
		otlp: `
  promote_all_resource_attributes: true
  ignore_resource_attributes: [host.name, process.pid]
  label_name_underscore_sanitization: false
  label_name_preserve_multiple_underscores: false
`,
		payload: goldenPayload,
	},
	{name: "no-utf8-escaping-with-suffixes", otlp: "\n  translation_strategy: NoUTF8EscapingWithSuffixes\n", payload: goldenPayload},
	{name: "underscore-escaping-without-suffixes", otlp: "\n  translation_strategy: UnderscoreEscapingWithoutSuffixes\n", payload: goldenPayload, json: true},
	{name: "no-translation", otlp: "\n  translation_strategy: NoTranslation\n  promote_scope_metadata: true\n", payload: goldenPayload},
	{
		name: "native-delta", payload: deltaPayload,
		shaleOTLP:    "\n  native_delta_ingestion: true\n",
		promFeatures: []string{"otlp-native-delta-ingestion"},
	},
}

// goldenResult is what a server stored of a case's payload. Times are
// offsets from the payload's t0 in ms; values are canonical number strings.
type goldenResult struct {
	Status    int              `json:"status"`
	Series    []goldenSeries   `json:"series"`
	Exemplars []goldenExemplar `json:"exemplars"`
	// Metadata by series name. Prometheus serves /api/v1/metadata from its
	// scrape targets only; the golden files take it from what Prometheus
	// remote-writes (2.0, with metadata-wal-records), which is per series.
	// Shale's is read from /api/v1/metadata, by family: the series name's,
	// or the name without a _bucket, _sum or _count suffix.
	Metadata map[string][]goldenMeta `json:"metadata"`
}

type goldenMeta struct {
	Type string `json:"type"`
	Help string `json:"help"`
	Unit string `json:"unit"`
}

// addMeta adds m to the set of metadata of family.
func addMeta(md map[string][]goldenMeta, family string, m goldenMeta) {
	if !slices.Contains(md[family], m) {
		md[family] = append(md[family], m)
		slices.SortFunc(md[family], func(a, b goldenMeta) int { return strings.Compare(jsonString(a), jsonString(b)) })
	}
}

// readMetadata reads /api/v1/metadata and returns the metadata of each of
// the series names.
func readMetadata(t *testing.T, baseURL string, series []goldenSeries) map[string][]goldenMeta {
	t.Helper()
	var byFamily map[string][]goldenMeta
	getJSON(t, baseURL+"/api/v1/metadata", &byFamily)
	out := map[string][]goldenMeta{}
	for _, s := range series {
		name := s.Labels["__name__"]
		ms, ok := byFamily[name]
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			if !ok && strings.HasSuffix(name, suf) {
				ms, ok = byFamily[strings.TrimSuffix(name, suf)]
			}
		}
		for _, m := range ms {
			addMeta(out, name, m)
		}
	}
	return out
}

type goldenSeries struct {
	Labels     map[string]string `json:"labels"`
	Floats     [][2]any          `json:"floats,omitempty"`
	Histograms [][2]any          `json:"histograms,omitempty"`
}

type goldenExemplar struct {
	Series map[string]string `json:"series"`
	Labels map[string]string `json:"labels"`
	Value  string            `json:"value"`
	Offset int64             `json:"offset_ms"`
}

// encodeOTLP encodes md as a case says.
func encodeOTLP(t *testing.T, md pmetric.Metrics, asJSON, gz bool) (body []byte, contentType string) {
	t.Helper()
	req := pmetricotlp.NewExportRequestFromMetrics(md)
	var err error
	contentType = "application/x-protobuf"
	if asJSON {
		body, err = req.MarshalJSON()
		contentType = "application/json"
	} else {
		body, err = req.MarshalProto()
	}
	if err != nil {
		t.Fatal(err)
	}
	if gz {
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		if _, err := zw.Write(body); err != nil {
			t.Fatal(err)
		}
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
		body = b.Bytes()
	}
	return body, contentType
}

// postOTLP posts a case's payload and returns the status and body.
func postOTLP(t *testing.T, baseURL string, c otlpCase, t0 int64) (int, string) {
	t.Helper()
	body, ct := encodeOTLP(t, c.payload(t0), c.json, c.gzip)
	req, err := http.NewRequest(http.MethodPost, baseURL+"/api/v1/otlp/v1/metrics", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", ct)
	if c.gzip {
		req.Header.Set("Content-Encoding", "gzip")
	}
	return send(t, req)
}

// readStored reads back everything stored around t0 through the query API.
func readStored(t *testing.T, baseURL string, t0 int64) ([]goldenSeries, []goldenExemplar) {
	t.Helper()
	at := float64(t0+10*60_000) / 1000
	var matrix []struct {
		Metric     map[string]string `json:"metric"`
		Values     [][2]any          `json:"values"`
		Histograms [][2]any          `json:"histograms"`
	}
	queryResult(t, baseURL, "/api/v1/query", url.Values{
		"query": {`{__name__=~".+"}[30m]`},
		"time":  {strconv.FormatFloat(at, 'f', 3, 64)},
	}, &matrix)
	var series []goldenSeries
	for _, m := range matrix {
		s := goldenSeries{Labels: m.Metric}
		for _, v := range m.Values {
			s.Floats = append(s.Floats, [2]any{offsetMs(t, v[0], t0), canonicalNumbers(v[1])})
		}
		for _, h := range m.Histograms {
			s.Histograms = append(s.Histograms, [2]any{offsetMs(t, h[0], t0), canonicalNumbers(h[1])})
		}
		series = append(series, s)
	}
	slices.SortFunc(series, func(a, b goldenSeries) int { return strings.Compare(jsonString(a.Labels), jsonString(b.Labels)) })

	var exs []struct {
		SeriesLabels map[string]string `json:"seriesLabels"`
		Exemplars    []struct {
			Labels    map[string]string `json:"labels"`
			Value     string            `json:"value"`
			Timestamp float64           `json:"timestamp"`
		} `json:"exemplars"`
	}
	query(t, baseURL, "/api/v1/query_exemplars", url.Values{
		"query": {`{__name__=~".+"}`},
		"start": {strconv.FormatFloat(float64(t0-30*60_000)/1000, 'f', 3, 64)},
		"end":   {strconv.FormatFloat(at, 'f', 3, 64)},
	}, &exs)
	var exemplars []goldenExemplar
	for _, s := range exs {
		for _, e := range s.Exemplars {
			exemplars = append(exemplars, goldenExemplar{
				Series: s.SeriesLabels, Labels: e.Labels, Value: canonicalNumbers(e.Value).(string),
				Offset: int64(math.Round(e.Timestamp*1000)) - t0,
			})
		}
	}
	slices.SortFunc(exemplars, func(a, b goldenExemplar) int { return strings.Compare(jsonString(a), jsonString(b)) })
	return series, exemplars
}

func offsetMs(t *testing.T, ts any, t0 int64) int64 {
	t.Helper()
	f, ok := ts.(float64)
	if !ok {
		t.Fatalf("timestamp %v is not a number", ts)
	}
	return int64(math.Round(f*1000)) - t0
}

// canonicalNumbers rewrites every string that is a number in v to one
// spelling, so that "1e+06" and "1000000" compare equal.
func canonicalNumbers(v any) any {
	switch x := v.(type) {
	case string:
		if f, err := strconv.ParseFloat(x, 64); err == nil {
			return strconv.FormatFloat(f, 'g', -1, 64)
		}
		return x
	case []any:
		out := make([]any, len(x))
		for i := range x {
			out[i] = canonicalNumbers(x[i])
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = canonicalNumbers(e)
		}
		return out
	}
	return v
}

// goldenT0 is a payload time close enough to now for both servers to take
// it, on a whole second.
func goldenT0() int64 { return time.Now().Add(-5 * time.Minute).Truncate(time.Second).UnixMilli() }

func goldenPath(name string) string { return filepath.Join("testdata", "otlp", name+".json") }

func TestOTLPGolden(t *testing.T) {
	if os.Getenv(goldenEnv) == "1" {
		writeOTLPGolden(t)
		return
	}
	for _, c := range otlpCases {
		t.Run(c.name, func(t *testing.T) {
			raw, err := os.ReadFile(goldenPath(c.name))
			if err != nil {
				t.Fatalf("golden file: %v (make it with %s=1)", err, goldenEnv)
			}
			var want goldenResult
			if err := json.Unmarshal(raw, &want); err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			cfgFile := writeFile(t, dir, "shale.yml", "otlp:"+c.otlp+c.shaleOTLP+"\n")
			s := startShale(t, "--storage.path="+filepath.Join(dir, "data"), "--config.file="+cfgFile)
			defer s.stop(t)
			t0 := goldenT0()
			code, body := postOTLP(t, s.url, c, t0)
			series, exemplars := readStored(t, s.url, t0)
			got := goldenResult{Status: code, Series: series, Exemplars: exemplars, Metadata: readMetadata(t, s.url, series)}
			if jsonString(got) != jsonString(want) {
				t.Errorf("Shale stored what Prometheus 3 did not (answer %d %q)\n got: %s\nwant: %s", code, body, indent(got), indent(want))
			}
		})
	}
}

func indent(v any) string {
	b, _ := json.MarshalIndent(v, "", " ")
	return string(b)
}

// writeOTLPGolden runs every case against Prometheus 3 and writes what it
// stored as the golden files.
func writeOTLPGolden(t *testing.T) {
	bin, err := filepath.Abs(*prometheus3)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s: %v (make peers builds it)", bin, err)
	}
	if err := os.MkdirAll(filepath.Join("testdata", "otlp"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range otlpCases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := "global:\n  scrape_interval: 1m\n"
			if c.otlp != "" {
				cfg += "otlp:" + c.otlp
			}
			capture := newMetadataCapture(t)
			defer capture.srv.Close()
			cfg += "remote_write:\n  - url: " + capture.srv.URL + "/write\n    protobuf_message: io.prometheus.write.v2.Request\n    send_native_histograms: true\n    send_exemplars: true\n    queue_config: {batch_send_deadline: 100ms}\n"
			cfgFile := writeFile(t, dir, "prometheus.yml", cfg)
			port := e2e.FreePort(t)
			addr := fmt.Sprintf("127.0.0.1:%d", port)
			// Shale stores a zero sample at a start timestamp, as
			// Prometheus does with created-timestamp-zero-ingestion.
			features := append([]string{"exemplar-storage", "created-timestamp-zero-ingestion", "metadata-wal-records"}, c.promFeatures...)
			cmd := exec.Command(bin, "--config.file="+cfgFile, "--storage.tsdb.path="+filepath.Join(dir, "data"),
				"--web.listen-address="+addr, "--web.enable-otlp-receiver", "--enable-feature="+strings.Join(features, ","))
			p := e2e.StartProcess(t, cmd)
			defer p.Stop()
			waitReady(t, p, "prometheus", addr)
			base := "http://" + addr
			// Prometheus remote-writes only samples newer than its
			// start: the payload's times (from t0-30s on) are ahead of
			// the clock, within both servers' 10 minutes.
			t0 := time.Now().Add(40 * time.Second).Truncate(time.Second).UnixMilli()
			code, body := postOTLP(t, base, c, t0)
			if code != http.StatusOK {
				t.Logf("prometheus answered %d: %s", code, body)
			}
			series, exemplars := readStored(t, base, t0)
			var names []string
			for _, s := range series {
				names = append(names, s.Labels["__name__"])
			}
			md := capture.wait(t, names)
			out, err := json.MarshalIndent(goldenResult{Status: code, Series: series, Exemplars: exemplars, Metadata: md}, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(goldenPath(c.name), append(out, '\n'), 0o644); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// metadataCapture receives Prometheus' remote writes (2.0) and keeps the
// metadata of every series name.
type metadataCapture struct {
	srv  *httptest.Server
	mu   sync.Mutex
	meta map[string]goldenMeta // by series name
}

func newMetadataCapture(t *testing.T) *metadataCapture {
	c := &metadataCapture{meta: map[string]goldenMeta{}}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		raw, err := snappy.Decode(nil, body)
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		var req writev2.Request
		if err := req.Unmarshal(raw); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		var sb labels.ScratchBuilder
		c.mu.Lock()
		defer c.mu.Unlock()
		var samples, hists, exemplars int
		for _, ts := range req.Timeseries {
			samples, hists, exemplars = samples+len(ts.Samples), hists+len(ts.Histograms), exemplars+len(ts.Exemplars)
			ls, err := ts.ToLabels(&sb, req.Symbols)
			if err != nil {
				continue
			}
			m, err := ts.ToMetadata(req.Symbols)
			if err != nil {
				continue
			}
			c.meta[ls.Get("__name__")] = goldenMeta{Type: string(m.Type), Help: m.Help, Unit: m.Unit}
		}
		w.Header().Set("X-Prometheus-Remote-Write-Samples-Written", strconv.Itoa(samples))
		w.Header().Set("X-Prometheus-Remote-Write-Histograms-Written", strconv.Itoa(hists))
		w.Header().Set("X-Prometheus-Remote-Write-Exemplars-Written", strconv.Itoa(exemplars))
		w.WriteHeader(http.StatusNoContent)
	}))
	return c
}

// wait waits until metadata came for every name and returns it.
func (c *metadataCapture) wait(t *testing.T, names []string) map[string][]goldenMeta {
	t.Helper()
	e2e.Eventually(t, 60*time.Second, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, n := range names {
			if _, ok := c.meta[n]; !ok {
				return false
			}
		}
		return true
	}, "metadata of %d series names remote-written by Prometheus", len(names))
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string][]goldenMeta{}
	for name, m := range c.meta {
		if m == (goldenMeta{}) {
			continue
		}
		addMeta(out, name, m)
	}
	return out
}
