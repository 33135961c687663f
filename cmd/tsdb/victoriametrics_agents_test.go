package main

import (
	"fmt"
	"net/url"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shaledb/shale/internal/e2e"
)

// TestVMAgentAndVMAlert drives Shale with Debian's VictoriaMetrics agents, as
// a user who moves from VictoriaMetrics would: vmagent scrapes Shale's own
// /metrics and itself and remote-writes what it scrapes; vmalert evaluates a
// recording rule and an alert over Shale's query API and writes the results
// (the recorded series, ALERTS) back by remote write. Every request either
// sends must succeed, and what they sent must be queryable, with the label
// vmagent's extra_label argument sets.
func TestVMAgentAndVMAlert(t *testing.T) {
	skipEndToEnd(t)
	vmagent := e2e.RequireBinary(t, "vmagent", "apt-get install victoria-metrics")
	vmalert := e2e.RequireBinary(t, "vmalert", "apt-get install victoria-metrics")
	t.Parallel()
	dir := t.TempDir()
	s := startShale(t, "--storage.path="+filepath.Join(dir, "data"))
	u, err := url.Parse(s.url)
	if err != nil {
		t.Fatal(err)
	}

	agentAddr := "127.0.0.1:" + strconv.Itoa(e2e.FreePort(t))
	scrape := writeFile(t, dir, "scrape.yml", fmt.Sprintf(`global:
  scrape_interval: 1s
scrape_configs:
  - job_name: shale
    static_configs: [{targets: [%q]}]
  - job_name: vmagent
    static_configs: [{targets: [%q]}]
`, u.Host, agentAddr))
	agent := e2e.StartProcess(t, exec.Command(vmagent,
		"-httpListenAddr="+agentAddr,
		"-promscrape.config="+scrape,
		// VictoriaMetrics' extra_label in the URL, as vmagent users set it.
		"-remoteWrite.url="+s.url+"/api/v1/write?extra_label=via=vmagent",
		"-remoteWrite.tmpDataPath="+filepath.Join(dir, "vmagent"),
		"-remoteWrite.flushInterval=200ms"))
	e2e.WaitHTTP(t, 30*time.Second, "http://"+agentAddr+"/health")

	rules := writeFile(t, dir, "rules.yml", `groups:
  - name: agents
    interval: 1s
    rules:
      - record: job:scrape_samples_scraped:sum
        expr: sum by (job) (scrape_samples_scraped)
      - alert: ShaleIsUp
        expr: up{job="shale"} == 1
        labels: {severity: none}
`)
	alertAddr := "127.0.0.1:" + strconv.Itoa(e2e.FreePort(t))
	alerter := e2e.StartProcess(t, exec.Command(vmalert,
		"-httpListenAddr="+alertAddr,
		"-rule="+rules,
		"-datasource.url="+s.url,
		"-remoteWrite.url="+s.url,
		"-remoteWrite.flushInterval=200ms",
		// No Alertmanager: notifications to a closed port fail and are
		// logged; the alert's state is what this test reads.
		"-notifier.url=http://127.0.0.1:9",
		"-evaluationInterval=1s"))
	e2e.WaitHTTP(t, 30*time.Second, "http://"+alertAddr+"/health")

	has := func(q string) bool {
		var v []vectorSample
		queryResult(t, s.url, "/api/v1/query", url.Values{"query": {q}}, &v)
		return len(v) > 0
	}
	for _, q := range []string{
		`up{job="shale", via="vmagent"} == 1`,
		`up{job="vmagent", via="vmagent"} == 1`,
		`count({job="shale"}) > 100`,
		`shale_remotewrite_requests_total{job="shale"} > 0`,
		`job:scrape_samples_scraped:sum{job="shale"} > 100`,
		`ALERTS{alertname="ShaleIsUp", alertstate="firing", severity="none"}`,
	} {
		e2e.Eventually(t, time.Minute, func() bool { return has(q) }, "%s in Shale", q)
	}

	// Nothing either agent sent was refused or dropped.
	_, metrics := sendGet(t, "http://"+agentAddr+"/metrics")
	for _, line := range strings.Split(metrics, "\n") {
		i := strings.LastIndexByte(line, ' ')
		if i < 0 || strings.HasPrefix(line, "#") {
			continue
		}
		name, value := line[:i], line[i+1:]
		switch {
		case strings.HasPrefix(name, "vmagent_remotewrite_requests_total") && !strings.Contains(name, `status_code="2XX"`),
			strings.HasPrefix(name, "vmagent_remotewrite_packets_dropped_total"):
			if value != "0" {
				t.Errorf("vmagent: %s", line)
			}
		}
	}
	if code, body := sendGet(t, s.url+"/metrics"); code != 200 || strings.Contains(body, `shale_remotewrite_requests_total{code="4`) || strings.Contains(body, `shale_remotewrite_requests_total{code="5`) {
		t.Errorf("Shale refused remote writes:\n%s", grepLines(body, "shale_remotewrite_requests_total"))
	}
	agent.Stop()
	alerter.Stop()
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		if strings.Contains(line, sub) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}
