package main

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/prompb"

	"github.com/shaledb/shale/internal/e2e"
)

// benchRuleFile is the rule file of BenchmarkRecordingRules: 10 groups of
// 100 rules at 15 s.
func benchRuleFile() string {
	var b strings.Builder
	b.WriteString("groups:\n")
	for g := range benchGroups {
		fmt.Fprintf(&b, "- name: g%d\n  interval: 15s\n  rules:\n", g)
		for m := g * benchMetrics / benchGroups; m < (g+1)*benchMetrics/benchGroups; m++ {
			for r, e := range benchRuleExprs {
				fmt.Fprintf(&b, "  - record: bench:metric_%d:rule_%d\n    expr: %q\n", m, r, fmt.Sprintf(e, fmt.Sprintf("bench_metric_%d", m)))
			}
		}
	}
	return b.String()
}

// benchScrape remote-writes one scrape of every benchmark series at ts (ms)
// to baseURL, the value of series k being k+step*(k%100).
func benchScrape(b *testing.B, baseURL string, ts int64, step int) {
	b.Helper()
	var batch []prompb.TimeSeries
	k := 0
	flush := func() {
		if code, body, err := remoteWrite(baseURL, batch); err != nil || code/100 != 2 {
			b.Fatalf("remote write: %d %s %v", code, body, err)
		}
		batch = batch[:0]
	}
	for m := range benchMetrics {
		for j := range benchJobs {
			for i := range benchInstances {
				batch = append(batch, prompb.TimeSeries{
					Labels: []prompb.Label{{Name: "__name__", Value: fmt.Sprintf("bench_metric_%d", m)},
						{Name: "instance", Value: fmt.Sprintf("i%d", i)}, {Name: "job", Value: fmt.Sprintf("j%d", j)}},
					Samples: []prompb.Sample{{Timestamp: ts, Value: float64(k + step*(k%100))}},
				})
				k++
				if len(batch) == 2000 {
					flush()
				}
			}
		}
	}
	flush()
}

// ruleGroupMetrics returns, from a server's /metrics, the largest
// prometheus_rule_group_last_duration_seconds, the sum of
// prometheus_rule_group_iterations_missed_total and the smallest
// prometheus_rule_group_last_evaluation_timestamp_seconds over the groups.
func ruleGroupMetrics(b *testing.B, baseURL string) (slowest, missed, oldestEval float64) {
	b.Helper()
	resp, err := httpGet(baseURL + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	oldestEval = math.Inf(1)
	groups := 0
	for _, line := range strings.Split(resp, "\n") {
		name, rest, ok := strings.Cut(line, "{")
		if !ok || !strings.Contains(rest, "bench.rules.yml") {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndex(line, " ")+1:], 64)
		if err != nil {
			continue
		}
		switch name {
		case "prometheus_rule_group_last_duration_seconds":
			slowest = max(slowest, v)
		case "prometheus_rule_group_iterations_missed_total":
			missed += v
		case "prometheus_rule_group_last_evaluation_timestamp_seconds":
			oldestEval = min(oldestEval, v)
			groups++
		}
	}
	if groups < benchGroups {
		oldestEval = 0
	}
	return slowest, missed, oldestEval
}

// BenchmarkRecordingRulesServers runs the rules of BenchmarkRecordingRules
// on the built server and on Prometheus 3 (.tools/prometheus-3.16), both
// fed by remote write: 10 minutes of history of the 100k series, then one
// scrape every 15 s of wall time. Each iteration is one 15 s step: a scrape,
// then a wait for every group to have evaluated once more. It reports the
// slowest group's prometheus_rule_group_last_duration_seconds (mean over the
// steps) and the missed iterations, read from the server's /metrics.
//
//	go test ./cmd/tsdb -run '^$' -bench BenchmarkRecordingRulesServers -benchtime 4x
func BenchmarkRecordingRulesServers(b *testing.B) {
	dir := b.TempDir()
	rulePath := filepath.Join(dir, "bench.rules.yml")
	if err := os.WriteFile(rulePath, []byte(benchRuleFile()), 0o644); err != nil {
		b.Fatal(err)
	}
	cfg := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("rule_files: [%q]\n", rulePath)), 0o644); err != nil {
		b.Fatal(err)
	}
	systems := map[string]func(b *testing.B) (string, *e2e.Process){
		"shale": func(b *testing.B) (string, *e2e.Process) {
			addr := fmt.Sprintf("127.0.0.1:%d", e2e.FreePort(b))
			p := e2e.StartProcess(b, exec.Command(tsdbBinary, "--web.listen-address="+addr, "--config.file="+cfg,
				"--storage.path="+filepath.Join(b.TempDir(), "data")))
			return "http://" + addr, p
		},
		"prometheus-3.16": func(b *testing.B) (string, *e2e.Process) {
			bin, err := filepath.Abs("../../.tools/prometheus-3.16")
			if err != nil {
				b.Fatal(err)
			}
			if _, err := os.Stat(bin); err != nil {
				b.Skip("no .tools/prometheus-3.16")
			}
			addr := fmt.Sprintf("127.0.0.1:%d", e2e.FreePort(b))
			p := e2e.StartProcess(b, exec.Command(bin, "--web.listen-address="+addr, "--config.file="+cfg,
				"--storage.tsdb.path="+filepath.Join(b.TempDir(), "data"), "--web.enable-remote-write-receiver"))
			return "http://" + addr, p
		},
	}
	for _, name := range []string{"shale", "prometheus-3.16"} {
		b.Run("system="+name, func(b *testing.B) {
			u, proc := systems[name](b)
			e2e.WaitHTTP(b, 60*time.Second, u+"/-/ready")
			now := time.Now().Truncate(benchStep)
			step := 0
			for ts := now.Add(-10 * time.Minute); ts.Before(now); ts = ts.Add(benchStep) {
				benchScrape(b, u, ts.UnixMilli(), step)
				step++
			}
			var sum float64
			var missed float64
			b.ResetTimer()
			for b.Loop() {
				began := float64(time.Now().UnixNano()) / 1e9
				benchScrape(b, u, time.Now().UnixMilli(), step)
				step++
				deadline := time.Now().Add(2 * time.Minute)
				for {
					slowest, m, oldest := ruleGroupMetrics(b, u)
					if oldest > began {
						sum += slowest
						missed = m
						break
					}
					if time.Now().After(deadline) {
						b.Fatalf("the groups did not all evaluate within 2 minutes")
					}
					time.Sleep(200 * time.Millisecond)
				}
			}
			b.ReportMetric(sum/float64(b.N), "group-s/eval")
			b.ReportMetric(missed, "missed")
			proc.Stop()
		})
	}
}

// httpGet returns the body of a GET of u.
func httpGet(u string) (string, error) {
	resp, err := http.Get(u)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return string(body), err
}
