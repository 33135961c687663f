package rules

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	jsoniter "github.com/json-iterator/go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/route"
	"github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	prules "github.com/prometheus/prometheus/rules"
	"github.com/prometheus/prometheus/scrape"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/util/notifications"
	"github.com/prometheus/prometheus/util/teststorage"
	v1 "github.com/prometheus/prometheus/web/api/v1"
	"github.com/stretchr/testify/require"

	"github.com/shaledb/shale/internal/jsonenc"
)

// newUpstreamHandler serves the three paths with Prometheus' own
// web/api/v1 code over src: the reference Handler is compared with.
func newUpstreamHandler(src upstreamSource) http.Handler {
	api := v1.NewAPI(
		nil, nil, nil, nil,
		func(context.Context) v1.ScrapePoolsRetriever { return noScrape{} },
		func(context.Context) v1.TargetRetriever { return noScrape{} },
		func(context.Context) v1.AlertmanagerRetriever { return src },
		func() config.Config { return config.DefaultConfig },
		map[string]string{},
		v1.GlobalURLOptions{Scheme: "http"},
		func(f http.HandlerFunc) http.HandlerFunc { return f },
		nil, "", false, false, 0,
		slog.New(slog.DiscardHandler),
		func(context.Context) v1.RulesRetriever { return src },
		0, 0, 0, false, anyOrigin,
		func() (v1.RuntimeInfo, error) { return v1.RuntimeInfo{}, nil },
		&v1.PrometheusVersion{},
		func() []notifications.Notification { return nil },
		func() (<-chan notifications.Notification, func(), bool) { return nil, func() {}, false },
		prometheus.NewRegistry(), prometheus.NewRegistry(),
		nil, false, nil, false, false, false, 0, false, false, nil, nil,
		v1.OpenAPIOptions{}, nil, false, 0,
	)
	r := route.New()
	api.Register(r)
	mux := http.NewServeMux()
	strip := http.StripPrefix("/api/v1", r)
	for _, p := range Paths {
		mux.Handle(p, strip)
	}
	return mux
}

type noScrape struct{}

func (noScrape) ScrapePools() []string                       { return nil }
func (noScrape) TargetsActive() map[string][]*scrape.Target  { return nil }
func (noScrape) TargetsDropped() map[string][]*scrape.Target { return nil }
func (noScrape) TargetsDroppedCounts() map[string]int        { return nil }
func (noScrape) ScrapePoolConfig(string) (*config.ScrapeConfig, error) {
	return nil, nil
}

// upstreamSource is what Prometheus' API reads: upstream rule groups.
type upstreamSource struct {
	groups          []*prules.Group
	active, dropped []*url.URL
}

func (s upstreamSource) RuleGroups() []*prules.Group { return s.groups }

func (s upstreamSource) AlertingRules() []*prules.AlertingRule {
	var out []*prules.AlertingRule
	for _, g := range s.groups {
		for _, r := range g.Rules() {
			if a, ok := r.(*prules.AlertingRule); ok {
				out = append(out, a)
			}
		}
	}
	return out
}

func (s upstreamSource) Alertmanagers() []*url.URL        { return s.active }
func (s upstreamSource) DroppedAlertmanagers() []*url.URL { return s.dropped }

// fixedSource is a Source over groups built and evaluated by the test.
type fixedSource struct {
	groups          []*Group
	active, dropped []*url.URL
}

func (s fixedSource) RuleGroups() []*Group { return s.groups }

func (s fixedSource) AlertingRules() []*AlertingRule {
	var out []*AlertingRule
	for _, g := range s.groups {
		for _, r := range g.Rules() {
			if a, ok := r.(*AlertingRule); ok {
				out = append(out, a)
			}
		}
	}
	return out
}

func (s fixedSource) Alertmanagers() []*url.URL        { return s.active }
func (s fixedSource) DroppedAlertmanagers() []*url.URL { return s.dropped }

// ruleSpec and groupSpec define a rule group once for both managers.
type ruleSpec struct {
	record, alert, expr string
	hold, keep          time.Duration
	labels, anns        labels.Labels
}

type groupSpec struct {
	name, file string
	interval   time.Duration
	limit      int
	rules      []ruleSpec
}

// testEnv is a group environment over st with query, for tests that
// evaluate groups themselves.
func testEnv(t *testing.T, st storage.Storage, query QueryFunc) *groupEnv {
	t.Helper()
	met, err := newMetrics(prometheus.NewRegistry())
	require.NoError(t, err)
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	return &groupEnv{
		appendable: st, queryable: st, query: query,
		notify:          func(string, []*Alert) {},
		externalURL:     &url.URL{Scheme: "http", Host: "localhost:9090"},
		outageTolerance: time.Hour,
		forGracePeriod:  10 * time.Minute,
		resendDelay:     time.Minute,
		metrics:         met,
		logger:          slog.New(slog.DiscardHandler),
		now:             time.Now,
		managerDone:     done,
		staleWG:         &sync.WaitGroup{},
	}
}

// evaluatedSources builds groups whose rules are in every state Prometheus
// reports (inactive, pending, firing, kept firing; health ok, err and
// unknown), with names, labels and errors that need escaping, twice: with
// Prometheus' rule manager and with Shale's, over the same query answers,
// and evaluates both at the same timestamps.
func evaluatedSources(t *testing.T) (upstreamSource, fixedSource) {
	t.Helper()
	p := parser.NewParser(parser.Options{})
	answers := map[string]promql.Vector{
		`up == 0`: {
			{Metric: labels.FromStrings("__name__", "up", "instance", "a<b>&c", "job", "x\u2028y\x01\"\\"), F: 0},
		},
		// One alert a rule: a rule's alerts come out in map order.
		`up == 2`:            {{Metric: labels.FromStrings("__name__", "up", "instance", "é\xff"), F: 12345.678}},
		`pending_metric > 1`: {{Metric: labels.FromStrings("k", "v"), F: 1e-7}},
		`kept`:               {{Metric: labels.FromStrings("k", "kept"), F: 1e300}},
		`sum(up)`:            {{Metric: labels.EmptyLabels(), F: 2}},
		`vector(1)`:          {{Metric: labels.EmptyLabels(), F: 1}},
	}
	query := func(_ context.Context, q string, ts time.Time) (promql.Vector, error) {
		if strings.Contains(q, "broken") {
			return nil, errors.New(`query "broken" failed: <bad> & worse`)
		}
		v := slices.Clone(answers[q])
		for i := range v {
			v[i].T = ts.UnixMilli()
		}
		return v, nil
	}
	alert := func(name, q string, hold, keep time.Duration, ls, anns labels.Labels) ruleSpec {
		return ruleSpec{alert: name, expr: q, hold: hold, keep: keep, labels: ls, anns: anns}
	}
	record := func(name, q string, ls labels.Labels) ruleSpec { return ruleSpec{record: name, expr: q, labels: ls} }
	specs := []groupSpec{
		{"alerts", "/rules/a.yml", time.Minute, 0, []ruleSpec{
			alert("Firing", `up == 0`, 0, 0, labels.FromStrings("severity", "page"),
				labels.FromStrings("summary", "<b>down</b> & out", "runbook", "https://x/?a=1&b=2")),
			alert("Firing2", `up == 2`, 0, 0, labels.EmptyLabels(), labels.EmptyLabels()),
			alert("Pending", `pending_metric > 1`, time.Hour, 0, labels.EmptyLabels(), labels.EmptyLabels()),
			alert("Quiet", `absent_metric`, 5*time.Minute, 0, labels.FromStrings("severity", "ticket"), labels.EmptyLabels()),
			alert("Broken", `broken_metric`, 0, 0, labels.EmptyLabels(), labels.EmptyLabels()),
			alert("Kept", `kept`, 0, 10*time.Minute, labels.FromStrings("severity", "page"), labels.EmptyLabels()),
			record("job:up:sum", `sum(up)`, labels.FromStrings("team", "a&b")),
		}},
		{"records", "/rules/b.yml", 30 * time.Second, 5, []ruleSpec{
			record("broken:sum", `sum(broken)`, labels.EmptyLabels()),
			record("one", `vector(1)`, labels.EmptyLabels()),
		}},
		{"never evaluated", "/rules/b.yml", 1500 * time.Millisecond, 0, []ruleSpec{
			record("later", `vector(1)`, labels.EmptyLabels()),
			alert("Later", `vector(1)`, 0, 0, labels.EmptyLabels(), labels.EmptyLabels()),
		}},
		{`odd "<name>" & co`, "/rules/c\u2028.yml", time.Minute, 0, []ruleSpec{
			record("odd", `vector(1)`, labels.EmptyLabels()),
		}},
	}

	upSt, ourSt := teststorage.New(t), teststorage.New(t)
	t.Cleanup(func() { upSt.Close(); ourSt.Close() })
	opts := &prules.ManagerOptions{
		QueryFunc: prules.QueryFunc(query), AppendableV2: upSt, Queryable: upSt, Context: t.Context(),
		NotifyFunc: func(context.Context, string, ...*prules.Alert) {},
		Logger:     slog.New(slog.DiscardHandler), Parser: p, Registerer: prometheus.NewRegistry(),
	}
	opts.Metrics = prules.NewGroupMetrics(opts.Registerer)
	env := testEnv(t, ourSt, query)
	expr := func(s string) parser.Expr {
		e, err := p.ParseExpr(s)
		require.NoError(t, err)
		return e
	}
	var theirs []*prules.Group
	var ours []*Group
	for _, gs := range specs {
		var urs []prules.Rule
		var rs []Rule
		for _, r := range gs.rules {
			if r.alert != "" {
				urs = append(urs, prules.NewAlertingRule(r.alert, expr(r.expr), r.hold, r.keep, r.labels, r.anns, labels.EmptyLabels(), "http://localhost:9090/", false, opts.Logger))
				rs = append(rs, newAlertingRule(r.alert, expr(r.expr), r.hold, r.keep, r.labels, r.anns, labels.EmptyLabels(), "http://localhost:9090/", false, nil))
				continue
			}
			urs = append(urs, prules.NewRecordingRule(r.record, expr(r.expr), r.labels))
			rs = append(rs, newRecordingRule(r.record, expr(r.expr), r.labels))
		}
		theirs = append(theirs, prules.NewGroup(prules.GroupOptions{Name: gs.name, File: gs.file, Interval: gs.interval, Limit: gs.limit, Rules: urs, Opts: opts}))
		ours = append(ours, newGroup(gs.name, gs.file, gs.interval, gs.limit, nil, rs, env, false))
	}
	ts := time.Date(2026, 3, 4, 5, 6, 7, 890123456, time.UTC)
	for i := range specs {
		if specs[i].name == "never evaluated" {
			continue
		}
		prules.DefaultEvalIterationFunc(t.Context(), theirs[i], ts)
		ours[i].evalIteration(t.Context(), ts)
		if i == 0 {
			delete(answers, "kept") // Kept stops matching and keeps firing
			prules.DefaultEvalIterationFunc(t.Context(), theirs[i], ts.Add(time.Minute))
			ours[i].evalIteration(t.Context(), ts.Add(time.Minute))
			answers["kept"] = nil
		}
	}
	u := func(s string) *url.URL {
		x, err := url.Parse(s)
		require.NoError(t, err)
		return x
	}
	active := []*url.URL{u("http://am1:9093/api/v2/alerts"), u("https://am2.example/prefix/api/v2/alerts?x=1&y=<2>")}
	dropped := []*url.URL{u("http://dropped:9093/api/v2/alerts")}
	return upstreamSource{groups: theirs, active: active, dropped: dropped},
		fixedSource{groups: ours, active: active, dropped: dropped}
}

// wallClock matches the fields that hold the wall-clock time and duration
// of an evaluation, which two evaluations cannot share.
var wallClock = regexp.MustCompile(`"(evaluationTime|lastEvaluation)":("[^"]*"|[^,}]*)`)

// normalise replaces the wall-clock fields of an evaluation that happened
// with a placeholder; those of one that did not (0 and year 1) stay.
func normalise(body string) string {
	return wallClock.ReplaceAllStringFunc(body, func(s string) string {
		if strings.HasSuffix(s, ":0") || strings.Contains(s, `"0001-01-01T00:00:00Z"`) {
			return s
		}
		return s[:strings.Index(s, ":")+1] + `"<wall clock>"`
	})
}

func token(file, group string) string {
	h := sha256.Sum256([]byte(file + ";" + group))
	return hex.EncodeToString(h[:])
}

// TestSameAsUpstream compares the status, headers and bytes of Handler's
// answers with those of Prometheus' web/api/v1 over the same rules and
// Alertmanagers, for every parameter and error.
func TestSameAsUpstream(t *testing.T) {
	theirSrc, src := evaluatedSources(t)
	states := map[string]bool{}
	for _, r := range src.AlertingRules() {
		states[r.State().String()] = true
		states["health "+string(r.Health())] = true
		for _, a := range r.ActiveAlerts() {
			states["alert "+a.State.String()] = true
			if !a.KeepFiringSince.IsZero() {
				states["kept"] = true
			}
		}
	}
	require.Equal(t, map[string]bool{"unknown": true, "inactive": true, "pending": true, "firing": true,
		"health unknown": true, "health ok": true, "health err": true,
		"alert pending": true, "alert firing": true, "kept": true}, states, "the fixture lacks a state")

	type request struct {
		method, target string
		header         http.Header
	}
	get := func(target string) request { return request{method: http.MethodGet, target: target} }
	reqs := []request{
		get("/api/v1/rules"),
		get("/api/v1/rules?type=alert"),
		get("/api/v1/rules?type=RECORD"),
		get("/api/v1/rules?type=x"),
		get("/api/v1/rules?type=record&file[]=/rules/c%E2%80%A8.yml"),
		get("/api/v1/rules?type=alert&rule_group[]=records"),
		get("/api/v1/rules?rule_name[]=Firing&rule_name[]=one"),
		get("/api/v1/rules?rule_name[]=nothing"),
		get("/api/v1/rules?rule_group[]=records&rule_group[]=alerts"),
		get("/api/v1/rules?file[]=/rules/b.yml"),
		get("/api/v1/rules?file[]=/rules/none.yml"),
		get("/api/v1/rules?match[]=" + url.QueryEscape(`{severity="page"}`)),
		get("/api/v1/rules?match[]=" + url.QueryEscape(`{severity="page"}`) + "&match[]=" + url.QueryEscape(`{team=~"a.*"}`)),
		get("/api/v1/rules?match[]=" + url.QueryEscape(`{severity=""}`)),
		get("/api/v1/rules?match[]=" + url.QueryEscape(`up{`)),
		get("/api/v1/rules?match[]=" + url.QueryEscape(`{a="<&>"`)),
		get("/api/v1/rules?exclude_alerts=true"),
		get("/api/v1/rules?exclude_alerts=FALSE"),
		get("/api/v1/rules?exclude_alerts=yes"),
		get("/api/v1/rules?group_limit=1"),
		get("/api/v1/rules?group_limit=2"),
		get("/api/v1/rules?group_limit=10"),
		get("/api/v1/rules?group_limit=1&group_next_token=" + token("/rules/b.yml", "records")),
		get("/api/v1/rules?group_limit=1&type=record&group_next_token=" + token("/rules/a.yml", "alerts")),
		get("/api/v1/rules?group_limit=2&rule_group[]=alerts&group_next_token=" + token("/rules/b.yml", "records")),
		get("/api/v1/rules?group_next_token=" + token("/rules/b.yml", "records")),
		get("/api/v1/rules?group_limit=1&group_next_token=bad%3Ctoken%3E"),
		get("/api/v1/rules?group_limit=0"),
		get("/api/v1/rules?group_limit=-3"),
		get("/api/v1/rules?group_limit=x"),
		get("/api/v1/rules?group_limit=99999999999"),
		get("/api/v1/rules?type=x&group_limit=x&exclude_alerts=x"),
		get("/api/v1/rules?exclude_alerts=x&group_limit=x"),
		get("/api/v1/rules?a=%zz"),
		get("/api/v1/alerts"),
		get("/api/v1/alerts?type=x"),
		get("/api/v1/alertmanagers"),
		{http.MethodGet, "/api/v1/rules", http.Header{"Accept-Encoding": {"gzip"}}},
		{http.MethodGet, "/api/v1/alerts", http.Header{"Accept-Encoding": {"deflate"}}},
		{http.MethodGet, "/api/v1/alerts", http.Header{"Origin": {"https://grafana.example"}}},
		{http.MethodPost, "/api/v1/rules", nil},
		{http.MethodPut, "/api/v1/alerts", nil},
		{http.MethodDelete, "/api/v1/alertmanagers", nil},
		{http.MethodHead, "/api/v1/rules", nil},
		{http.MethodOptions, "/api/v1/rules", http.Header{"Origin": {"https://grafana.example"}}},
		get("/api/v1/rules/"),
		get("/api/v1/query"),
	}
	for _, s := range []struct {
		name   string
		src    Source
		theirs upstreamSource
		// wallClock: the two sides evaluated at other wall-clock times,
		// whose fields (and so the bodies' lengths) are compared for
		// presence only.
		wallClock bool
	}{{"evaluated", src, theirSrc, true}, {"empty", Empty{}, upstreamSource{}, false}} {
		ours := httptest.NewServer(Handler(s.src, nil, nil))
		defer ours.Close()
		theirs := httptest.NewServer(newUpstreamHandler(s.theirs))
		defer theirs.Close()
		do := func(base string, r request) (int, http.Header, string) {
			t.Helper()
			req, err := http.NewRequestWithContext(t.Context(), r.method, base+r.target, nil)
			require.NoError(t, err)
			for k, v := range r.header {
				req.Header[k] = v
			}
			resp, err := http.DefaultTransport.RoundTrip(req) // no redirects followed, no decompression
			require.NoError(t, err)
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			resp.Header.Del("Date")
			// Compressed at another level than upstream's, the bytes on the
			// wire (and their length) differ; the body they carry must not.
			if enc := resp.Header.Get("Content-Encoding"); enc != "" && len(b) > 0 {
				var zr io.Reader
				switch enc {
				case "gzip":
					zr, err = gzip.NewReader(bytes.NewReader(b))
				case "deflate":
					zr, err = zlib.NewReader(bytes.NewReader(b))
				default:
					t.Fatalf("Content-Encoding %q", enc)
				}
				require.NoError(t, err)
				b, err = io.ReadAll(zr)
				require.NoError(t, err)
				resp.Header.Del("Content-Length")
			}
			if !s.wallClock {
				return resp.StatusCode, resp.Header, string(b)
			}
			resp.Header.Del("Content-Length")
			return resp.StatusCode, resp.Header, normalise(string(b))
		}
		for _, r := range reqs {
			t.Run(s.name+" "+r.method+" "+r.target, func(t *testing.T) {
				wantCode, wantHdr, want := do(theirs.URL, r)
				gotCode, gotHdr, got := do(ours.URL, r)
				require.Equal(t, wantCode, gotCode, "upstream: %s\nshale: %s", want, got)
				require.Equal(t, wantHdr, gotHdr)
				require.Equal(t, want, got)
			})
		}
	}
	if n := strings.Count(normalise(`"evaluationTime":1.5e-05,"lastEvaluation":"2026-03-04T05:06:07Z"`), "<wall clock>"); n != 2 {
		t.Errorf("normalise replaced %d fields, want 2", n)
	}
}

// TestEncodersAsJSONIterator compares the encoders of strings and floats
// with json-iterator's, which Prometheus' answers are written with, on
// values the fixture of TestSameAsUpstream does not reach.
func TestEncodersAsJSONIterator(t *testing.T) {
	js := jsoniter.ConfigCompatibleWithStandardLibrary
	for _, s := range []string{
		"", "plain", "\x00\x08\x0c\x1f\x7f", `"quoted" \ back`, "<>&", "\u2028\u2029\u2027", "é日本\xff\xfe", "\xe2\x80", "a\tb\nc\rd",
	} {
		want, err := js.Marshal(s)
		require.NoError(t, err)
		require.Equal(t, string(want), string(appendHTMLString(nil, s)), "%q", s)
		stream := js.BorrowStream(nil)
		stream.WriteString(s)
		require.Equal(t, string(stream.Buffer()), string(jsonenc.AppendString(nil, s)), "%q", s)
		js.ReturnStream(stream)
	}
	for _, f := range []float64{
		0, 1.5, 60, 1e-6, 9.99e-7, 1e21, 1e20, -2.5e-9, math.MaxFloat64, math.SmallestNonzeroFloat64, 0.1 + 0.2,
	} {
		want, err := js.Marshal(f)
		require.NoError(t, err)
		require.Equal(t, string(want), string(jsonenc.AppendFloat(nil, f)), "%v", f)
	}
	for _, ts := range []time.Time{
		{}, time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC), time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("x", -5*3600-1800)),
	} {
		want, err := js.Marshal(ts)
		require.NoError(t, err)
		require.Equal(t, string(want), string(appendTime(nil, ts)), "%v", ts)
	}
}
