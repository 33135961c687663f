package rules

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/grafana/regexp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/util/teststorage"

	shalepromql "github.com/shaledb/shale/promql"
)

const testRules = `groups:
- name: rec
  interval: 50ms
  rules:
  - record: m:sum
    expr: sum(m)
- name: alerts
  interval: 50ms
  rules:
  - alert: High
    expr: m > 1
    labels: {severity: page}
`

// TestManagerAndHandler evaluates rules over a storage through the upstream
// engine, and reads them back through Handler with its filters.
func TestManagerAndHandler(t *testing.T) {
	st := teststorage.New(t)
	defer st.Close()
	app := st.Appender(t.Context())
	if _, err := app.Append(0, labels.FromStrings("__name__", "m", "i", "a"), time.Now().UnixMilli(), 2); err != nil {
		t.Fatal(err)
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	ng := promql.NewEngine(promql.EngineOpts{MaxSamples: 1e6, Timeout: time.Minute, LookbackDelta: 5 * time.Minute})
	defer ng.Close()

	dir := t.TempDir()
	rulePath := filepath.Join(dir, "r.yml")
	if err := os.WriteFile(rulePath, []byte(testRules), 0o644); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m, err := New(DefaultOptions(), Components{
		Appendable: st, Queryable: st, QueryFunc: shalepromql.EngineQueryFunc(ng, st),
		Parser: parser.NewParser(parser.Options{}), Registerer: reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
	cfg := DefaultConfig()
	cfg.RuleFiles = []string{rulePath}
	if err := m.ApplyConfig(cfg); err != nil {
		t.Fatal(err)
	}
	m.Run()

	srv := httptest.NewServer(Handler(m, nil, nil))
	defer srv.Close()
	get := func(path string) string {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(get("/api/v1/alerts"), `"state":"firing"`) {
		if time.Now().After(deadline) {
			t.Fatalf("the alert did not fire: %s", get("/api/v1/alerts"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	var rules struct {
		Data struct {
			Groups []struct {
				Name  string `json:"name"`
				Rules []struct {
					Name string `json:"name"`
					Type string `json:"type"`
				} `json:"rules"`
			} `json:"groups"`
			Next string `json:"groupNextToken"`
		} `json:"data"`
	}
	for _, c := range []struct{ query, want string }{
		{"", "alerts:High/alerting rec:m:sum/recording"},
		{"?type=record", "rec:m:sum/recording"},
		{"?type=alert", "alerts:High/alerting"},
		{"?rule_group[]=rec", "rec:m:sum/recording"},
		{"?rule_name[]=High", "alerts:High/alerting"},
		{"?file[]=" + rulePath, "alerts:High/alerting rec:m:sum/recording"},
		{"?file[]=other", ""},
		{"?group_limit=1", "alerts:High/alerting next"},
	} {
		rules.Data.Groups, rules.Data.Next = nil, ""
		if err := json.Unmarshal([]byte(get("/api/v1/rules"+c.query)), &rules); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, g := range rules.Data.Groups {
			for _, r := range g.Rules {
				got = append(got, g.Name+":"+r.Name+"/"+r.Type)
			}
		}
		if rules.Data.Next != "" {
			got = append(got, "next")
		}
		if s := strings.Join(got, " "); s != c.want {
			t.Errorf("/api/v1/rules%s: %q, want %q", c.query, s, c.want)
		}
	}
	if got := get("/api/v1/rules?type=x"); !strings.Contains(got, `"errorType":"bad_data"`) {
		t.Errorf("bad type: %s", got)
	}
	if got := get("/api/v1/alertmanagers"); got != `{"status":"success","data":{"activeAlertmanagers":[],"droppedAlertmanagers":[]}}` {
		t.Errorf("/api/v1/alertmanagers: %s", got)
	}
	if got := get("/api/v1/query?query=1"); !strings.Contains(got, "404") {
		t.Errorf("a path Handler does not serve: %s", got)
	}
	// The recording rule's output is in the storage once its group (which
	// runs apart from the alert's) has evaluated.
	for {
		q, err := ng.NewInstantQuery(t.Context(), st, nil, "m:sum", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		r := q.Exec(t.Context())
		v, ok := r.Value.(promql.Vector)
		done := r.Err == nil && ok && len(v) == 1 && v[0].F == 2 && v[0].Metric.Get("__name__") == "m:sum"
		if !done && (r.Err != nil || len(v) > 0 || time.Now().After(deadline)) {
			t.Fatalf("m:sum: %v %v", r.Value, r.Err)
		}
		q.Close()
		if done {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := testutil.CollectAndCount(reg, "prometheus_rule_group_last_duration_seconds"); n != 2 {
		t.Errorf("prometheus_rule_group_last_duration_seconds has %d series, want one a group", n)
	}

	// A rule file that fails keeps the rules in force.
	if err := os.WriteFile(rulePath, []byte("groups:\n- name: x\n  rules:\n  - record: y\n    expr: sum(\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := m.ApplyConfig(cfg); err == nil || !strings.Contains(err.Error(), "could not parse expression") {
		t.Fatalf("ApplyConfig of a bad file: %v", err)
	}
	if n := len(m.RuleGroups()); n != 2 {
		t.Errorf("%d groups after a failed apply, want the 2 in force", n)
	}
}

// TestHandlerCORS wants the CORS answers of Prometheus 3.16 on the rule
// endpoints, recorded with its default --web.cors.origin and with
// --web.cors.origin='https?://grafana\.local(:\d+)?': an allowed origin
// echoed, another refused, like every other endpoint of the API.
func TestHandlerCORS(t *testing.T) {
	grafana, err := shalepromql.CompileCORS(`https?://grafana\.local(:\d+)?`)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name         string
		cors         *regexp.Regexp
		path, origin string
		want         string // Access-Control-Allow-Origin
	}{
		{"default", nil, "/api/v1/rules", "http://grafana.local:3000", "http://grafana.local:3000"},
		{"default", nil, "/api/v1/alerts", "http://evil.com", "http://evil.com"},
		{"grafana only", grafana, "/api/v1/rules", "http://grafana.local:3000", "http://grafana.local:3000"},
		{"grafana only", grafana, "/api/v1/rules", "http://evil.com", ""},
		{"grafana only", grafana, "/api/v1/alertmanagers", "http://grafana.local:3000.evil.com", ""},
	}
	for _, c := range cases {
		srv := httptest.NewServer(Handler(Empty{}, nil, c.cors))
		req, err := http.NewRequest("GET", srv.URL+c.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Origin", c.origin)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		srv.Close()
		if got := resp.Header.Get("Access-Control-Allow-Origin"); resp.StatusCode != http.StatusOK || got != c.want {
			t.Errorf("%s: GET %s from %s: %d, Access-Control-Allow-Origin %q, want 200, %q", c.name, c.path, c.origin, resp.StatusCode, got, c.want)
		}
	}
}
