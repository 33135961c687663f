package rules

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-openapi/strfmt"
	"github.com/prometheus/alertmanager/api/v2/models"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// TestPostableAlertsAsAlertmanagerModels compares the request body with
// the one Alertmanager's own API v2 models encode, as Prometheus sends it.
func TestPostableAlertsAsAlertmanagerModels(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 4, 5, 678901234, time.UTC)
	alerts := []*notifierAlert{
		{Labels: labels.FromStrings("alertname", "A<&>", "é", "\u2028x"), Annotations: labels.FromStrings("summary", `"quoted" <b>`),
			StartsAt: start, EndsAt: start.Add(4 * time.Minute), GeneratorURL: "http://h:9090/graph?g0.expr=up%3D%3D0&g0.tab=1"},
		{Labels: labels.FromStrings("alertname", "B"), Annotations: labels.EmptyLabels(), StartsAt: start, EndsAt: start.Add(time.Second)},
		{Labels: labels.EmptyLabels(), Annotations: labels.EmptyLabels()}, // zero times
	}
	var want models.PostableAlerts
	for _, a := range alerts {
		set := func(ls labels.Labels) models.LabelSet {
			out := models.LabelSet{}
			ls.Range(func(l labels.Label) { out[l.Name] = l.Value })
			return out
		}
		want = append(want, &models.PostableAlert{
			Annotations: set(a.Annotations), StartsAt: strfmt.DateTime(a.StartsAt), EndsAt: strfmt.DateTime(a.EndsAt),
			Alert: models.Alert{GeneratorURL: strfmt.URI(a.GeneratorURL), Labels: set(a.Labels)},
		})
	}
	wantBody, err := json.Marshal(want)
	require.NoError(t, err)
	got, err := appendPostableAlerts(nil, alerts)
	require.NoError(t, err)
	require.Equal(t, string(wantBody), string(got))
}

// fakeAlertmanager records the alerts posted to it; while blocked it holds
// requests until unblocked.
type fakeAlertmanager struct {
	*httptest.Server
	mu       sync.Mutex
	batches  [][]map[string]any
	auth     []string
	paths    []string
	status   int
	block    chan struct{}
	received chan struct{}
}

func newFakeAlertmanager(t *testing.T) *fakeAlertmanager {
	t.Helper()
	am := &fakeAlertmanager{status: http.StatusOK, received: make(chan struct{}, 1000)}
	am.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		am.mu.Lock()
		block := am.block
		am.mu.Unlock()
		if block != nil {
			<-block
		}
		body, _ := io.ReadAll(r.Body)
		var batch []map[string]any
		if err := json.Unmarshal(body, &batch); err != nil || r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		am.mu.Lock()
		am.batches = append(am.batches, batch)
		am.auth = append(am.auth, r.Header.Get("Authorization"))
		am.paths = append(am.paths, r.URL.Path)
		status := am.status
		am.mu.Unlock()
		w.WriteHeader(status)
		am.received <- struct{}{}
	}))
	t.Cleanup(am.Close)
	return am
}

func (am *fakeAlertmanager) host() string { return strings.TrimPrefix(am.URL, "http://") }

// wait waits for n requests.
func (am *fakeAlertmanager) wait(t *testing.T, n int) {
	t.Helper()
	for range n {
		select {
		case <-am.received:
		case <-time.After(10 * time.Second):
			t.Fatalf("the Alertmanager got fewer than %d requests", n)
		}
	}
}

func (am *fakeAlertmanager) alerts() []map[string]any {
	am.mu.Lock()
	defer am.mu.Unlock()
	var out []map[string]any
	for _, b := range am.batches {
		out = append(out, b...)
	}
	return out
}

func parseConfig(t *testing.T, text string) *Config {
	t.Helper()
	var fc FileConfig
	require.NoError(t, yaml.Unmarshal([]byte(text), &fc))
	cfg, err := fc.Parse("/etc/shale", nil)
	require.NoError(t, err)
	return cfg
}

func newTestNotifier(t *testing.T, capacity int, drain bool) (*notifier, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	n, err := newNotifier(notifierOptions{queueCapacity: capacity, drain: drain, maxBatch: maxBatchSize}, reg, discardLogger())
	require.NoError(t, err)
	t.Cleanup(n.stop)
	return n, reg
}

func firing(name string, extra ...string) *notifierAlert {
	now := time.Now().UTC()
	return &notifierAlert{
		Labels: labels.FromStrings(append([]string{"alertname", name}, extra...)...), Annotations: labels.EmptyLabels(),
		StartsAt: now, EndsAt: now.Add(4 * time.Minute),
	}
}

// TestNotifierSendsToEveryAlertmanager: every Alertmanager of every entry
// gets the alerts at scheme://target/path_prefix/api/v2/alerts, with the
// entry's HTTP settings, the external labels (an alert's own label wins)
// and the relabelling (global, then the entry's); targets dropped by
// relabel_configs are listed apart.
func TestNotifierSendsToEveryAlertmanager(t *testing.T) {
	am1, am2, am3 := newFakeAlertmanager(t), newFakeAlertmanager(t), newFakeAlertmanager(t)
	n, reg := newTestNotifier(t, 100, true)
	cfg := parseConfig(t, `
global: {external_labels: {cluster: eu1, team: core}}
alerting:
  alert_relabel_configs:
  - {source_labels: [severity], regex: debug, action: drop}
  - {target_label: relabelled, replacement: "yes"}
  alertmanagers:
  - static_configs: [{targets: [`+am1.host()+`, `+am2.host()+`]}]
    path_prefix: /prefix/
    basic_auth: {username: u, password: p}
  - static_configs: [{targets: [`+am3.host()+`, 'dropped:9093'], labels: {dc: x}}]
    relabel_configs:
    - {source_labels: [__address__], regex: 'dropped:.*', action: drop}
    alert_relabel_configs:
    - {source_labels: [alertname], regex: OnlyFirstSets, action: drop}
`)
	require.NoError(t, n.applyConfig(cfg))
	var urls []string
	for _, u := range n.alertmanagers(false) {
		urls = append(urls, u.String())
	}
	require.Equal(t, []string{am1.URL + "/prefix/api/v2/alerts", am2.URL + "/prefix/api/v2/alerts", am3.URL + "/api/v2/alerts"}, urls)
	dropped := n.alertmanagers(true)
	require.Len(t, dropped, 1)
	require.Equal(t, "http://dropped:9093/api/v2/alerts", dropped[0].String())
	require.Equal(t, 3.0, testutil.ToFloat64(n.metrics.alertmanagersDiscoveredFn))

	n.send(firing("A", "team", "own"), firing("Debug", "severity", "debug"), firing("OnlyFirstSets"))
	am1.wait(t, 1)
	am2.wait(t, 1)
	am3.wait(t, 1)
	for _, am := range []*fakeAlertmanager{am1, am2} {
		got := am.alerts()
		require.Len(t, got, 2)
		require.Equal(t, map[string]any{"alertname": "A", "cluster": "eu1", "team": "own", "relabelled": "yes"}, got[0]["labels"])
		require.Equal(t, "OnlyFirstSets", got[1]["labels"].(map[string]any)["alertname"])
		require.Equal(t, "Basic dTpw", am.auth[0])
		require.Equal(t, "/prefix/api/v2/alerts", am.paths[0])
	}
	got := am3.alerts()
	require.Len(t, got, 1)
	require.Equal(t, "A", got[0]["labels"].(map[string]any)["alertname"])
	require.Empty(t, am3.auth[0])
	require.Eventually(t, func() bool {
		return testutil.ToFloat64(n.metrics.sent.WithLabelValues(am1.URL+"/prefix/api/v2/alerts")) == 2
	}, 10*time.Second, time.Millisecond)
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP prometheus_notifications_queue_capacity The capacity of the alert notifications queue.
# TYPE prometheus_notifications_queue_capacity gauge
prometheus_notifications_queue_capacity 100
`), "prometheus_notifications_queue_capacity"))
}

// TestNotifierBatchesAndQueue: alerts go in batches of at most 256; a full
// queue drops the oldest; a failed send counts errors and drops its batch;
// a stop sends what is queued.
func TestNotifierBatchesAndQueue(t *testing.T) {
	am := newFakeAlertmanager(t)
	n, _ := newTestNotifier(t, 600, true)
	require.NoError(t, n.applyConfig(parseConfig(t, "alerting: {alertmanagers: [{static_configs: [{targets: ["+am.host()+"]}]}]}\n")))
	u := am.URL + "/api/v2/alerts"
	m := n.metrics

	// Hold the first request so that the rest wait in the queue.
	block := make(chan struct{})
	am.mu.Lock()
	am.block = block
	am.mu.Unlock()
	n.send(firing("first"))
	// Wait until the first alert is taken out of the queue.
	require.Eventually(t, func() bool { return testutil.ToFloat64(m.queueLength.WithLabelValues(u)) == 0 }, 10*time.Second, time.Millisecond)
	var batch []*notifierAlert
	for i := range 700 {
		batch = append(batch, firing("many", "i", string(rune('a'+i%26))+strings.Repeat("x", i/26)))
	}
	n.send(batch...) // 100 more than the queue holds: the first 100 are dropped
	require.Equal(t, 600.0, testutil.ToFloat64(m.queueLength.WithLabelValues(u)))
	require.Equal(t, 100.0, testutil.ToFloat64(m.dropped.WithLabelValues(u)))
	am.mu.Lock()
	am.block = nil
	am.mu.Unlock()
	close(block)
	am.wait(t, 4) // 1, then 256 + 256 + 88
	am.mu.Lock()
	var sizes []int
	for _, b := range am.batches {
		sizes = append(sizes, len(b))
	}
	am.mu.Unlock()
	require.Equal(t, []int{1, 256, 256, 88}, sizes)
	got := am.alerts()
	require.Equal(t, batch[100].Labels.Get("i"), got[1]["labels"].(map[string]any)["i"], "the oldest alerts are the ones dropped")
	require.Eventually(t, func() bool { return testutil.ToFloat64(m.sent.WithLabelValues(u)) == 601 }, 10*time.Second, time.Millisecond)

	// A failing Alertmanager: errors counted, the batch dropped.
	am.mu.Lock()
	am.status = http.StatusInternalServerError
	am.mu.Unlock()
	n.send(firing("fails"), firing("fails too"))
	am.wait(t, 1)
	require.Eventually(t, func() bool { return testutil.ToFloat64(m.errors.WithLabelValues(u)) == 2 }, 10*time.Second, time.Millisecond)
	require.Equal(t, 102.0, testutil.ToFloat64(m.dropped.WithLabelValues(u)))
}

// TestNotifierStop: a stop sends the queue when draining is on, and drops
// it (counted) when off.
func TestNotifierStop(t *testing.T) {
	for _, drain := range []bool{true, false} {
		am := newFakeAlertmanager(t)
		n, _ := newTestNotifier(t, 100, drain)
		require.NoError(t, n.applyConfig(parseConfig(t, "alerting: {alertmanagers: [{static_configs: [{targets: ["+am.host()+"]}]}]}\n")))
		u := am.URL + "/api/v2/alerts"
		block := make(chan struct{})
		am.mu.Lock()
		am.block = block
		am.mu.Unlock()
		n.send(firing("first"))
		require.Eventually(t, func() bool { return testutil.ToFloat64(n.metrics.queueLength.WithLabelValues(u)) == 0 }, 10*time.Second, time.Millisecond)
		n.send(firing("queued"), firing("queued too"))
		loop := n.sets[0].loops[0]
		stopped := make(chan struct{})
		go func() {
			defer close(stopped)
			n.stop()
		}()
		<-loop.stopping // the stop has begun, the first send is still held
		am.mu.Lock()
		am.block = nil
		am.mu.Unlock()
		close(block)
		<-stopped
		want := 1
		if drain {
			want = 3
		}
		require.Len(t, am.alerts(), want, "drain %v", drain)
		n.send(firing("after the stop"))
		require.Len(t, am.alerts(), want)
	}
}

// TestNotifierTimeout: a send that takes longer than the entry's timeout
// fails.
func TestNotifierTimeout(t *testing.T) {
	am := newFakeAlertmanager(t)
	n, _ := newTestNotifier(t, 100, false)
	require.NoError(t, n.applyConfig(parseConfig(t, "alerting: {alertmanagers: [{timeout: 50ms, static_configs: [{targets: ["+am.host()+"]}]}]}\n")))
	block := make(chan struct{})
	am.mu.Lock()
	am.block = block
	am.mu.Unlock()
	defer close(block)
	n.send(firing("slow"))
	u := am.URL + "/api/v2/alerts"
	require.Eventually(t, func() bool { return testutil.ToFloat64(n.metrics.errors.WithLabelValues(u)) == 1 }, 10*time.Second, time.Millisecond)
}

// TestNotifierReload: an entry left as it was keeps its queue and sender;
// a changed one gets new ones; a removed one stops.
func TestNotifierReload(t *testing.T) {
	am1, am2 := newFakeAlertmanager(t), newFakeAlertmanager(t)
	n, _ := newTestNotifier(t, 100, true)
	one := "  - static_configs: [{targets: [" + am1.host() + "]}]\n"
	two := "  - static_configs: [{targets: [" + am2.host() + "]}]\n"
	require.NoError(t, n.applyConfig(parseConfig(t, "alerting:\n  alertmanagers:\n"+one+two)))
	loop1 := n.sets[0].loops[0]
	require.NoError(t, n.applyConfig(parseConfig(t, "alerting:\n  alertmanagers:\n"+one)))
	require.Same(t, loop1, n.sets[0].loops[0], "the unchanged entry keeps its sender")
	require.Len(t, n.alertmanagers(false), 1)
	require.NoError(t, n.applyConfig(parseConfig(t, "alerting:\n  alertmanagers:\n  - {timeout: 5s, static_configs: [{targets: ["+am1.host()+"]}]}\n")))
	require.NotSame(t, loop1, n.sets[0].loops[0], "a changed entry gets a new sender")
	n.send(firing("x"))
	am1.wait(t, 1)
	require.Empty(t, am2.alerts())
}

// TestToNotifierAlerts: a firing alert is sent with its ValidUntil as
// endsAt, a resolved one with its resolution, and the generator URL links
// the expression in the external URL's graph page.
func TestToNotifierAlerts(t *testing.T) {
	ts := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	got := toNotifierAlerts("http://shale:9090", `up == 0`, []*Alert{
		{State: StateFiring, FiredAt: ts, ValidUntil: ts.Add(4 * time.Minute), Labels: labels.FromStrings("alertname", "A")},
		{State: StateInactive, FiredAt: ts, ValidUntil: ts.Add(4 * time.Minute), ResolvedAt: ts.Add(time.Minute), Labels: labels.FromStrings("alertname", "B")},
	})
	require.Equal(t, ts, got[0].StartsAt)
	require.Equal(t, ts.Add(4*time.Minute), got[0].EndsAt)
	require.Equal(t, ts.Add(time.Minute), got[1].EndsAt)
	require.Equal(t, "http://shale:9090/graph?g0.expr=up+%3D%3D+0&g0.tab=1", got[0].GeneratorURL)

	// ValidUntil is 4 x the longer of the group interval and resend delay.
	r := newAlertingRule("A", nil, 0, 0, labels.EmptyLabels(), labels.EmptyLabels(), labels.EmptyLabels(), "", true, nil)
	r.active[1] = &Alert{State: StateFiring, Labels: labels.FromStrings("alertname", "A")}
	sent := r.alertsToSend(ts, time.Minute, 30*time.Second)
	require.Len(t, sent, 1)
	require.Equal(t, ts.Add(4*time.Minute), sent[0].ValidUntil)
	require.Empty(t, r.alertsToSend(ts.Add(time.Minute), time.Minute, 30*time.Second), "resent before the resend delay")
	require.Len(t, r.alertsToSend(ts.Add(time.Minute+time.Millisecond), time.Minute, 30*time.Second), 1)
	sent = r.alertsToSend(ts.Add(2*time.Hour), time.Minute, 5*time.Minute)
	require.Equal(t, ts.Add(2*time.Hour+20*time.Minute), sent[0].ValidUntil)
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// TestNotifierReloadAliases: an entry written with YAML aliases or merges
// gets new queues at every reload, as its text does not show its settings.
func TestNotifierReloadAliases(t *testing.T) {
	am := newFakeAlertmanager(t)
	n, _ := newTestNotifier(t, 100, true)
	text := "alerting:\n  alertmanagers:\n  - &a {timeout: 1s, static_configs: [{targets: [" + am.host() + "]}]}\n  - <<: *a\n    path_prefix: /p\n"
	require.NoError(t, n.applyConfig(parseConfig(t, text)))
	require.Len(t, n.sets, 2)
	require.Equal(t, time.Second, time.Duration(n.sets[1].cfg.Timeout))
	require.Equal(t, "/p", n.sets[1].cfg.PathPrefix)
	full, merged := n.sets[0].loops[0], n.sets[1].loops[0]
	require.NoError(t, n.applyConfig(parseConfig(t, text)))
	require.Same(t, full, n.sets[0].loops[0])
	require.NotSame(t, merged, n.sets[1].loops[0])
}
