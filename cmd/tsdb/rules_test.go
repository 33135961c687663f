package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/prometheus/prompb"

	"github.com/shaledb/shale/internal/e2e"
)

// getJSON GETs u and decodes the data of the API's answer into out.
func getJSON(t *testing.T, u string, out any) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	decodeAnswer(t, resp, "GET "+u, nil, out)
}

// writeFile writes content to dir/name and returns the path.
func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// compareRules are recording rules of the kinds dashboards and alerts use.
const compareRules = `groups:
- name: compare
  interval: 1s
  rules:
  - record: job:rt_requests:rate1m
    expr: sum by (job) (rate(rt_requests_total[1m]))
  - record: job_code:rt_requests:irate30s
    expr: sum by (job, code) (irate(rt_requests_total[30s]))
  - record: rt_latency:p90
    expr: histogram_quantile(0.9, sum by (le) (rate(rt_latency_bucket[1m])))
  - record: rt_temp:avg1m
    expr: avg_over_time(rt_temp[1m])
  - record: job:rt_error_ratio
    expr: sum by (job) (rate(rt_requests_total{code="500"}[1m])) / sum by (job) (rate(rt_requests_total[1m]))
  - record: rt_temp:zoned
    expr: label_replace(rt_temp, "zone", "z-$1", "instance", "i(.*)")
    labels: {source: rule}
  - record: job:rt_temp_hot:count
    expr: count by (job) (rt_temp > 20)
  - record: rt_temp:top2
    expr: topk(2, rt_temp)
  - record: rt_temp:delta
    expr: delta(rt_temp[1m]) * on (instance, job) group_left () (rt_temp > bool 0)
`

// compareSamples are the samples both servers are fed: counters, a classic
// histogram and gauges, one a second over [from, to] (ms).
func compareSamples(from, to int64) []prompb.TimeSeries {
	var out []prompb.TimeSeries
	add := func(v func(k int64) float64, kv ...string) {
		ts := prompb.TimeSeries{}
		for i := 0; i < len(kv); i += 2 {
			ts.Labels = append(ts.Labels, prompb.Label{Name: kv[i], Value: kv[i+1]})
		}
		for t := from; t <= to; t += 1000 {
			ts.Samples = append(ts.Samples, prompb.Sample{Timestamp: t, Value: v((t - from) / 1000)})
		}
		out = append(out, ts)
	}
	for j, job := range []string{"api", "db"} {
		for i := 1; i <= 3; i++ {
			inst := fmt.Sprintf("i%d", i)
			for c, code := range []string{"200", "500"} {
				rate := float64((j+1)*i*(3-2*c)) + 0.25
				add(func(k int64) float64 { return rate * float64(k) }, "__name__", "rt_requests_total", "code", code, "instance", inst, "job", job)
			}
			add(func(k int64) float64 { return 15 + float64(i*(j+1)) + 3*math.Sin(float64(k)/7) }, "__name__", "rt_temp", "instance", inst, "job", job)
		}
	}
	for b, le := range []string{"0.1", "0.5", "1", "+Inf"} {
		per := float64(b*b+1) * 1.5
		add(func(k int64) float64 { return per * float64(k) }, "__name__", "rt_latency_bucket", "le", le, "job", "api")
	}
	return out
}

// rawSamples returns the raw samples of the series query matches over the
// last window before at, by series (labels as JSON) and timestamp (ms).
func rawSamples(t *testing.T, baseURL, query string, at time.Time) map[string]map[int64]float64 {
	t.Helper()
	var res []matrixSeries
	queryResult(t, baseURL, "/api/v1/query", url.Values{"query": {query}, "time": {strconv.FormatInt(at.Unix(), 10)}}, &res)
	out := map[string]map[int64]float64{}
	for _, s := range res {
		key := jsonString(s.Metric)
		out[key] = map[int64]float64{}
		for _, v := range s.Values {
			ts := int64(math.Round(v[0].(float64) * 1000))
			f, err := strconv.ParseFloat(v[1].(string), 64)
			if err != nil {
				t.Fatalf("value %v: %v", v[1], err)
			}
			out[key][ts] = f
		}
	}
	return out
}

// compareRuleList is compareRules as record name -> expression and labels.
var compareRuleList = map[string]struct {
	expr   string
	labels map[string]string
}{
	"job:rt_requests:rate1m":        {`sum by (job) (rate(rt_requests_total[1m]))`, nil},
	"job_code:rt_requests:irate30s": {`sum by (job, code) (irate(rt_requests_total[30s]))`, nil},
	"rt_latency:p90":                {`histogram_quantile(0.9, sum by (le) (rate(rt_latency_bucket[1m])))`, nil},
	"rt_temp:avg1m":                 {`avg_over_time(rt_temp[1m])`, nil},
	"job:rt_error_ratio":            {`sum by (job) (rate(rt_requests_total{code="500"}[1m])) / sum by (job) (rate(rt_requests_total[1m]))`, nil},
	"rt_temp:zoned":                 {`label_replace(rt_temp, "zone", "z-$1", "instance", "i(.*)")`, map[string]string{"source": "rule"}},
	"job:rt_temp_hot:count":         {`count by (job) (rt_temp > 20)`, nil},
	"rt_temp:top2":                  {`topk(2, rt_temp)`, nil},
	"rt_temp:delta":                 {`delta(rt_temp[1m]) * on (instance, job) group_left () (rt_temp > bool 0)`, nil},
}

// recordedQuery selects every series compareRules records, over the last
// minute.
func recordedQuery() string {
	var names []string
	for n := range compareRuleList {
		names = append(names, n)
	}
	sort.Strings(names)
	return `{__name__=~"` + strings.Join(names, "|") + `"}[1m]`
}

// startRulesPeer starts the Prometheus binary bin with the rule file (the
// same path as Shale's) and remote write on, fed the samples.
func startRulesPeer(t *testing.T, bin, dir, name, rulePath string, series []prompb.TimeSeries) string {
	t.Helper()
	cfg := writeFile(t, dir, name+".yml", fmt.Sprintf("rule_files: [%q]\n", rulePath))
	addr := fmt.Sprintf("127.0.0.1:%d", e2e.FreePort(t))
	e2e.StartProcess(t, exec.Command(bin, "--config.file="+cfg, "--web.listen-address="+addr,
		"--storage.tsdb.path="+filepath.Join(dir, name), "--web.enable-remote-write-receiver"))
	u := "http://" + addr
	e2e.WaitHTTP(t, 60*time.Second, u+"/-/ready")
	if code, body, err := remoteWrite(u, series); err != nil || code/100 != 2 {
		t.Fatalf("remote write to %s: %d %s %v", name, code, body, err)
	}
	return u
}

// TestRecordingRulesAgainstPrometheus evaluates one rule file on Shale and
// on Prometheus, both fed the same samples by remote write, and compares
// what they record.
//
// A group's evaluation timestamps are offset within its interval by a hash
// of its file and name, and the hash changed between Prometheus 2 and 3:
// against Debian's Prometheus (2.x) the test checks that both record the
// same series, and that every value Shale recorded is what that Prometheus
// computes for the rule at the same timestamp; against Prometheus 3
// (.tools/prometheus-3.16, when present), whose timestamps are Shale's, it
// compares the recorded samples themselves.
func TestRecordingRulesAgainstPrometheus(t *testing.T) {
	skipEndToEnd(t)
	prom := e2e.RequireBinary(t, "prometheus", "apt-get install prometheus")
	dir := t.TempDir()
	rulePath := writeFile(t, dir, "compare.rules.yml", compareRules)
	shaleCfg := writeFile(t, dir, "shale.yml", fmt.Sprintf("rule_files: [%q]\n", rulePath))

	// The samples run from 3 minutes ago to 2 minutes ahead, so that every
	// evaluation of the next minute sees a full minute of data.
	now := time.Now().Truncate(time.Second)
	series := compareSamples(now.Add(-3*time.Minute).UnixMilli(), now.Add(2*time.Minute).UnixMilli())
	s := startShale(t, "--storage.path="+filepath.Join(dir, "shale"), "--config.file="+shaleCfg)
	if code, body, err := remoteWrite(s.url, series); err != nil || code/100 != 2 {
		t.Fatalf("remote write to Shale: %d %s %v", code, body, err)
	}
	debian := startRulesPeer(t, prom, dir, "debian", rulePath, series)
	peers := map[string]string{"debian": debian}
	if p, err := filepath.Abs("../../.tools/prometheus-3.16"); err == nil {
		if _, err := os.Stat(p); err == nil {
			peers["prometheus-3.16"] = startRulesPeer(t, p, dir, "p3", rulePath, series)
		} else {
			t.Log("no .tools/prometheus-3.16: recorded samples compared with Debian's Prometheus only at Shale's timestamps")
		}
	}

	// Wait until each has recorded at least 15 evaluations of every rule.
	recorded := recordedQuery()
	results := map[string]map[string]map[int64]float64{}
	e2e.Eventually(t, 90*time.Second, func() bool {
		at := time.Now()
		results["shale"] = rawSamples(t, s.url, recorded, at)
		for name, u := range peers {
			results[name] = rawSamples(t, u, recorded, at)
		}
		for _, r := range results {
			if len(r) < 20 {
				return false
			}
			for _, samples := range r {
				if len(samples) < 15 {
					return false
				}
			}
		}
		return true
	}, "every server to record every series 15 times")

	sameValue := func(a, b float64) bool {
		return a == b || (math.IsNaN(a) && math.IsNaN(b)) || math.Abs(a-b) <= 1e-9*math.Max(math.Abs(a), math.Abs(b))
	}
	shale := results["shale"]
	for name := range peers {
		if len(results[name]) != len(shale) {
			t.Errorf("%s recorded %d series, Shale %d", name, len(results[name]), len(shale))
		}
		for k := range results[name] {
			if _, ok := shale[k]; !ok {
				t.Errorf("%s recorded %s, Shale did not", name, k)
			}
		}
	}
	if p3, ok := results["prometheus-3.16"]; ok {
		compared := 0
		for k, p := range p3 {
			for ts, b := range p {
				if a, ok := shale[k][ts]; ok {
					compared++
					if !sameValue(a, b) {
						t.Errorf("%s at %d: Shale %v, Prometheus 3.16 %v", k, ts, a, b)
					}
				}
			}
		}
		if compared < 15*len(p3) {
			t.Errorf("only %d samples at common timestamps with Prometheus 3.16", compared)
		}
		t.Logf("%d recorded samples equal to Prometheus 3.16's", compared)
	}

	// Shale's recorded values against Debian's Prometheus evaluating each
	// rule at the same timestamps (5 per series). Prometheus 2 selects a
	// range closed on the left and Prometheus 3 (Shale's engine) open on
	// the left, so they differ where a timestamp falls on a sample's (whole
	// seconds here). The group's offset within its interval comes from a
	// hash of the rule file's path, a temporary folder, so about one run in
	// a thousand evaluates on whole seconds: those timestamps are left out.
	compared, onSample := 0, 0
	for key, samples := range shale {
		var metric map[string]string
		if err := json.Unmarshal([]byte(key), &metric); err != nil {
			t.Fatal(err)
		}
		rule := compareRuleList[metric["__name__"]]
		var stamps []int64
		for ts := range samples {
			if ts%1000 == 0 {
				onSample++
				continue
			}
			stamps = append(stamps, ts)
		}
		sort.Slice(stamps, func(i, j int) bool { return stamps[i] > stamps[j] })
		for _, ts := range stamps[:min(5, len(stamps))] {
			var res []vectorSample
			queryResult(t, debian, "/api/v1/query", url.Values{"query": {rule.expr}, "time": {strconv.FormatFloat(float64(ts)/1000, 'f', 3, 64)}}, &res)
			found := false
			for _, r := range res {
				r.Metric["__name__"] = metric["__name__"]
				for k, v := range rule.labels {
					r.Metric[k] = v
				}
				if jsonString(r.Metric) != key {
					continue
				}
				found = true
				b, err := strconv.ParseFloat(r.Value[1].(string), 64)
				if err != nil {
					t.Fatal(err)
				}
				compared++
				if !sameValue(samples[ts], b) {
					t.Errorf("%s at %d: Shale recorded %v, Debian's Prometheus computes %v", key, ts, samples[ts], b)
				}
			}
			if !found {
				t.Errorf("%s at %d: Debian's Prometheus computes no such series", key, ts)
			}
		}
	}
	if compared == 0 && onSample == 0 {
		t.Error("no recorded value checked against Debian's Prometheus")
	}
	t.Logf("%d recorded series, %d values checked against Debian's Prometheus, %d left out on a sample's timestamp", len(shale), compared, onSample)
}

// TestRuleFilesRefusedAtStart starts the server with a rule file promtool
// refuses: it must not start, and say what promtool says.
func TestRuleFilesRefusedAtStart(t *testing.T) {
	skipEndToEnd(t)
	promtool := e2e.RequireBinary(t, "promtool", "apt-get install prometheus")
	dir := t.TempDir()
	rulePath := writeFile(t, dir, "bad.yml", "groups:\n- name: g\n  rules:\n  - record: job:x\n    expr: sum(up\n")
	cfg := writeFile(t, dir, "shale.yml", "rule_files: ['*.yml']\n")
	// The glob takes the config file too, which is no rule file either.
	out, err := exec.Command(promtool, "check", "rules", rulePath, cfg).CombinedOutput()
	if err == nil {
		t.Fatalf("promtool accepts the bad rule file:\n%s", out)
	}
	cmd := exec.Command(tsdbBinary, "--web.listen-address=127.0.0.1:0", "--storage.path="+filepath.Join(dir, "data"), "--config.file="+cfg)
	cmd.Dir = dir
	got, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("tsdb started with a bad rule file:\n%s", got)
	}
	for _, line := range strings.Split(string(out), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "Checking") || line == "FAILED:" {
			continue
		}
		// The server names the files by the pattern's path.
		line = strings.ReplaceAll(line, dir+"/", "")
		if !strings.Contains(strings.ReplaceAll(string(got), `\n`, "\n"), line) && !strings.Contains(string(got), strconv.Quote(line)[1:len(strconv.Quote(line))-1]) {
			t.Errorf("the server's refusal lacks promtool's %q:\n%s", line, got)
		}
	}
}

// alertWebhook is the test's Alertmanager receiver: it keeps every alert it
// is sent, by status.
type alertWebhook struct {
	mu       sync.Mutex
	received []map[string]any
}

func (h *alertWebhook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var msg struct {
		Alerts []map[string]any `json:"alerts"`
	}
	body, _ := io.ReadAll(r.Body)
	if err := json.Unmarshal(body, &msg); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	h.mu.Lock()
	h.received = append(h.received, msg.Alerts...)
	h.mu.Unlock()
}

// has reports whether an alert named name with status came in.
func (h *alertWebhook) has(name, status string) map[string]any {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, a := range h.received {
		labels, _ := a["labels"].(map[string]any)
		if labels["alertname"] == name && a["status"] == status {
			return a
		}
	}
	return nil
}

// startAlertmanager starts Debian's Alertmanager sending every alert to
// hook at once, and returns its address.
func startAlertmanager(t *testing.T, dir, hook string) string {
	t.Helper()
	am := e2e.RequireBinary(t, "prometheus-alertmanager", "apt-get install prometheus-alertmanager")
	cfg := writeFile(t, dir, "alertmanager.yml", fmt.Sprintf(`route:
  receiver: hook
  group_by: [alertname]
  group_wait: 0s
  group_interval: 1s
  repeat_interval: 1h
receivers:
- name: hook
  webhook_configs:
  - url: %s
    send_resolved: true
`, hook))
	addr := fmt.Sprintf("127.0.0.1:%d", e2e.FreePort(t))
	e2e.StartProcess(t, exec.Command(am, "--config.file="+cfg, "--web.listen-address="+addr,
		"--storage.path="+filepath.Join(dir, "am"), "--cluster.listen-address=", "--log.level=debug"))
	e2e.WaitHTTP(t, 60*time.Second, "http://"+addr+"/-/ready")
	return addr
}

// feeder remote-writes one gauge every 200ms with the value it is set to,
// until stopped.
type feeder struct {
	value atomic.Int64
	stop  chan struct{}
	done  chan struct{}
}

func startFeeder(t *testing.T, baseURL, name string, v int64) *feeder {
	f := &feeder{stop: make(chan struct{}), done: make(chan struct{})}
	f.value.Store(v)
	go func() {
		defer close(f.done)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			_, _, _ = remoteWrite(baseURL, []prompb.TimeSeries{{
				Labels:  []prompb.Label{{Name: "__name__", Value: name}, {Name: "job", Value: "e2e"}},
				Samples: []prompb.Sample{{Timestamp: time.Now().UnixMilli(), Value: float64(f.value.Load())}},
			}})
			select {
			case <-f.stop:
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(f.halt)
	return f
}

func (f *feeder) halt() {
	select {
	case <-f.stop:
	default:
		close(f.stop)
	}
	<-f.done
}

type alertsAnswer struct {
	Alerts []struct {
		Labels   map[string]string `json:"labels"`
		State    string            `json:"state"`
		ActiveAt time.Time         `json:"activeAt"`
	} `json:"alerts"`
}

// alertState returns the state and activeAt of the alert named name, or "".
func alertState(t *testing.T, baseURL, name string) (string, time.Time) {
	t.Helper()
	resp, err := http.Get(baseURL + "/api/v1/alerts")
	if err != nil {
		t.Fatalf("GET /api/v1/alerts: %v", err)
	}
	defer resp.Body.Close()
	var r apiResponse
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || r.Status != "success" {
		t.Fatalf("decode /api/v1/alerts: %v %+v", err, r)
	}
	var a alertsAnswer
	if err := json.Unmarshal(r.Data, &a); err != nil {
		t.Fatal(err)
	}
	for _, x := range a.Alerts {
		if x.Labels["alertname"] == name {
			return x.State, x.ActiveAt
		}
	}
	return "", time.Time{}
}

// TestAlertThroughAlertmanager: an alert goes pending, then firing, and
// Debian's Alertmanager delivers it to the test's webhook with the external
// labels and annotations; once its expression no longer holds it is resolved
// and delivered as such.
func TestAlertThroughAlertmanager(t *testing.T) {
	skipEndToEnd(t)
	dir := t.TempDir()
	hook := &alertWebhook{}
	srv := httptest.NewServer(hook)
	defer srv.Close()
	amAddr := startAlertmanager(t, dir, srv.URL)
	writeFile(t, dir, "alerts.rules.yml", `groups:
- name: alerts
  interval: 500ms
  rules:
  - alert: TooHot
    expr: e2e_temp > 50
    for: 2s
    labels: {severity: page}
    annotations: {summary: "{{ $labels.job }} at {{ $value }}"}
`)
	cfg := writeFile(t, dir, "shale.yml", fmt.Sprintf(`global:
  external_labels: {cluster: e2e}
rule_files: ['*.rules.yml']
alerting:
  alert_relabel_configs:
  - {source_labels: [severity], target_label: relabelled, replacement: "yes"}
  alertmanagers:
  - static_configs: [{targets: [%q]}]
    timeout: 5s
`, amAddr))
	s := startShale(t, "--storage.path="+filepath.Join(dir, "data"), "--config.file="+cfg, "--rules.alert.resend-delay=1s")

	var ams struct {
		Active []struct {
			URL string `json:"url"`
		} `json:"activeAlertmanagers"`
	}
	getJSON(t, s.url+"/api/v1/alertmanagers", &ams)
	if len(ams.Active) != 1 || ams.Active[0].URL != "http://"+amAddr+"/api/v2/alerts" {
		t.Fatalf("/api/v1/alertmanagers: %+v", ams)
	}

	f := startFeeder(t, s.url, "e2e_temp", 80)
	e2e.Eventually(t, 30*time.Second, func() bool { st, _ := alertState(t, s.url, "TooHot"); return st == "pending" }, "the alert to be pending")
	e2e.Eventually(t, 30*time.Second, func() bool { st, _ := alertState(t, s.url, "TooHot"); return st == "firing" }, "the alert to fire")
	var got map[string]any
	e2e.Eventually(t, 30*time.Second, func() bool { got = hook.has("TooHot", "firing"); return got != nil }, "Alertmanager to deliver the firing alert")
	labels := got["labels"].(map[string]any)
	if labels["cluster"] != "e2e" || labels["severity"] != "page" || labels["relabelled"] != "yes" || labels["job"] != "e2e" {
		t.Errorf("delivered labels %v: want cluster=e2e (external), severity=page, relabelled=yes, job=e2e", labels)
	}
	if ann := got["annotations"].(map[string]any); ann["summary"] != "e2e at 80" {
		t.Errorf("delivered annotations %v: want summary \"e2e at 80\"", ann)
	}
	if gen, _ := got["generatorURL"].(string); !strings.Contains(gen, "/graph?g0.expr=") {
		t.Errorf("generatorURL %q", gen)
	}
	// Prometheus' self-metrics of the notifier and the rule manager.
	for name, want := range map[string]string{
		"prometheus_notifications_alertmanagers_discovered":                                                          "1",
		"prometheus_notifications_queue_capacity":                                                                    "10000",
		`prometheus_notifications_dropped_total{alertmanager="http://` + amAddr + `/api/v2/alerts"}`:                 "0",
		`prometheus_notifications_errors_total{alertmanager="http://` + amAddr + `/api/v2/alerts"}`:                  "0",
		`prometheus_rule_group_rules{rule_group="` + filepath.Join(dir, "alerts.rules.yml") + `;alerts"}`:            "1",
		`prometheus_rule_group_interval_seconds{rule_group="` + filepath.Join(dir, "alerts.rules.yml") + `;alerts"}`: "0.5",
	} {
		if v := metricValue(t, s.url, name); v != want {
			t.Errorf("%s = %q, want %s", name, v, want)
		}
	}
	if v, _ := strconv.ParseFloat(metricValue(t, s.url, `prometheus_notifications_sent_total{alertmanager="http://`+amAddr+`/api/v2/alerts"}`), 64); v < 1 {
		t.Errorf("prometheus_notifications_sent_total = %v after a delivery", v)
	}
	var series []vectorSample
	queryResult(t, s.url, "/api/v1/query", url.Values{"query": {`ALERTS{alertname="TooHot",alertstate="firing"}`}}, &series)
	if len(series) != 1 {
		t.Errorf("ALERTS for the firing alert: %v", series)
	}

	f.value.Store(20)
	e2e.Eventually(t, 60*time.Second, func() bool { return hook.has("TooHot", "resolved") != nil }, "Alertmanager to deliver the resolved alert")
	if st, _ := alertState(t, s.url, "TooHot"); st != "" {
		t.Errorf("the resolved alert is still %s", st)
	}
	f.halt()
	s.stop(t)
}

// TestAlertForStateRestoredAfterKill kills the server (SIGKILL) while an
// alert is pending: after the restart it keeps counting its 'for' from where
// it was (less the time down, as Prometheus does), rather than from the
// restart.
func TestAlertForStateRestoredAfterKill(t *testing.T) {
	skipEndToEnd(t)
	dir := t.TempDir()
	writeFile(t, dir, "alerts.rules.yml", `groups:
- name: alerts
  interval: 500ms
  rules:
  - alert: Slow
    expr: e2e_load > 1
    for: 10m
`)
	cfg := writeFile(t, dir, "shale.yml", "rule_files: ['*.rules.yml']\n")
	args := []string{"--storage.path=" + filepath.Join(dir, "data"), "--config.file=" + cfg, "--rules.alert.for-grace-period=1s"}
	s := startShale(t, args...)
	f := startFeeder(t, s.url, "e2e_load", 5)
	var first time.Time
	e2e.Eventually(t, 30*time.Second, func() bool {
		var st string
		st, first = alertState(t, s.url, "Slow")
		return st == "pending"
	}, "the alert to be pending")
	// Pending for a while, with ALERTS_FOR_STATE written every evaluation.
	e2e.Eventually(t, 30*time.Second, func() bool {
		var res []vectorSample
		queryResult(t, s.url, "/api/v1/query", url.Values{"query": {`count_over_time(ALERTS_FOR_STATE{alertname="Slow"}[1m])`}}, &res)
		return len(res) == 1 && res[0].Value[1] != "1" && time.Since(first) > 8*time.Second
	}, "several evaluations of the pending alert")
	f.halt()
	s.kill(t)
	killed := time.Now()

	pendingBefore := killed.Sub(first)

	restarted := time.Now()
	s = startShale(t, args...)
	f = startFeeder(t, s.url, "e2e_load", 5)
	// Restored (after the group's second evaluation), activeAt moves on by
	// the time down only: the alert keeps the time it had been pending, and
	// is active since well before the restart. A fresh alert would be active
	// since after it.
	e2e.Eventually(t, 30*time.Second, func() bool {
		st, restored := alertState(t, s.url, "Slow")
		return st == "pending" && restored.Before(restarted.Add(-pendingBefore/2))
	}, "the alert to be pending since before the restart (first active at %s, killed at %s after %s pending, restarted at %s)",
		first, killed, pendingBefore, restarted)
	f.halt()
	s.stop(t)
}

// ruleNames returns the names of the rules /api/v1/rules lists, by group.
func ruleNames(t *testing.T, baseURL string) string {
	t.Helper()
	var rules struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Name string `json:"name"`
			} `json:"rules"`
		} `json:"groups"`
	}
	getJSON(t, baseURL+"/api/v1/rules", &rules)
	var b strings.Builder
	for _, g := range rules.Groups {
		b.WriteString(g.Name + ":")
		for _, r := range g.Rules {
			b.WriteString(" " + r.Name)
		}
		b.WriteString(";")
	}
	return b.String()
}

// metricValue returns the value of the unlabelled metric name on /metrics.
func metricValue(t *testing.T, baseURL, name string) string {
	t.Helper()
	_, body := sendGet(t, baseURL+"/metrics")
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return v
		}
	}
	return ""
}

func postReload(t *testing.T, baseURL string) (int, string) {
	t.Helper()
	return sendPost(t, baseURL+"/-/reload", "", nil)
}

// TestQuit: POST /-/quit stops the server as Prometheus does with
// --web.enable-lifecycle, cleanly and keeping what it acknowledged; without
// the flag it is 403, and GET is 405. /-/healthy, /-/ready and /health
// (VictoriaMetrics' liveness path, "OK") answer 405 to other methods than
// GET and HEAD.
func TestQuit(t *testing.T) {
	skipEndToEnd(t)
	t.Parallel()
	dir := t.TempDir()
	s := startShale(t, "--storage.path="+filepath.Join(dir, "data0"))
	if code, body := sendPost(t, s.url+"/-/quit", "", nil); code != http.StatusForbidden || body != "Lifecycle API is not enabled." {
		t.Errorf("POST /-/quit without --web.enable-lifecycle: %d %q", code, body)
	}
	if code, body := sendGet(t, s.url+"/-/quit"); code != http.StatusMethodNotAllowed || body != "Only POST or PUT requests allowed" {
		t.Errorf("GET /-/quit: %d %q", code, body)
	}
	for _, p := range []string{"/-/healthy", "/-/ready", "/health"} {
		if code, body := sendPost(t, s.url+p, "", nil); code != http.StatusMethodNotAllowed {
			t.Errorf("POST %s: %d %q", p, code, body)
		}
		if code, body := sendGet(t, s.url+p); code != http.StatusOK || (p == "/health" && body != "OK") {
			t.Errorf("GET %s: %d %q", p, code, body)
		}
	}
	s.stop(t)

	data := filepath.Join(dir, "data")
	s = startShale(t, "--storage.path="+data, "--web.enable-lifecycle")
	now := time.Now().UnixMilli()
	series := []prompb.TimeSeries{{
		Labels:  []prompb.Label{{Name: "__name__", Value: "quit_test"}},
		Samples: []prompb.Sample{{Timestamp: now, Value: 42}},
	}}
	if code, body, err := remoteWrite(s.url, series); err != nil || code/100 != 2 {
		t.Fatalf("remote write: %d %q %v", code, body, err)
	}
	if code, body := sendPost(t, s.url+"/-/quit", "", nil); code != http.StatusOK || body != "Requesting termination... Goodbye!" {
		t.Fatalf("POST /-/quit: %d %q", code, body)
	}
	e2e.Eventually(t, 60*time.Second, func() bool {
		exited, _ := s.proc.Exited()
		return exited
	}, "tsdb to exit after POST /-/quit")
	if _, err := s.proc.Exited(); err != nil {
		t.Fatalf("tsdb after POST /-/quit: %v\n%s", err, s.proc.Output())
	}

	s = startShale(t, "--storage.path="+data)
	var res []vectorSample
	queryResult(t, s.url, "/api/v1/query", url.Values{"query": {"quit_test"}, "time": {strconv.FormatInt(now/1000+1, 10)}}, &res)
	if len(res) != 1 || fmt.Sprint(res[0].Value[1]) != "42" {
		t.Errorf("quit_test after the restart: %v", res)
	}
	s.stop(t)
}

// TestReload reloads good and bad rule files through POST /-/reload and
// SIGHUP: a good one takes effect, a bad one is refused with its reason
// (answer, log, prometheus_config_last_reload_successful) and the rules in
// force stay.
func TestReload(t *testing.T) {
	skipEndToEnd(t)
	dir := t.TempDir()
	rulePath := writeFile(t, dir, "a.rules.yml", "groups:\n- name: a\n  rules:\n  - record: a:up\n    expr: vector(1)\n")
	cfg := writeFile(t, dir, "shale.yml", "rule_files: ['*.rules.yml']\n")

	// Without --web.enable-lifecycle, as Prometheus.
	s := startShale(t, "--storage.path="+filepath.Join(dir, "data0"), "--config.file="+cfg)
	if code, body := postReload(t, s.url); code != http.StatusForbidden || body != "Lifecycle API is not enabled." {
		t.Errorf("POST /-/reload without --web.enable-lifecycle: %d %q", code, body)
	}
	s.stop(t)

	s = startShale(t, "--storage.path="+filepath.Join(dir, "data"), "--config.file="+cfg, "--web.enable-lifecycle")
	if got := ruleNames(t, s.url); got != "a: a:up;" {
		t.Fatalf("rules at start: %q", got)
	}
	writeFile(t, dir, "b.rules.yml", "groups:\n- name: b\n  rules:\n  - alert: B\n    expr: vector(1) > 2\n")
	if code, body := postReload(t, s.url); code != http.StatusOK {
		t.Fatalf("reload of a good file: %d %s", code, body)
	}
	if got := ruleNames(t, s.url); got != "a: a:up;b: B;" {
		t.Fatalf("rules after the reload: %q", got)
	}
	if v := metricValue(t, s.url, "prometheus_config_last_reload_successful"); v != "1" {
		t.Errorf("prometheus_config_last_reload_successful = %q after a good reload", v)
	}
	okTime := metricValue(t, s.url, "prometheus_config_last_reload_success_timestamp_seconds")

	writeFile(t, dir, "a.rules.yml", "groups:\n- name: a\n  rules:\n  - record: a:up\n    expr: sum(\n")
	code, body := postReload(t, s.url)
	if code != http.StatusInternalServerError || !strings.Contains(body, "failed to reload config") || !strings.Contains(body, "could not parse expression") || !strings.Contains(body, rulePath) {
		t.Errorf("reload of a bad file: %d %q; want 500 naming the file and the parse error", code, body)
	}
	if got := ruleNames(t, s.url); got != "a: a:up;b: B;" {
		t.Errorf("rules after a bad reload: %q; want the running ones kept", got)
	}
	if v := metricValue(t, s.url, "prometheus_config_last_reload_successful"); v != "0" {
		t.Errorf("prometheus_config_last_reload_successful = %q after a bad reload", v)
	}
	if v := metricValue(t, s.url, "prometheus_config_last_reload_success_timestamp_seconds"); v != okTime {
		t.Errorf("the success timestamp moved on a bad reload: %s -> %s", okTime, v)
	}
	if out := s.proc.Output(); !strings.Contains(out, "Error reloading config") {
		t.Errorf("the log does not say why the reload failed:\n%s", out)
	}

	// A broken config file (not only a rule file) is refused too.
	writeFile(t, dir, "a.rules.yml", "groups:\n- name: a\n  rules:\n  - record: a:up\n    expr: vector(2)\n")
	writeFile(t, dir, "shale.yml", "rule_files: ['*.rules.yml']\nalerting: {alertmanagers: [{kubernetes_sd_configs: [{role: pod}]}]}\n")
	if code, body := postReload(t, s.url); code != http.StatusInternalServerError {
		t.Errorf("reload of a config file with an unsupported discovery: %d %q", code, body)
	}

	// SIGHUP, once the file is right again.
	writeFile(t, dir, "shale.yml", "rule_files: ['a.rules.yml']\n")
	if err := s.proc.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	e2e.Eventually(t, 30*time.Second, func() bool {
		return ruleNames(t, s.url) == "a: a:up;" && metricValue(t, s.url, "prometheus_config_last_reload_successful") == "1"
	}, "SIGHUP to load the fixed file")
	s.stop(t)
}

// TestReaderServesWritersRules: a read replica evaluates no rule and
// answers the rule endpoints from the writer.
func TestReaderServesWritersRules(t *testing.T) {
	skipEndToEnd(t)
	dir := t.TempDir()
	writeFile(t, dir, "a.rules.yml", "groups:\n- name: a\n  rules:\n  - record: a:up\n    expr: vector(1)\n")
	cfg := writeFile(t, dir, "shale.yml", "rule_files: ['*.rules.yml']\n")
	w := startShale(t, "--storage.path="+filepath.Join(dir, "data"), "--config.file="+cfg)
	r := startShale(t, "--storage.path="+filepath.Join(dir, "data"), "--config.file="+cfg, "--mode=reader")
	if got := ruleNames(t, r.url); got != "a: a:up;" {
		t.Errorf("the reader's rules: %q", got)
	}
	if v := metricValue(t, r.url, `prometheus_rule_group_rules{rule_group="`+filepath.Join(dir, "a.rules.yml")+`;a"}`); v != "" {
		t.Errorf("the reader evaluates rules: prometheus_rule_group_rules = %s", v)
	}
	w.stop(t)
	code, body := sendGet(t, r.url+"/api/v1/rules")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "evaluated by the writer") {
		t.Errorf("the reader's rules with the writer gone: %d %s", code, body)
	}
	r.stop(t)
}
