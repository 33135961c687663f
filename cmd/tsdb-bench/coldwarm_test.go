package main

import (
	"encoding/json"
	"encoding/xml"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestColdWarmFlags(t *testing.T) {
	o, err := parseFlags([]string{"-mode=coldwarm"})
	if err != nil {
		t.Fatal(err)
	}
	c := o.coldwarm
	if !slices.Equal(c.Series, []int{10, 100, 500, 1000, 10000}) || c.Span != 6*time.Hour || c.Colds != 5 || c.Warms != 5 {
		t.Errorf("defaults %+v", c)
	}
	if c.Step != 90*time.Second || c.PerTarget != 10 || o.soak.Faults.Latency != 50*time.Millisecond {
		t.Errorf("step %s, per target %d, latency %s; want 1m30s, 10, 50ms", c.Step, c.PerTarget, o.soak.Faults.Latency)
	}
	o, err = parseFlags([]string{"-mode=coldwarm", "-coldwarm-series= 7, 20 ", "-coldwarm-span=1h", "-coldwarm-colds=2",
		"-coldwarm-warms=3", "-store-latency=20ms", "-interval=30s"})
	if err != nil {
		t.Fatal(err)
	}
	if c := o.coldwarm; !slices.Equal(c.Series, []int{7, 20}) || c.Span != time.Hour || c.Colds != 2 || c.Warms != 3 ||
		c.Step != 30*time.Second || o.soak.Faults.Latency != 20*time.Millisecond {
		t.Errorf("parsed %+v, latency %s", c, o.soak.Faults.Latency)
	}
	for _, bad := range [][]string{
		{"-coldwarm-series=10,x"},
		{"-coldwarm-series=0"},
		{"-coldwarm-series=,"},
		{"-coldwarm-colds=0"},
		{"-coldwarm-warms=0"},
		{"-coldwarm-span=1m"},
		{"-interval=500ms"},
	} {
		if _, err := parseFlags(append([]string{"-mode=coldwarm"}, bad...)); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
}

func TestTraceWaves(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(start, end int, op s3Op) proxyEvent {
		return proxyEvent{Start: t0.Add(time.Duration(start) * time.Millisecond), End: t0.Add(time.Duration(end) * time.Millisecond), Op: op, Bytes: 10}
	}
	for _, tc := range []struct {
		name string
		tr   []proxyEvent
		want int
	}{
		{"none", nil, 0},
		{"one", []proxyEvent{at(0, 50, opGET)}, 1},
		{"parallel", []proxyEvent{at(0, 50, opGET), at(1, 55, opGET), at(2, 60, opGET)}, 1},
		// The third starts after the first answer: it may have waited for it.
		{"sequential", []proxyEvent{at(0, 50, opGET), at(1, 70, opGET), at(51, 100, opGET), at(120, 170, opGET)}, 3},
		// Given out of order, and a list of the writer's in between.
		{"unordered", []proxyEvent{at(60, 110, opGET), at(0, 50, opGET), at(20, 300, opLIST)}, 2},
	} {
		if got := traceWaves(tc.tr); got != tc.want {
			t.Errorf("%s: %d waves, want %d", tc.name, got, tc.want)
		}
	}
	if n := traceBytes([]proxyEvent{at(0, 1, opGET), at(0, 1, opLIST)}); n != 20 {
		t.Errorf("traceBytes = %d, want 20", n)
	}
	mixed := []proxyEvent{at(0, 1, opGET), at(0, 9, opLIST), at(2, 5, opHEAD), at(3, 4, opPUT)}
	if reads := traceReads(mixed); len(reads) != 2 || reads[0].Op != opGET || reads[1].Op != opHEAD {
		t.Errorf("traceReads = %+v, want the GET and the HEAD", reads)
	}
	if end := lastEnd(traceReads(mixed)); !end.Equal(t0.Add(5 * time.Millisecond)) {
		t.Errorf("lastEnd = %s, want 5 ms after the start", end.Sub(t0))
	}
	txt := traceText([]proxyEvent{at(60, 110, opGET), at(0, 50, opGET)}, t0)
	lines := strings.Split(strings.TrimSpace(txt), "\n")
	if len(lines) != 3 || !strings.Contains(lines[1], "0.0") || !strings.Contains(lines[2], "110.0") {
		t.Errorf("trace text, want a header and the requests by start:\n%s", txt)
	}
}

func TestFaultProxyTrace(t *testing.T) {
	backend := &recordingBackend{}
	p, base := newTestProxy(t, backend, faultConfig{Latency: 5 * time.Millisecond}, nil)
	get := func(path, rng string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, base+path, nil)
		if rng != "" {
			req.Header.Set("Range", rng)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	get("/b/untraced", "")
	p.startTrace()
	get("/b/k1", "bytes=0-9")
	get("/b/", "")
	tr := p.takeTrace()
	get("/b/after", "")
	if len(tr) != 2 {
		t.Fatalf("traced %d requests, want 2: %+v", len(tr), tr)
	}
	ev := tr[0]
	if ev.Path != "/b/k1" || ev.Range != "bytes=0-9" || ev.Op != opGET || ev.Status != 200 ||
		ev.Bytes != int64(len("answer to GET /b/k1")) {
		t.Errorf("first event %+v", ev)
	}
	if ev.Sent.Sub(ev.Start) < 5*time.Millisecond || ev.End.Before(ev.Sent) {
		t.Errorf("times: start %s, sent %s, end %s; want the latency between start and sent", ev.Start, ev.Sent, ev.End)
	}
	if tr[1].Op != opLIST {
		t.Errorf("second event %+v, want a LIST", tr[1])
	}
	if len(p.takeTrace()) != 0 {
		t.Error("requests recorded after takeTrace")
	}
}

func testColdWarmResults() []*coldwarmResult {
	return []*coldwarmResult{
		{Series: 10, Samples: 14400, Tables: 1, StartupMs: []float64{900, 1000}, ColdMs: []float64{80, 100, 90}, ColdReadMs: []float64{60, 70, 65},
			ColdReqs: []float64{2, 2, 2}, ColdBytes: []float64{8000, 8000, 8000}, ColdWaves: []float64{1, 1, 1},
			ColdCPUMs: []float64{10, 20, 30}, WarmMs: []float64{5, 7}, WarmCPUMs: []float64{5, 5}, WarmReqs: []float64{0, 0}},
		{Series: 500, Samples: 720000, Tables: 1, StartupMs: []float64{1000}, ColdMs: []float64{250, 400, 300},
			ColdReqs: []float64{10, 10, 12}, ColdBytes: []float64{1.2e6, 1.2e6, 1.2e6}, ColdWaves: []float64{2, 2, 2},
			ColdCPUMs: []float64{100}, WarmMs: []float64{120}, WarmCPUMs: []float64{100}, WarmReqs: []float64{0}},
	}
}

func TestColdWarmReport(t *testing.T) {
	tab := coldwarmTable(testColdWarmResults())
	for _, want := range []string{
		"| 10 | 14.4k | 1 | 950 ms | **90 ms** | 80–100 ms | 20 ms | 2 | 8000B | 1 | 65 ms | **6 ms** | 5 ms | 0 |",
		"| 500 | 720k | 1 | 1000 ms | **300 ms** | 250–400 ms |",
	} {
		if !strings.Contains(tab, want) {
			t.Errorf("table lacks %q:\n%s", want, tab)
		}
	}
	svg := coldwarmSVG("cold <&> warm", testColdWarmResults())
	counts := map[string]int{}
	var texts []string
	for _, tok := range svgTokens(t, svg) {
		switch tok := tok.(type) {
		case xml.StartElement:
			counts[tok.Name.Local]++
			for _, a := range tok.Attr {
				if a.Name.Local == "class" {
					counts[a.Value]++
				}
			}
		case xml.CharData:
			texts = append(texts, string(tok))
		}
	}
	all := strings.Join(texts, "\n")
	if counts["polyline"] != 2 || counts["circle"] != 4 || counts["spread"] != 2 || counts["opendata"] != 2 {
		t.Errorf("elements %v: want 2 lines (cold, warm) of 2 points, 2 min–max bars and OpenData's 2 points", counts)
	}
	for _, want := range []string{"OpenData, published: cold 13 s", "OpenData, published: warm 2.1 s", "not measured here",
		"500 series: cold 300 ms, warm 120 ms", "10 series: cold 90 ms, warm 6 ms", "goal: 500 series cold ≤ 300 ms"} {
		if !strings.Contains(all, want) {
			t.Errorf("SVG text lacks %q", want)
		}
	}
}

// TestSmokeColdWarm runs -mode=coldwarm against bin/tsdb and versitygw at
// a tiny scale and checks what it measured and wrote.
func TestSmokeColdWarm(t *testing.T) {
	bin, _ := filepath.Abs("../../bin/tsdb")
	vgw, _ := filepath.Abs("../../.tools/versitygw")
	for _, p := range []struct{ path, install string }{{bin, "make build"}, {vgw, "make tools"}} {
		if _, err := os.Stat(p.path); err != nil {
			if os.Getenv("SHALE_REQUIRE_E2E") == "1" {
				t.Fatalf("%s: %v (%s)", p.path, err, p.install)
			}
			t.Skipf("%s not installed (%s)", p.path, p.install)
		}
	}
	if testing.Short() {
		t.Skip("starts versitygw and the server")
	}
	out := t.TempDir()
	o, err := parseFlags([]string{"-mode=coldwarm", "-coldwarm-series=100", "-coldwarm-span=1h", "-coldwarm-colds=2",
		"-coldwarm-warms=2", "-store-latency=20ms", "-progress=0", "-shale-bin=" + bin, "-versitygw-bin=" + vgw, "-out=" + out})
	if err != nil {
		t.Fatal(err)
	}
	devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	if err := runColdWarm(t.Context(), o, devnull); err != nil {
		t.Fatal(err)
	}
	js, err := os.ReadFile(filepath.Join(out, "coldwarm.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rs []*coldwarmResult
	if err := json.Unmarshal(js, &rs); err != nil {
		t.Fatal(err)
	}
	if len(rs) != 1 {
		t.Fatalf("%d results, want 1", len(rs))
	}
	r := rs[0]
	if r.Series != 100 || r.Samples != 100*240 || r.Tables < 1 {
		t.Errorf("series %d, samples %d, tables %d; want 100, %d, at least 1", r.Series, r.Samples, r.Tables, 100*240)
	}
	if len(r.ColdMs) != 2 || len(r.WarmMs) != 4 || len(r.StartupMs) != 2 {
		t.Fatalf("%d cold, %d warm, %d startup figures; want 2, 4, 2", len(r.ColdMs), len(r.WarmMs), len(r.StartupMs))
	}
	for i := range r.ColdMs {
		// A cold query reads from the store, through the proxy's latency.
		if r.ColdReqs[i] < 1 || r.ColdBytes[i] <= 0 || r.ColdWaves[i] < 1 || r.ColdMs[i] < 20 {
			t.Errorf("cold query %d: %v ms, %v requests, %v bytes, %v waves", i, r.ColdMs[i], r.ColdReqs[i], r.ColdBytes[i], r.ColdWaves[i])
		}
	}
	if len(r.Trace) == 0 || r.ResultSize == 0 {
		t.Errorf("trace of %d requests, %d series in the answer", len(r.Trace), r.ResultSize)
	}
	for _, name := range []string{"coldwarm.md", "coldwarm.svg", "trace-cold-100.txt"} {
		if fi, err := os.Stat(filepath.Join(out, name)); err != nil || fi.Size() == 0 {
			t.Errorf("%s: %v", name, err)
		}
	}
	// Drawn again from the JSON: the same report.
	md, _ := os.ReadFile(filepath.Join(out, "coldwarm.md"))
	out2 := t.TempDir()
	o2, err := parseFlags([]string{"-mode=coldwarm", "-coldwarm-span=1h", "-coldwarm-colds=2", "-coldwarm-warms=2", "-store-latency=20ms",
		"-coldwarm-replot=" + filepath.Join(out, "coldwarm.json"), "-out=" + out2})
	if err != nil {
		t.Fatal(err)
	}
	if err := runColdWarm(t.Context(), o2, devnull); err != nil {
		t.Fatal(err)
	}
	md2, _ := os.ReadFile(filepath.Join(out2, "coldwarm.md"))
	tab := func(b []byte) string { _, after, _ := strings.Cut(string(b), "| series"); return after }
	if tab(md) == "" || tab(md) != tab(md2) {
		t.Errorf("replotted report differs:\n%s\nwant:\n%s", md2, md)
	}
}
