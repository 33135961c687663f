package remotewrite

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/golang/snappy"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/exemplar"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/metadata"
)

// recSample is a float sample as the recorder kept it.
type recSample struct {
	ST, T int64
	V     float64
}

type recHist struct {
	ST, T int64
	H     *histogram.Histogram
	FH    *histogram.FloatHistogram
}

// recSeries is what the recorder kept of one series, copied out of the
// handler's buffers.
type recSeries struct {
	Labels    labels.Labels
	Samples   []recSample
	Hists     []recHist
	Exemplars []exemplar.Exemplar
	Meta      metadata.Metadata
}

// recorder is an Appendable that keeps what it receives, committed, for
// comparison with what a sender sent. Its fault hooks make the appender
// return errors.
type recorder struct {
	mu        sync.Mutex
	series    map[string]*recSeries
	family    map[string]metadata.Metadata
	commits   int
	rollbacks int
	refErrors []string // violations of the ref contract

	appendErr    func(lset labels.Labels, t int64) error // nil: accept
	exemplarErr  func(e exemplar.Exemplar) error
	commitErr    error
	onAppendable func() // called by Appender(), e.g. to block
}

func newRecorder() *recorder {
	return &recorder{series: map[string]*recSeries{}, family: map[string]metadata.Metadata{}}
}

func (r *recorder) Appender(context.Context) Appender {
	if r.onAppendable != nil {
		r.onAppendable()
	}
	return &recAppender{r: r, pending: map[string]*recSeries{}}
}

// get returns a copy of the committed series with the given labels.
func (r *recorder) get(lset labels.Labels) *recSeries {
	for _, s := range r.all() {
		if labels.Equal(s.Labels, lset) {
			return s
		}
	}
	return nil
}

func (r *recorder) all() []*recSeries {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*recSeries, 0, len(r.series))
	for _, s := range r.series {
		c := *s // a snapshot: later commits append to s
		c.Samples = slices.Clone(s.Samples)
		c.Hists = slices.Clone(s.Hists)
		c.Exemplars = slices.Clone(s.Exemplars)
		out = append(out, &c)
	}
	slices.SortFunc(out, func(a, b *recSeries) int { return labels.Compare(a.Labels, b.Labels) })
	return out
}

func (r *recorder) counts() (samples, hists, exemplars int) {
	for _, s := range r.all() {
		samples += len(s.Samples)
		hists += len(s.Hists)
		exemplars += len(s.Exemplars)
	}
	return
}

type recAppender struct {
	r       *recorder
	pending map[string]*recSeries
	byRef   []string
	family  map[string]metadata.Metadata
	done    bool
}

func (a *recAppender) entry(ref SeriesRef, lset labels.Labels) (*recSeries, SeriesRef) {
	key := lset.String()
	if ref != 0 {
		if int(ref) > len(a.byRef) || a.byRef[ref-1] != key {
			a.r.mu.Lock()
			a.r.refErrors = append(a.r.refErrors, fmt.Sprintf("ref %d passed for %s", ref, key))
			a.r.mu.Unlock()
		}
	}
	s, ok := a.pending[key]
	if !ok {
		s = &recSeries{Labels: lset.Copy()}
		a.pending[key] = s
		a.byRef = append(a.byRef, key)
		return s, SeriesRef(len(a.byRef))
	}
	return s, SeriesRef(slices.Index(a.byRef, key) + 1)
}

func (a *recAppender) Append(ref SeriesRef, lset labels.Labels, st, t int64, v float64) (SeriesRef, error) {
	if a.r.appendErr != nil {
		if err := a.r.appendErr(lset, t); err != nil {
			return 0, err
		}
	}
	s, ref := a.entry(ref, lset)
	s.Samples = append(s.Samples, recSample{ST: st, T: t, V: v})
	return ref, nil
}

func (a *recAppender) AppendHistogram(ref SeriesRef, lset labels.Labels, st, t int64, h *histogram.Histogram, fh *histogram.FloatHistogram) (SeriesRef, error) {
	if a.r.appendErr != nil {
		if err := a.r.appendErr(lset, t); err != nil {
			return 0, err
		}
	}
	s, ref := a.entry(ref, lset)
	rh := recHist{ST: st, T: t}
	if h != nil {
		rh.H = h.Copy()
	}
	if fh != nil {
		rh.FH = fh.Copy()
	}
	s.Hists = append(s.Hists, rh)
	return ref, nil
}

func (a *recAppender) AppendExemplar(ref SeriesRef, lset labels.Labels, e exemplar.Exemplar) (SeriesRef, error) {
	if a.r.exemplarErr != nil {
		if err := a.r.exemplarErr(e); err != nil {
			return 0, err
		}
	}
	s, ref := a.entry(ref, lset)
	e.Labels = e.Labels.Copy()
	s.Exemplars = append(s.Exemplars, e)
	return ref, nil
}

func (a *recAppender) UpdateMetadata(ref SeriesRef, lset labels.Labels, m metadata.Metadata) (SeriesRef, error) {
	if m.IsEmpty() {
		return ref, nil
	}
	m = metadata.Metadata{Type: m.Type, Help: string([]byte(m.Help)), Unit: string([]byte(m.Unit))}
	if a.family == nil {
		a.family = map[string]metadata.Metadata{}
	}
	a.family[strings.Clone(lset.Get(model.MetricNameLabel))] = m
	s, ref := a.entry(ref, lset)
	s.Meta = m
	return ref, nil
}

func (a *recAppender) Commit() error {
	if a.done {
		return fmt.Errorf("commit after done")
	}
	a.done = true
	if a.r.commitErr != nil {
		return a.r.commitErr
	}
	a.r.mu.Lock()
	defer a.r.mu.Unlock()
	a.r.commits++
	for k, p := range a.pending {
		if len(p.Samples)+len(p.Hists)+len(p.Exemplars) == 0 {
			continue
		}
		s, ok := a.r.series[k]
		if !ok {
			s = &recSeries{Labels: p.Labels}
			a.r.series[k] = s
		}
		s.Samples = append(s.Samples, p.Samples...)
		s.Hists = append(s.Hists, p.Hists...)
		s.Exemplars = append(s.Exemplars, p.Exemplars...)
		if !p.Meta.IsEmpty() {
			s.Meta = p.Meta
		}
	}
	for k, m := range a.family {
		a.r.family[k] = m
	}
	return nil
}

func (a *recAppender) Rollback() error {
	if a.done {
		return fmt.Errorf("rollback after done")
	}
	a.done = true
	a.r.mu.Lock()
	a.r.rollbacks++
	a.r.mu.Unlock()
	return nil
}

// marshal encodes a 1.0 or 2.0 request.
func marshal(t testing.TB, req interface{ Marshal() ([]byte, error) }) []byte {
	t.Helper()
	b, err := req.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// encode marshals and snappy-compresses a 1.0 or 2.0 request.
func encode(t testing.TB, req interface{ Marshal() ([]byte, error) }) []byte {
	t.Helper()
	return snappy.Encode(nil, marshal(t, req))
}

// post sends body to h in-process and returns the response.
func post(t testing.TB, h http.Handler, contentType, encoding string, body []byte) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/api/v1/write", bytesReader(body))
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if encoding != "" {
		req.Header.Set("Content-Encoding", encoding)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}
