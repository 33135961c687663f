package main

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/shaledb/shale/internal/e2e"
)

// TestPrometheus3SenderThroughCrashes has Prometheus 3.16 scrape itself every
// second (floats, classic and native histograms) and send it by remote write
// 2.0 to Shale, which is killed with SIGKILL three times meanwhile, each time
// after it acknowledged writes and once Prometheus has seen a send fail, and
// started again on the same address and data. Prometheus resends what was not
// acknowledged; at the end Shale must hold exactly what Prometheus holds over
// the whole run, every series and every sample: a sample acknowledged and
// then lost, doubled by a replay or a resend, or altered, is a difference.
// With the data in a local folder and in versitygw.
func TestPrometheus3SenderThroughCrashes(t *testing.T) {
	skipEndToEnd(t)
	bin := requirePrometheus3(t)
	for _, store := range []string{"folder", "s3"} {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			args := []string{"--storage.path=" + filepath.Join(dir, "shale")}
			if store == "s3" {
				args = []string{"--objstore.config-file=" + s3ConfigFile(t, "", "crash")}
			}
			runSenderThroughCrashes(t, bin, dir, args)
		})
	}
}

func runSenderThroughCrashes(t *testing.T, bin, dir string, args []string) {
	shaleAddr := "127.0.0.1:" + strconv.Itoa(e2e.FreePort(t))
	s := startShaleOn(t, shaleAddr, "", args...)
	promAddr := "127.0.0.1:" + strconv.Itoa(e2e.FreePort(t))
	promURL := "http://" + promAddr
	// Short back-offs keep the resends after each restart quick.
	cfg := prometheus3SelfConfig(promAddr, s.url, "min_backoff: 30ms, max_backoff: 500ms")
	prom := e2e.StartProcess(t, exec.Command(bin,
		"--config.file="+writeFile(t, dir, "prometheus.yml", cfg),
		"--storage.tsdb.path="+filepath.Join(dir, "prom"),
		"--web.listen-address="+promAddr,
		"--log.level=error"))
	waitReady(t, prom, "prometheus", promAddr)
	start := time.Now()

	// newest returns the time of the newest scrape in the server at base.
	newest := func(base string) float64 {
		var v []vectorSample
		queryResult(t, base, "/api/v1/query", url.Values{"query": {`max(timestamp(up{job="prom"}))`}}, &v)
		if len(v) == 0 {
			return 0
		}
		f, _ := strconv.ParseFloat(v[0].Value[1].(string), 64)
		return f
	}
	// failedSends is how many of Prometheus' sends failed and were retried.
	failedSends := func() float64 {
		var v []vectorSample
		queryResult(t, promURL, "/api/v1/query", url.Values{"query": {`sum(prometheus_remote_storage_samples_retried_total)`}}, &v)
		if len(v) == 0 {
			return 0
		}
		f, _ := strconv.ParseFloat(v[0].Value[1].(string), 64)
		return f
	}
	for i := range 3 {
		up := float64(time.Now().UnixMilli()) / 1000
		e2e.Eventually(t, time.Minute, func() bool { return newest(s.url) > up+1 },
			"crash %d: a scrape sent to this server's run acknowledged", i+1)
		retried := failedSends()
		s.kill(t)
		e2e.Eventually(t, time.Minute, func() bool { return failedSends() > retried },
			"crash %d: Prometheus retrying its sends", i+1)
		s = startShaleOn(t, shaleAddr, "", args...)
	}
	// Every scrape up to the end, and more, has arrived once Shale has one
	// 2 s newer (one shard sends in order).
	end := float64(time.Now().UnixMilli())/1000 - 1
	e2e.Eventually(t, time.Minute, func() bool { return newest(s.url) > end+2 },
		"Prometheus to catch up after the last restart")

	// Everything from before the first crash to the end, as raw samples.
	window := int(end-float64(start.Unix())) + 5
	params := url.Values{
		"query": {fmt.Sprintf(`{job="prom"}[%ds]`, window)},
		"time":  {strconv.FormatFloat(end, 'f', 3, 64)},
	}
	byLabels := func(base string) (map[string]string, int) {
		var res []map[string]json.RawMessage
		queryResult(t, base, "/api/v1/query", params, &res)
		out, samples := map[string]string{}, 0
		for _, r := range res {
			var values, histograms []json.RawMessage
			_ = json.Unmarshal(r["values"], &values)
			_ = json.Unmarshal(r["histograms"], &histograms)
			samples += len(values) + len(histograms)
			out[string(r["metric"])] = string(r["values"]) + string(r["histograms"])
		}
		return out, samples
	}
	want, wantSamples := byLabels(promURL)
	got, gotSamples := byLabels(s.url)
	if wantSamples < 1000 {
		t.Fatalf("Prometheus holds %d samples: too few to compare", wantSamples)
	}
	for m, w := range want {
		g, ok := got[m]
		switch {
		case !ok:
			t.Errorf("series %s: in Prometheus, not in Shale", m)
		case g != w:
			t.Errorf("series %s: samples differ\nPrometheus: %.400s\nShale:      %.400s", m, w, g)
		}
	}
	for m := range got {
		if _, ok := want[m]; !ok {
			t.Errorf("series %s: in Shale, not in Prometheus", m)
		}
	}
	t.Logf("%d series, %d samples over %d s through 3 crashes: Prometheus %d samples", len(want), gotSamples, window, wantSamples)
}
