package promql

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/util/httputil"
	"google.golang.org/protobuf/proto"

	"github.com/shaledb/shale/internal/httpcompress"
)

// FederatePath is where the federation endpoint is mounted.
const FederatePath = "/federate"

// errNoMatch answers a federation request without a selector. Prometheus
// answers it with 200 and an empty body, which a scraper takes for a healthy
// target without series: a misconfigured federation job would look fine.
var errNoMatch = errors.New("no match[] parameter: give at least one series selector, e.g. match[]={job=\"node\"}")

// federated is the latest sample of one series, as /federate exposes it.
type federated struct {
	lset labels.Labels
	t    int64
	f    float64
	fh   *histogram.FloatHistogram // nil: a float sample
}

// kind orders the families of one metric name: floats, then counter
// histograms, then gauge histograms. Each kind is its own family.
func (s *federated) kind() int {
	switch {
	case s.fh == nil:
		return 0
	case s.fh.CounterResetHint == histogram.GaugeType:
		return 2
	}
	return 1
}

// federate serves GET /federate as Prometheus does: for the union of the
// series matched by the match[] selectors, the latest sample of each within
// the lookback delta before now, in the exposition format the client
// accepts, grouped by metric name. A series whose latest sample is a stale
// marker is left out.
func (a *API) federate(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, fmt.Sprintf("error parsing form values: %v", err), http.StatusBadRequest)
		return
	}
	selectors := r.Form["match[]"]
	if len(selectors) == 0 {
		http.Error(w, errNoMatch.Error(), http.StatusBadRequest)
		return
	}
	matcherSets, err := a.parser.ParseMetricSelectors(selectors)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}

	now := a.now()
	maxt := now.UnixMilli()
	mint := now.Add(-a.opts.LookbackDelta).UnixMilli()
	ctx, cancel := context.WithTimeout(r.Context(), a.opts.QueryTimeout)
	defer cancel()
	samples, err := a.latestSamples(ctx, mint, maxt, matcherSets)
	if err != nil {
		a.federationErrors.Inc()
		a.logger.Error("federation failed", "err", err)
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}

	format := expfmt.NegotiateAccept(r.Header,
		expfmt.NewFormat(expfmt.TypeProtoDelim),
		expfmt.NewFormat(expfmt.TypeProtoText),
		expfmt.NewFormat(expfmt.TypeProtoCompact),
		expfmt.NewFormat(expfmt.TypeTextPlain))
	w.Header().Set("Content-Type", string(format))
	if err := encodeFederated(expfmt.NewEncoder(w, format), format.FormatType(), samples); err != nil {
		// Part of the answer may be out: the status cannot change now.
		a.federationErrors.Inc()
		a.logger.Error("federation failed", "err", err)
	}
}

// latestSamples returns the latest sample in [mint, maxt] of every series
// matched by any of the matcher sets, each series once, ordered by metric
// name, kind and labels. Series whose latest sample is a stale marker are
// left out.
func (a *API) latestSamples(ctx context.Context, mint, maxt int64, matcherSets [][]*labels.Matcher) ([]federated, error) {
	q, err := a.comps.Queryable.Querier(mint, maxt)
	if err != nil {
		return nil, fmt.Errorf("open querier over [%d, %d]: %w", mint, maxt, err)
	}
	defer q.Close()

	hints := &storage.SelectHints{Start: mint, End: maxt}
	sets := make([]storage.SeriesSet, 0, len(matcherSets))
	for _, ms := range matcherSets {
		sets = append(sets, q.Select(ctx, true, hints, ms...))
	}
	set := storage.NewMergeSeriesSet(sets, 0, storage.ChainedSeriesMerge)

	var (
		out []federated
		it  chunkenc.Iterator
		buf *histogram.FloatHistogram // the latest histogram read of the current series
	)
	for set.Next() {
		series := set.At()
		it = series.Iterator(it)
		s := federated{t: mint - 1}
		isHist := false
		for vt := it.Next(); vt != chunkenc.ValNone; vt = it.Next() {
			t := it.AtT()
			if t < mint {
				continue
			}
			if t > maxt {
				break
			}
			switch vt {
			case chunkenc.ValFloat:
				s.t, s.f = it.At()
				isHist = false
			case chunkenc.ValHistogram, chunkenc.ValFloatHistogram:
				s.t, buf = it.AtFloatHistogram(buf)
				isHist = true
			}
		}
		if err := it.Err(); err != nil {
			return nil, fmt.Errorf("read series %s: %w", series.Labels(), err)
		}
		if s.t < mint {
			continue // no sample within the lookback delta
		}
		if isHist {
			s.fh, buf = buf, nil
		}
		// The exposition formats have no stale markers. A federating
		// server ends the series by itself once it no longer sees it.
		if value.IsStaleNaN(s.f) || (s.fh != nil && value.IsStaleNaN(s.fh.Sum)) {
			continue
		}
		s.lset = series.Labels()
		out = append(out, s)
	}
	if err := set.Err(); err != nil {
		return nil, fmt.Errorf("select series: %w", err)
	}
	if ws := set.Warnings(); len(ws) > 0 {
		a.logger.Debug("federation select returned warnings", "warnings", ws)
		a.federationWarnings.Add(float64(len(ws)))
	}
	// Stable: within a family the series keep the merged set's label order.
	slices.SortStableFunc(out, func(x, y federated) int {
		return cmp.Or(
			cmp.Compare(x.lset.Get(model.MetricNameLabel), y.lset.Get(model.MetricNameLabel)),
			cmp.Compare(x.kind(), y.kind()))
	})
	return out, nil
}

// encodeFederated writes one metric family per run of samples with the same
// metric name and kind. Floats are untyped, as Prometheus federates them
// whatever their metadata. Native histograms with exponential buckets exist
// only in the protobuf formats and are left out of the others; those with
// custom buckets become classic histograms in every format.
func encodeFederated(enc expfmt.Encoder, formatType expfmt.FormatType, samples []federated) error {
	protobuf := formatType == expfmt.TypeProtoDelim || formatType == expfmt.TypeProtoText || formatType == expfmt.TypeProtoCompact
	var (
		fam      *dto.MetricFamily
		lastName string
		lastKind = -1
	)
	for i := range samples {
		s := &samples[i]
		if s.fh != nil && !s.fh.UsesCustomBuckets() && !protobuf {
			continue
		}
		name := s.lset.Get(model.MetricNameLabel)
		if name == "" {
			continue // a storage never returns one; nothing could name its family
		}
		if fam == nil || name != lastName || s.kind() != lastKind {
			if fam != nil {
				if err := enc.Encode(fam); err != nil {
					return fmt.Errorf("encode family %s: %w", lastName, err)
				}
			}
			fam = &dto.MetricFamily{Name: proto.String(name), Type: familyType(s).Enum()}
			lastName, lastKind = name, s.kind()
		}
		fam.Metric = append(fam.Metric, federatedMetric(s))
	}
	if fam != nil {
		if err := enc.Encode(fam); err != nil {
			return fmt.Errorf("encode family %s: %w", lastName, err)
		}
	}
	return nil
}

func familyType(s *federated) dto.MetricType {
	switch s.kind() {
	case 1:
		return dto.MetricType_HISTOGRAM
	case 2:
		return dto.MetricType_GAUGE_HISTOGRAM
	}
	return dto.MetricType_UNTYPED
}

// federatedMetric is one series' sample with its labels but the name. A
// series without an instance label gets instance="", as Prometheus sends
// it: a scraper with honor_labels then keeps the series without one
// instead of adding the federation target's.
func federatedMetric(s *federated) *dto.Metric {
	m := &dto.Metric{TimestampMs: proto.Int64(s.t)}
	hasInstance := false
	s.lset.Range(func(l labels.Label) {
		if l.Value == "" || l.Name == model.MetricNameLabel {
			return
		}
		hasInstance = hasInstance || l.Name == model.InstanceLabel
		m.Label = append(m.Label, &dto.LabelPair{Name: proto.String(l.Name), Value: proto.String(l.Value)})
	})
	if !hasInstance {
		m.Label = append(m.Label, &dto.LabelPair{Name: proto.String(model.InstanceLabel), Value: proto.String("")})
	}
	switch {
	case s.fh == nil:
		m.Untyped = &dto.Untyped{Value: proto.Float64(s.f)}
	case s.fh.UsesCustomBuckets():
		m.Histogram = classicHistogram(s.fh)
	default:
		m.Histogram = nativeHistogram(s.fh)
	}
	return m
}

// nativeHistogram is a histogram with exponential buckets in the protobuf
// exposition's fields.
func nativeHistogram(h *histogram.FloatHistogram) *dto.Histogram {
	return &dto.Histogram{
		SampleCountFloat: proto.Float64(h.Count),
		SampleSum:        proto.Float64(h.Sum),
		Schema:           proto.Int32(h.Schema),
		ZeroThreshold:    proto.Float64(h.ZeroThreshold),
		ZeroCountFloat:   proto.Float64(h.ZeroCount),
		PositiveSpan:     bucketSpans(h.PositiveSpans),
		PositiveCount:    h.PositiveBuckets,
		NegativeSpan:     bucketSpans(h.NegativeSpans),
		NegativeCount:    h.NegativeBuckets,
	}
}

func bucketSpans(spans []histogram.Span) []*dto.BucketSpan {
	if len(spans) == 0 {
		return nil
	}
	out := make([]*dto.BucketSpan, len(spans))
	for i, sp := range spans {
		out[i] = &dto.BucketSpan{Offset: proto.Int32(sp.Offset), Length: proto.Uint32(sp.Length)}
	}
	return out
}

// classicHistogram turns a histogram with custom buckets into cumulative
// buckets. The +Inf bucket is left to the encoder: the protobuf format does
// not need it and the text encoder adds it.
func classicHistogram(h *histogram.FloatHistogram) *dto.Histogram {
	out := &dto.Histogram{
		SampleCountFloat: proto.Float64(h.Count),
		SampleSum:        proto.Float64(h.Sum),
		Bucket:           make([]*dto.Bucket, len(h.CustomValues)),
	}
	var cumulative float64
	it := h.PositiveBucketIterator()
	more := it.Next()
	for i, le := range h.CustomValues {
		for more && int(it.At().Index) < i {
			more = it.Next()
		}
		if more && int(it.At().Index) == i {
			cumulative += it.At().Count
		}
		out.Bucket[i] = &dto.Bucket{UpperBound: proto.Float64(le), CumulativeCountFloat: proto.Float64(cumulative)}
	}
	return out
}

// federateHandler wraps federate as Prometheus mounts it: readiness and
// compression, and Shale's request metrics under handler="/federate".
func (a *API) federateHandler() http.HandlerFunc {
	h := a.ready(httpcompress.HandlerFunc(a.federate))
	return func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		h(sw, r.WithContext(httputil.ContextWithPath(r.Context(), FederatePath)))
		a.requests.WithLabelValues(FederatePath, strconv.Itoa(sw.code)).Inc()
		a.duration.WithLabelValues(FederatePath).Observe(time.Since(start).Seconds())
	}
}
