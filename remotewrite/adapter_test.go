package remotewrite

import (
	"context"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/exemplar"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/metadata"
	"github.com/prometheus/prometheus/storage"
)

// upstreamCall is one call an upstream AppenderV2 received.
type upstreamCall struct {
	Labels    string
	ST, T     int64
	V         float64
	Hist      bool
	Meta      metadata.Metadata
	Family    string
	Exemplars []float64 // values
}

// upstreamStore implements storage.AppendableV2 and ExemplarAppenderV2.
type upstreamStore struct {
	calls     []upstreamCall
	committed bool
}

func (s *upstreamStore) AppenderV2(context.Context) storage.AppenderV2 { return &upstreamApp{s: s} }

type upstreamApp struct{ s *upstreamStore }

func (a *upstreamApp) Append(ref storage.SeriesRef, ls labels.Labels, st, t int64, v float64, h *histogram.Histogram, fh *histogram.FloatHistogram, opts storage.AOptions) (storage.SeriesRef, error) {
	// Keeps opts as given: upstream allows it.
	a.s.calls = append(a.s.calls, upstreamCall{Labels: ls.String(), ST: st, T: t, V: v, Hist: h != nil || fh != nil,
		Meta: opts.Metadata, Family: opts.MetricFamilyName})
	return 7, nil
}

func (a *upstreamApp) AppendExemplars(ref storage.SeriesRef, ls labels.Labels, es []exemplar.Exemplar) (storage.SeriesRef, error) {
	if es[0].Value < 0 {
		return ref, &storage.AppendPartialError{ExemplarErrors: []storage.ExemplarError{{Index: 0, Err: storage.ErrOutOfOrderExemplar}}}
	}
	c := upstreamCall{Labels: ls.String()}
	for _, e := range es {
		c.Exemplars = append(c.Exemplars, e.Value)
	}
	a.s.calls = append(a.s.calls, c)
	return ref, nil
}

func (a *upstreamApp) Commit() error   { a.s.committed = true; return nil }
func (a *upstreamApp) Rollback() error { return nil }

func TestFromAppendableV2(t *testing.T) {
	store := &upstreamStore{}
	h, _ := newTestHandler(t, FromAppendableV2(store), nil)
	counter := metadata.Metadata{Type: model.MetricTypeCounter, Help: "Requests."}
	sent := []recSeries{
		{
			Labels:    labels.FromStrings("__name__", "a"),
			Samples:   []recSample{{ST: 5, T: testNow, V: 1}, {ST: 5, T: testNow + 1, V: 2}},
			Meta:      counter,
			Exemplars: []exemplar.Exemplar{{Labels: labels.FromStrings("trace_id", "t"), Value: 0.5, Ts: testNow, HasTs: true}, {Labels: labels.FromStrings("trace_id", "u"), Value: -1, Ts: testNow + 1, HasTs: true}},
		},
		{Labels: labels.FromStrings("__name__", "b"), Samples: []recSample{{T: testNow, V: 3}}}, // no metadata
		{Labels: labels.FromStrings("__name__", "c"), Hists: []recHist{{ST: 9, T: testNow, H: intHistogram(0)}}},
	}
	resp := postSeries(t, h, 2, sent)
	assertCode(t, resp, http.StatusNoContent, "")
	assertWritten(t, resp.Header(), 3, 1, 1)
	none := metadata.Metadata{}
	want := []upstreamCall{
		{Labels: `{__name__="a"}`, ST: 5, T: testNow, V: 1, Meta: counter, Family: "a"},
		{Labels: `{__name__="a"}`, ST: 5, T: testNow + 1, V: 2, Meta: counter, Family: "a"},
		{Labels: `{__name__="a"}`, Exemplars: []float64{0.5}},
		{Labels: `{__name__="b"}`, T: testNow, V: 3, Meta: none},
		{Labels: `{__name__="c"}`, ST: 9, T: testNow, Hist: true, Meta: none},
	}
	// Another request reuses the handler's buffers; what the upstream
	// appender kept must not change.
	other := []recSeries{{Labels: labels.FromStrings("__name__", "zzz"), Samples: []recSample{{T: testNow, V: 1}},
		Meta: metadata.Metadata{Type: model.MetricTypeGauge, Help: "Something else entirely."}}}
	assertCode(t, postSeries(t, h, 2, other), http.StatusNoContent, "")
	if diff := cmp.Diff(want, store.calls[:len(want)]); diff != "" {
		t.Fatalf("upstream appender calls differ:\n%s", diff)
	}
	if !store.committed {
		t.Fatal("not committed")
	}
	if got := testutil.ToFloat64(h.m.rejected[kindExemplars].WithLabelValues("out_of_order")); got != 1 {
		t.Fatalf("out_of_order exemplars %v, want 1 (from the AppendPartialError)", got)
	}
}
