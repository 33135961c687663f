package remotewrite

import (
	"cmp"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/exemplar"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/metadata"
)

// ingest appends a decoded request. Series and samples that are invalid, or
// that the storage rejects as bad data, are skipped and reported with 400
// while the rest is committed (partial write). Overload and storage failures
// roll the whole request back (429, 500), so a retry never duplicates.
func (h *Handler) ingest(r *http.Request, st *reqState, version int) result {
	d := &st.dec
	m := h.m
	totalSamples, totalHists, totalEx := len(d.samples), len(d.hists), len(d.exemplars)
	m.samplesReceived.Add(float64(totalSamples))
	m.histogramsReceived.Add(float64(totalHists))
	m.exemplarsReceived.Add(float64(totalEx))

	now := h.now()
	maxT := now.Add(h.opts.MaxFutureSkew).UnixMilli()
	minT := int64(math.MinInt64)
	if h.opts.MaxSampleAge > 0 {
		minT = now.Add(-h.opts.MaxSampleAge).UnixMilli()
	}

	var (
		res                        result
		rejSamples, rejHists       int // rejected so far
		exRejected                 int
		app                        = h.app.Appender(r.Context())
		finished                   bool
		rejectSamples, rejectHists = m.samplesRejected, m.histogramsRejected
	)
	defer func() {
		if !finished { // a panic below: never leave an Appender open
			_ = app.Rollback()
		}
	}()
	// abort rolls back after a retryable failure; everything not yet
	// rejected counts as rejected for reason.
	abort := func(code int, reason string, err error) result {
		finished = true
		if rerr := app.Rollback(); rerr != nil {
			h.logger.Error("remote write: rollback failed", "err", rerr)
		}
		m.samplesRejected.WithLabelValues(reason).Add(float64(totalSamples - rejSamples))
		m.histogramsRejected.WithLabelValues(reason).Add(float64(totalHists - rejHists))
		m.exemplarsRejected.WithLabelValues(reason).Add(float64(totalEx - exRejected))
		res := result{code: code, msg: fmt.Sprintf("storage: %v", err)}
		res.retryAfter = code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable
		return res
	}
	// retryable classifies a non-bad-data error.
	retryable := func(err error) result {
		if IsOverloaded(err) {
			return abort(http.StatusTooManyRequests, "overloaded", err)
		}
		if IsUnavailable(err) {
			return abort(http.StatusServiceUnavailable, "unavailable", err)
		}
		return abort(http.StatusInternalServerError, "storage_error", err)
	}
	// Series go in batches: the labels of a whole batch are checked and
	// built first and looked up together, then the samples of each series
	// are appended in order. Without a SeriesResolver, a batch is one series:
	// one label buffer, warm in the cache, serves them all.
	resolver, _ := app.(SeriesResolver)
	batch := 1
	if resolver != nil {
		batch = seriesBatch
	}
	if len(st.slots) < batch {
		st.slots = make([]seriesSlot, batch)
	}
	for lo := 0; lo < len(d.series); lo += batch {
		slots := st.slots[:min(batch, len(d.series)-lo)]
		for j := range slots {
			h.prepareSeries(st, version, lo+j, &slots[j])
		}
		if resolver != nil {
			st.resolveBatch(resolver, lo, slots)
		}
		for j := range slots {
			si := lo + j
			sl := &slots[j]
			s := &d.series[si]
			nS, nH := s.samples.len(), s.histograms.len()
			rejectSeries := func(reason string, err error) {
				rejectSamples.WithLabelValues(reason).Add(float64(nS))
				rejectHists.WithLabelValues(reason).Add(float64(nH))
				m.exemplarsRejected.WithLabelValues(reason).Add(float64(s.exemplars.len()))
				rejSamples += nS
				rejHists += nH
				exRejected += s.exemplars.len()
				st.problem(h.opts.MaxErrorMessages, "%v", err)
			}
			if sl.err != nil {
				rejectSeries(sl.reason, sl.err)
				continue
			}
			ls := sl.ls
			ref := sl.ref
			if version == 2 {
				if newRef, err := app.UpdateMetadata(0, ls, sl.meta); err != nil {
					h.logger.Debug("remote write: metadata not stored", "series", ls.String(), "err", err)
				} else if newRef != 0 {
					ref = newRef
				}
			}

			for i := s.samples.lo; i < s.samples.hi; i++ {
				smp := &d.samples[i]
				if reason, bad := window(smp.t, minT, maxT); bad {
					rejectSamples.WithLabelValues(reason).Inc()
					rejSamples++
					st.problem(h.opts.MaxErrorMessages, "series %s: sample at %d: %s", ls, smp.t, windowMsg(reason, h.opts))
					continue
				}
				sts := smp.st
				if sts == 0 {
					sts = s.createdTS
				}
				newRef, err := app.Append(ref, ls, sts, smp.t, smp.v)
				if err != nil {
					if !IsBadData(err) {
						return retryable(err)
					}
					rejectSamples.WithLabelValues(rejectReason(err)).Inc()
					rejSamples++
					st.problem(h.opts.MaxErrorMessages, "series %s: sample at %d: %v", ls, smp.t, err)
					continue
				}
				ref = newRef
				res.samples++
			}

			for i := s.histograms.lo; i < s.histograms.hi; i++ {
				hr := &d.hists[i]
				if reason, bad := window(hr.t, minT, maxT); bad {
					rejectHists.WithLabelValues(reason).Inc()
					rejHists++
					st.problem(h.opts.MaxErrorMessages, "series %s: histogram at %d: %s", ls, hr.t, windowMsg(reason, h.opts))
					continue
				}
				hi, fh := st.histogram(d, hr)
				var verr error
				if fh != nil {
					verr = fh.Validate()
				} else {
					verr = hi.Validate()
				}
				if verr != nil {
					rejectHists.WithLabelValues("invalid_histogram").Inc()
					rejHists++
					st.problem(h.opts.MaxErrorMessages, "series %s: histogram at %d: %v", ls, hr.t, verr)
					continue
				}
				sts := hr.st
				if sts == 0 {
					sts = s.createdTS
				}
				newRef, err := app.AppendHistogram(ref, ls, sts, hr.t, hi, fh)
				if err != nil {
					if !IsBadData(err) {
						return retryable(err)
					}
					rejectHists.WithLabelValues(rejectReason(err)).Inc()
					rejHists++
					st.problem(h.opts.MaxErrorMessages, "series %s: histogram at %d: %v", ls, hr.t, err)
					continue
				}
				ref = newRef
				res.histograms++
			}

			if s.exemplars.len() > 0 {
				exs := d.exemplars[s.exemplars.lo:s.exemplars.hi]
				slices.SortStableFunc(exs, func(a, b exemplarRec) int { return cmp.Compare(a.ts, b.ts) })
				for j := range exs {
					e := &exs[j]
					var elbls []labels.Label
					exUTF8 := false
					if version == 2 {
						var err error
						if elbls, exUTF8, err = st.resolve(d, d.exRefs[e.labels.lo:e.labels.hi], &st.exlb); err != nil {
							m.exemplarsRejected.WithLabelValues("invalid_symbol_ref").Inc()
							exRejected++
							st.problem(h.opts.MaxErrorMessages, "series %s: exemplar: %v", ls, err)
							continue
						}
					} else {
						elbls = d.exLabels[e.labels.lo:e.labels.hi]
					}
					if reason, err := h.buildLabels(&st.exsb, &st.exls, elbls, true, exUTF8); err != nil {
						m.exemplarsRejected.WithLabelValues(reason).Inc()
						exRejected++
						st.problem(h.opts.MaxErrorMessages, "series %s: exemplar %s: %v", ls, describe(elbls), err)
						continue
					}
					ex := exemplar.Exemplar{Labels: st.exls, Value: e.v, Ts: e.ts, HasTs: e.ts != 0}
					newRef, err := app.AppendExemplar(ref, ls, ex)
					if err != nil {
						// Senders resend exemplars, so out-of-order and duplicate
						// exemplars are routine; they never fail the request.
						reason, unexpected := exemplarRejectReason(err)
						if unexpected {
							h.logger.Warn("remote write: exemplar not stored", "series", ls.String(), "err", err)
						}
						m.exemplarsRejected.WithLabelValues(reason).Inc()
						exRejected++
						continue
					}
					ref = newRef
					res.exemplars++
				}
			}
		}
	}

	if version == 1 {
		for i := range d.meta {
			md := &d.meta[i]
			if md.family == "" {
				continue
			}
			st.sb.Reset()
			st.sb.Add(model.MetricNameLabel, md.family)
			st.sb.Overwrite(&st.ls)
			meta := metadata.Metadata{Type: metricType(md.typ), Help: md.help, Unit: md.unit}
			if _, err := app.UpdateMetadata(0, st.ls, meta); err != nil {
				h.logger.Debug("remote write: metadata not stored", "family", md.family, "err", err)
			}
		}
	}

	if err := app.Commit(); err != nil {
		finished = true
		m.samplesRejected.WithLabelValues(commitReason(err)).Add(float64(totalSamples - rejSamples))
		m.histogramsRejected.WithLabelValues(commitReason(err)).Add(float64(totalHists - rejHists))
		m.exemplarsRejected.WithLabelValues(commitReason(err)).Add(float64(totalEx - exRejected))
		code := http.StatusInternalServerError
		switch {
		case IsOverloaded(err):
			code = http.StatusTooManyRequests
		case IsUnavailable(err):
			code = http.StatusServiceUnavailable
		}
		return result{code: code, msg: fmt.Sprintf("commit: %v", err), retryAfter: code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable}
	}
	finished = true
	if st.nProblems == 0 {
		res.code = http.StatusOK
		return res
	}
	res.code = http.StatusBadRequest
	res.msg = st.report(res)
	return res
}

// seriesBatch is the number of series whose labels are built, and looked up,
// together.
const seriesBatch = 128

// seriesSlot is one series of a batch: its labels, built in the slot's own
// buffer so that a whole batch stays valid at once, or why it is rejected.
type seriesSlot struct {
	sb   labels.ScratchBuilder
	ls   labels.Labels
	meta metadata.Metadata // 2.0
	ref  SeriesRef         // from SeriesResolver, or 0
	// err rejects the whole series, counted under reason.
	reason string
	err    error
}

// prepareSeries checks and builds the labels (and 2.0 metadata) of series si
// in sl.
func (h *Handler) prepareSeries(st *reqState, version, si int, sl *seriesSlot) {
	d := &st.dec
	s := &d.series[si]
	sl.meta, sl.ref, sl.reason, sl.err = metadata.Metadata{}, 0, "", nil
	reject := func(reason string, err error) {
		sl.reason, sl.err = reason, err
	}
	var lbls []labels.Label
	knownUTF8 := false
	if version == 2 {
		var err error
		if lbls, knownUTF8, err = st.resolve(d, d.refs[s.labels.lo:s.labels.hi], &st.lbls); err != nil {
			reject("invalid_symbol_ref", fmt.Errorf("series %d: labels: %w", si, err))
			return
		}
		if s.hasMeta {
			help, ok1 := symbol(d.symbols, s.helpRef)
			unit, ok2 := symbol(d.symbols, s.unitRef)
			if !ok1 || !ok2 {
				reject("invalid_symbol_ref", fmt.Errorf("series %s: metadata refers to a symbol out of range (help %d, unit %d, %d symbols)",
					describe(lbls), s.helpRef, s.unitRef, len(d.symbols)))
				return
			}
			sl.meta = metadata.Metadata{Type: metricType(s.metaType), Help: help, Unit: unit}
		}
	} else {
		lbls = d.labels[s.labels.lo:s.labels.hi]
		knownUTF8 = s.asciiLabels
	}
	if reason, err := h.buildLabels(&sl.sb, &sl.ls, lbls, false, knownUTF8); err != nil {
		reject(reason, fmt.Errorf("series %s: %w", describe(lbls), err))
		return
	}
	if version == 2 && s.samples.len()+s.histograms.len()+s.exemplars.len() == 0 {
		// 2.0-rc.4 allows a series with only exemplars, not one with
		// nothing.
		reject("no_samples", fmt.Errorf("series %s: has no samples, histograms or exemplars", describe(lbls)))
	}
}

// resolveBatch asks r for the refs of the accepted series of a batch that
// starts at series lo, by the time of each one's first sample.
func (st *reqState) resolveBatch(r SeriesResolver, lo int, slots []seriesSlot) {
	d := &st.dec
	st.rIdx, st.rLsets, st.rTs = st.rIdx[:0], st.rLsets[:0], st.rTs[:0]
	for j := range slots {
		if slots[j].err != nil {
			continue
		}
		s := &d.series[lo+j]
		var t int64
		switch {
		case s.samples.len() > 0:
			t = d.samples[s.samples.lo].t
		case s.histograms.len() > 0:
			t = d.hists[s.histograms.lo].t
		default:
			continue
		}
		st.rIdx = append(st.rIdx, j)
		st.rLsets = append(st.rLsets, slots[j].ls)
		st.rTs = append(st.rTs, t)
	}
	if len(st.rIdx) == 0 {
		return
	}
	st.rRefs = slices.Grow(st.rRefs[:0], len(st.rIdx))[:len(st.rIdx)]
	r.ResolveSeries(st.rLsets, st.rTs, st.rRefs)
	for k, j := range st.rIdx {
		slots[j].ref = st.rRefs[k]
	}
	clear(st.rLsets)
}

func commitReason(err error) string {
	if IsOverloaded(err) {
		return "overloaded"
	}
	if IsUnavailable(err) {
		return "unavailable"
	}
	return "storage_error"
}

func window(t, minT, maxT int64) (string, bool) {
	switch {
	case t > maxT:
		return "too_far_in_future", true
	case t < minT:
		return "too_old", true
	}
	return "", false
}

func windowMsg(reason string, o Options) string {
	if reason == "too_far_in_future" {
		return fmt.Sprintf("timestamp more than max_future_skew=%s ahead of the receiver's clock", o.MaxFutureSkew)
	}
	return fmt.Sprintf("timestamp older than max_sample_age=%s", o.MaxSampleAge)
}

// problem records one rejected item; only the first max get a message.
func (st *reqState) problem(max int, format string, args ...any) {
	st.nProblems++
	if len(st.problems) < max {
		st.problems = append(st.problems, fmt.Sprintf(format, args...))
	}
}

func (st *reqState) report(res result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d rejected (written: %d samples, %d histograms, %d exemplars):\n",
		st.nProblems, res.samples, res.histograms, res.exemplars)
	for _, p := range st.problems {
		b.WriteString(p)
		b.WriteByte('\n')
	}
	if more := st.nProblems - len(st.problems); more > 0 {
		fmt.Fprintf(&b, "and %d more\n", more)
	}
	return b.String()
}

func symbol(symbols []string, ref uint32) (string, bool) {
	if int64(ref) >= int64(len(symbols)) {
		return "", false
	}
	return symbols[ref], true
}

// resolve turns 2.0 name/value reference pairs into labels in *buf. It also
// reports whether every string is known to be valid UTF-8: each symbol is
// checked once per request, however many series use it.
func (st *reqState) resolve(d *decoder, refs []uint32, buf *[]labels.Label) ([]labels.Label, bool, error) {
	if len(refs)%2 != 0 {
		return nil, false, fmt.Errorf("odd number of label references (%d)", len(refs))
	}
	out := (*buf)[:0]
	n := uint32(len(d.symbols))
	valid := true
	for i := 0; i < len(refs); i += 2 {
		nr, vr := refs[i], refs[i+1]
		if nr >= n || vr >= n {
			*buf = out
			return nil, false, fmt.Errorf("label reference %d/%d out of range of %d symbols", nr, vr, n)
		}
		valid = valid && st.validSymbol(d, nr) && st.validSymbol(d, vr)
		out = append(out, labels.Label{Name: d.symbols[nr], Value: d.symbols[vr]})
	}
	*buf = out
	return out, valid, nil
}

// Symbol states in reqState.symOK.
const (
	symUnchecked = iota
	symValid
	symInvalid
)

func (st *reqState) validSymbol(d *decoder, ref uint32) bool {
	if len(st.symOK) != len(d.symbols) {
		st.symOK = slices.Grow(st.symOK[:0], len(d.symbols))[:len(d.symbols)]
		clear(st.symOK)
	}
	switch st.symOK[ref] {
	case symValid:
		return true
	case symInvalid:
		return false
	}
	if utf8.ValidString(d.symbols[ref]) {
		st.symOK[ref] = symValid
		return true
	}
	st.symOK[ref] = symInvalid
	return false
}

// buildLabels checks a label set against the specification and the limits and
// writes it to *dst through sb. Labels with an empty value are dropped: in the
// Prometheus data model they are the same as absent labels. Exemplar labels
// need no metric name and may come unsorted.
func (h *Handler) buildLabels(sb *labels.ScratchBuilder, dst *labels.Labels, lbls []labels.Label, exemplarLabels, knownUTF8 bool) (string, error) {
	o := &h.opts
	if len(lbls) > o.MaxLabelsPerSeries {
		return "limit_labels", fmt.Errorf("%d labels exceed max_labels_per_series=%d", len(lbls), o.MaxLabelsPerSeries)
	}
	sb.Reset()
	hasName := false
	for i := range lbls {
		l := &lbls[i]
		if l.Name == "" {
			return "invalid_labels", fmt.Errorf("empty label name")
		}
		if len(l.Name) > o.MaxLabelNameLength {
			return "limit_label_name_length", fmt.Errorf("label name of %d bytes exceeds max_label_name_length=%d", len(l.Name), o.MaxLabelNameLength)
		}
		if len(l.Value) > o.MaxLabelValueLength {
			return "limit_label_value_length", fmt.Errorf("value of label %q has %d bytes, exceeds max_label_value_length=%d", trunc(l.Name), len(l.Value), o.MaxLabelValueLength)
		}
		if i > 0 && !exemplarLabels {
			switch prev := lbls[i-1].Name; {
			case l.Name == prev:
				return "invalid_labels", fmt.Errorf("duplicate label name %q", trunc(l.Name))
			// Names are not empty (checked above); most differ in their first
			// byte, which spares a string comparison.
			case l.Name[0] < prev[0] || (l.Name[0] == prev[0] && l.Name < prev):
				return "invalid_labels", fmt.Errorf("label names not sorted: %q after %q", trunc(l.Name), trunc(prev))
			}
		}
		if !knownUTF8 && !utf8.ValidString(l.Name) {
			return "invalid_labels", fmt.Errorf("label name %q is not valid UTF-8", trunc(l.Name))
		}
		if !knownUTF8 && !utf8.ValidString(l.Value) {
			return "invalid_labels", fmt.Errorf("value of label %q is not valid UTF-8", trunc(l.Name))
		}
		if l.Value == "" {
			continue
		}
		if l.Name == model.MetricNameLabel {
			hasName = true
		}
		sb.Add(l.Name, l.Value)
	}
	if exemplarLabels {
		sb.Sort()
	} else if !hasName {
		return "missing_metric_name", fmt.Errorf("missing or empty metric name (%s)", model.MetricNameLabel)
	}
	sb.Overwrite(dst)
	return "", nil
}

// histogram fills the reused histogram of st from a decoded one. Empty
// slices stay nil: Validate tells nil custom values from empty ones.
func (st *reqState) histogram(d *decoder, hr *histRec) (*histogram.Histogram, *histogram.FloatHistogram) {
	hint := histogram.UnknownCounterReset
	if hr.resetHint <= uint64(histogram.GaugeType) {
		hint = histogram.CounterResetHint(hr.resetHint)
	}
	if hr.isFloat {
		st.fh = histogram.FloatHistogram{
			CounterResetHint: hint,
			Schema:           hr.schema,
			ZeroThreshold:    hr.zeroThreshold,
			ZeroCount:        hr.zeroCountFloat,
			Count:            hr.countFloat,
			Sum:              hr.sum,
			PositiveSpans:    sub(d.posSpans, hr.posSpans),
			NegativeSpans:    sub(d.negSpans, hr.negSpans),
			PositiveBuckets:  sub(d.posCounts, hr.posCounts),
			NegativeBuckets:  sub(d.negCounts, hr.negCounts),
			CustomValues:     sub(d.custom, hr.custom),
		}
		return nil, &st.fh
	}
	st.h = histogram.Histogram{
		CounterResetHint: hint,
		Schema:           hr.schema,
		ZeroThreshold:    hr.zeroThreshold,
		ZeroCount:        hr.zeroCountInt,
		Count:            hr.countInt,
		Sum:              hr.sum,
		PositiveSpans:    sub(d.posSpans, hr.posSpans),
		NegativeSpans:    sub(d.negSpans, hr.negSpans),
		PositiveBuckets:  sub(d.posDeltas, hr.posDeltas),
		NegativeBuckets:  sub(d.negDeltas, hr.negDeltas),
		CustomValues:     sub(d.custom, hr.custom),
	}
	return &st.h, nil
}

// sub returns s[r] with its capacity cut, so that an append by the storage
// cannot overwrite the next histogram's data; nil when empty.
func sub[T any](s []T, r rng) []T {
	if r.lo == r.hi {
		return nil
	}
	return s[r.lo:r.hi:r.hi]
}

func metricType(t uint64) model.MetricType {
	switch t {
	case 1:
		return model.MetricTypeCounter
	case 2:
		return model.MetricTypeGauge
	case 3:
		return model.MetricTypeHistogram
	case 4:
		return model.MetricTypeGaugeHistogram
	case 5:
		return model.MetricTypeSummary
	case 6:
		return model.MetricTypeInfo
	case 7:
		return model.MetricTypeStateset
	}
	return model.MetricTypeUnknown
}

// describe renders raw labels for an error message, shortened.
func describe(lbls []labels.Label) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, l := range lbls {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s=%q", trunc(l.Name), trunc(l.Value))
		if b.Len() > 300 {
			b.WriteString(", ...")
			break
		}
	}
	b.WriteByte('}')
	return b.String()
}

func trunc(s string) string {
	const n = 64
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
