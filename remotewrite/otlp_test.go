package remotewrite

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/otlptranslator"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
)

func otlpTS(ms int64) pcommon.Timestamp { return pcommon.Timestamp(time.UnixMilli(ms).UnixNano()) }

// otlpPayload is a small request: a counter with a start time, an exemplar
// and two points, a gauge, an exponential histogram, all of one resource.
func otlpPayload(now int64) pmetric.Metrics {
	md := pmetric.NewMetrics()
	rm := md.ResourceMetrics().AppendEmpty()
	rm.Resource().Attributes().PutStr("service.name", "svc")
	rm.Resource().Attributes().PutStr("service.instance.id", "i1")
	rm.Resource().Attributes().PutStr("host.name", "h1")
	sm := rm.ScopeMetrics().AppendEmpty()
	m := sm.Metrics().AppendEmpty()
	m.SetName("requests")
	m.SetDescription("Requests.")
	s := m.SetEmptySum()
	s.SetIsMonotonic(true)
	s.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
	for i, v := range []int64{1, 4} {
		dp := s.DataPoints().AppendEmpty()
		dp.SetStartTimestamp(otlpTS(now - 60_000))
		dp.SetTimestamp(otlpTS(now - 30_000 + int64(i)*15_000))
		dp.SetIntValue(v)
		dp.Attributes().PutStr("code", "200")
		if i == 1 {
			ex := dp.Exemplars().AppendEmpty()
			ex.SetTimestamp(otlpTS(now - 16_000))
			ex.SetDoubleValue(1)
			ex.SetTraceID(pcommon.TraceID{1})
		}
	}
	m = sm.Metrics().AppendEmpty()
	m.SetName("temperature")
	m.SetUnit("Cel")
	dp := m.SetEmptyGauge().DataPoints().AppendEmpty()
	dp.SetTimestamp(otlpTS(now - 30_000))
	dp.SetDoubleValue(21.5)
	m = sm.Metrics().AppendEmpty()
	m.SetName("latency")
	m.SetUnit("s")
	eh := m.SetEmptyExponentialHistogram()
	eh.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
	edp := eh.DataPoints().AppendEmpty()
	edp.SetTimestamp(otlpTS(now - 30_000))
	edp.SetScale(1)
	edp.Positive().SetOffset(0)
	edp.Positive().BucketCounts().FromRaw([]uint64{1, 2})
	edp.SetCount(3)
	edp.SetSum(4)
	return md
}

func otlpProto(t testing.TB, md pmetric.Metrics) []byte {
	t.Helper()
	b, err := pmetricotlp.NewExportRequestFromMetrics(md).MarshalProto()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func otlpJSON(t testing.TB, md pmetric.Metrics) []byte {
	t.Helper()
	b, err := pmetricotlp.NewExportRequestFromMetrics(md).MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func gzipped(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func newOTLPHandler(t testing.TB, app Appendable, mod func(*Options), omod func(*OTLPOptions)) (*OTLPHandler, *Handler) {
	t.Helper()
	h, _ := newTestHandler(t, app, mod)
	o := DefaultOTLPOptions()
	if omod != nil {
		omod(&o)
	}
	oh, err := h.OTLP(o)
	if err != nil {
		t.Fatal(err)
	}
	return oh, h
}

// exportResponse decodes the body of a 200.
func exportResponse(t *testing.T, contentType string, body []byte) pmetricotlp.ExportResponse {
	t.Helper()
	resp := pmetricotlp.NewExportResponse()
	var err error
	if contentType == ContentTypeOTLPJSON {
		err = resp.UnmarshalJSON(body)
	} else {
		err = resp.UnmarshalProto(body)
	}
	if err != nil {
		t.Fatalf("decode ExportMetricsServiceResponse %q: %v", body, err)
	}
	return resp
}

func TestOTLPStored(t *testing.T) {
	md := otlpPayload(testNow)
	for _, tc := range []struct {
		name, ct, enc string
		body          []byte
	}{
		{"protobuf", ContentTypeOTLPProto, "", otlpProto(t, md)},
		{"protobuf-gzip", ContentTypeOTLPProto, "gzip", gzipped(t, otlpProto(t, md))},
		{"json", ContentTypeOTLPJSON, "", otlpJSON(t, md)},
		{"json-gzip-charset", "application/json; charset=utf-8", "GZIP", gzipped(t, otlpJSON(t, md))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := newRecorder()
			oh, _ := newOTLPHandler(t, rec, nil, nil)
			w := post(t, oh, tc.ct, tc.enc, tc.body)
			if w.Code != http.StatusOK {
				t.Fatalf("status %d: %s", w.Code, w.Body)
			}
			wantCT := ContentTypeOTLPProto
			if strings.Contains(tc.ct, "json") {
				wantCT = ContentTypeOTLPJSON
			}
			if got := w.Header().Get("Content-Type"); got != wantCT {
				t.Errorf("Content-Type %q, want %q", got, wantCT)
			}
			if resp := exportResponse(t, wantCT, w.Body.Bytes()); resp.PartialSuccess().RejectedDataPoints() != 0 || resp.PartialSuccess().ErrorMessage() != "" {
				t.Errorf("partial success on a clean request: %v", resp.PartialSuccess())
			}
			ctr := rec.get(labels.FromStrings("__name__", "requests_total", "code", "200", "instance", "i1", "job", "svc"))
			if ctr == nil {
				t.Fatalf("counter not stored; got %v", rec.all())
			}
			if len(ctr.Samples) != 2 || ctr.Samples[0] != (recSample{ST: testNow - 60_000, T: testNow - 30_000, V: 1}) || ctr.Samples[1].V != 4 {
				t.Errorf("counter samples %+v", ctr.Samples)
			}
			if len(ctr.Exemplars) != 1 || ctr.Exemplars[0].Value != 1 || ctr.Exemplars[0].Labels.Get("trace_id") != "01000000000000000000000000000000" {
				t.Errorf("counter exemplars %+v", ctr.Exemplars)
			}
			if m := rec.family["requests_total"]; m.Type != "counter" || m.Help != "Requests." {
				t.Errorf("counter metadata %+v", m)
			}
			g := rec.get(labels.FromStrings("__name__", "temperature_celsius", "instance", "i1", "job", "svc"))
			if g == nil || len(g.Samples) != 1 || g.Samples[0].V != 21.5 {
				t.Errorf("gauge %+v", g)
			}
			h := rec.get(labels.FromStrings("__name__", "latency_seconds", "instance", "i1", "job", "svc"))
			if h == nil || len(h.Hists) != 1 || h.Hists[0].H == nil || h.Hists[0].H.Count != 3 || h.Hists[0].H.Schema != 1 {
				t.Errorf("exponential histogram %+v", h)
			}
			if ti := rec.get(labels.FromStrings("__name__", "target_info", "host_name", "h1", "instance", "i1", "job", "svc")); ti == nil {
				t.Error("target_info not stored")
			}
		})
	}
}

func TestOTLPErrors(t *testing.T) {
	valid := otlpProto(t, otlpPayload(testNow))
	big := otlpProto(t, otlpPayload(testNow))
	for _, tc := range []struct {
		name, method, ct, enc string
		body                  []byte
		mod                   func(*Options)
		code                  int
		msg                   string
	}{
		{name: "GET", method: http.MethodGet, ct: ContentTypeOTLPProto, code: 405, msg: "use POST"},
		{name: "text content type", ct: "text/plain", body: valid, code: 415, msg: "unsupported Content-Type"},
		{name: "no content type", ct: "", body: valid, code: 415, msg: "unsupported Content-Type"},
		{name: "snappy", ct: ContentTypeOTLPProto, enc: "snappy", body: valid, code: 415, msg: "Content-Encoding"},
		{name: "garbage protobuf", ct: ContentTypeOTLPProto, body: []byte{0xff, 0xff, 0xff}, code: 400, msg: "decode OTLP"},
		{name: "garbage JSON", ct: ContentTypeOTLPJSON, body: []byte(`{"resourceMetrics": [`), code: 400, msg: "decode OTLP"},
		{name: "not gzip", ct: ContentTypeOTLPProto, enc: "gzip", body: valid, code: 400, msg: "gzip"},
		{name: "truncated gzip", ct: ContentTypeOTLPProto, enc: "gzip", body: gzipped(t, valid)[:20], code: 400, msg: "gzip"},
		{name: "body too large", ct: ContentTypeOTLPProto, body: big, mod: func(o *Options) { o.MaxCompressedBytes = 16 }, code: 413, msg: "max_compressed_bytes=16"},
		{name: "gzip bomb", ct: ContentTypeOTLPProto, enc: "gzip", body: gzipped(t, make([]byte, 1<<20)), mod: func(o *Options) { o.MaxDecompressedBytes = 1 << 16 }, code: 413, msg: "max_decompressed_bytes"},
		{name: "plain over decompressed limit", ct: ContentTypeOTLPProto, body: big, mod: func(o *Options) { o.MaxDecompressedBytes = 64 }, code: 413, msg: "max_decompressed_bytes=64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := newRecorder()
			oh, _ := newOTLPHandler(t, rec, tc.mod, nil)
			method := tc.method
			if method == "" {
				method = http.MethodPost
			}
			req, err := http.NewRequest(method, OTLPPath, bytes.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			if tc.ct != "" {
				req.Header.Set("Content-Type", tc.ct)
			}
			if tc.enc != "" {
				req.Header.Set("Content-Encoding", tc.enc)
			}
			w := httptest.NewRecorder()
			oh.ServeHTTP(w, req)
			if w.Code != tc.code || !strings.Contains(w.Body.String(), tc.msg) {
				t.Fatalf("got %d %q, want %d with %q", w.Code, w.Body, tc.code, tc.msg)
			}
			if tc.code == 405 && w.Header().Get("Allow") != http.MethodPost {
				t.Errorf("405 without Allow: POST")
			}
			if n := len(rec.all()); n != 0 {
				t.Errorf("%d series stored from a refused request", n)
			}
		})
	}
}

// TestOTLPPartial checks that bad points are rejected, the rest written and
// the sender told with a partial success, and that a request of which
// nothing could be written is a 400.
func TestOTLPPartial(t *testing.T) {
	md := otlpPayload(testNow)
	// A point far in the future, and a delta sum (refused without
	// native_delta_ingestion).
	// (in a resource of its own: target_info spans a resource's points).
	fm := md.ResourceMetrics().AppendEmpty().ScopeMetrics().AppendEmpty().Metrics().AppendEmpty()
	fm.SetName("temperature")
	future := fm.SetEmptyGauge().DataPoints().AppendEmpty()
	future.SetTimestamp(otlpTS(testNow + time.Hour.Milliseconds()))
	future.SetDoubleValue(1)
	m := md.ResourceMetrics().At(0).ScopeMetrics().At(0).Metrics().AppendEmpty()
	m.SetName("delta")
	m.SetDescription("Deltas.")
	ds := m.SetEmptySum()
	ds.SetAggregationTemporality(pmetric.AggregationTemporalityDelta)
	for i := range 3 {
		ds.DataPoints().AppendEmpty().SetTimestamp(otlpTS(testNow - int64(i)))
	}

	for _, ct := range []string{ContentTypeOTLPProto, ContentTypeOTLPJSON} {
		t.Run(ct, func(t *testing.T) {
			rec := newRecorder()
			oh, h := newOTLPHandler(t, rec, nil, nil)
			body := otlpProto(t, md)
			if ct == ContentTypeOTLPJSON {
				body = otlpJSON(t, md)
			}
			w := post(t, oh, ct, "", body)
			if w.Code != http.StatusOK {
				t.Fatalf("status %d: %s", w.Code, w.Body)
			}
			ps := exportResponse(t, ct, w.Body.Bytes()).PartialSuccess()
			if ps.RejectedDataPoints() != 4 {
				t.Errorf("rejected_data_points %d, want 4 (%q)", ps.RejectedDataPoints(), ps.ErrorMessage())
			}
			for _, want := range []string{"max_future_skew", `metric "delta": delta temporality`, "native_delta_ingestion"} {
				if !strings.Contains(ps.ErrorMessage(), want) {
					t.Errorf("error_message %q does not say %q", ps.ErrorMessage(), want)
				}
			}
			if rec.get(labels.FromStrings("__name__", "requests_total", "code", "200", "instance", "i1", "job", "svc")) == nil {
				t.Error("the good points were not written")
			}
			if got := testutil.ToFloat64(h.m.rejected[kindSamples].WithLabelValues("unsupported_temporality")); got != 3 {
				t.Errorf("rejected{unsupported_temporality} = %v, want 3", got)
			}
		})
	}

	t.Run("nothing written", func(t *testing.T) {
		md := pmetric.NewMetrics()
		m := md.ResourceMetrics().AppendEmpty().ScopeMetrics().AppendEmpty().Metrics().AppendEmpty()
		m.SetName("g")
		m.SetEmptyGauge().DataPoints().AppendEmpty().SetTimestamp(otlpTS(testNow + time.Hour.Milliseconds()))
		rec := newRecorder()
		oh, _ := newOTLPHandler(t, rec, nil, nil)
		w := post(t, oh, ContentTypeOTLPProto, "", otlpProto(t, md))
		if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "max_future_skew") {
			t.Fatalf("got %d %q, want 400 naming max_future_skew", w.Code, w.Body)
		}
	})

	t.Run("native delta", func(t *testing.T) {
		rec := newRecorder()
		oh, _ := newOTLPHandler(t, rec, nil, func(o *OTLPOptions) { o.NativeDeltaIngestion = true })
		w := post(t, oh, ContentTypeOTLPProto, "", otlpProto(t, md))
		ps := exportResponse(t, ContentTypeOTLPProto, w.Body.Bytes()).PartialSuccess()
		if w.Code != http.StatusOK || ps.RejectedDataPoints() != 1 {
			t.Fatalf("got %d, %d rejected (%q); want 200 with only the future point rejected", w.Code, ps.RejectedDataPoints(), ps.ErrorMessage())
		}
		d := rec.get(labels.FromStrings("__name__", "delta", "instance", "i1", "job", "svc"))
		if d == nil || len(d.Samples) != 3 {
			t.Fatalf("delta points stored: %+v", d)
		}
		if m := rec.family["delta"]; m.Type != "unknown" || m.Help != "Deltas." {
			t.Errorf("delta metadata %+v, want type unknown", m)
		}
	})
}

// TestOTLPStorageErrors checks that what a retry can fix rolls the whole
// request back and answers as remote write does.
func TestOTLPStorageErrors(t *testing.T) {
	for _, tc := range []struct {
		name       string
		err        error
		commitErr  error
		code       int
		retryAfter bool
	}{
		{name: "unavailable", err: unavailableErr{}, code: 503, retryAfter: true},
		{name: "commit unavailable", commitErr: fmt.Errorf("wal: %w", unavailableErr{}), code: 503, retryAfter: true},
		{name: "overloaded", err: ErrOverloaded, code: 429, retryAfter: true},
		{name: "other", err: errors.New("disk on fire"), code: 500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := newRecorder()
			calls := 0
			if tc.err != nil {
				rec.appendErr = func(labels.Labels, int64) error {
					calls++
					return tc.err
				}
			}
			rec.commitErr = tc.commitErr
			oh, _ := newOTLPHandler(t, rec, nil, nil)
			w := post(t, oh, ContentTypeOTLPProto, "", otlpProto(t, otlpPayload(testNow)))
			if w.Code != tc.code {
				t.Fatalf("status %d (%s), want %d", w.Code, w.Body, tc.code)
			}
			if got := w.Header().Get("Retry-After") != ""; got != tc.retryAfter {
				t.Errorf("Retry-After present %v, want %v", got, tc.retryAfter)
			}
			if n := len(rec.all()); n != 0 {
				t.Errorf("%d series committed after a failure", n)
			}
			if tc.err != nil && calls != 1 {
				t.Errorf("%d appends after the first failure, want none", calls-1)
			}
		})
	}

	t.Run("bad data from storage", func(t *testing.T) {
		rec := newRecorder()
		rec.appendErr = func(l labels.Labels, _ int64) error {
			if l.Get("__name__") == "temperature_celsius" {
				return storage.ErrOutOfOrderSample
			}
			return nil
		}
		oh, _ := newOTLPHandler(t, rec, nil, nil)
		w := post(t, oh, ContentTypeOTLPProto, "", otlpProto(t, otlpPayload(testNow)))
		ps := exportResponse(t, ContentTypeOTLPProto, w.Body.Bytes()).PartialSuccess()
		if w.Code != 200 || ps.RejectedDataPoints() != 1 || !strings.Contains(ps.ErrorMessage(), "out of order") {
			t.Fatalf("got %d, partial success %d %q", w.Code, ps.RejectedDataPoints(), ps.ErrorMessage())
		}
	})
}

// TestOTLPConsecutiveDeltaStartTimes checks that a start time equal to the
// previous point's time in the same request is not passed on: the zero
// sample the storage writes there would replace that point.
func TestOTLPConsecutiveDeltaStartTimes(t *testing.T) {
	md := pmetric.NewMetrics()
	m := md.ResourceMetrics().AppendEmpty().ScopeMetrics().AppendEmpty().Metrics().AppendEmpty()
	m.SetName("d")
	s := m.SetEmptySum()
	s.SetAggregationTemporality(pmetric.AggregationTemporalityDelta)
	for i := range int64(3) {
		dp := s.DataPoints().AppendEmpty()
		dp.SetStartTimestamp(otlpTS(testNow - 40_000 + i*10_000))
		dp.SetTimestamp(otlpTS(testNow - 30_000 + i*10_000))
		dp.SetIntValue(i + 1)
	}
	rec := newRecorder()
	oh, _ := newOTLPHandler(t, rec, nil, func(o *OTLPOptions) { o.NativeDeltaIngestion = true })
	if w := post(t, oh, ContentTypeOTLPProto, "", otlpProto(t, md)); w.Code != 200 {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	d := rec.get(labels.FromStrings("__name__", "d"))
	want := []recSample{{ST: testNow - 40_000, T: testNow - 30_000, V: 1}, {T: testNow - 20_000, V: 2}, {T: testNow - 10_000, V: 3}}
	if d == nil || fmt.Sprint(d.Samples) != fmt.Sprint(want) {
		t.Fatalf("samples %+v, want %+v", d, want)
	}
}

func TestOTLPOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		mod func(*OTLPOptions)
		err string
	}{
		{func(o *OTLPOptions) {}, ""},
		{func(o *OTLPOptions) { o.TranslationStrategy = otlptranslator.NoTranslation }, ""},
		{func(o *OTLPOptions) { o.TranslationStrategy = "Bogus" }, `unsupported translation_strategy "Bogus"`},
		{func(o *OTLPOptions) {
			o.PromoteAllResourceAttributes = true
			o.PromoteResourceAttributes = []string{"a"}
		}, "cannot be configured simultaneously"},
		{func(o *OTLPOptions) { o.IgnoreResourceAttributes = []string{"a"} }, "cannot be configured unless"},
		{func(o *OTLPOptions) { o.PromoteResourceAttributes = []string{"a", " a"} }, `duplicated promoted OTel resource attribute "a"`},
		{func(o *OTLPOptions) { o.PromoteResourceAttributes = []string{" "} }, "empty promoted"},
	} {
		o := DefaultOTLPOptions()
		tc.mod(&o)
		err := o.Validate()
		if (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%+v: error %v, want %q", o, err, tc.err)
		}
	}
}

// TestOTLPStaleAndSpecialValues checks that a point with no recorded value
// is stored as the stale marker, bit-exact, and infinities as they are.
func TestOTLPStaleAndSpecialValues(t *testing.T) {
	md := pmetric.NewMetrics()
	m := md.ResourceMetrics().AppendEmpty().ScopeMetrics().AppendEmpty().Metrics().AppendEmpty()
	m.SetName("g")
	g := m.SetEmptyGauge()
	for i, v := range []float64{math.Inf(1), math.Inf(-1), 0} {
		dp := g.DataPoints().AppendEmpty()
		dp.SetTimestamp(otlpTS(testNow - 3000 + int64(i)*1000))
		dp.SetDoubleValue(v)
		if i == 2 {
			dp.SetFlags(pmetric.DefaultDataPointFlags.WithNoRecordedValue(true))
		}
	}
	rec := newRecorder()
	oh, _ := newOTLPHandler(t, rec, nil, nil)
	if w := post(t, oh, ContentTypeOTLPProto, "", otlpProto(t, md)); w.Code != 200 {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	s := rec.get(labels.FromStrings("__name__", "g"))
	if s == nil || len(s.Samples) != 3 || !math.IsInf(s.Samples[0].V, 1) || !math.IsInf(s.Samples[1].V, -1) || math.Float64bits(s.Samples[2].V) != 0x7ff0000000000002 {
		t.Fatalf("samples %+v", s)
	}
}

// TestOTLPTargetInfoSpanBounded checks that a point decades older than the
// rest of its resource is refused rather than spanned by millions of
// target_info samples.
func TestOTLPTargetInfoSpanBounded(t *testing.T) {
	md := otlpPayload(testNow)
	m := md.ResourceMetrics().At(0).ScopeMetrics().At(0).Metrics().AppendEmpty()
	m.SetName("ancient")
	m.SetEmptyGauge().DataPoints().AppendEmpty().SetTimestamp(otlpTS(1))
	rec := newRecorder()
	oh, _ := newOTLPHandler(t, rec, nil, nil)
	w := post(t, oh, ContentTypeOTLPProto, "", otlpProto(t, md))
	ps := exportResponse(t, ContentTypeOTLPProto, w.Body.Bytes()).PartialSuccess()
	if w.Code != http.StatusOK || ps.RejectedDataPoints() != 1 || !strings.Contains(ps.ErrorMessage(), `metric "ancient": data point at 1: more than`) {
		t.Fatalf("got %d, partial success %d %q", w.Code, ps.RejectedDataPoints(), ps.ErrorMessage())
	}
	ti := rec.get(labels.FromStrings("__name__", "target_info", "host_name", "h1", "instance", "i1", "job", "svc"))
	if ti == nil || len(ti.Samples) > 3 {
		t.Fatalf("target_info: %+v", ti)
	}
}

// TestOTLPResponseLikePdata checks the hand-made ExportMetricsServiceResponse
// against the collector's encoding of it.
func TestOTLPResponseLikePdata(t *testing.T) {
	for _, tc := range []struct {
		rejected int64
		msg      string
	}{
		{0, ""}, {3, ""}, {0, "m"}, {1 << 40, "series {a=\"b\"}: <bad> & \"quoted\"\n\u2028 é"}, {-1, "x"},
	} {
		resp := pmetricotlp.NewExportResponse()
		resp.PartialSuccess().SetRejectedDataPoints(tc.rejected)
		resp.PartialSuccess().SetErrorMessage(tc.msg)
		want, err := resp.MarshalProto()
		if err != nil {
			t.Fatal(err)
		}
		if got := appendOTLPResponseProto(nil, tc.rejected, tc.msg); !bytes.Equal(got, want) {
			t.Errorf("%+v: protobuf %x, want %x", tc, got, want)
		}
		wantJSON, err := resp.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		gotJSON := appendOTLPResponseJSON(nil, tc.rejected, tc.msg)
		var w, g any
		if err := json.Unmarshal(wantJSON, &w); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(gotJSON, &g); err != nil {
			t.Fatalf("%+v: %s: %v", tc, gotJSON, err)
		}
		if !reflect.DeepEqual(w, g) {
			t.Errorf("%+v: JSON %s, want %s", tc, gotJSON, wantJSON)
		}
	}
}
