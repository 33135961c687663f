package main

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/tsdb"

	"github.com/shaledb/shale/internal/e2e"
	"github.com/shaledb/shale/internal/seriestest"
)

// upstreamSamples reads the real block through the upstream reader: what
// the query API must give back (stale markers end a series there, so they
// are left out; the importer's own tests compare those bit for bit), and
// the time of its newest sample.
func upstreamSamples(t *testing.T) (map[string][]seriestest.Point, int64) {
	t.Helper()
	db, err := tsdb.OpenDBReadOnly(seriestest.RealBlock, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	blocks, err := db.Blocks()
	if err != nil {
		t.Fatal(err)
	}
	q, err := db.Querier(math.MinInt64, blocks[len(blocks)-1].Meta().MaxTime-1)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	out := seriestest.ReadAll(t, q)
	newest := int64(math.MinInt64)
	for k, ps := range out {
		out[k] = slices.DeleteFunc(ps, func(p seriestest.Point) bool {
			newest = max(newest, p.T)
			return value.IsStaleNaN(math.Float64frombits(p.V))
		})
		if len(out[k]) == 0 {
			delete(out, k)
		}
	}
	return out, newest
}

// servedSamples reads every raw sample of the 40 minutes up to at (ms)
// through /api/v1/query.
func servedSamples(t *testing.T, baseURL string, at int64) map[string][]seriestest.Point {
	t.Helper()
	var res []struct {
		Metric map[string]string    `json:"metric"`
		Values [][2]json.RawMessage `json:"values"`
	}
	queryResult(t, baseURL, "/api/v1/query", url.Values{"query": {`{__name__=~".+"}[40m]`}, "time": {fmt.Sprintf("%d.%03d", at/1000, at%1000)}}, &res)
	out := map[string][]seriestest.Point{}
	for _, s := range res {
		key := labels.FromMap(s.Metric).String()
		for _, p := range s.Values {
			ts := strings.Replace(string(p[0]), ".", "", 1)
			if !strings.Contains(string(p[0]), ".") {
				ts += "000"
			} else if frac := len(string(p[0])) - strings.Index(string(p[0]), ".") - 1; frac < 3 {
				ts += strings.Repeat("0", 3-frac)
			}
			ms, err := strconv.ParseInt(ts, 10, 64)
			if err != nil {
				t.Fatalf("time %s: %v", p[0], err)
			}
			var vs string
			if err := json.Unmarshal(p[1], &vs); err != nil {
				t.Fatal(err)
			}
			v, err := strconv.ParseFloat(vs, 64)
			if err != nil {
				t.Fatalf("value %s: %v", vs, err)
			}
			out[key] = append(out[key], seriestest.Point{T: ms, V: math.Float64bits(v)})
		}
	}
	return out
}

// runImport runs bin/tsdb import with args and returns its output and
// error.
func runImportCmd(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(tsdbBinary, append([]string{"import", "--progress.interval=1s"}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestImportBesideWriter imports the real block through a running writer's
// remote-write endpoint (2.0 and 1.0) and reads every sample back through
// the query API.
func TestImportBesideWriter(t *testing.T) {
	seriestest.SkipWithoutRealBlock(t)
	want, newest := upstreamSamples(t)
	for _, version := range []string{"2", "1"} {
		t.Run("rw="+version, func(t *testing.T) {
			s := startShale(t, "--storage.path="+t.TempDir(), "--storage.retention.time=0")
			out, err := runImportCmd(t, "--url="+s.url, "--remote-write.version="+version, "prometheus", seriestest.RealBlock)
			if err != nil {
				t.Fatalf("import: %v\n%s", err, out)
			}
			if !strings.Contains(out, "samples:     1572314 floats") || !strings.Contains(out, "series:      3758") {
				t.Errorf("summary:\n%s", out)
			}
			seriestest.Compare(t, want, servedSamples(t, s.url, newest))
			s.stop(t)
		})
	}
}

// TestImportAloneRefusedBesideLiveWriter: alone, the import does not fence
// a running writer; it says how to import through it.
func TestImportAloneRefusedBesideLiveWriter(t *testing.T) {
	seriestest.SkipWithoutRealBlock(t)
	dir := t.TempDir()
	s := startShale(t, "--storage.path="+dir)
	out, err := runImportCmd(t, "--storage.path="+dir, "prometheus", seriestest.RealBlock)
	if err == nil || !strings.Contains(out, "a Shale writer is running") || !strings.Contains(out, "--url=") {
		t.Fatalf("import beside a live writer: %v\n%s", err, out)
	}
	// The writer was not fenced: it still takes writes.
	if code, body, err := remoteWrite(s.url, loadSeries(1)); err != nil || code/100 != 2 {
		t.Fatalf("writer after the refused import: %d %s %v", code, body, err)
	}
	s.stop(t)
}

// TestImportKilledThenRerun kills an import alone halfway (SIGKILL), runs
// it again, and finds every sample once, bit for bit, through the query
// API: what the killed one committed stays, the rerun writes the rest, and
// samples written twice keep one value.
func TestImportKilledThenRerun(t *testing.T) {
	seriestest.SkipWithoutRealBlock(t)
	want, newest := upstreamSamples(t)
	dir := t.TempDir()
	cmd := exec.Command(tsdbBinary, "import", "--storage.path="+dir, "--progress.interval=50ms", "--writers=1", "prometheus", seriestest.RealBlock)
	p := e2e.StartProcess(t, cmd)
	e2e.Eventually(t, 60*time.Second, func() bool {
		if exited, _ := p.Exited(); exited {
			return true
		}
		for _, l := range strings.Split(p.Output(), "\n") {
			if strings.HasPrefix(l, "import: ") && !strings.Contains(l, " 0 samples stored") {
				return true
			}
		}
		return false
	}, "the import to store samples")
	if exited, _ := p.Exited(); exited {
		t.Log("the import ended before it could be killed; the rerun still must change nothing")
	}
	_ = p.Cmd.Process.Signal(syscall.SIGKILL)
	p.Stop()

	out, err := runImportCmd(t, "--storage.path="+dir, "prometheus", seriestest.RealBlock)
	if err != nil {
		t.Fatalf("rerun: %v\n%s", err, out)
	}
	s := startShale(t, "--storage.path="+dir, "--storage.retention.time=0")
	seriestest.Compare(t, want, servedSamples(t, s.url, newest))
	s.stop(t)
}

// TestImportEndpoint posts VictoriaMetrics' JSON lines, gzip-compressed, to
// the server's /api/v1/import and reads them back; a malformed line is a
// 400 naming it.
func TestImportEndpoint(t *testing.T) {
	s := startShale(t, "--storage.path="+t.TempDir())
	base := time.Now().Add(-time.Hour).UnixMilli()
	var body bytes.Buffer
	zw := gzip.NewWriter(&body)
	fmt.Fprintf(zw, `{"metric":{"__name__":"imported","job":"vm"},"values":[1,2.5,"Infinity"],"timestamps":[%d,%d,%d]}`+"\n", base, base+1000, base+2000)
	zw.Close()
	post := func(b []byte, enc string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, s.url+"/api/v1/import", bytes.NewReader(b))
		if enc != "" {
			req.Header.Set("Content-Encoding", enc)
		}
		return send(t, req)
	}
	if code, msg := post(body.Bytes(), "gzip"); code != http.StatusNoContent {
		t.Fatalf("import: %d %s", code, msg)
	}
	if code, msg := post([]byte("{\"metric\":{\"a\":\"b\"},\"values\":[1],\"timestamps\":[1]}\n{oops\n"), ""); code != 400 || !strings.Contains(msg, "line 2") {
		t.Fatalf("malformed: %d %s", code, msg)
	}
	// Remote write's label checks and limits hold here too: each bad
	// series is refused whole and named, the good one is stored.
	var many strings.Builder
	for i := range 200 {
		fmt.Fprintf(&many, `,"l%d":"v"`, i)
	}
	bad := fmt.Sprintf(`{"metric":{"__name__":"bad","job":"vm"%s},"values":[1,2],"timestamps":[%d,%d]}
{"metric":{"job":"vm","what":"no name"},"values":[1],"timestamps":[%d]}
{"metric":{"__name__":"bad","job":"vm","long":%q},"values":[1],"timestamps":[%d]}
{"metric":{"__name__":"good","job":"vm"},"values":[7],"timestamps":[%d]}
`, many.String(), base, base+1000, base, strings.Repeat("x", 5000), base, base)
	code, msg := post([]byte(bad), "")
	if code != 400 || !strings.Contains(msg, "4 samples refused (1 limit_label_value_length, 2 limit_labels, 1 missing_metric_name); the other 1 are stored; the first: series {__name__=\"bad\"") ||
		!strings.Contains(msg, "202 labels exceed max_labels_per_series=128") {
		t.Fatalf("bad labels: %d %s", code, msg)
	}
	if code, msg := post([]byte(`{"metric":{"__name__":"dup","a":"1","\u0061":"2"},"values":[1],"timestamps":[1]}`), ""); code != 400 || !strings.Contains(msg, `line 1: label "a" appears more than once in "metric"`) {
		t.Fatalf("repeated label: %d %s", code, msg)
	}
	// A timestamp in nanoseconds is refused (max_future_skew), and does not
	// stop the samples on time that come after it.
	if code, msg := post([]byte(fmt.Sprintf(`{"metric":{"__name__":"ns","job":"vm"},"values":[1],"timestamps":[%d]}`, time.Now().UnixNano())), ""); code != 400 || !strings.Contains(msg, "1 too far in the future") {
		t.Fatalf("timestamp in nanoseconds: %d %s", code, msg)
	}
	if code, msg := post([]byte(fmt.Sprintf(`{"metric":{"__name__":"good","job":"vm"},"values":[8],"timestamps":[%d]}`, base+1000)), ""); code != http.StatusNoContent {
		t.Fatalf("a sample on time after one too far ahead: %d %s", code, msg)
	}
	got := servedSamples(t, s.url, base+2000)
	for k := range got {
		if strings.Contains(k, "bad") || strings.Contains(k, "no name") || strings.Contains(k, "dup") || strings.Contains(k, `"ns"`) {
			t.Errorf("refused series stored: %.200s", k)
		}
	}
	if g := labels.FromStrings("__name__", "good", "job", "vm").String(); len(got[g]) != 2 {
		t.Errorf("%s: %d samples stored, want 2", g, len(got[g]))
	}
	key := labels.FromStrings("__name__", "imported", "job", "vm").String()
	want := []seriestest.Point{{T: base, V: math.Float64bits(1)}, {T: base + 1000, V: math.Float64bits(2.5)}, {T: base + 2000, V: math.Float64bits(math.Inf(1))}}
	seriestest.Compare(t, map[string][]seriestest.Point{key: want}, map[string][]seriestest.Point{key: got[key]})
	s.stop(t)
}

// TestVMCtlMigratesPrometheus: vmctl, VictoriaMetrics' migration tool (a
// Debian package), moves the real Prometheus block into Shale as into
// VictoriaMetrics (`vmctl prometheus --vm-addr=...`): it asks /health,
// then sends /api/v1/import requests two at a time, gzip-compressed, with
// NaN written bare, and --vm-extra-label as extra_label arguments. What it
// sent is stored, with the extra label: as many samples as it counts,
// each series as the block holds it; the block's stale markers arrive as
// ordinary NaNs, which is what vmctl sends.
func TestVMCtlMigratesPrometheus(t *testing.T) {
	skipEndToEnd(t)
	seriestest.SkipWithoutRealBlock(t)
	vmctl := e2e.RequireBinary(t, "vmctl", "apt-get install victoria-metrics")
	// vmctl draws progress bars and stops without a terminal: script(1)
	// gives it one.
	script := e2e.RequireBinary(t, "script", "apt-get install bsdutils")
	want, newest := upstreamSamples(t)
	s := startShale(t, "--storage.path="+t.TempDir(), "--storage.retention.time=0")
	quote := func(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
	cmd := exec.Command(script, "-qec", strings.Join([]string{quote(vmctl), "prometheus", "-s",
		"--prom-snapshot=" + quote(seriestest.RealBlock), "--vm-addr=" + quote(s.url), "--vm-disable-progress-bar",
		"--vm-extra-label=migrated=vmctl"}, " "), "/dev/null")
	out, err := cmd.CombinedOutput()
	m := regexp.MustCompile(`total samples: (\d+)`).FindSubmatch(out)
	if err != nil || m == nil {
		t.Fatalf("vmctl: %v\n%s", err, out)
	}
	// Debian's vmctl now and then leaves a few series of the block out
	// (3,752 to 3,757 of 3,758 lines in half the runs, sent to a server
	// that only counted them); it counts what it sends.
	sent, _ := strconv.Atoi(string(m[1]))
	// Every series carries the extra label (extra_label=migrated=vmctl).
	got := map[string][]seriestest.Point{}
	for k, ps := range servedSamples(t, s.url, newest) {
		if !strings.Contains(k, `, migrated="vmctl"`) {
			t.Fatalf("%s: no migrated=\"vmctl\" label", k)
		}
		got[strings.Replace(k, `, migrated="vmctl"`, "", 1)] = ps
	}
	stored, stale := 0, 0
	for k, ps := range got {
		stored += len(ps)
		at := map[int64]bool{}
		for _, p := range want[k] {
			at[p.T] = true
		}
		got[k] = slices.DeleteFunc(ps, func(p seriestest.Point) bool {
			drop := !at[p.T] && math.IsNaN(math.Float64frombits(p.V))
			if drop {
				stale++
			}
			return drop
		})
	}
	t.Logf("vmctl sent %d samples; %d stored, %d of them stale markers that arrived as NaN", sent, stored, stale)
	// vmctl left out up to 6 of the 3,758 series in the runs tried; more
	// than a twentieth missing would be something else.
	if stored != sent || len(got) < len(want)*19/20 {
		t.Fatalf("%d samples of %d series stored, vmctl sent %d (the block has %d series)", stored, len(got), sent, len(want))
	}
	for k := range want {
		if _, ok := got[k]; !ok {
			delete(want, k) // left out by vmctl
		}
	}
	seriestest.Compare(t, want, got)
	s.stop(t)
}
