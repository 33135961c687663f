package remotewrite

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/prometheus/model/exemplar"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/metadata"
	"github.com/prometheus/prometheus/prompb"
	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"
	"github.com/prometheus/prometheus/storage"
	"go.opentelemetry.io/collector/pdata/pmetric"
)

// resolvingRecorder is a recorder whose appenders are SeriesResolvers: they
// hand out refs of their own from ResolveSeries and check that the handler
// passes each one back only with its label set.
type resolvingRecorder struct {
	*recorder
	calls    int
	resolved []string // label sets given to ResolveSeries, in order
	firstT   map[string]int64
}

// resolvedBase offsets the refs ResolveSeries gives from those Append gives.
const resolvedBase = 1 << 30

type resolvingAppender struct {
	*recAppender
	rr   *resolvingRecorder
	refs []string // ResolveSeries ref resolvedBase+i+1 is refs[i]
}

func (r *resolvingRecorder) Appender(ctx context.Context) Appender {
	return &resolvingAppender{recAppender: r.recorder.Appender(ctx).(*recAppender), rr: r}
}

func (a *resolvingAppender) ResolveSeries(lsets []labels.Labels, ts []int64, refs []SeriesRef) {
	a.rr.calls++
	for i, lset := range lsets {
		key := lset.String()
		a.rr.resolved = append(a.rr.resolved, key)
		a.rr.firstT[key] = ts[i]
		a.refs = append(a.refs, key)
		refs[i] = SeriesRef(resolvedBase + len(a.refs))
	}
}

// check takes a ref from ResolveSeries out of the way of recAppender's own
// check, after checking it.
func (a *resolvingAppender) check(ref SeriesRef, lset labels.Labels) SeriesRef {
	if ref <= resolvedBase {
		return ref
	}
	if i := int(ref - resolvedBase - 1); i >= len(a.refs) || a.refs[i] != lset.String() {
		a.r.mu.Lock()
		a.r.refErrors = append(a.r.refErrors, fmt.Sprintf("resolved ref %d passed for %s", ref, lset))
		a.r.mu.Unlock()
	}
	return 0
}

func (a *resolvingAppender) Append(ref SeriesRef, lset labels.Labels, st, t int64, v float64) (SeriesRef, error) {
	return a.recAppender.Append(a.check(ref, lset), lset, st, t, v)
}

func (a *resolvingAppender) AppendHistogram(ref SeriesRef, lset labels.Labels, st, t int64, h *histogram.Histogram, fh *histogram.FloatHistogram) (SeriesRef, error) {
	return a.recAppender.AppendHistogram(a.check(ref, lset), lset, st, t, h, fh)
}

func (a *resolvingAppender) AppendExemplar(ref SeriesRef, lset labels.Labels, e exemplar.Exemplar) (SeriesRef, error) {
	return a.recAppender.AppendExemplar(a.check(ref, lset), lset, e)
}

func (a *resolvingAppender) UpdateMetadata(ref SeriesRef, lset labels.Labels, m metadata.Metadata) (SeriesRef, error) {
	return a.recAppender.UpdateMetadata(a.check(ref, lset), lset, m)
}

// TestResolveSeries sends requests of more series than one batch, valid and
// invalid series mixed, to an Appender that resolves series: every valid
// series is looked up once, by its first sample's time, its ref comes back
// with its samples only, and the rejections read as they do without
// batches.
func TestResolveSeries(t *testing.T) {
	const n = 2*seriesBatch + 17
	bad := []prompb.Label{{Name: "__name__", Value: "m"}, {Name: "a", Value: "\xff"}}
	badAt := []int{0, 5, seriesBatch, seriesBatch + 1, n}
	for _, version := range []int{1, 2} {
		t.Run(fmt.Sprintf("version=%d", version), func(t *testing.T) {
			good := nodePayload(n, 3, testNow)
			rr := &resolvingRecorder{recorder: newRecorder(), firstT: map[string]int64{}}
			plain := newRecorder()
			var body []byte
			if version == 1 {
				req := toV1(good)
				for i, at := range badAt {
					ts := prompb.TimeSeries{Labels: bad, Samples: []prompb.Sample{{Value: float64(i), Timestamp: testNow}}}
					req.Timeseries = slices.Insert(req.Timeseries, at, ts)
				}
				body = encode(t, req)
			} else {
				req := toV2(good)
				refs := []uint32{symbolize(req, bad[0].Name), symbolize(req, bad[0].Value), symbolize(req, bad[1].Name), symbolize(req, bad[1].Value)}
				for i, at := range badAt {
					ts := writev2.TimeSeries{LabelsRefs: refs, Samples: []writev2.Sample{{Value: float64(i), Timestamp: testNow}}}
					req.Timeseries = slices.Insert(req.Timeseries, at, ts)
				}
				body = encode(t, req)
			}
			var msgs [2]string
			for i, app := range []Appendable{rr, plain} {
				h, _ := newTestHandler(t, app, nil)
				resp := post(t, h, contentType(version), "snappy", body)
				msgs[i] = assertCode(t, resp, http.StatusBadRequest, "not valid UTF-8")
				if got := testutil.ToFloat64(h.m.rejected[kindSamples].WithLabelValues("invalid_labels")); got != float64(len(badAt)) {
					t.Fatalf("rejected{reason=invalid_labels} = %v, want %d", got, len(badAt))
				}
			}
			if msgs[0] != msgs[1] {
				t.Fatalf("response with batches resolved:\n%s\nwithout:\n%s", msgs[0], msgs[1])
			}
			assertSeries(t, good, rr.all())
			if len(rr.refErrors) > 0 {
				t.Fatalf("ref contract violated: %v", rr.refErrors)
			}
			if want := (n + len(badAt) + seriesBatch - 1) / seriesBatch; rr.calls != want {
				t.Fatalf("ResolveSeries called %d times, want %d", rr.calls, want)
			}
			if len(rr.resolved) != n {
				t.Fatalf("%d series resolved, want %d", len(rr.resolved), n)
			}
			for i, s := range good {
				if key := s.Labels.String(); rr.resolved[i] != key || rr.firstT[key] != s.Samples[0].T {
					t.Fatalf("series %d: resolved %s at %d, want %s at %d", i, rr.resolved[i], rr.firstT[key], key, s.Samples[0].T)
				}
			}
			if strings.Count(msgs[0], "not valid UTF-8") != len(badAt) {
				t.Fatalf("response names %d invalid series, want %d:\n%s", strings.Count(msgs[0], "not valid UTF-8"), len(badAt), msgs[0])
			}
		})
	}
}

// TestOTLPResolveSeries sends an OTLP request of more float points than one
// batch, with points that carry exemplars, histograms and points the
// storage refuses as bad data among them, to an Appender that resolves
// series and to one that does not: what is stored, the response and the
// rejected counters are the same, and every resolved ref comes back with
// its own labels only. A storage failure in the middle of a batch rolls the
// request back in both.
func TestOTLPResolveSeries(t *testing.T) {
	const n = 3*seriesBatch + 7
	md := pmetric.NewMetrics()
	rm := md.ResourceMetrics().AppendEmpty()
	rm.Resource().Attributes().PutStr("service.name", "resolve")
	ms := rm.ScopeMetrics().AppendEmpty().Metrics()
	sum := ms.AppendEmpty()
	sum.SetName("requests")
	s := sum.SetEmptySum()
	s.SetIsMonotonic(true)
	s.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
	for i := range n {
		dp := s.DataPoints().AppendEmpty()
		dp.SetTimestamp(otlpTS(testNow - int64(i%3)*1000))
		dp.SetStartTimestamp(otlpTS(testNow - 60_000))
		dp.SetDoubleValue(float64(i))
		dp.Attributes().PutStr("point", strconv.Itoa(i%(n-20))) // the last 20 repeat earlier series
		if i%50 == 7 {
			ex := dp.Exemplars().AppendEmpty()
			ex.SetTimestamp(otlpTS(testNow - 500))
			ex.SetDoubleValue(float64(i))
			ex.FilteredAttributes().PutStr("trace_id", "t"+strconv.Itoa(i))
		}
	}
	hist := ms.AppendEmpty()
	hist.SetName("latency")
	eh := hist.SetEmptyExponentialHistogram()
	eh.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
	for i := range 3 {
		dp := eh.DataPoints().AppendEmpty()
		dp.SetTimestamp(otlpTS(testNow))
		dp.SetScale(0)
		dp.SetCount(2)
		dp.SetSum(3)
		dp.Positive().SetOffset(0)
		dp.Positive().BucketCounts().FromRaw([]uint64{1, 1})
		dp.Attributes().PutStr("point", strconv.Itoa(i))
	}
	gauge := ms.AppendEmpty()
	gauge.SetName("temperature")
	g := gauge.SetEmptyGauge()
	for i := range seriesBatch / 2 {
		dp := g.DataPoints().AppendEmpty()
		dp.SetTimestamp(otlpTS(testNow))
		dp.SetDoubleValue(float64(i) / 4)
		dp.Attributes().PutStr("room", strconv.Itoa(i))
	}
	body := otlpProto(t, md)
	refuse := func(lset labels.Labels, _ int64) error {
		p := lset.Get("point")
		if p == "5" || p == strconv.Itoa(seriesBatch) || p == strconv.Itoa(2*seriesBatch+1) {
			return storage.ErrOutOfOrderSample
		}
		return nil
	}

	// post returns the status, the body, the samples rejected as out of
	// order and the float samples and histograms received.
	post := func(app Appendable) (int, string, float64, [2]float64) {
		oh, h := newOTLPHandler(t, app, nil, nil)
		req := httptest.NewRequest(http.MethodPost, OTLPPath, bytes.NewReader(body))
		req.Header.Set("Content-Type", ContentTypeOTLPProto)
		w := httptest.NewRecorder()
		oh.ServeHTTP(w, req)
		received := [2]float64{testutil.ToFloat64(h.m.received[kindSamples]), testutil.ToFloat64(h.m.received[kindHistograms])}
		return w.Code, w.Body.String(), testutil.ToFloat64(h.m.rejected[kindSamples].WithLabelValues("out_of_order")), received
	}

	rr := &resolvingRecorder{recorder: newRecorder(), firstT: map[string]int64{}}
	plain := newRecorder()
	rr.appendErr, plain.appendErr = refuse, refuse
	code1, msg1, rej1, recv1 := post(rr)
	code2, msg2, rej2, recv2 := post(plain)
	if code1 != http.StatusOK || code1 != code2 || msg1 != msg2 || rej1 != rej2 || recv1 != recv2 {
		t.Fatalf("with series resolved: %d %q, %v rejected; without: %d %q, %v rejected", code1, msg1, rej1, code2, msg2, rej2)
	}
	// Every float point of the sum and the gauge; a histogram point each.
	if want := [2]float64{n + seriesBatch/2, 3}; recv1 != want {
		t.Fatalf("received counters %v, want %v", recv1, want)
	}
	// Point 5 has a twin among the last 20 points; the others do not.
	if rej1 != 4 {
		t.Fatalf("%v samples rejected as out of order, want 4", rej1)
	}
	got, want := rr.all(), plain.all()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("stored with series resolved:\n%v\nwithout:\n%v", got, want)
	}
	if samples, hists, exemplars := plain.counts(); samples == 0 || hists != 3 || exemplars == 0 {
		t.Fatalf("stored %d samples, %d histograms, %d exemplars", samples, hists, exemplars)
	}
	if len(rr.refErrors) > 0 {
		t.Fatalf("ref contract violated: %v", rr.refErrors)
	}
	if rr.calls < n/seriesBatch {
		t.Fatalf("ResolveSeries called %d times for %d float points", rr.calls, n)
	}

	// A failure that is not bad data, in the second batch: nothing stays.
	fail := func(lset labels.Labels, _ int64) error {
		if lset.Get("point") == strconv.Itoa(seriesBatch+3) {
			return errors.New("disk on fire")
		}
		return nil
	}
	rr = &resolvingRecorder{recorder: newRecorder(), firstT: map[string]int64{}}
	plain = newRecorder()
	rr.appendErr, plain.appendErr = fail, fail
	code1, msg1, _, _ = post(rr)
	code2, msg2, _, _ = post(plain)
	if code1 < 500 || code1 != code2 || msg1 != msg2 {
		t.Fatalf("with series resolved: %d %q; without: %d %q", code1, msg1, code2, msg2)
	}
	if len(rr.all()) != 0 || len(plain.all()) != 0 || rr.rollbacks != 1 {
		t.Fatalf("after a failed request: %d and %d series stored, %d rollbacks", len(rr.all()), len(plain.all()), rr.rollbacks)
	}
}
