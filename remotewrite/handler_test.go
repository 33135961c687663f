package remotewrite

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang/snappy"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/exemplar"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/metadata"
	"github.com/prometheus/prometheus/prompb"
	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"
	"github.com/prometheus/prometheus/storage"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/shaledb/shale/internal/race"
)

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

// newTestHandler returns a handler over app with a fixed clock; mod adjusts
// the default options.
func newTestHandler(t testing.TB, app Appendable, mod func(*Options)) (*Handler, *prometheus.Registry) {
	t.Helper()
	opts := DefaultOptions()
	if mod != nil {
		mod(&opts)
	}
	reg := prometheus.NewRegistry()
	h, err := NewHandler(app, opts, Components{
		Logger:     slog.New(slog.DiscardHandler),
		Registerer: reg,
		Now:        func() time.Time { return time.UnixMilli(testNow) },
	})
	if err != nil {
		t.Fatal(err)
	}
	return h, reg
}

// cmpOpts compares recorded data bit-exactly (stale NaN included).
var cmpOpts = []cmp.Option{
	cmp.Comparer(func(a, b labels.Labels) bool { return labels.Equal(a, b) }),
	cmp.Comparer(func(a, b float64) bool { return math.Float64bits(a) == math.Float64bits(b) }),
}

func assertSeries(t *testing.T, want []recSeries, got []*recSeries) {
	t.Helper()
	w := slices.Clone(want)
	slices.SortFunc(w, func(a, b recSeries) int { return labels.Compare(a.Labels, b.Labels) })
	g := make([]recSeries, len(got))
	for i, s := range got {
		g[i] = *s
	}
	if diff := cmp.Diff(w, g, cmpOpts...); diff != "" {
		t.Fatalf("recorded series differ (-sent +received):\n%s", diff)
	}
}

func assertCode(t *testing.T, rec interface {
	Result() *http.Response
}, want int, msgContains string,
) string {
	t.Helper()
	resp := rec.Result()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("status %d, want %d; body: %s", resp.StatusCode, want, body)
	}
	if msgContains != "" && !strings.Contains(string(body), msgContains) {
		t.Fatalf("body %q does not contain %q", body, msgContains)
	}
	return string(body)
}

func assertWritten(t *testing.T, h http.Header, samples, hists, exemplars int) {
	t.Helper()
	got := [3]string{h.Get(HeaderSamplesWritten), h.Get(HeaderHistogramsWritten), h.Get(HeaderExemplarsWritten)}
	want := [3]string{fmt.Sprint(samples), fmt.Sprint(hists), fmt.Sprint(exemplars)}
	if got != want {
		t.Fatalf("written headers (samples, histograms, exemplars) = %v, want %v", got, want)
	}
}

func TestRoundTripInProcess(t *testing.T) {
	for _, version := range []int{1, 2} {
		t.Run(fmt.Sprintf("version=%d", version), func(t *testing.T) {
			rec := newRecorder()
			h, _ := newTestHandler(t, rec, nil)
			sent := append(richPayload(testNow-5000, version == 2), nodePayload(50, 3, testNow-60_000)...)
			var resp *httptestRecorder
			if version == 1 {
				resp = post(t, h, "application/x-protobuf", "snappy", encode(t, toV1(sent)))
			} else {
				resp = post(t, h, ContentTypeV2, "snappy", encode(t, toV2(sent)))
			}
			assertCode(t, resp, http.StatusNoContent, "")
			assertSeries(t, sent, rec.all())
			if version == 2 {
				s, hi, e := rec.counts()
				assertWritten(t, resp.Header(), s, hi, e)
			} else if resp.Header().Get(HeaderSamplesWritten) != "" {
				t.Fatalf("1.0 response carries %s", HeaderSamplesWritten)
			}
			if len(rec.refErrors) > 0 {
				t.Fatalf("ref contract violated: %v", rec.refErrors)
			}
		})
	}
}

func TestContentNegotiation(t *testing.T) {
	v1 := encode(t, toV1(nodePayload(2, 1, testNow)))
	v2 := encode(t, toV2(nodePayload(2, 1, testNow)))
	for _, tc := range []struct {
		name, ct, enc string
		body          []byte
		code          int
		msg           string
		v2Headers     bool
	}{
		{name: "no content type is 1.0", ct: "", enc: "snappy", body: v1, code: 204},
		{name: "bare protobuf is 1.0", ct: "application/x-protobuf", enc: "snappy", body: v1, code: 204},
		{name: "explicit 1.0", ct: ContentTypeV1, enc: "snappy", body: v1, code: 204},
		{name: "1.0 with space and no encoding", ct: "application/x-protobuf; proto=prometheus.WriteRequest", body: v1, code: 204},
		{name: "2.0", ct: ContentTypeV2, enc: "snappy", body: v2, code: 204, v2Headers: true},
		{name: "2.0 with space and charset", ct: "application/x-protobuf; proto=io.prometheus.write.v2.Request; charset=utf-8", enc: "SNAPPY", body: v2, code: 204, v2Headers: true},
		{name: "json", ct: "application/json", enc: "snappy", body: v1, code: 415, msg: "unsupported Content-Type"},
		{name: "unknown proto", ct: "application/x-protobuf;proto=io.prometheus.write.v3.Request", enc: "snappy", body: v1, code: 415, msg: "io.prometheus.write.v2.Request"},
		{name: "bad media type", ct: "application/x-protobuf;;;=", enc: "snappy", body: v1, code: 415},
		{name: "gzip", ct: ContentTypeV2, enc: "gzip", body: v2, code: 415, msg: "only snappy", v2Headers: true},
		{name: "zstd 1.0", ct: "application/x-protobuf", enc: "zstd", body: v1, code: 415, msg: "Content-Encoding"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, _ := newTestHandler(t, newRecorder(), nil)
			resp := post(t, h, tc.ct, tc.enc, tc.body)
			assertCode(t, resp, tc.code, tc.msg)
			if got := resp.Header().Get(HeaderSamplesWritten) != ""; got != tc.v2Headers {
				t.Fatalf("2.0 headers present = %v, want %v", got, tc.v2Headers)
			}
		})
	}
	t.Run("GET", func(t *testing.T) {
		h, _ := newTestHandler(t, newRecorder(), nil)
		req := httptestNewRequest(http.MethodGet, nil)
		rec := newHTTPRecorder()
		h.ServeHTTP(rec, req)
		assertCode(t, rec, http.StatusMethodNotAllowed, "POST")
		if rec.Header().Get("Allow") != http.MethodPost {
			t.Fatalf("Allow header %q", rec.Header().Get("Allow"))
		}
	})
}

func TestMalformedBodies(t *testing.T) {
	good, _ := toV1(nodePayload(3, 2, testNow)).Marshal()
	goodV2, _ := toV2(nodePayload(3, 2, testNow)).Marshal()
	for _, tc := range []struct {
		name string
		ct   string
		body []byte
		msg  string
	}{
		{"not snappy", "application/x-protobuf", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, "snappy"},
		{"snappy of garbage 1.0", "application/x-protobuf", snappy.Encode(nil, []byte("this is not protobuf at all")), "decode prometheus.WriteRequest"},
		{"snappy of garbage 2.0", ContentTypeV2, snappy.Encode(nil, []byte{0x2a, 0xff, 0xff, 0xff, 0xff, 0x0f}), "decode io.prometheus.write.v2.Request"},
		{"truncated 1.0", "application/x-protobuf", snappy.Encode(nil, good[:len(good)-3]), "truncated"},
		{"truncated 2.0", ContentTypeV2, snappy.Encode(nil, goodV2[:len(goodV2)-1]), "truncated"},
		{"wrong wire type", "application/x-protobuf", snappy.Encode(nil, protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 5)), "wire type"},
		{"truncated snappy", "application/x-protobuf", snappy.Encode(nil, good)[:20], "snappy"},
		{"empty body is a 1.0 request with nothing", "application/x-protobuf", nil, ""},
		// What promtool 3.16's push metrics sends with
		// --protobuf_message=io.prometheus.write.v2.Request.
		{"1.0 body sent as 2.0", ContentTypeV2, snappy.Encode(nil, good), "field 1 is reserved in io.prometheus.write.v2.Request and is a prometheus.WriteRequest's: the body looks like remote write 1.0 sent as 2.0"},
		{"2.0 body sent as 1.0", "application/x-protobuf", snappy.Encode(nil, goodV2), "field 4 is not in prometheus.WriteRequest and is an io.prometheus.write.v2.Request's, and nothing else is in the body: it looks like remote write 2.0 sent as 1.0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := newRecorder()
			h, _ := newTestHandler(t, rec, nil)
			resp := post(t, h, tc.ct, "snappy", tc.body)
			if tc.msg == "" {
				assertCode(t, resp, http.StatusBadRequest, "snappy")
				return
			}
			assertCode(t, resp, http.StatusBadRequest, tc.msg)
			if samples, hists, exemplars := rec.counts(); rec.commits != 0 || rec.rollbacks != 1 || samples+hists+exemplars != 0 {
				t.Fatalf("malformed request: %d commits, %d rollbacks, %d items stored; want 0, 1, 0", rec.commits, rec.rollbacks, samples+hists+exemplars)
			}
		})
	}
}

// orderReader records, in order, the first read of a request body.
type orderReader struct {
	r      io.Reader
	events *[]string
	read   bool
}

func (o *orderReader) Read(p []byte) (int, error) {
	if !o.read {
		o.read = true
		*o.events = append(*o.events, "body read")
	}
	return o.r.Read(p)
}

// TestAppenderOpensBeforeBody: the remote-write and OTLP handlers take
// their Appender before they read the body (so that the storage's WAL can
// wait for a request it knows is coming: storage/lsm Options.WALMinInterval)
// and finish it with one Commit, or one Rollback for a body that does not
// decode.
func TestAppenderOpensBeforeBody(t *testing.T) {
	body, _ := toV1(nodePayload(3, 2, testNow)).Marshal()
	for _, tc := range []struct {
		name       string
		otlp       bool
		ct         string
		body       []byte
		code       int
		rolledBack bool
	}{
		{"remote write", false, "application/x-protobuf", snappy.Encode(nil, body), http.StatusNoContent, false},
		{"remote write, bad body", false, "application/x-protobuf", []byte{0xff, 0xff}, http.StatusBadRequest, true},
		{"otlp", true, ContentTypeOTLPProto, otlpProto(t, otlpPayload(testNow)), http.StatusOK, false},
		{"otlp, bad body", true, ContentTypeOTLPProto, []byte{0xff, 0xff}, http.StatusBadRequest, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var events []string
			rec := newRecorder()
			rec.onAppendable = func() { events = append(events, "appender") }
			var h http.Handler
			if tc.otlp {
				h, _ = newOTLPHandler(t, rec, nil, nil)
			} else {
				h, _ = newTestHandler(t, rec, nil)
			}
			req := httptest.NewRequest(http.MethodPost, "/api/v1/write", &orderReader{r: bytes.NewReader(tc.body), events: &events})
			req.Header.Set("Content-Type", tc.ct)
			if !tc.otlp {
				req.Header.Set("Content-Encoding", "snappy")
			}
			resp := httptest.NewRecorder()
			h.ServeHTTP(resp, req)
			if resp.Code != tc.code {
				t.Fatalf("status %d: %s", resp.Code, resp.Body)
			}
			if want := []string{"appender", "body read"}; !slices.Equal(events, want) {
				t.Fatalf("events %q, want %q", events, want)
			}
			commits, rollbacks := 1, 0
			if tc.rolledBack {
				commits, rollbacks = 0, 1
			}
			if rec.commits != commits || rec.rollbacks != rollbacks {
				t.Fatalf("%d commits, %d rollbacks; want %d, %d", rec.commits, rec.rollbacks, commits, rollbacks)
			}
		})
	}
}

func TestRequestLimits(t *testing.T) {
	body := encode(t, toV1(nodePayload(20, 2, testNow)))
	raw, _ := toV1(nodePayload(20, 2, testNow)).Marshal()
	t.Run("compressed size with Content-Length", func(t *testing.T) {
		h, _ := newTestHandler(t, newRecorder(), func(o *Options) { o.MaxCompressedBytes = int64(len(body) - 1) })
		assertCode(t, post(t, h, "", "snappy", body), http.StatusRequestEntityTooLarge, "max_compressed_bytes=")
	})
	t.Run("compressed size chunked", func(t *testing.T) {
		h, _ := newTestHandler(t, newRecorder(), func(o *Options) { o.MaxCompressedBytes = int64(len(body) - 1) })
		req := httptestNewRequest(http.MethodPost, io.MultiReader(bytes.NewReader(body[:10]), bytes.NewReader(body[10:])))
		req.ContentLength = -1
		rec := newHTTPRecorder()
		h.ServeHTTP(rec, req)
		assertCode(t, rec, http.StatusRequestEntityTooLarge, "max_compressed_bytes=")
	})
	t.Run("chunked within limit", func(t *testing.T) {
		rec := newRecorder()
		h, _ := newTestHandler(t, rec, nil)
		req := httptestNewRequest(http.MethodPost, io.MultiReader(bytes.NewReader(body[:10]), bytes.NewReader(body[10:])))
		req.ContentLength = -1
		hr := newHTTPRecorder()
		h.ServeHTTP(hr, req)
		assertCode(t, hr, http.StatusNoContent, "")
		if len(rec.all()) != 20 {
			t.Fatalf("%d series written", len(rec.all()))
		}
	})
	t.Run("decompressed size", func(t *testing.T) {
		h, _ := newTestHandler(t, newRecorder(), func(o *Options) { o.MaxDecompressedBytes = int64(len(raw) - 1) })
		assertCode(t, post(t, h, "", "snappy", body), http.StatusRequestEntityTooLarge, "max_decompressed_bytes=")
	})
	t.Run("decompressed size is checked before allocating", func(t *testing.T) {
		// A 6-byte body whose snappy header claims 1 GiB.
		bomb := protowire.AppendVarint(nil, 1<<30)
		bomb = append(bomb, 0x00)
		h, _ := newTestHandler(t, newRecorder(), nil)
		var code int
		n := bytesAllocated(func() { code = post(t, h, "", "snappy", bomb).Code })
		if code != http.StatusRequestEntityTooLarge {
			t.Fatalf("status %d", code)
		}
		if n > 1<<20 {
			t.Fatalf("%d bytes allocated for a 6-byte body", n)
		}
	})
	t.Run("series per request", func(t *testing.T) {
		for _, v2 := range []bool{false, true} {
			rec := newRecorder()
			h, _ := newTestHandler(t, rec, func(o *Options) { o.MaxSeriesPerRequest = 19 })
			resp := post(t, h, "", "snappy", body)
			if v2 {
				resp = post(t, h, ContentTypeV2, "snappy", encode(t, toV2(nodePayload(20, 2, testNow))))
			}
			assertCode(t, resp, http.StatusRequestEntityTooLarge, "max_series_per_request=19")
			if rec.commits != 0 {
				t.Fatal("over-limit request was committed")
			}
		}
	})
}

// seriesLimitCases are label sets that break a per-series rule, each in a
// request with valid series around it.
func seriesLimitCases() []struct {
	name   string
	lbls   []prompb.Label
	msg    string
	reason string
} {
	return []struct {
		name   string
		lbls   []prompb.Label
		msg    string
		reason string
	}{
		{"unsorted with a name repeated apart", []prompb.Label{{Name: "__name__", Value: "m"}, {Name: "z", Value: "1"}, {Name: "a", Value: "2"}, {Name: "z", Value: "3"}}, `duplicate label name "z"`, "invalid_labels"},
		{"duplicate", []prompb.Label{{Name: "__name__", Value: "m"}, {Name: "a", Value: "1"}, {Name: "a", Value: "2"}}, `duplicate label name "a"`, "invalid_labels"},
		{"empty name", []prompb.Label{{Name: "", Value: "x"}, {Name: "__name__", Value: "m"}}, "empty label name", "invalid_labels"},
		{"no metric name", []prompb.Label{{Name: "job", Value: "x"}}, "missing or empty metric name", "missing_metric_name"},
		{"empty metric name", []prompb.Label{{Name: "__name__", Value: ""}, {Name: "job", Value: "x"}}, "missing or empty metric name", "missing_metric_name"},
		{"invalid utf8 value", []prompb.Label{{Name: "__name__", Value: "m"}, {Name: "a", Value: "\xff\xfe"}}, "not valid UTF-8", "invalid_labels"},
		{"invalid utf8 name", []prompb.Label{{Name: "__name__", Value: "m"}, {Name: "\xc3", Value: "1"}}, "not valid UTF-8", "invalid_labels"},
		{"too many labels", []prompb.Label{{Name: "__name__", Value: "m"}, {Name: "a", Value: "1"}, {Name: "b", Value: "1"}, {Name: "c", Value: "1"}, {Name: "d", Value: "1"}, {Name: "e", Value: "1"}, {Name: "f", Value: "1"}, {Name: "g", Value: "1"}}, "8 labels exceed max_labels_per_series=7", "limit_labels"},
		{"long name", []prompb.Label{{Name: "__name__", Value: "m"}, {Name: strings.Repeat("n", 33), Value: "1"}}, "max_label_name_length=32", "limit_label_name_length"},
		{"long value", []prompb.Label{{Name: "__name__", Value: "m"}, {Name: "a", Value: strings.Repeat("v", 65)}}, "max_label_value_length=64", "limit_label_value_length"},
	}
}

// TestUnsortedLabelsSorted: a series whose label names come in any order is
// stored with them sorted, as Prometheus 3 takes it, in both versions.
func TestUnsortedLabelsSorted(t *testing.T) {
	for _, version := range []int{1, 2} {
		t.Run(fmt.Sprintf("version=%d", version), func(t *testing.T) {
			lbls := []prompb.Label{{Name: "zone", Value: "b"}, {Name: "__name__", Value: "m"}, {Name: "job", Value: "x"}}
			rec := newRecorder()
			h, _ := newTestHandler(t, rec, nil)
			var resp *httptestRecorder
			if version == 1 {
				req := &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{{Labels: lbls, Samples: []prompb.Sample{{Value: 1, Timestamp: testNow}}}}}
				resp = post(t, h, "", "snappy", encode(t, req))
			} else {
				req := &writev2.Request{Symbols: []string{""}}
				var refs []uint32
				for _, l := range lbls {
					refs = append(refs, symbolize(req, l.Name), symbolize(req, l.Value))
				}
				req.Timeseries = []writev2.TimeSeries{{LabelsRefs: refs, Samples: []writev2.Sample{{Value: 1, Timestamp: testNow}}}}
				resp = post(t, h, ContentTypeV2, "snappy", encode(t, req))
			}
			assertCode(t, resp, http.StatusNoContent, "")
			got := rec.all()
			want := labels.FromStrings("__name__", "m", "job", "x", "zone", "b")
			if len(got) != 1 || !labels.Equal(got[0].Labels, want) {
				t.Fatalf("stored %v, want one series %s", got, want)
			}
		})
	}
}

func TestInvalidSeriesPartialWrite(t *testing.T) {
	limits := func(o *Options) {
		o.MaxLabelsPerSeries = 7 // nodePayload series have 7
		o.MaxLabelNameLength = 32
		o.MaxLabelValueLength = 64
	}
	for _, tc := range seriesLimitCases() {
		for _, version := range []int{1, 2} {
			t.Run(fmt.Sprintf("%s/version=%d", tc.name, version), func(t *testing.T) {
				good := nodePayload(2, 2, testNow)
				rec := newRecorder()
				h, reg := newTestHandler(t, rec, limits)
				var resp *httptestRecorder
				if version == 1 {
					req := toV1(good)
					bad := prompb.TimeSeries{Labels: tc.lbls, Samples: []prompb.Sample{{Value: 1, Timestamp: testNow}, {Value: 2, Timestamp: testNow + 1}}}
					req.Timeseries = slices.Insert(req.Timeseries, 1, bad)
					resp = post(t, h, "", "snappy", encode(t, req))
				} else {
					req := toV2(good)
					var refs []uint32
					for _, l := range tc.lbls {
						refs = append(refs, symbolize(req, l.Name), symbolize(req, l.Value))
					}
					bad := writev2.TimeSeries{LabelsRefs: refs, Samples: []writev2.Sample{{Value: 1, Timestamp: testNow}, {Value: 2, Timestamp: testNow + 1}}}
					req.Timeseries = slices.Insert(req.Timeseries, 1, bad)
					resp = post(t, h, ContentTypeV2, "snappy", encode(t, req))
				}
				assertCode(t, resp, http.StatusBadRequest, tc.msg)
				assertSeries(t, good, rec.all())
				if version == 2 {
					assertWritten(t, resp.Header(), 4, 0, 0)
				}
				if got := testutil.ToFloat64(h.m.rejected[kindSamples].WithLabelValues(tc.reason)); got != 2 {
					t.Fatalf("rejected{reason=%q} = %v, want 2", tc.reason, got)
				}
				_ = reg
			})
		}
	}
}

// symbolize returns the index of s in req.Symbols, adding it if needed.
func symbolize(req *writev2.Request, s string) uint32 {
	if i := slices.Index(req.Symbols, s); i >= 0 {
		return uint32(i)
	}
	req.Symbols = append(req.Symbols, s)
	return uint32(len(req.Symbols) - 1)
}

func TestEmptyLabelValueIsDropped(t *testing.T) {
	rec := newRecorder()
	h, _ := newTestHandler(t, rec, nil)
	req := &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{{
		Labels:  []prompb.Label{{Name: "__name__", Value: "m"}, {Name: "empty", Value: ""}, {Name: "job", Value: "j"}},
		Samples: []prompb.Sample{{Value: 1, Timestamp: testNow}},
	}}}
	assertCode(t, post(t, h, "", "", encode(t, req)), http.StatusNoContent, "")
	if rec.get(labels.FromStrings("__name__", "m", "job", "j")) == nil {
		t.Fatalf("series not stored without the empty label: %v", rec.all())
	}
}

func TestTimeWindow(t *testing.T) {
	for _, version := range []int{1, 2} {
		t.Run(fmt.Sprintf("version=%d", version), func(t *testing.T) {
			rec := newRecorder()
			h, _ := newTestHandler(t, rec, func(o *Options) {
				o.MaxFutureSkew = time.Minute
				o.MaxSampleAge = time.Hour
			})
			s := recSeries{Labels: labels.FromStrings("__name__", "m"), Samples: []recSample{
				{T: testNow - 2*time.Hour.Milliseconds(), V: 1}, // too old
				{T: testNow - 1000, V: 2},
				{T: testNow + 59_000, V: 3},
				{T: testNow + 61_000, V: 4}, // too far ahead
			}}
			hs := recSeries{Labels: labels.FromStrings("__name__", "h"), Hists: []recHist{{T: testNow + time.Hour.Milliseconds(), H: intHistogram(0)}, {T: testNow, H: intHistogram(1)}}}
			var resp *httptestRecorder
			if version == 1 {
				resp = post(t, h, "", "snappy", encode(t, toV1([]recSeries{s, hs})))
			} else {
				resp = post(t, h, ContentTypeV2, "snappy", encode(t, toV2([]recSeries{s, hs})))
				assertWritten(t, resp.Header(), 2, 1, 0)
			}
			body := assertCode(t, resp, http.StatusBadRequest, "max_future_skew=1m0s")
			if !strings.Contains(body, "max_sample_age=1h0m0s") {
				t.Fatalf("body %q does not name max_sample_age", body)
			}
			got := rec.get(s.Labels)
			if got == nil || len(got.Samples) != 2 || got.Samples[0].V != 2 || got.Samples[1].V != 3 {
				t.Fatalf("recorded %+v", got)
			}
			if gh := rec.get(hs.Labels); gh == nil || len(gh.Hists) != 1 {
				t.Fatalf("recorded histograms %+v", gh)
			}
			if got := testutil.ToFloat64(h.m.rejected[kindSamples].WithLabelValues("too_far_in_future")); got != 1 {
				t.Fatalf("too_far_in_future = %v", got)
			}
			if got := testutil.ToFloat64(h.m.rejected[kindSamples].WithLabelValues("too_old")); got != 1 {
				t.Fatalf("too_old = %v", got)
			}
		})
	}
}

func TestV2SymbolReferences(t *testing.T) {
	good := nodePayload(1, 1, testNow)
	for _, tc := range []struct {
		name   string
		mutate func(req *writev2.Request)
		msg    string
		// written counts
		samples, exemplars int
	}{
		{
			name: "label ref out of range",
			mutate: func(req *writev2.Request) {
				req.Timeseries = append(req.Timeseries, writev2.TimeSeries{LabelsRefs: []uint32{1, uint32(len(req.Symbols))}, Samples: []writev2.Sample{{Value: 1, Timestamp: testNow}}})
			},
			msg: "out of range", samples: 1,
		},
		{
			name: "huge label ref",
			mutate: func(req *writev2.Request) {
				req.Timeseries = append(req.Timeseries, writev2.TimeSeries{LabelsRefs: []uint32{math.MaxUint32, 1}, Samples: []writev2.Sample{{Value: 1, Timestamp: testNow}}})
			},
			msg: "out of range", samples: 1,
		},
		{
			name: "odd number of refs",
			mutate: func(req *writev2.Request) {
				req.Timeseries = append(req.Timeseries, writev2.TimeSeries{LabelsRefs: []uint32{1, 2, 1}, Samples: []writev2.Sample{{Value: 1, Timestamp: testNow}}})
			},
			msg: "odd number of label references", samples: 1,
		},
		{
			name: "help ref out of range",
			mutate: func(req *writev2.Request) {
				ts := req.Timeseries[0]
				ts.LabelsRefs = []uint32{symbolize(req, "__name__"), symbolize(req, "other")}
				ts.Metadata = writev2.Metadata{Type: writev2.Metadata_METRIC_TYPE_GAUGE, HelpRef: 999}
				req.Timeseries = append(req.Timeseries, ts)
			},
			msg: "metadata refers to a symbol out of range", samples: 1,
		},
		{
			name: "exemplar ref out of range keeps the sample",
			mutate: func(req *writev2.Request) {
				req.Timeseries[0].Exemplars = []writev2.Exemplar{{LabelsRefs: []uint32{1, 5000}, Value: 1, Timestamp: testNow}}
			},
			msg: "exemplar", samples: 1, exemplars: 0,
		},
		{
			name: "series without samples",
			mutate: func(req *writev2.Request) {
				req.Timeseries = append(req.Timeseries, writev2.TimeSeries{LabelsRefs: []uint32{symbolize(req, "__name__"), symbolize(req, "lonely")}})
			},
			msg: "has no samples, histograms or exemplars", samples: 1,
		},
		{
			name: "series with only exemplars is fine, an invalid one is not",
			mutate: func(req *writev2.Request) {
				req.Timeseries = append(req.Timeseries, writev2.TimeSeries{
					LabelsRefs: []uint32{symbolize(req, "__name__"), symbolize(req, "exemplar_only")},
					Exemplars:  []writev2.Exemplar{{LabelsRefs: []uint32{symbolize(req, "trace_id"), symbolize(req, "t1")}, Value: 3, Timestamp: testNow}},
				}, writev2.TimeSeries{LabelsRefs: []uint32{symbolize(req, "__name__"), symbolize(req, "nothing")}})
			},
			msg: "nothing", samples: 1, exemplars: 1,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := newRecorder()
			h, _ := newTestHandler(t, rec, nil)
			req := toV2(good)
			tc.mutate(req)
			resp := post(t, h, ContentTypeV2, "snappy", encode(t, req))
			assertCode(t, resp, http.StatusBadRequest, tc.msg)
			assertWritten(t, resp.Header(), tc.samples, 0, tc.exemplars)
			if s, _, _ := rec.counts(); s != tc.samples {
				t.Fatalf("recorded %d samples, want %d", s, tc.samples)
			}
		})
	}
}

func TestHistograms(t *testing.T) {
	valid := []recSeries{
		{Labels: labels.FromStrings("__name__", "nhcb_int"), Hists: []recHist{{T: testNow, H: nhcbHistogram(2)}, {T: testNow + 1, H: nhcbHistogram(3)}}},
		{Labels: labels.FromStrings("__name__", "nhcb_float"), Hists: []recHist{{T: testNow, FH: nhcbFloatHistogram(1)}}},
		{Labels: labels.FromStrings("__name__", "exp_int"), Hists: []recHist{{T: testNow, H: intHistogram(1)}}},
		{Labels: labels.FromStrings("__name__", "exp_float"), Hists: []recHist{{T: testNow, FH: floatHistogram(2)}}},
	}
	for _, version := range []int{1, 2} {
		t.Run(fmt.Sprintf("valid/version=%d", version), func(t *testing.T) {
			rec := newRecorder()
			h, _ := newTestHandler(t, rec, nil)
			resp := postSeries(t, h, version, valid)
			assertCode(t, resp, http.StatusNoContent, "")
			assertSeries(t, valid, rec.all())
		})
	}
	unsortedBounds := nhcbHistogram(1)
	unsortedBounds.CustomValues = []float64{1, 0.5, 2, 3}
	noBounds := nhcbHistogram(1)
	noBounds.CustomValues = nil
	nhcbWithZero := nhcbHistogram(1)
	nhcbWithZero.ZeroCount = 1
	badSpans := intHistogram(1)
	badSpans.PositiveSpans = []histogram.Span{{Offset: 0, Length: 9}}
	badSchema := intHistogram(1)
	badSchema.Schema = 42
	expWithBounds := intHistogram(1)
	expWithBounds.CustomValues = []float64{1}
	for _, tc := range []struct {
		name string
		h    *histogram.Histogram
		msg  string
	}{
		{"custom bounds not sorted", unsortedBounds, "custom buckets"},
		{"custom buckets without bounds", noBounds, "custom buckets"},
		{"custom buckets with zero count", nhcbWithZero, "zero"},
		{"spans longer than buckets", badSpans, "spans"},
		{"unknown schema", badSchema, "schema"},
		{"exponential with custom bounds", expWithBounds, "custom"},
	} {
		for _, version := range []int{1, 2} {
			t.Run(fmt.Sprintf("%s/version=%d", tc.name, version), func(t *testing.T) {
				rec := newRecorder()
				h, _ := newTestHandler(t, rec, nil)
				series := append(slices.Clone(valid[:1]), recSeries{Labels: labels.FromStrings("__name__", "bad"), Hists: []recHist{{T: testNow, H: tc.h}}})
				resp := postSeries(t, h, version, series)
				assertCode(t, resp, http.StatusBadRequest, tc.msg)
				assertSeries(t, valid[:1], rec.all())
				if version == 2 {
					assertWritten(t, resp.Header(), 0, 2, 0)
				}
				if got := testutil.ToFloat64(h.m.rejected[kindHistograms].WithLabelValues("invalid_histogram")); got != 1 {
					t.Fatalf("invalid_histogram rejections = %v", got)
				}
			})
		}
	}
}

func postSeries(t *testing.T, h http.Handler, version int, series []recSeries) *httptestRecorder {
	t.Helper()
	if version == 1 {
		return post(t, h, "application/x-protobuf", "snappy", encode(t, toV1(series)))
	}
	return post(t, h, ContentTypeV2, "snappy", encode(t, toV2(series)))
}

func TestExemplars(t *testing.T) {
	for _, version := range []int{1, 2} {
		t.Run(fmt.Sprintf("version=%d", version), func(t *testing.T) {
			rec := newRecorder()
			// The storage rejects one exemplar as out of order: that never
			// fails the request.
			rec.exemplarErr = func(e exemplar.Exemplar) error {
				if e.Value == 99 {
					return storage.ErrOutOfOrderExemplar
				}
				return nil
			}
			h, _ := newTestHandler(t, rec, nil)
			s := recSeries{
				Labels:  labels.FromStrings("__name__", "m"),
				Samples: []recSample{{T: testNow, V: 1}},
				Exemplars: []exemplar.Exemplar{
					{Labels: labels.FromStrings("trace_id", "late"), Value: 2, Ts: testNow + 5, HasTs: true},
					{Labels: labels.FromStrings("trace_id", "early"), Value: 1, Ts: testNow + 1, HasTs: true},
					{Labels: labels.FromStrings("trace_id", "ooo"), Value: 99, Ts: testNow + 9, HasTs: true},
				},
			}
			resp := postSeries(t, h, version, []recSeries{s})
			assertCode(t, resp, http.StatusNoContent, "")
			if version == 2 {
				assertWritten(t, resp.Header(), 1, 0, 2)
			}
			got := rec.get(s.Labels)
			want := []exemplar.Exemplar{s.Exemplars[1], s.Exemplars[0]} // sorted by timestamp
			if diff := cmp.Diff(want, got.Exemplars, cmpOpts...); diff != "" {
				t.Fatalf("exemplars differ:\n%s", diff)
			}
			if got := testutil.ToFloat64(h.m.rejected[kindExemplars].WithLabelValues("out_of_order")); got != 1 {
				t.Fatalf("out_of_order exemplars = %v", got)
			}
		})
	}
}

// postRichV2 posts richPayload, with its 2.0-only fields, to a new handler
// as a 2.0 request that must be written whole, and returns the series sent
// and the recorder they went to.
func postRichV2(t *testing.T) ([]recSeries, *recorder) {
	t.Helper()
	rec := newRecorder()
	h, _ := newTestHandler(t, rec, nil)
	sent := richPayload(testNow, true)
	assertCode(t, postSeries(t, h, 2, sent), http.StatusNoContent, "")
	return sent, rec
}

func TestMetadata(t *testing.T) {
	t.Run("version=2 per series", func(t *testing.T) {
		sent, rec := postRichV2(t)
		got := rec.get(sent[1].Labels)
		want := metadata.Metadata{Type: model.MetricTypeGauge, Help: "Temperature.", Unit: "celsius"}
		if got.Meta != want {
			t.Fatalf("metadata %+v, want %+v", got.Meta, want)
		}
	})
	t.Run("version=1 per family", func(t *testing.T) {
		rec := newRecorder()
		h, _ := newTestHandler(t, rec, nil)
		req := toV1(nodePayload(1, 1, testNow))
		req.Metadata = []prompb.MetricMetadata{
			{Type: prompb.MetricMetadata_COUNTER, MetricFamilyName: "node_cpu_seconds_total", Help: "Seconds the CPUs spent in each mode.", Unit: "seconds"},
			{Type: prompb.MetricMetadata_STATESET, MetricFamilyName: "ss", Help: "h"},
		}
		assertCode(t, post(t, h, "", "snappy", encode(t, req)), http.StatusNoContent, "")
		want := map[string]metadata.Metadata{
			"node_cpu_seconds_total": {Type: model.MetricTypeCounter, Help: "Seconds the CPUs spent in each mode.", Unit: "seconds"},
			"ss":                     {Type: model.MetricTypeStateset, Help: "h"},
		}
		if diff := cmp.Diff(want, rec.family); diff != "" {
			t.Fatalf("family metadata differs:\n%s", diff)
		}
	})
}

func TestStartTimestamps(t *testing.T) {
	t.Run("per sample and histogram", func(t *testing.T) {
		sent, rec := postRichV2(t)
		got := rec.get(sent[0].Labels)
		if got.Samples[0].ST != testNow-60_000 {
			t.Fatalf("sample st %d", got.Samples[0].ST)
		}
		if gh := rec.get(sent[2].Labels); gh.Hists[0].ST != testNow-30_000 {
			t.Fatalf("histogram st %d", gh.Hists[0].ST)
		}
	})
	t.Run("series created_timestamp of 2.0-rc.3 senders", func(t *testing.T) {
		rec := newRecorder()
		h, _ := newTestHandler(t, rec, nil)
		// symbols "", "__name__", "m"; one series with created_timestamp
		// (field 6) and two samples, the second with its own start
		// timestamp, which wins.
		var b []byte
		for _, s := range []string{"", "__name__", "m"} {
			b = protowire.AppendTag(b, 4, protowire.BytesType)
			b = protowire.AppendString(b, s)
		}
		var ts []byte
		ts = protowire.AppendTag(ts, 1, protowire.BytesType)
		ts = protowire.AppendBytes(ts, []byte{1, 2})
		for i, st := range []int64{0, testNow - 7} {
			var smp []byte
			smp = protowire.AppendTag(smp, 1, protowire.Fixed64Type)
			smp = protowire.AppendFixed64(smp, math.Float64bits(float64(i)))
			smp = protowire.AppendTag(smp, 2, protowire.VarintType)
			smp = protowire.AppendVarint(smp, uint64(testNow+int64(i)))
			if st != 0 {
				smp = protowire.AppendTag(smp, 3, protowire.VarintType)
				smp = protowire.AppendVarint(smp, uint64(st))
			}
			ts = protowire.AppendTag(ts, 2, protowire.BytesType)
			ts = protowire.AppendBytes(ts, smp)
		}
		ts = protowire.AppendTag(ts, 6, protowire.VarintType)
		ts = protowire.AppendVarint(ts, uint64(testNow-1000))
		b = protowire.AppendTag(b, 5, protowire.BytesType)
		b = protowire.AppendBytes(b, ts)
		assertCode(t, post(t, h, ContentTypeV2, "snappy", snappy.Encode(nil, b)), http.StatusNoContent, "")
		got := rec.get(labels.FromStrings("__name__", "m"))
		if got == nil || len(got.Samples) != 2 || got.Samples[0].ST != testNow-1000 || got.Samples[1].ST != testNow-7 {
			t.Fatalf("recorded %+v", got)
		}
	})
}

// badDataErr and overloadErr classify themselves by behaviour.
type badDataErr struct{}

func (badDataErr) Error() string { return "storage refuses this" }
func (badDataErr) BadData() bool { return true }

type overloadErr struct{}

func (overloadErr) Error() string    { return "memory pressure" }
func (overloadErr) Overloaded() bool { return true }

type unavailableErr struct{}

func (unavailableErr) Error() string     { return "not durable within the write timeout" }
func (unavailableErr) Unavailable() bool { return true }

func TestStorageErrors(t *testing.T) {
	for _, tc := range []struct {
		name      string
		err       error
		commitErr error
		code      int
		msg       string
		reason    string
		committed int // samples
	}{
		{name: "out of order is partial", err: storage.ErrOutOfOrderSample, code: 400, msg: "out of order sample", reason: "out_of_order", committed: 5},
		{name: "out of bounds wrapped", err: fmt.Errorf("partition gone: %w", storage.ErrOutOfBounds), code: 400, msg: "partition gone", reason: "out_of_bounds", committed: 5},
		{name: "too old", err: storage.ErrTooOldSample, code: 400, reason: "too_old", committed: 5},
		{name: "duplicate", err: storage.ErrDuplicateSampleForTimestamp, code: 400, reason: "duplicate", committed: 5},
		{name: "bad data by behaviour", err: badDataErr{}, code: 400, msg: "storage refuses this", reason: "bad_data", committed: 5},
		{name: "overloaded sentinel", err: fmt.Errorf("head full: %w", ErrOverloaded), code: 429, reason: "overloaded"},
		{name: "overloaded by behaviour", err: overloadErr{}, code: 429, msg: "memory pressure", reason: "overloaded"},
		{name: "internal", err: errors.New("disk on fire"), code: 500, msg: "disk on fire", reason: "storage_error"},
		{name: "commit fails", commitErr: errors.New("object store unavailable"), code: 500, msg: "object store unavailable", reason: "storage_error"},
		{name: "commit overloaded", commitErr: ErrOverloaded, code: 429, reason: "overloaded"},
		{name: "commit unavailable", commitErr: fmt.Errorf("log: %w", unavailableErr{}), code: 503, msg: "not durable within the write timeout", reason: "unavailable"},
		{name: "unavailable", err: unavailableErr{}, code: 503, msg: "not durable", reason: "unavailable"},
	} {
		for _, version := range []int{1, 2} {
			t.Run(fmt.Sprintf("%s/version=%d", tc.name, version), func(t *testing.T) {
				rec := newRecorder()
				rec.commitErr = tc.commitErr
				// The third series' samples fail.
				rec.appendErr = func(lset labels.Labels, _ int64) error {
					if tc.err != nil && lset.Get("cpu") == "2" {
						return tc.err
					}
					return nil
				}
				h, _ := newTestHandler(t, rec, nil)
				resp := postSeries(t, h, version, nodePayload(6, 1, testNow))
				assertCode(t, resp, tc.code, tc.msg)
				if s, _, _ := rec.counts(); s != tc.committed {
					t.Fatalf("%d samples committed, want %d", s, tc.committed)
				}
				if (tc.code == 429 || tc.code == 503) && resp.Header().Get("Retry-After") == "" {
					t.Fatalf("%d without Retry-After", tc.code)
				}
				if version == 2 {
					assertWritten(t, resp.Header(), tc.committed, 0, 0)
				}
				if tc.code >= 429 && rec.commits != 0 {
					t.Fatal("retryable failure was committed")
				}
				want := 6.0 - float64(tc.committed)
				if got := testutil.ToFloat64(h.m.rejected[kindSamples].WithLabelValues(tc.reason)); got != want {
					t.Fatalf("rejected{reason=%q} = %v, want %v", tc.reason, got, want)
				}
			})
		}
	}
}

// blockFirstAppend makes the first append to rec wait: entered is closed
// once it started, and it goes on once release is closed. Only the first
// waits: a later request that got past a limit by mistake goes on (and
// fails the assertions) rather than waiting behind it for good.
func blockFirstAppend(rec *recorder) (entered, release chan struct{}) {
	entered, release = make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	rec.appendErr = func(labels.Labels, int64) error {
		if first.CompareAndSwap(false, true) {
			close(entered)
			<-release
		}
		return nil
	}
	return entered, release
}

func TestInflightLimit(t *testing.T) {
	rec := newRecorder()
	entered, release := blockFirstAppend(rec)
	h, _ := newTestHandler(t, rec, func(o *Options) { o.MaxInflightRequests = 1; o.RetryAfter = 3 * time.Second })
	body := encode(t, toV1(nodePayload(1, 1, testNow)))
	done := make(chan int)
	go func() { done <- post(t, h, "", "snappy", body).Code }()
	<-entered
	resp := post(t, h, "", "snappy", body)
	assertCode(t, resp, http.StatusTooManyRequests, "max_inflight_requests=1")
	if got := resp.Header().Get("Retry-After"); got != "3" {
		t.Fatalf("Retry-After %q", got)
	}
	// OTLP requests take their slots from the same limit.
	oh, err := h.OTLP(DefaultOTLPOptions())
	if err != nil {
		t.Fatal(err)
	}
	resp = post(t, oh, ContentTypeOTLPProto, "", otlpProto(t, otlpPayload(testNow)))
	assertCode(t, resp, http.StatusTooManyRequests, "max_inflight_requests=1")
	if got := resp.Header().Get("Retry-After"); got != "3" {
		t.Fatalf("OTLP Retry-After %q", got)
	}
	close(release)
	if code := <-done; code != http.StatusNoContent {
		t.Fatalf("first request: %d", code)
	}
	assertCode(t, post(t, h, "", "snappy", body), http.StatusNoContent, "")
}

// TestInflightBytesLimit: while requests in flight hold max_inflight_bytes,
// another remote-write or OTLP request is answered 429 with Retry-After;
// a request alone is let in whatever its size, and what a request held is
// given back when it ends.
func TestInflightBytesLimit(t *testing.T) {
	rec := newRecorder()
	entered, release := blockFirstAppend(rec)
	h, _ := newTestHandler(t, rec, func(o *Options) { o.MaxInflightBytes, o.RetryAfter = 1, 2*time.Second })
	oh, err := h.OTLP(DefaultOTLPOptions())
	if err != nil {
		t.Fatal(err)
	}
	body := encode(t, toV1(nodePayload(1, 1, testNow)))
	done := make(chan int)
	go func() { done <- post(t, h, "", "snappy", body).Code }() // alone: let in, far over 1 byte
	<-entered
	if got := testutil.ToFloat64(h.m.inflightBytes); got <= float64(len(body)) {
		t.Fatalf("inflight bytes %v while a request of %d compressed bytes is in flight", got, len(body))
	}
	resp := post(t, h, "", "snappy", body)
	assertCode(t, resp, http.StatusTooManyRequests, "max_inflight_bytes=1")
	if got := resp.Header().Get("Retry-After"); got != "2" {
		t.Fatalf("Retry-After %q", got)
	}
	resp = post(t, oh, ContentTypeOTLPProto, "", otlpProto(t, otlpPayload(testNow)))
	assertCode(t, resp, http.StatusTooManyRequests, "max_inflight_bytes=1")
	close(release)
	if code := <-done; code != http.StatusNoContent {
		t.Fatalf("first request: %d", code)
	}
	if got := testutil.ToFloat64(h.m.inflightBytes); got != 0 {
		t.Fatalf("inflight bytes %v once every request ended, want 0", got)
	}
	assertCode(t, post(t, h, "", "snappy", body), http.StatusNoContent, "")
	assertCode(t, post(t, oh, ContentTypeOTLPProto, "", otlpProto(t, otlpPayload(testNow))), http.StatusOK, "")
}

// TestBodyCountedAsItArrives: the bytes of a body still arriving count
// against max_inflight_bytes, so a flood of large bodies is refused while
// they come in rather than once they are all held; a request that never
// got its bytes in gives them back.
func TestBodyCountedAsItArrives(t *testing.T) {
	h, _ := newTestHandler(t, newRecorder(), func(o *Options) { o.MaxInflightBytes = 100 << 10 })
	pr, pw := io.Pipe()
	t.Cleanup(func() { pw.CloseWithError(io.ErrUnexpectedEOF) })
	req := httptest.NewRequest(http.MethodPost, "/api/v1/write", pr)
	req.Header.Set("Content-Type", "application/x-protobuf")
	done := make(chan int)
	go func() {
		resp := httptest.NewRecorder()
		h.ServeHTTP(resp, req)
		done <- resp.Code
	}()
	// 96 KiB arrive; the byte after them is read only once the handler has
	// counted them.
	if _, err := pw.Write(make([]byte, 96<<10)); err != nil {
		t.Fatal(err)
	}
	if _, err := pw.Write([]byte{0}); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(h.m.inflightBytes); got < 64<<10 {
		t.Fatalf("inflight bytes %v while 96 KiB of a body arrived, want at least 64 KiB", got)
	}
	resp := post(t, h, "", "snappy", make([]byte, 40<<10))
	assertCode(t, resp, http.StatusTooManyRequests, "max_inflight_bytes=102400")
	pw.CloseWithError(io.ErrUnexpectedEOF)
	if code := <-done; code != http.StatusBadRequest {
		t.Fatalf("the request whose body broke off: %d, want 400", code)
	}
	if got := testutil.ToFloat64(h.m.inflightBytes); got != 0 {
		t.Fatalf("inflight bytes %v once no request is in flight, want 0", got)
	}
	assertCode(t, post(t, h, "", "snappy", encode(t, toV1(nodePayload(1, 1, testNow)))), http.StatusNoContent, "")
}

// TestSlowBodyHoldsNoSlot: a request whose body has not arrived holds none
// of the max_inflight_requests slots, and what is allocated for it goes by
// the bytes that came, not by the Content-Length it announced.
func TestSlowBodyHoldsNoSlot(t *testing.T) {
	rec := newRecorder()
	h, _ := newTestHandler(t, rec, func(o *Options) { o.MaxInflightRequests = 1 })
	oh, err := h.OTLP(DefaultOTLPOptions())
	if err != nil {
		t.Fatal(err)
	}
	body := encode(t, toV1(nodePayload(1, 1, testNow)))
	for _, slow := range []struct {
		name string
		h    http.Handler
		ct   string
	}{{"remote write", h, "application/x-protobuf"}, {"otlp", oh, ContentTypeOTLPProto}} {
		t.Run(slow.name, func(t *testing.T) {
			pr, pw := io.Pipe()
			t.Cleanup(func() { pw.CloseWithError(io.ErrUnexpectedEOF) })
			req := httptest.NewRequest(http.MethodPost, "/api/v1/write", pr)
			req.Header.Set("Content-Type", slow.ct)
			req.ContentLength = 16 << 20 // announced, never sent
			done := make(chan int)
			go func() {
				resp := httptest.NewRecorder()
				slow.h.ServeHTTP(resp, req)
				done <- resp.Code
			}()
			if _, err := pw.Write([]byte{0x0a}); err != nil { // the body has begun
				t.Fatal(err)
			}
			// Another sender gets the only slot, over and over.
			for range 3 {
				assertCode(t, post(t, h, "", "snappy", body), http.StatusNoContent, "")
				assertCode(t, post(t, oh, ContentTypeOTLPProto, "", otlpProto(t, otlpPayload(testNow))), http.StatusOK, "")
			}
			pw.CloseWithError(io.ErrUnexpectedEOF)
			if code := <-done; code != http.StatusBadRequest {
				t.Fatalf("the slow request: %d, want 400", code)
			}
		})
	}
}

func TestReadBodyAllocatesWhatArrives(t *testing.T) {
	got, err := readBody(nil, bytes.NewReader([]byte("abc")), 16<<20, 16<<20, nil)
	if err != nil || string(got) != "abc" || cap(got) > maxBodyPrealloc {
		t.Fatalf("readBody = %q (cap %d), %v; want \"abc\" in at most %d bytes", got, cap(got), err, maxBodyPrealloc)
	}
	got, err = readBody(nil, bytes.NewReader([]byte("abc")), 3, 16<<20, nil)
	if err != nil || string(got) != "abc" {
		t.Fatalf("readBody = %q, %v", got, err)
	}
	if _, err := readBody(nil, bytes.NewReader(make([]byte, 10)), -1, 5, nil); !errors.Is(err, errBodyTooLarge) {
		t.Fatalf("over the limit: %v", err)
	}
}

// TestReadBodyCounts: readBody tells its counter of the bytes as they
// arrive, all of them by the end, and stops once the counter refuses.
func TestReadBodyCounts(t *testing.T) {
	body := bytes.Repeat([]byte("x"), 5*countChunk+123)
	for _, contentLength := range []int64{-1, int64(len(body)), 10} {
		var total int64
		calls := 0
		got, err := readBody(nil, bytes.NewReader(body), contentLength, 16<<20, func(n int64) bool {
			total += n
			calls++
			return true
		})
		if contentLength == 10 {
			// A Content-Length under what arrives: only it is read.
			if err != nil || len(got) != 10 || total != 10 {
				t.Fatalf("short Content-Length: %d bytes, counted %d, %v", len(got), total, err)
			}
			continue
		}
		if err != nil || len(got) != len(body) || total != int64(len(body)) {
			t.Fatalf("Content-Length %d: read %d, counted %d of %d, %v", contentLength, len(got), total, len(body), err)
		}
		if contentLength < 0 && calls < 5 {
			t.Fatalf("counted in %d calls; want one at least every %d bytes", calls, countChunk)
		}
	}
	calls := 0
	_, err := readBody(nil, bytes.NewReader(body), -1, 16<<20, func(int64) bool {
		calls++
		return calls < 2
	})
	if !errors.Is(err, errInflightBytes) || calls != 2 {
		t.Fatalf("a refusing counter: %v after %d calls, want errInflightBytes after 2", err, calls)
	}
}

func TestPanicIsRecovered(t *testing.T) {
	rec := newRecorder()
	rec.appendErr = func(lset labels.Labels, _ int64) error {
		if lset.Get("cpu") == "1" {
			panic("storage bug")
		}
		return nil
	}
	h, _ := newTestHandler(t, rec, nil)
	assertCode(t, postSeries(t, h, 1, nodePayload(3, 1, testNow)), http.StatusInternalServerError, "internal error")
	if rec.rollbacks != 1 || rec.commits != 0 {
		t.Fatalf("commits %d rollbacks %d", rec.commits, rec.rollbacks)
	}
	rec.appendErr = nil
	assertCode(t, postSeries(t, h, 1, nodePayload(3, 1, testNow)), http.StatusNoContent, "")
}

func TestMetrics(t *testing.T) {
	rec := newRecorder()
	rec.appendErr = func(lset labels.Labels, t int64) error {
		if lset.Get("cpu") == "0" {
			return storage.ErrOutOfOrderSample
		}
		return nil
	}
	h, reg := newTestHandler(t, rec, nil)
	assertCode(t, postSeries(t, h, 2, nodePayload(4, 3, testNow)), http.StatusBadRequest, "")
	assertCode(t, postSeries(t, h, 1, nodePayload(2, 1, testNow)), http.StatusBadRequest, "")
	assertCode(t, post(t, h, "text/plain", "", nil), http.StatusUnsupportedMediaType, "")
	rec.appendErr = nil
	assertCode(t, postSeries(t, h, 1, nodePayload(2, 1, testNow)), http.StatusNoContent, "")
	// A request written whole is counted under the 204 it was answered with.
	expected := `
# HELP shale_remotewrite_requests_total Remote-write requests by protocol version and HTTP status code.
# TYPE shale_remotewrite_requests_total counter
shale_remotewrite_requests_total{code="204",version="1.0"} 1
shale_remotewrite_requests_total{code="400",version="1.0"} 1
shale_remotewrite_requests_total{code="400",version="2.0"} 1
shale_remotewrite_requests_total{code="415",version="unknown"} 1
# HELP shale_remotewrite_samples_received_total Float samples decoded from well-formed remote-write requests.
# TYPE shale_remotewrite_samples_received_total counter
shale_remotewrite_samples_received_total 16
# HELP shale_remotewrite_samples_rejected_total Float samples received but not written, by reason.
# TYPE shale_remotewrite_samples_rejected_total counter
shale_remotewrite_samples_rejected_total{reason="out_of_order"} 4
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(expected),
		"shale_remotewrite_requests_total", "shale_remotewrite_samples_received_total", "shale_remotewrite_samples_rejected_total"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(h.m.duration); n != 3 {
		t.Fatalf("duration series %d", n)
	}
	if s, _, _ := rec.counts(); s != 12 {
		t.Fatalf("written %d, want 16-4", s)
	}
}

func TestOptionsValidate(t *testing.T) {
	if err := DefaultOptions().Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		mod  func(*Options)
		msg  string
	}{
		{"compressed", func(o *Options) { o.MaxCompressedBytes = 0 }, "max_compressed_bytes"},
		{"decompressed", func(o *Options) { o.MaxDecompressedBytes = -1 }, "max_decompressed_bytes"},
		{"decompressed huge", func(o *Options) { o.MaxDecompressedBytes = 4 << 30 }, "below 2 GiB"},
		{"series", func(o *Options) { o.MaxSeriesPerRequest = 0 }, "max_series_per_request"},
		{"labels", func(o *Options) { o.MaxLabelsPerSeries = 0 }, "max_labels_per_series"},
		{"name", func(o *Options) { o.MaxLabelNameLength = 0 }, "max_label_name_length"},
		{"value", func(o *Options) { o.MaxLabelValueLength = 0 }, "max_label_value_length"},
		{"skew", func(o *Options) { o.MaxFutureSkew = -time.Second }, "max_future_skew"},
		{"age", func(o *Options) { o.MaxSampleAge = -time.Second }, "max_sample_age"},
		{"inflight", func(o *Options) { o.MaxInflightRequests = -1 }, "max_inflight_requests"},
		{"inflight bytes", func(o *Options) { o.MaxInflightBytes = -1 }, "max_inflight_bytes"},
		{"retry", func(o *Options) { o.RetryAfter = -1 }, "retry_after"},
		{"messages", func(o *Options) { o.MaxErrorMessages = 0 }, "max_error_messages"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := DefaultOptions()
			tc.mod(&o)
			err := o.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("Validate() = %v, want mention of %s", err, tc.msg)
			}
			if _, err := NewHandler(newRecorder(), o, Components{}); err == nil {
				t.Fatal("NewHandler accepted invalid options")
			}
		})
	}
}

func TestErrorMessagesAreBounded(t *testing.T) {
	rec := newRecorder()
	rec.appendErr = func(labels.Labels, int64) error { return storage.ErrOutOfOrderSample }
	h, _ := newTestHandler(t, rec, func(o *Options) { o.MaxErrorMessages = 3 })
	body := assertCode(t, postSeries(t, h, 1, nodePayload(50, 2, testNow)), http.StatusBadRequest, "100 rejected")
	if !strings.Contains(body, "and 97 more") || strings.Count(body, "out of order sample") != 3 {
		t.Fatalf("body:\n%s", body)
	}
}

// TestNoPerSampleAllocations checks that decoding and appending a request
// allocates the same whether it has 100 or 2000 series once the pooled
// buffers have grown.
func TestNoPerSampleAllocations(t *testing.T) {
	if race.Enabled {
		t.Skip("sync.Pool drops items at random under the race detector")
	}
	for _, version := range []int{1, 2} {
		t.Run(fmt.Sprintf("version=%d", version), func(t *testing.T) {
			h, _ := newTestHandler(t, nopAppendable{}, nil)
			allocs := func(n int) float64 {
				series := nodePayload(n, 2, testNow)
				var body []byte
				ct := ContentTypeV2
				if version == 1 {
					body, ct = encode(t, toV1(series)), ContentTypeV1
				} else {
					body = encode(t, toV2(series))
				}
				w := &discardWriter{h: http.Header{}}
				req := httptestNewRequest(http.MethodPost, nil)
				req.Header.Set("Content-Type", ct)
				req.Header.Set("Content-Encoding", "snappy")
				rd := bytes.NewReader(body)
				run := func() {
					rd.Reset(body)
					req.Body = io.NopCloser(rd)
					req.ContentLength = int64(len(body))
					w.code = 0
					h.ServeHTTP(w, req)
					if w.code != http.StatusNoContent {
						t.Fatalf("status %d", w.code)
					}
				}
				run() // grow the pooled buffers
				return testing.AllocsPerRun(20, run)
			}
			small, large := allocs(100), allocs(2000)
			t.Logf("allocs per request: 100 series %.0f, 2000 series %.0f", small, large)
			if large > small+2 {
				t.Fatalf("allocations grow with the request: %.0f for 100 series, %.0f for 2000", small, large)
			}
		})
	}
}

// nopAppendable accepts everything and keeps nothing.
type nopAppendable struct{}

func (nopAppendable) Appender(context.Context) Appender { return nopAppender{} }

type nopAppender struct{}

func (nopAppender) Append(ref SeriesRef, _ labels.Labels, _, _ int64, _ float64) (SeriesRef, error) {
	return 1, nil
}

func (nopAppender) AppendHistogram(SeriesRef, labels.Labels, int64, int64, *histogram.Histogram, *histogram.FloatHistogram) (SeriesRef, error) {
	return 1, nil
}

func (nopAppender) AppendExemplar(SeriesRef, labels.Labels, exemplar.Exemplar) (SeriesRef, error) {
	return 1, nil
}

func (nopAppender) UpdateMetadata(ref SeriesRef, _ labels.Labels, _ metadata.Metadata) (SeriesRef, error) {
	return ref, nil
}
func (nopAppender) Commit() error   { return nil }
func (nopAppender) Rollback() error { return nil }

type httptestRecorder = httptest.ResponseRecorder

func httptestNewRequest(method string, body io.Reader) *http.Request {
	return httptest.NewRequest(method, "/api/v1/write", body)
}

func newHTTPRecorder() *httptest.ResponseRecorder { return httptest.NewRecorder() }

// discardWriter is a ResponseWriter that keeps only the status code.
type discardWriter struct {
	h    http.Header
	code int
}

func (w *discardWriter) Header() http.Header { return w.h }
func (w *discardWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return len(b), nil
}
func (w *discardWriter) WriteHeader(code int) { w.code = code }

// bytesAllocated returns how many heap bytes f allocates.
func bytesAllocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestConcurrentRequests sends requests of both versions from several
// goroutines at once; pooled state must not leak between them.
func TestConcurrentRequests(t *testing.T) {
	rec := newRecorder()
	h, _ := newTestHandler(t, rec, nil)
	const workers, perWorker = 6, 10
	var wg sync.WaitGroup
	errs := make(chan string, workers*perWorker)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWorker {
				series := nodePayload(20, 2, testNow)
				for j := range series {
					series[j].Labels = relabel(series[j].Labels, fmt.Sprintf("w%d_i%d_", w, i))
				}
				version := 1 + (w+i)%2
				var resp *httptestRecorder
				if version == 1 {
					resp = post(t, h, ContentTypeV1, "snappy", encode(t, toV1(series)))
				} else {
					resp = post(t, h, ContentTypeV2, "snappy", encode(t, toV2(series)))
				}
				if resp.Code != http.StatusNoContent {
					errs <- fmt.Sprintf("worker %d request %d: %d %s", w, i, resp.Code, resp.Body.String())
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	all := rec.all()
	if len(all) != workers*perWorker*20 {
		t.Fatalf("%d series recorded, want %d", len(all), workers*perWorker*20)
	}
	for _, s := range all {
		name := s.Labels.Get(model.MetricNameLabel)
		if !strings.HasPrefix(name, "w") || len(s.Samples) != 2 {
			t.Fatalf("series %s with %d samples", s.Labels, len(s.Samples))
		}
	}
	if len(rec.refErrors) > 0 {
		t.Fatalf("ref contract violated: %v", rec.refErrors[:1])
	}
}

// TestV1WithUnknownFields: a 1.0 body with series is taken whatever other
// fields it carries, as protobuf takes unknown fields; only one that holds
// nothing but 2.0 fields is refused (TestMalformedBodies).
func TestV1WithUnknownFields(t *testing.T) {
	good, _ := toV1(nodePayload(3, 2, testNow)).Marshal()
	body := protowire.AppendTag(slices.Clone(good), 5, protowire.BytesType)
	body = protowire.AppendBytes(body, []byte("unknown"))
	body = protowire.AppendTag(body, 4, protowire.BytesType)
	body = protowire.AppendString(body, "x")
	rec := newRecorder()
	h, _ := newTestHandler(t, rec, nil)
	assertCode(t, post(t, h, "application/x-protobuf", "snappy", snappy.Encode(nil, body)), http.StatusNoContent, "")
	if samples, _, _ := rec.counts(); samples != 6 {
		t.Fatalf("%d samples stored, want 6", samples)
	}
}

// TestOutcomeLogged checks the log lines of requests let in: a partial
// rejection is a warning and a failure an error, each at most once a second
// of the handler's clock (the next one counts what was left out), for
// remote write and OTLP alike, the OTLP warning with its partial success's
// message.
func TestOutcomeLogged(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(lockedWriter{&mu, &buf}, nil))
	rec := newRecorder()
	rec.appendErr = func(lset labels.Labels, _ int64) error {
		if lset.Get("cpu") == "2" || lset.Get("__name__") == "temperature_celsius" {
			return storage.ErrOutOfOrderSample
		}
		return nil
	}
	h, err := NewHandler(rec, DefaultOptions(), Components{Logger: logger, Registerer: prometheus.NewRegistry(),
		Now: func() time.Time { return time.UnixMilli(testNow) }})
	if err != nil {
		t.Fatal(err)
	}
	oh, err := h.OTLP(DefaultOTLPOptions())
	if err != nil {
		t.Fatal(err)
	}
	lines := func() []string {
		mu.Lock()
		defer mu.Unlock()
		out := strings.Split(strings.TrimSpace(buf.String()), "\n")
		buf.Reset()
		if len(out) == 1 && out[0] == "" {
			return nil
		}
		return out
	}
	for range 2 {
		assertCode(t, postSeries(t, h, 2, nodePayload(6, 1, testNow)), http.StatusBadRequest, "out of order")
	}
	got := lines()
	if len(got) != 1 || !strings.Contains(got[0], `level=WARN msg="remote write: request partially rejected" version=2.0 code=400`) ||
		!strings.Contains(got[0], "rejected_since_last_line=0") {
		t.Fatalf("two rejected remote writes logged %q, want one warning", got)
	}
	w := post(t, oh, ContentTypeOTLPProto, "", otlpProto(t, otlpPayload(testNow)))
	if w.Code != http.StatusOK {
		t.Fatalf("OTLP with a rejected point: %d %s", w.Code, w.Body)
	}
	if got := lines(); len(got) != 0 {
		t.Fatalf("a rejection within a second of the last one logged %q", got)
	}
	rec.appendErr = nil
	rec.commitErr = errors.New("disk on fire")
	assertCode(t, postSeries(t, h, 1, nodePayload(1, 1, testNow)), http.StatusInternalServerError, "disk on fire")
	got = lines()
	if len(got) != 1 || !strings.Contains(got[0], `level=ERROR msg="remote write: request failed" version=1.0 code=500`) ||
		!strings.Contains(got[0], "disk on fire") {
		t.Fatalf("a failed remote write logged %q, want one error", got)
	}
	// A second later an OTLP rejection is logged, with the two left out.
	h.now = func() time.Time { return time.UnixMilli(testNow).Add(logInterval) }
	rec.commitErr = nil
	rec.appendErr = func(lset labels.Labels, _ int64) error {
		if lset.Get("__name__") == "temperature_celsius" {
			return storage.ErrOutOfOrderSample
		}
		return nil
	}
	post(t, oh, ContentTypeOTLPProto, "", otlpProto(t, otlpPayload(testNow)))
	got = lines()
	if len(got) != 1 || !strings.Contains(got[0], `level=WARN msg="otlp: request partially rejected" code=200`) ||
		!strings.Contains(got[0], "out of order") || !strings.Contains(got[0], "rejected_since_last_line=2") {
		t.Fatalf("an OTLP partial success logged %q, want one warning with its message", got)
	}
}

// lockedWriter serializes writes to w.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
