package remotewrite

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"mime"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/exemplar"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/metadata"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/shaledb/shale/internal/extralabel"
)

// OTLPPath is where Prometheus serves the OTLP/HTTP metrics receiver.
const OTLPPath = "/api/v1/otlp/v1/metrics"

// Content types of OTLP/HTTP.
const (
	ContentTypeOTLPProto = "application/x-protobuf"
	ContentTypeOTLPJSON  = "application/json"
)

// OTLPHandler serves POST /api/v1/otlp/v1/metrics: OTLP/HTTP metrics
// (ExportMetricsServiceRequest in protobuf or JSON, optionally gzipped),
// translated to Prometheus series as Prometheus 3 translates them, and
// appended through the Handler's Appendable with its validation, limits,
// metrics and commit. It is safe for concurrent use.
type OTLPHandler struct {
	h           *Handler
	opts        OTLPOptions
	settings    *otlpSettings
	translators sync.Pool // *otlpTranslator
	requests    sync.Pool // *otlpMetrics
}

// OTLP returns the OTLP receiver that appends through h: it shares h's
// Appendable, limits (max_compressed_bytes and max_decompressed_bytes bound
// the body before and after gzip), requests in flight and metrics (the
// requests are counted with version="otlp").
func (h *Handler) OTLP(opts OTLPOptions) (*OTLPHandler, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	o := &OTLPHandler{h: h, opts: opts, settings: newOTLPSettings(opts)}
	o.translators.New = func() any { return newOTLPTranslator(o.settings) }
	o.requests.New = func() any { return &otlpMetrics{} }
	return o, nil
}

const otlpVersion = "otlp"

// otlpResult is the outcome of one OTLP request.
type otlpResult struct {
	result
	json bool // answer in JSON
	// rejected data points and their report, for a partial success.
	rejected int64
	report   string
}

func (o *OTLPHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	h := o.h
	h.m.inflight.Inc()
	defer h.m.inflight.Dec()

	res := o.serve(r)
	switch {
	case res.code == http.StatusOK:
		var body []byte
		if res.json {
			w.Header().Set("Content-Type", ContentTypeOTLPJSON)
			body = appendOTLPResponseJSON(nil, res.rejected, res.report)
		} else {
			w.Header().Set("Content-Type", ContentTypeOTLPProto)
			body = appendOTLPResponseProto(nil, res.rejected, res.report)
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(body)
	default:
		h.refuse(w, res.result)
	}
	h.count(otlpVersion, res.code, start)
}

func otlpFail(code int, format string, args ...any) otlpResult {
	return otlpResult{result: fail(code, format, args...)}
}

// serve handles one OTLP request.
func (o *OTLPHandler) serve(r *http.Request) (res otlpResult) {
	h := o.h
	defer func() {
		if p := recover(); p != nil {
			h.logger.Error("otlp: panic while handling request", "panic", p, "stack", string(debug.Stack()))
			res = otlpFail(http.StatusInternalServerError, "internal error")
		}
	}()
	if r.Method != http.MethodPost {
		return otlpFail(http.StatusMethodNotAllowed, "method %s not allowed, use POST", r.Method)
	}
	ct := r.Header.Get("Content-Type")
	isJSON, ok := otlpContentType(ct)
	if !ok {
		return otlpFail(http.StatusUnsupportedMediaType, "unsupported Content-Type %q: want %s or %s", ct, ContentTypeOTLPProto, ContentTypeOTLPJSON)
	}
	gzipped := false
	switch enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
	case "gzip":
		gzipped = true
	default:
		res = otlpFail(http.StatusUnsupportedMediaType, "unsupported Content-Encoding %q: only gzip or none is supported", enc)
		res.json = isJSON
		return res
	}
	extra, err := extraLabels(r)
	if err != nil {
		res = otlpFail(http.StatusBadRequest, "%v", err)
		res.json = isJSON
		return res
	}
	var a admission
	defer h.release(&a)
	if refused, ok := h.admit(r, &a); !ok {
		return otlpResult{result: refused}
	}
	st := a.st
	st.extra = extra

	md := o.requests.Get().(*otlpMetrics)
	defer func() {
		md.reset()
		md.trim(maxPooledElems)
		o.requests.Put(md)
	}()
	if res = o.decode(&a, md, isJSON, gzipped); res.code != 0 {
		return res
	}
	res = o.ingest(r, st, md, a.held.take())
	res.json = isJSON
	msg := res.msg
	if msg == "" {
		msg = res.report // a partial success's rejections
	}
	h.logOutcome(r, "otlp", 0, res.code, msg, res.code >= 400 || res.report != "")
	return res
}

// otlpContentType reports whether ct selects JSON or protobuf, and whether
// it is supported at all.
func otlpContentType(ct string) (isJSON, ok bool) {
	switch ct {
	case ContentTypeOTLPProto:
		return false, true
	case ContentTypeOTLPJSON:
		return true, true
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false, false
	}
	switch mt {
	case ContentTypeOTLPProto:
		return false, true
	case ContentTypeOTLPJSON:
		return true, true
	}
	return false, false
}

// decode decompresses and decodes the body read into st into md; on
// failure the result has a code.
func (o *OTLPHandler) decode(a *admission, md *otlpMetrics, isJSON, gzipped bool) otlpResult {
	opts := &o.h.opts
	st := a.st
	var err error
	raw := st.body
	if gzipped {
		if st.raw, err = gunzip(st.raw[:0], st.body, opts.MaxDecompressedBytes, o.h.counter(a)); err != nil {
			if errors.Is(err, errInflightBytes) {
				return otlpResult{result: o.h.overloadedBytes()}
			}
			if errors.Is(err, errBodyTooLarge) {
				return otlpFail(http.StatusRequestEntityTooLarge, "decompressed body exceeds max_decompressed_bytes=%d", opts.MaxDecompressedBytes)
			}
			return otlpFail(http.StatusBadRequest, "gzip: %v", err)
		}
		raw = st.raw
	} else if int64(len(raw)) > opts.MaxDecompressedBytes {
		return otlpFail(http.StatusRequestEntityTooLarge, "request body exceeds max_decompressed_bytes=%d", opts.MaxDecompressedBytes)
	}
	if err := decodeOTLP(md, raw, isJSON); err != nil {
		return otlpFail(http.StatusBadRequest, "%v", err)
	}
	return otlpResult{}
}

// decodeOTLP decodes an ExportMetricsServiceRequest into md. Its strings
// alias raw.
func decodeOTLP(md *otlpMetrics, raw []byte, isJSON bool) error {
	if isJSON {
		if err := decodeOTLPJSON(md, raw); err != nil {
			return fmt.Errorf("decode OTLP ExportMetricsServiceRequest (JSON): %w", err)
		}
	} else if err := decodeOTLPProto(md, raw); err != nil {
		return fmt.Errorf("decode OTLP ExportMetricsServiceRequest (protobuf): %w", err)
	}
	return nil
}

// gunzip decompresses src into dst (reusing its capacity), failing with
// errBodyTooLarge once more than limit bytes come out; count is readBody's.
func gunzip(dst, src []byte, limit int64, count func(int64) bool) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(src))
	if err != nil {
		return dst, err
	}
	defer zr.Close()
	return readBody(dst, zr, -1, limit, count)
}

// ingest translates md and appends it. Series and points that are invalid,
// or that the storage rejects as bad data, are skipped and reported (a
// partial success) while the rest is committed; overload and storage failures
// roll the whole request back (429, 503, 500), so a retry never duplicates.
func (o *OTLPHandler) ingest(r *http.Request, st *reqState, md *otlpMetrics, app Appender) otlpResult {
	h := o.h
	a := &otlpAppender{ledger: h.newLedger(st, false), knownUTF8: md.validUTF8}
	a.app = app
	a.resolver, _ = app.(SeriesResolver)
	a.refuseUntranslatable(md, o.opts.NativeDeltaIngestion)
	a.refuseOutOfRange(md, o.opts.LookbackDelta)

	tr := o.translators.Get().(*otlpTranslator)
	finished := false
	defer func() {
		if !finished { // a panic below: never leave an Appender open
			_ = a.app.Rollback()
		}
		o.translators.Put(tr)
	}()
	tr.warnOn = h.logger.Enabled(r.Context(), slog.LevelDebug)
	errs := tr.translate(r.Context(), md, a)
	_ = a.appendPoints() // the last batch; its error is a.fatal
	if len(tr.warnings) > 0 {
		h.logger.Debug("otlp: translation warnings", "warnings", tr.warnings)
	}
	if a.fatal == nil && len(errs) > 0 && r.Context().Err() != nil {
		a.fatal = r.Context().Err()
	}
	if a.fatal != nil {
		finished = true
		if rerr := a.app.Rollback(); rerr != nil {
			h.logger.Error("otlp: rollback failed", "err", rerr)
		}
		return otlpResult{result: a.fail("storage", a.fatal)}
	}
	a.translationErrors(errs)
	err := a.app.Commit()
	finished = true
	if err != nil {
		return otlpResult{result: a.fail("commit", err)}
	}
	return a.committed()
}

// otlpAppender is the sink the translator appends to: it checks what it is
// given as the remote-write receiver does (labels,
// limits, time window, histograms), appends it through an Appender, counts
// what was received, written and rejected, and keeps the first error that is
// not bad data, after which it appends nothing more.
type otlpAppender struct {
	ledger
	// fatal is the first error to roll the request back for.
	fatal error
	// family and meta are the metadata last given to the Appender.
	family string
	meta   metadata.Metadata
	// newest is the time of the newest sample appended in this request, by
	// series (label hash), kept for series whose points carry a start time.
	newest map[uint64]int64
	// resolver is app's SeriesResolver, if it has one: float points without
	// exemplars then wait in pts, their labels in st.slots, and are looked up
	// together (appendPoints) as remote write's series are.
	resolver SeriesResolver
	pts      []pendingPoint
	// knownUTF8: the decoder found every string of the request that labels
	// take valid UTF-8 (otlpMetrics.validUTF8), so labels skip the check.
	knownUTF8 bool
}

// pendingPoint is a float point waiting in otlpAppender.pts.
type pendingPoint struct {
	st, t int64
	v     float64
}

var _ otlpSink = (*otlpAppender)(nil)

// add checks and appends one sample (float, or native histogram h) with
// its exemplars and metadata. Bad data is counted and reported, and nil
// returned so that the translator goes on with the request.
func (a *otlpAppender) add(lbls []labels.Label, st, t int64, v float64, h *histogram.Histogram, exs []exemplar.Exemplar, family string, meta metadata.Metadata) error {
	k := kindSamples
	if h != nil {
		k = kindHistograms
	}
	a.count(k, len(exs))
	if a.fatal != nil {
		return a.fatal
	}
	s := a.st
	// A float point without exemplars waits for the next batch; anything
	// else is appended at once, after the points before it.
	batched := a.resolver != nil && k == kindSamples && len(exs) == 0
	sb, ls := &s.sb, &s.ls
	if batched {
		if len(s.slots) < seriesBatch {
			s.slots = make([]seriesSlot, seriesBatch)
		}
		sl := &s.slots[len(a.pts)]
		sb, ls = &sl.sb, &sl.ls
	}
	if len(s.extra) > 0 {
		s.extraLbls = extralabel.Apply(s.extraLbls[:0], lbls, s.extra)
		lbls = s.extraLbls
	}
	if reason, err := a.h.buildLabels(sb, ls, lbls, false, a.knownUTF8); err != nil {
		a.rejectOne(k, reason, "series %s: %v", describe(lbls), err)
		a.reject(kindExemplars, reason, len(exs))
		return nil
	}
	lset := *ls
	if !a.inWindow(k, lset, t) {
		a.reject(kindExemplars, "rejected_sample", len(exs))
		return nil
	}
	if k == kindHistograms {
		if err := validate(h, nil); err != nil {
			a.rejectOne(k, "invalid_histogram", "series %s: histogram at %d: %v", lset, t, err)
			a.reject(kindExemplars, "rejected_sample", len(exs))
			return nil
		}
	}
	a.updateMetadata(lset, family, meta)
	st = a.startTime(lset, st, t)
	if batched {
		a.pts = append(a.pts, pendingPoint{st: st, t: t, v: v})
		if len(a.pts) == seriesBatch {
			return a.appendPoints()
		}
		return nil
	}
	if err := a.appendPoints(); err != nil {
		return err
	}
	var ref SeriesRef
	var err error
	if k == kindHistograms {
		ref, err = a.app.AppendHistogram(0, lset, st, t, h, nil)
	} else {
		ref, err = a.app.Append(0, lset, st, t, v)
	}
	if err != nil {
		a.reject(kindExemplars, "rejected_sample", len(exs))
		if !IsBadData(err) {
			a.fatal = err
			return err
		}
		a.rejectOne(k, rejectReason(err), "series %s: %s at %d: %v", lset, k, t, err)
		return nil
	}
	a.written[k]++
	a.appendExemplars(ref, lset, exs)
	return nil
}

// appendPoints appends the float points waiting in a.pts, their series
// looked up together first, and returns the error to roll the request back
// for, if there is one.
func (a *otlpAppender) appendPoints() error {
	if len(a.pts) == 0 || a.fatal != nil {
		a.pts = a.pts[:0]
		return a.fatal
	}
	s := a.st
	s.rLsets, s.rTs = s.rLsets[:0], s.rTs[:0]
	for i := range a.pts {
		s.rLsets = append(s.rLsets, s.slots[i].ls)
		s.rTs = append(s.rTs, a.pts[i].t)
	}
	refs := s.resolveScratch(a.resolver)
	for i, p := range a.pts {
		lset := s.slots[i].ls
		if _, err := a.app.Append(refs[i], lset, p.st, p.t, p.v); err != nil {
			if !IsBadData(err) {
				a.fatal = err
				break
			}
			a.rejectOne(kindSamples, rejectReason(err), "series %s: %s at %d: %v", lset, kindSamples, p.t, err)
			continue
		}
		a.written[kindSamples]++
	}
	a.pts = a.pts[:0]
	return a.fatal
}

// startTime returns st, or 0 when the series has a sample at or after st
// earlier in this request. The Appender stores a zero sample at a start time
// only when the series has nothing there yet, but it cannot see the samples
// of its own open request: consecutive delta points (each starting where the
// last ended) would have their zero overwrite the previous point.
func (a *otlpAppender) startTime(lset labels.Labels, st, t int64) int64 {
	if st <= 0 || st >= t {
		return st
	}
	if a.newest == nil {
		a.newest = map[uint64]int64{}
	}
	h := lset.Hash()
	prev, seen := a.newest[h]
	if !seen || t > prev {
		a.newest[h] = t
	}
	if seen && prev >= st {
		return 0
	}
	return st
}

// count counts what one Append call brings.
func (a *otlpAppender) count(k kind, exemplars int) {
	a.received[k]++
	a.h.m.received[k].Inc()
	if exemplars > 0 {
		a.received[kindExemplars] += exemplars
		a.h.m.received[kindExemplars].Add(float64(exemplars))
	}
}

// updateMetadata gives the Appender the metadata of the family of the next
// sample when it differs from the last given.
func (a *otlpAppender) updateMetadata(lset labels.Labels, familyName string, m metadata.Metadata) {
	if familyName == a.family && m == a.meta {
		return
	}
	a.family, a.meta = strings.Clone(familyName), metadata.Metadata{Type: m.Type, Help: strings.Clone(m.Help), Unit: strings.Clone(m.Unit)}
	family := a.family
	if family == "" {
		family = lset.Get(model.MetricNameLabel)
	}
	if _, err := a.app.UpdateMetadata(0, labels.FromStrings(model.MetricNameLabel, family), a.meta); err != nil {
		a.h.logger.Debug("otlp: metadata not stored", "family", family, "err", err)
	}
}

// appendExemplars appends the exemplars of a written sample, sorted by time
// (the translator sorts them). A refused exemplar never fails the request.
func (a *otlpAppender) appendExemplars(ref SeriesRef, lset labels.Labels, exs []exemplar.Exemplar) {
	s := a.st
	for _, e := range exs {
		s.exlb = s.exlb[:0]
		e.Labels.Range(func(l labels.Label) { s.exlb = append(s.exlb, l) })
		if reason, err := a.h.buildLabels(&s.exsb, &s.exls, s.exlb, true, a.knownUTF8); err != nil {
			a.rejectOne(kindExemplars, reason, "series %s: exemplar %s: %v", lset, describe(s.exlb), err)
			continue
		}
		e.Labels = s.exls
		newRef, err := a.app.AppendExemplar(ref, lset, e)
		if err != nil {
			a.rejectStoredExemplar(lset, err, "otlp: exemplar not stored")
			continue
		}
		if newRef != 0 {
			ref = newRef
		}
		a.written[kindExemplars]++
	}
}

// refuseUntranslatable marks the metrics of md the translator would
// refuse for their temporality or type, and reports their data points: a
// delta sum or histogram without native_delta_ingestion (Prometheus answers
// those 500, so senders retry them for ever), one of unspecified
// temporality, a metric of no type.
func (a *otlpAppender) refuseUntranslatable(md *otlpMetrics, allowDelta bool) {
	md.eachMetric(func(m *otlpMetric) {
		k, n, why := untranslatable(m, allowDelta)
		if why == "" {
			return
		}
		m.skip = true
		a.received[k] += n
		a.h.m.received[k].Add(float64(n))
		a.reject(k, "unsupported_temporality", n)
		a.st.problem(a.h.opts.MaxErrorMessages, "metric %q: %s: its %d data points are dropped", trunc(m.name), why, n)
	})
}

// eachMetric calls f on each metric of md that a resource holds.
func (md *otlpMetrics) eachMetric(f func(m *otlpMetric)) {
	for _, r := range md.resources {
		md.eachMetricOf(r, f)
	}
}

// eachMetricOf calls f on each metric of resource r.
func (md *otlpMetrics) eachMetricOf(r otlpResource, f func(m *otlpMetric)) {
	for _, s := range of(md.scopes, r.scopes) {
		for i := s.metrics.lo; i < s.metrics.hi; i++ {
			f(&md.metrics[i])
		}
	}
}

// maxTargetInfoSamples bounds the target_info samples of one resource. The
// translator writes one every half lookback delta from the resource's
// oldest point to its newest: a point decades old would make millions.
// 10000 cover 17 days at the default lookback delta.
const maxTargetInfoSamples = 10_000

// refuseOutOfRange removes from md the data points that cannot be written
// for their time, before the translator spans target_info over them: those
// outside the accepted window (max_future_skew, max_sample_age), and those
// older than maxTargetInfoSamples target_info intervals before the newest
// point of their resource.
func (a *otlpAppender) refuseOutOfRange(md *otlpMetrics, lookback time.Duration) {
	if lookback <= 0 {
		lookback = 5 * time.Minute
	}
	span := maxTargetInfoSamples * (lookback / 2).Milliseconds()
	o := &a.h.opts
	for _, r := range md.resources {
		newest := int64(math.MinInt64)
		md.eachMetricOf(r, func(m *otlpMetric) {
			if m.skip {
				return
			}
			md.removePoints(m, func(t int64) bool {
				switch {
				case t > a.maxT:
					a.refusePoint(m, "too_far_in_future", "metric %q: data point at %d: timestamp more than max_future_skew=%s ahead of the receiver's clock", trunc(m.name), t, o.MaxFutureSkew)
				case t < a.minT:
					a.refusePoint(m, "too_old", "metric %q: data point at %d: timestamp older than max_sample_age=%s", trunc(m.name), t, o.MaxSampleAge)
				default:
					newest = max(newest, t)
					return false
				}
				return true
			})
		})
		if newest == math.MinInt64 || newest-span <= a.minT {
			continue
		}
		oldest := newest - span
		md.eachMetricOf(r, func(m *otlpMetric) {
			if m.skip {
				return
			}
			md.removePoints(m, func(t int64) bool {
				if t >= oldest {
					return false
				}
				a.refusePoint(m, "too_old", "metric %q: data point at %d: more than %s before the newest point of its resource (%d), which target_info would span", trunc(m.name), t, time.Duration(span)*time.Millisecond, newest)
				return true
			})
		})
	}
}

// refusePoint counts one data point of m as received and rejected.
func (a *otlpAppender) refusePoint(m *otlpMetric, reason, format string, args ...any) {
	k := kindSamples
	if m.typ == otlpHistogram || m.typ == otlpExpHistogram {
		k = kindHistograms
	}
	a.received[k]++
	a.h.m.received[k].Inc()
	a.rejectOne(k, reason, format, args...)
}

// removePoints removes the data points of m whose time (ms, as the
// translator converts it) drop says to, keeping the order of the rest.
func (md *otlpMetrics) removePoints(m *otlpMetric, drop func(t int64) bool) {
	pts := of(md.points, m.points)
	keep := 0
	for i := range pts {
		if drop(ms(pts[i].time)) {
			continue
		}
		pts[keep] = pts[i]
		keep++
	}
	m.points.hi = m.points.lo + int32(keep)
}

// untranslatable says why the translator would refuse metric m ("" if it
// would not), with the kind and number of its data points.
func untranslatable(m *otlpMetric, allowDelta bool) (kind, int, string) {
	k, n := kindSamples, m.points.len()
	switch m.typ {
	case otlpSum:
	case otlpHistogram, otlpExpHistogram:
		k = kindHistograms
	case otlpGauge, otlpSummary:
		return 0, 0, ""
	default:
		return kindSamples, 0, "metric has no data (no gauge, sum, histogram, exponential histogram or summary)"
	}
	switch t := m.temporality; {
	case t == temporalityCumulative:
		return k, n, ""
	case t == temporalityDelta && allowDelta:
		return k, n, ""
	case t == temporalityDelta:
		return k, n, "delta temporality is not stored unless otlp.native_delta_ingestion is true (or send cumulative temporality)"
	}
	return k, n, fmt.Sprintf("aggregation temporality %s is not supported", temporalityString(m.temporality))
}

// translationErrors reports what the translator refused beside the storage:
// each error is counted as one rejected data point.
func (a *otlpAppender) translationErrors(errs []error) {
	for _, err := range errs {
		a.h.m.received[kindSamples].Inc()
		a.rejected[kindSamples]++
		a.received[kindSamples]++
		a.h.m.rejected[kindSamples].WithLabelValues("untranslatable").Inc()
		a.st.problem(a.h.opts.MaxErrorMessages, "translate: %v", err)
	}
}

// committed answers a committed request: 200, with a partial success when
// anything was rejected, or 400 when nothing of a request that carried
// something was written.
func (a *otlpAppender) committed() otlpResult {
	res := otlpResult{result: result{
		code:       http.StatusOK,
		samples:    a.written[kindSamples],
		histograms: a.written[kindHistograms],
		exemplars:  a.written[kindExemplars],
	}}
	if a.st.nProblems == 0 {
		return res
	}
	report := a.st.report(res.result)
	if a.written[kindSamples]+a.written[kindHistograms] == 0 && a.rejected[kindSamples]+a.rejected[kindHistograms] > 0 {
		res.code, res.msg = http.StatusBadRequest, report
		return res
	}
	res.report = report
	res.rejected = int64(a.rejected[kindSamples] + a.rejected[kindHistograms])
	return res
}

// appendOTLPResponseProto appends an ExportMetricsServiceResponse in
// protobuf: partial_success (always present, as the collector's encoder
// writes it) with rejected_data_points and error_message when set.
func appendOTLPResponseProto(dst []byte, rejected int64, message string) []byte {
	n := 0
	if message != "" {
		n += protowire.SizeTag(2) + protowire.SizeBytes(len(message))
	}
	if rejected != 0 {
		n += protowire.SizeTag(1) + protowire.SizeVarint(uint64(rejected))
	}
	dst = protowire.AppendTag(dst, 1, protowire.BytesType)
	dst = protowire.AppendVarint(dst, uint64(n))
	if message != "" {
		dst = protowire.AppendTag(dst, 2, protowire.BytesType)
		dst = protowire.AppendString(dst, message)
	}
	if rejected != 0 {
		dst = protowire.AppendTag(dst, 1, protowire.VarintType)
		dst = protowire.AppendVarint(dst, uint64(rejected))
	}
	return dst
}

// appendOTLPResponseJSON appends an ExportMetricsServiceResponse in JSON
// (64-bit integers as strings, as the protobuf JSON mapping has them).
func appendOTLPResponseJSON(dst []byte, rejected int64, message string) []byte {
	dst = append(dst, `{"partialSuccess":{`...)
	if rejected != 0 {
		dst = append(dst, `"rejectedDataPoints":"`...)
		dst = strconv.AppendInt(dst, rejected, 10)
		dst = append(dst, '"')
	}
	if message != "" {
		if rejected != 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `"errorMessage":`...)
		var sb bytes.Buffer
		enc := json.NewEncoder(&sb)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(message) // a string always encodes
		dst = append(dst, bytes.TrimSuffix(sb.Bytes(), []byte("\n"))...)
	}
	return append(dst, "}}"...)
}
