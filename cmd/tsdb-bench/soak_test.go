package main

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestPlanSchedule(t *testing.T) {
	for _, tc := range []struct {
		d            time.Duration
		kills, terms int
		at           float64
		outage       time.Duration
	}{
		{2 * time.Hour, 5, 1, 0.4, 2 * time.Minute},
		{15 * time.Minute, 3, 1, 0.4, 2 * time.Minute},
		{4 * time.Minute, 3, 1, 0.4, 30 * time.Second},
		{10 * time.Minute, 2, 0, 0.5, 0},
	} {
		name := fmt.Sprintf("d=%s/kills=%d/outage=%s", tc.d, tc.kills, tc.outage)
		evs, err := planSchedule(tc.d, tc.kills, tc.terms, tc.at, tc.outage)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		n := map[eventKind]int{}
		var outStart, outEnd time.Duration
		for i, e := range evs {
			n[e.Kind]++
			if i > 0 && e.At < evs[i-1].At {
				t.Errorf("%s: events out of order: %v", name, evs)
			}
			switch e.Kind {
			case evOutageStart:
				outStart = e.At
			case evOutageEnd:
				outEnd = e.At
			}
		}
		if n[evKill] != tc.kills || n[evTerm] != tc.terms {
			t.Errorf("%s: %d kills, %d terms; want %d, %d", name, n[evKill], n[evTerm], tc.kills, tc.terms)
		}
		if tc.outage > 0 {
			want := time.Duration(float64(tc.d) * tc.at).Round(time.Second)
			if n[evOutageStart] != 1 || n[evOutageEnd] != 1 || outStart != want || outEnd-outStart != tc.outage {
				t.Errorf("%s: outage %s..%s, want %s from %s", name, outStart, outEnd, tc.outage, want)
			}
		} else if n[evOutageStart] != 0 {
			t.Errorf("%s: an outage was planned", name)
		}
		var prev time.Duration
		for _, e := range evs {
			if e.Kind != evKill && e.Kind != evTerm {
				continue
			}
			if e.At < tc.d/20 || e.At > tc.d-tc.d/20 {
				t.Errorf("%s: restart at %s, outside the middle 90 %%", name, e.At)
			}
			if guard := min(time.Minute, tc.d/20) - time.Second; tc.outage > 0 && e.At > outStart-guard && e.At < outEnd+guard {
				t.Errorf("%s: restart at %s, too close to the outage %s..%s", name, e.At, outStart, outEnd)
			}
			if prev > 0 && e.At-prev < 10*time.Second {
				t.Errorf("%s: restarts at %s and %s, under 10 s apart", name, prev, e.At)
			}
			prev = e.At
		}
	}
	if _, err := planSchedule(4*time.Minute, 3, 1, 0.9, 2*time.Minute); err == nil {
		t.Error("an outage past the end: no error")
	}
	if _, err := planSchedule(4*time.Minute, 100, 1, 0.4, 30*time.Second); err == nil {
		t.Error("100 restarts in 4 minutes: no error")
	}
}

func TestSoakFlags(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		dur   time.Duration
		kills int
	}{
		{nil, 2 * time.Hour, 5},
		{[]string{"-duration=15m"}, 15 * time.Minute, 3},
		{[]string{"-duration=6h"}, 6 * time.Hour, 15},
		{[]string{"-duration=4m", "-outage=30s", "-kills=2"}, 4 * time.Minute, 2},
		{[]string{"-duration=15m", "-kills=-1"}, 15 * time.Minute, 3},
		{[]string{"-duration=15m", "-kills=0"}, 15 * time.Minute, 0},
	} {
		o, err := parseFlags(append([]string{"-mode=soak"}, tc.args...))
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if o.load.Duration != tc.dur || o.soak.Kills != tc.kills || o.soak.Terms != 1 || o.soak.Faults.Rate != 0.1 ||
			o.soak.Faults.Latency != 50*time.Millisecond || o.soak.Faults.Mix != (faultMix{1, 1, 1}) {
			t.Errorf("%v: duration %s, kills %d, settings %+v", tc.args, o.load.Duration, o.soak.Kills, o.soak)
		}
	}
	// A clean run: no restart, no fault, no outage, no latency.
	o, err := parseFlags([]string{"-mode=soak", "-duration=1h", "-kills=0", "-terms=0", "-outage=0", "-fault-rate=0", "-store-latency=0", "-read-back-shards=20"})
	if err != nil {
		t.Fatal(err)
	}
	if evs, err := planSchedule(o.load.Duration, o.soak.Kills, o.soak.Terms, o.soak.OutageAt, o.soak.Outage); err != nil || len(evs) != 0 {
		t.Errorf("clean run: schedule %v, %v; want none", evs, err)
	}
	if o.soak.ReadBackShards != 20 || o.soak.Faults.Rate != 0 || o.soak.Faults.Latency != 0 {
		t.Errorf("clean run: settings %+v", o.soak)
	}
	for _, bad := range [][]string{{"-outage-mode=explode"}, {"-fault-rate=2"}, {"-duration=1m"}, {"-fault-mix=drop=0"}, {"-terms=-1"}} {
		if _, err := parseFlags(append([]string{"-mode=soak"}, bad...)); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
	if _, err := parseFlags([]string{"-mode=nope"}); err == nil {
		t.Error("-mode=nope: no error")
	}
}

func TestSoakValue(t *testing.T) {
	for _, k := range []kind{kindConst, kindCounter, kindGauge, kindBucket} {
		prev := math.Inf(-1)
		for step := range int64(2000) {
			v := soakValue(k, 7, step, 1)
			if v != soakValue(k, 7, step, 1) {
				t.Fatalf("kind %v step %d: not deterministic", k, step)
			}
			if (k == kindCounter || k == kindBucket) && v < prev {
				t.Fatalf("kind %v: counter went down from %v to %v at step %d", k, prev, v, step)
			}
			if str := strconv.FormatFloat(v, 'f', -1, 64); strings.Contains(str, ".") && len(str)-strings.IndexByte(str, '.')-1 > 2 {
				t.Fatalf("kind %v step %d: value %s has more than two decimals", k, step, str)
			}
			prev = v
		}
	}
	if soakValue(kindGauge, 1, 5, 1) == soakValue(kindGauge, 2, 5, 1) && soakValue(kindGauge, 1, 6, 1) == soakValue(kindGauge, 2, 6, 1) {
		t.Error("two series have the same gauge values")
	}
}

// testBook makes the book of a small load: 3 shards of 2 targets of 20
// series, 15 s interval.
func testBook(t *testing.T) (*generator, *ackBook, *soakSeries) {
	t.Helper()
	g, err := newGenerator(loadConfig{Series: 120, PerTarget: 20, Batch: 40, Version: 1, Interval: 15 * time.Second, RealTime: true, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	b, ss := newSoakBook(g, ts0, 15*time.Second, 1)
	return g, b, ss
}

func TestAckBook(t *testing.T) {
	_, b, ss := testBook(t)
	if len(b.shards) != 3 || b.shards[1].first != 40 || b.shards[2].n != 40 || len(ss.kinds) != 120 {
		t.Fatalf("shards %+v, %d series", b.shards, len(ss.kinds))
	}
	if got := b.shards[1].offset; got != 5000 {
		t.Errorf("shard 1 offset %d ms, want a third of the interval", got)
	}
	if got := b.shards[2].instances; len(got) != 2 || got[0] != "host-00004-0:9100" {
		t.Errorf("shard 2 instances %v", got)
	}
	for si := range b.shards {
		for _, step := range []int64{0, 1, 479} {
			s, ok := b.step(si, b.ts(si, step))
			if !ok || s != step {
				t.Errorf("shard %d step %d: round trip gave %d, %v", si, step, s, ok)
			}
		}
		if _, ok := b.step(si, b.ts(si, 3)+1); ok {
			t.Errorf("shard %d: a timestamp between steps maps to a step", si)
		}
	}
	b.markSent(0, 0)
	b.markSent(0, 1)
	b.markAcked(0, 1)
	b.markSent(2, 70)
	b.markAcked(2, 70)
	sent, acked, samples := b.totals()
	if sent != 3 || acked != 2 || samples != 80 || b.maxStep() != 71 {
		t.Errorf("totals %d sent, %d acked, %d samples, max step %d; want 3, 2, 80, 71", sent, acked, samples, b.maxStep())
	}
}

// fakeStore answers read-back queries from samples held per series index
// and timestamp, as the query API would.
type fakeStore struct {
	book    *ackBook
	series  *soakSeries
	labels  []map[string]string
	samples map[int32]map[int64][]string // series -> ts -> values (more than one: a duplicate)
	failAt  map[int64]bool               // query times that fail
}

var selRE = regexp.MustCompile(`^\{instance=~?"([^"]*)"\}\[(\d+)ms\]$`)

func (f *fakeStore) query(_ context.Context, expr string, at int64) ([]byte, error) {
	if f.failAt[at] {
		return nil, errors.New("HTTP 500: boom")
	}
	m := selRE.FindStringSubmatch(expr)
	if m == nil {
		return nil, fmt.Errorf("unexpected query %q", expr)
	}
	inst := regexp.MustCompile("^(?:" + m[1] + ")$")
	w, _ := strconv.ParseInt(m[2], 10, 64)
	type series struct {
		Metric map[string]string `json:"metric"`
		Values [][2]any          `json:"values"`
	}
	var res []series
	for gi, lbs := range f.labels {
		if !inst.MatchString(lbs["instance"]) {
			continue
		}
		s := series{Metric: lbs}
		var tss []int64
		for ts := range f.samples[int32(gi)] {
			if ts > at-w && ts <= at {
				tss = append(tss, ts)
			}
		}
		sortInt64(tss)
		for _, ts := range tss {
			for _, v := range f.samples[int32(gi)][ts] {
				// As Prometheus writes them: seconds, trailing zeros dropped.
				s.Values = append(s.Values, [2]any{json.Number(strconv.FormatFloat(float64(ts)/1000, 'f', -1, 64)), v})
			}
		}
		if len(s.Values) > 0 {
			res = append(res, s)
		}
	}
	out := map[string]any{"status": "success", "data": map[string]any{"resultType": "matrix", "result": res}}
	return json.Marshal(out)
}

func sortInt64(xs []int64) {
	for i := 1; i < len(xs); i++ {
		for j := i; j > 0 && xs[j] < xs[j-1]; j-- {
			xs[j], xs[j-1] = xs[j-1], xs[j]
		}
	}
}

func newFakeStore(g *generator, b *ackBook, ss *soakSeries) *fakeStore {
	f := &fakeStore{book: b, series: ss, samples: map[int32]map[int64][]string{}, failAt: map[int64]bool{}}
	for _, st := range g.shards {
		for _, sd := range st.series {
			m := map[string]string{}
			for _, l := range sd.labels {
				m[l.Name] = l.Value
			}
			f.labels = append(f.labels, m)
		}
	}
	return f
}

// store puts the samples of shard si at step, as sent.
func (f *fakeStore) store(si int, step int64) {
	bs := f.book.shards[si]
	for j := range bs.n {
		gi := int32(bs.first + j)
		if f.samples[gi] == nil {
			f.samples[gi] = map[int64][]string{}
		}
		v := soakValue(f.series.kinds[gi], int(gi), step, f.series.seed)
		f.samples[gi][f.book.ts(si, step)] = []string{strconv.FormatFloat(v, 'f', -1, 64)}
	}
}

func TestReadBack(t *testing.T) {
	g, b, ss := testBook(t)
	f := newFakeStore(g, b, ss)
	const steps = 150 // 37.5 minutes: two read windows of 30 minutes
	const window = 30 * time.Minute
	var acked, unacked int64
	for si := range b.shards {
		for step := range int64(steps) {
			b.markSent(si, step)
			if step%50 != 7 { // every 50th request got no 2xx...
				b.markAcked(si, step)
				acked += 40
			}
			if step%100 != 7 { // ...and half of those were applied anyway
				f.store(si, step)
				if step%50 == 7 {
					unacked += 40
				}
			}
		}
	}
	start := time.UnixMilli(ts0)
	res := readBack(t.Context(), b, ss, f.query, window, start, 0, nil)
	if res.Lost != 0 || res.Duplicated != 0 || res.Altered != 0 || res.Unexpected != 0 || res.Unverified != 0 ||
		res.Acked != acked || res.Found != acked || res.Unacked != unacked || unacked == 0 || res.QueryErrors != 0 || res.Queries != 6 {
		t.Fatalf("clean store: %+v; want %d acknowledged, all found, %d stored unacknowledged, 6 queries", res, acked, unacked)
	}

	// Now break it: one acknowledged sample lost, one duplicated (same
	// value twice), one altered, one at a timestamp never sent, one series
	// that was never sent.
	gi := int32(b.shards[1].first + 3)
	delete(f.samples[gi], b.ts(1, 10))
	gj := int32(b.shards[2].first + 5)
	tsd := b.ts(2, 20)
	f.samples[gj][tsd] = append(f.samples[gj][tsd], f.samples[gj][tsd][0])
	f.samples[gj][b.ts(2, 21)] = []string{"123456.78"}
	f.samples[gj][b.ts(2, 22)+1] = []string{"1"}
	f.labels = append(f.labels, map[string]string{"__name__": "stray", "instance": "host-00000-0:9100", "job": "node"})
	f.samples[int32(len(f.labels)-1)] = map[int64][]string{b.ts(0, 0): {"1"}}
	res = readBack(t.Context(), b, ss, f.query, window, start, 0, nil)
	if res.Lost != 1 || res.Duplicated != 1 || res.Altered != 1 || res.Unexpected != 2 || res.Acked != acked || res.Found != acked-1 {
		t.Fatalf("broken store: %+v; want 1 lost, 1 duplicated, 1 altered, 2 unexpected", res)
	}
	if res.LostByMinute[2] != 1 { // step 10 of shard 1: 150 s + 5 s in
		t.Errorf("lost by minute %v, want one in minute 2", res.LostByMinute)
	}
	var kinds []string
	for _, e := range res.Examples {
		kinds = append(kinds, strings.SplitN(e, " ", 2)[0])
	}
	if got := strings.Join(kinds, " "); !strings.Contains(got, "lost:") || !strings.Contains(got, "duplicated:") || !strings.Contains(got, "altered:") {
		t.Errorf("examples %q", res.Examples)
	}

	// A window whose query keeps failing is unverified, not lost.
	f = newFakeStore(g, b, ss)
	for si := range b.shards {
		for step := range int64(steps) {
			f.store(si, step)
		}
	}
	f.failAt[b.ts(0, 0)-1+window.Milliseconds()] = true
	res = readBack(t.Context(), b, ss, f.query, window, start, 0, nil)
	// Steps 0..119 of shard 0, less the 3 never acknowledged (7, 57, 107).
	if res.Lost != 0 || res.Unverified != 40*(120-3) || res.QueryErrors != 1 || !strings.Contains(res.FirstError, "boom") {
		t.Fatalf("failing window: %+v; want the first window of shard 0 unverified", res)
	}
}

func TestParseMillis(t *testing.T) {
	for in, want := range map[string]int64{
		"1790000000.123": 1_790_000_000_123, "1790000000.1": 1_790_000_000_100, "1790000000": 1_790_000_000_000,
		"1790000000.005": 1_790_000_000_005, "1.790000000123e9": 1_790_000_000_123,
	} {
		if got, err := parseMillis(json.Number(in)); err != nil || got != want {
			t.Errorf("parseMillis(%s) = %d, %v; want %d", in, got, err, want)
		}
	}
	if fmtMillis(1_790_000_000_005) != "1790000000.005" {
		t.Errorf("fmtMillis: %s", fmtMillis(1_790_000_000_005))
	}
}

func TestS3Costs(t *testing.T) {
	ops := [numOps]int64{opGET: 1_000_000, opPUT: 36_000, opLIST: 3_600, opDELETE: 500}
	rows, total := s3Costs(ops, time.Hour)
	want := map[string]float64{"GET": 292, "PUT": 131.4, "LIST": 13.14, "DELETE": 0}
	if len(rows) != 4 {
		t.Fatalf("rows %+v, want one per operation with requests", rows)
	}
	for _, r := range rows {
		if math.Abs(r.USDPerMonth-want[r.Op]) > 1e-9 {
			t.Errorf("%s: $%g a month, want $%g", r.Op, r.USDPerMonth, want[r.Op])
		}
	}
	if math.Abs(total.USDPerMonth-436.54) > 1e-9 || total.Requests != 1_040_100 || total.PerHour != 1_040_100 {
		t.Errorf("total %+v, want $436.54 a month", total)
	}
	// The same requests over two hours cost half as much a month.
	if _, t2 := s3Costs(ops, 2*time.Hour); math.Abs(t2.USDPerMonth-436.54/2) > 1e-9 {
		t.Errorf("over 2 h: $%g", t2.USDPerMonth)
	}
	// HEAD is billed as a GET, POST as a PUT.
	_, hp := s3Costs([numOps]int64{opHEAD: 1000, opPOST: 1000}, time.Hour)
	if math.Abs(hp.USDPerMonth-(0.0004+0.005)*730) > 1e-9 {
		t.Errorf("HEAD and POST: $%g", hp.USDPerMonth)
	}
}

func TestRecoveryTimes(t *testing.T) {
	s := time.Second
	attempts := []rwAttempt{{at: 1 * s, status: 204}, {at: 12 * s, status: -1}, {at: 15 * s, status: 503}, {at: 17 * s, status: 204}, {at: 16 * s, status: 200}}
	if at, ok := firstOKAfter(attempts, 10*s); !ok || at != 16*s {
		t.Errorf("first 2xx after 10s: %s, %v; want 16s", at, ok)
	}
	if _, ok := firstOKAfter(attempts, 18*s); ok {
		t.Error("a 2xx after the last one")
	}
	polls := []readyPoll{{9 * s, 200}, {10 * s, -1}, {11 * s, 503}, {12 * s, 503}, {13 * s, 200}}
	if at, ok := readyAfter(polls, 10*s); !ok || at != 13*s {
		t.Errorf("ready after 10s: %s, %v", at, ok)
	}
	if got := readyCodes(polls, 10*s, 13*s); got != "no answer ×1, 503 ×2" {
		t.Errorf("codes %q", got)
	}
}

func TestSoakSVG(t *testing.T) {
	s := time.Second
	nan := math.NaN()
	samples := []resSample{{0, 50 << 20, 1, 0, 0.5, 0, 1}, {5 * s, 60 << 20, 3, 1, 0.7, 0, 2}, {10 * s, nan, nan, 1, nan, 0, nan}, {15 * s, 55 << 20, 2, 1.5, 1, 0, 1},
		{50 * s, 55 << 20, 2, 31.5, 1.2, 0, 1}}
	attempts := []rwAttempt{{at: s, status: 204}, {at: 6 * s, status: 503}, {at: 11 * s, status: -1}}
	events := []soakEventRecord{{Kind: "SIGKILL", Start: 8 * s, Ref: 8 * s}, {Kind: "outage (refuse)", Start: 9 * s, Ref: 12 * s},
		{Kind: "unplanned exit", Start: 13 * s, Ref: -1}}
	svg := soakSVG("Shale fault soak", 20*s, samples, attempts, events)
	if err := xml.Unmarshal([]byte(svg), new(struct{})); err != nil {
		t.Fatalf("not well-formed: %v", err)
	}
	for _, want := range []string{"writer RSS (MiB)", "L0 tables", "L0 depth", "#f4b6b6", "stroke-dasharray=\"4,3\"", "writer CPU (cores", "load avg 1m"} {
		if !strings.Contains(svg, want) {
			t.Errorf("SVG lacks %q", want)
		}
	}
}

func TestSoakReport(t *testing.T) {
	g, b, ss := testBook(t)
	out := t.TempDir()
	o, err := parseFlags([]string{"-mode=soak", "-duration=15m", "-out=" + out})
	if err != nil {
		t.Fatal(err)
	}
	p, err := newFaultProxy("http://127.0.0.1:1", o.soak.Faults, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	l := newSoakLoad(g, b, ss, "http://127.0.0.1:1/api/v1/write", now, now, time.Second, time.Minute)
	s := time.Second
	l.attempts = []rwAttempt{{at: 10 * s, latency: 80 * time.Millisecond, status: 204}, {at: 61 * s, status: statusRefused},
		{at: 63 * s, status: 503}, {at: 65 * s, latency: 90 * time.Millisecond, status: 204}, {at: 121 * s, status: statusRefused},
		{at: 126 * s, latency: 70 * time.Millisecond, status: 204}}
	l.ackTimes = []float32{80, 4090, 5070}
	b.markSent(0, 0)
	b.markAcked(0, 0)
	fenced := procExit{Gen: 2, Code: 3, LastError: `level=ERROR msg="fenced" | by a newer writer`}
	r := &soakRun{o: o, sc: o.soak, dir: out, start: now, proxy: p, load: l, book: b, series: ss, elapsed: 15 * time.Minute,
		proxySpan: time.Hour, proxyCounts: proxyCounts{Ops: [][numOps]int64{{opGET: 100, opPUT: 50}}, Faults: [numFaultKinds]int64{faultSlowDown: 5, faultDrop: 2}},
		events: []soakEventRecord{
			{Kind: "SIGKILL", Start: 60 * s, Ref: 60 * s, Exit: &procExit{Code: -1, Signal: "killed"}, Took: 5 * time.Millisecond},
			{Kind: "unplanned exit", Start: 120 * s, Ref: 122 * s, Exit: &fenced},
		},
		polls: []readyPoll{{59 * s, 200}, {61 * s, -1}, {63 * s, 503}, {64 * s, 200}, {121 * s, -1}, {125 * s, 200}},
		samples: []resSample{{0, 50 << 20, 1, 0, 0.5, 100 << 20, 1}, {5 * s, 60 << 20, 3, 1, 0.7, 120 << 20, 2},
			{65 * s, 60 << 20, 3, 121, 1.5, 110 << 20, 1}},
		storedAtEnd: 200, storedFinal: 300,
		queries: []queryPoint{{at: s, latency: 5 * time.Millisecond, ok: true}, {at: 2 * s, kind: "connection refused"},
			{at: 3 * s, kind: "HTTP 503 unavailable"}, {at: 4 * s, kind: "HTTP 503 unavailable"}},
		firstQueryErr: "cpu_by_job: Post ...: connection refused",
		readBack:      &readBackResult{Acked: 40, Found: 39, Lost: 1, Queries: 6, LostByMinute: map[int]int64{1: 1}, Examples: []string{"lost: up{} at 1"}},
	}
	var stdout strings.Builder
	if err := r.writeReport(&stdout); err == nil || err.Error() != "soak failed: 1 lost, 1 unplanned exits" {
		t.Fatalf("error %v, want the failures named", err)
	}
	rep := stdout.String()
	for _, want := range []string{
		"**FAIL: 1 lost, 1 unplanned exits.**",
		"| samples acknowledged (2xx) | 40 (1 of the 1 requests sent) |",
		"| acknowledged samples lost | 1 |",
		"| unplanned writer exits | 1 (exit 3 ×1), each restarted by the harness |",
		"| remote-write attempts | 6: 3 2xx, 1 503, 0 other non-2xx, 2 without an answer |",
		"| 1 | SIGKILL | 1:00 | 0.00s | 5.00s | 4.00s | connection refused ×1, 503 ×1 | no answer ×1, 503 ×1 | signal killed after 0.01s |",
		`| 2 | unplanned exit | 2:00 | 2.00s | 4.00s | 3.00s | connection refused ×1 | no answer ×1 | exit 3: level=ERROR msg="fenced" \| by a newer writer |`,
		"| PUT | 50 | 50 | 0.18 |",
		"| store faults injected | 7 (slowdown 5, drop 2) |",
		"- lost: up{} at 1",
		"| writer CPU during the load | 121 CPU-s over 15m0s: 0.134 cores on average, 3.02M CPU-s per million samples acknowledged |",
		"| writer CPU, busiest minute | 1.86 cores |",
		"| machine load average (1 min) median / max during the load | 0.7 / 1.5 on",
		"| harness (tsdb-bench) RSS peak | 120 MiB |",
		"| L0 depth (compaction debt: writes stall at 24) max / last | 2 / 1 |",
		"| L0 tables max / last | 3 / 3 |",
		"| stored bytes at the end of the load | 200 (5 bytes per acknowledged sample) |",
		"| stored bytes after the final clean stop | 300 (7.5 bytes per acknowledged sample) |",
		"| samples in attempts without a 2xx (refused, failed or unanswered; retried) | 0 |",
		"| query errors | 3 (HTTP 503 unavailable ×2, connection refused ×1); the first: cpu_by_job: Post ...: connection refused |",
	} {
		if !strings.Contains(rep, want) {
			t.Errorf("report lacks %q:\n%s", want, rep)
		}
	}
	for _, f := range []string{"soak-report.md", "soak-snippet.md", "soak-timeline.svg"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Error(err)
		}
	}

	r.events = r.events[:1]
	r.readBack = &readBackResult{Acked: 40, Found: 40, Queries: 6}
	stdout.Reset()
	if err := r.writeReport(&stdout); err != nil || !strings.Contains(stdout.String(), "**PASS: every acknowledged sample read back once") {
		t.Errorf("clean run: %v\n%s", err, stdout.String())
	}

	// A read-back of some shards says so; none asked for is no failure.
	r.readBack = &readBackResult{Acked: 40, Found: 40, Queries: 6, Shards: 2, OfShards: 9, Took: 3 * s}
	stdout.Reset()
	if err := r.writeReport(&stdout); err != nil || !strings.Contains(stdout.String(), "**PASS: every acknowledged sample of the 2 shards read back") ||
		!strings.Contains(stdout.String(), "| read-back | every acknowledged sample of 2 of the 9 shards (series groups sent in one request), in 3.00s |") {
		t.Errorf("partial read-back: %v\n%s", err, stdout.String())
	}
	r.readBack, r.sc.ReadBackShards = nil, 0
	stdout.Reset()
	if err := r.writeReport(&stdout); err != nil || !strings.Contains(stdout.String(), "**PASS: no unplanned exit; no read-back asked for.**") {
		t.Errorf("no read-back: %v\n%s", err, stdout.String())
	}
	r.sc.ReadBackShards = -1
	stdout.Reset()
	if err := r.writeReport(&stdout); err == nil || !strings.Contains(stdout.String(), "FAIL: no read-back") {
		t.Errorf("read-back missing though asked for: %v\n%s", err, stdout.String())
	}

	// A read replica's exits, its lag at the end and its losses fail the
	// soak as the writer's do.
	r.sc.Reader = true
	r.readBack = &readBackResult{Acked: 40, Found: 40, Queries: 6}
	r.events = append(r.events, soakEventRecord{Kind: readerUnplanned, Start: 90 * s, Ref: 91 * s, Exit: &procExit{Code: 1}})
	r.readerQueries = []queryPoint{{at: s, latency: 3 * time.Millisecond, ok: true}}
	r.readerReadBack, r.readerCaughtUp = &readBackResult{Acked: 40, Found: 38, Lost: 2, Queries: 6}, -1
	stdout.Reset()
	err = r.writeReport(&stdout)
	if err == nil || err.Error() != "soak failed: reader: 1 unplanned exits, reader: did not catch up, reader: 2 lost" {
		t.Errorf("reader failures: %v, want them named", err)
	}
	for _, want := range []string{
		"| reader: unplanned exits | 1 (exit 1 ×1), each restarted by the harness |",
		"| reader: caught up with the writer at the end | not within 2m |",
		"| reader: acknowledged samples lost | 2 |",
		"| reader: query errors | 0 |",
	} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, stdout.String())
		}
	}
	r.events, r.readerCaughtUp = r.events[:1], 2*s
	r.readerReadBack = &readBackResult{Acked: 40, Found: 40, Queries: 6}
	stdout.Reset()
	if err := r.writeReport(&stdout); err != nil || !strings.Contains(stdout.String(), "| reader: caught up with the writer at the end | in 2.00s |") {
		t.Errorf("clean run with a reader: %v\n%s", err, stdout.String())
	}
}

func TestPickShards(t *testing.T) {
	for _, tc := range []struct {
		n, want int
		out     []int
	}{
		{5, -1, []int{0, 1, 2, 3, 4}},
		{5, 9, []int{0, 1, 2, 3, 4}},
		{5, 0, []int{}},
		{5, 1, []int{0}},
		{10, 3, []int{0, 4, 9}},
		{1650, 2, []int{0, 1649}},
	} {
		if got := pickShards(tc.n, tc.want); !slices.Equal(got, tc.out) {
			t.Errorf("pickShards(%d, %d) = %v, want %v", tc.n, tc.want, got, tc.out)
		}
	}
}

func TestDirBytesAndLoadAverage(t *testing.T) {
	d := t.TempDir()
	if err := os.MkdirAll(filepath.Join(d, "a", "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	for p, n := range map[string]int{"x": 10, "a/y": 20, "a/b/z": 30} {
		if err := os.WriteFile(filepath.Join(d, p), make([]byte, n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := dirBytes(d); err != nil || n != 60 {
		t.Errorf("dirBytes = %d, %v; want 60", n, err)
	}
	if _, err := dirBytes(filepath.Join(d, "missing")); err == nil {
		t.Error("dirBytes of a missing folder: no error")
	}
	if v := loadAverage(); math.IsNaN(v) || v < 0 {
		t.Errorf("loadAverage = %v", v)
	}
}

// minuteSoakLoad makes a soak load of 8 shards of 20 series, a sample a
// minute, that sends to url from now on and whose step 0 falls at t0 (ms),
// and returns it and its book.
func minuteSoakLoad(t *testing.T, url string, now time.Time, t0 int64) (*soakLoad, *ackBook) {
	t.Helper()
	g, err := newGenerator(loadConfig{Series: 160, PerTarget: 20, Batch: 20, Version: 1, Interval: time.Minute, RealTime: true, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	b, ss := newSoakBook(g, t0, time.Minute, 1)
	return newSoakLoad(g, b, ss, url, now, now, 10*time.Second, time.Minute), b
}

// TestSoakLoadInFlight sends one step of 8 shards, all due at once, to a
// receiver that takes 20 ms per request: with limitInFlight(2) no more
// than 2 are ever in flight, and every request is acknowledged.
func TestSoakLoadInFlight(t *testing.T) {
	now := time.Now()
	var mu sync.Mutex
	cur, peak, n := 0, 0, 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		cur++
		peak, n = max(peak, cur), n+1
		mu.Unlock()
		_, _ = io.Copy(io.Discard, r.Body)
		time.Sleep(20 * time.Millisecond) // the receiver's service time
		mu.Lock()
		cur--
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	// Step 0 of every shard is past, step 1 in the future.
	l, b := minuteSoakLoad(t, srv.URL, now, now.Add(-time.Minute+time.Millisecond).UnixMilli())
	l.limitInFlight(2)
	l.run(t.Context())
	if len(l.gen.shards) != 8 || n != 8 || peak > 2 {
		t.Errorf("%d shards, %d requests, at most %d in flight; want 8, 8, at most 2", len(l.gen.shards), n, peak)
	}
	if _, acked, samples := b.totals(); acked != 8 || samples != 160 {
		t.Errorf("acknowledged %d requests, %d samples; want 8, 160", acked, samples)
	}
}

// TestSoakLoadDataOffset: with a data offset of -1h a step is sent when the
// wall clock reaches its timestamp plus an hour, not at once because its
// timestamp is past.
func TestSoakLoadDataOffset(t *testing.T) {
	now := time.Now()
	var mu sync.Mutex
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n++
		mu.Unlock()
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	// Step 0 is due a minute ago in wall time, step 1 after the end: 61
	// steps of every shard have timestamps in the past.
	l, b := minuteSoakLoad(t, srv.URL, now, now.Add(-time.Hour-time.Minute+time.Millisecond).UnixMilli())
	l.dataOffset = -time.Hour
	l.run(t.Context())
	if n != len(l.gen.shards) {
		t.Errorf("%d requests for %d shards; want one step of each", n, len(l.gen.shards))
	}
	if _, acked, _ := b.totals(); acked != int64(len(l.gen.shards)) {
		t.Errorf("acknowledged %d requests, want %d", acked, len(l.gen.shards))
	}
}
