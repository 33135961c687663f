package remotewrite

import (
	"cmp"
	"context"
	"errors"
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

	"github.com/shaledb/shale/internal/extralabel"
)

// ingest appends a decoded request. Series and samples that are invalid, or
// that the storage rejects as bad data, are skipped and reported with 400
// while the rest is committed (partial write). Overload and storage failures
// roll the whole request back (429, 503, 500), so a retry never duplicates.
func (h *Handler) ingest(r *http.Request, st *reqState, version int, app Appender) result {
	t := h.begin(st, version, app)
	finished := false
	defer func() {
		if !finished { // a panic below: never leave an Appender open
			_ = t.app.Rollback()
		}
	}()
	if err := t.appendSeries(); err != nil {
		finished = true
		if rerr := t.app.Rollback(); rerr != nil {
			h.logger.Error("remote write: rollback failed", "err", rerr)
		}
		return t.fail("storage", err)
	}
	if version == 1 {
		t.appendMetadataV1()
	}
	err := t.app.Commit()
	finished = true
	if err != nil {
		return t.fail("commit", err)
	}
	return t.committed()
}

// kind is a kind of item a request carries.
type kind uint8

const (
	kindSamples kind = iota
	kindHistograms
	kindExemplars
	nKinds
)

// String is the kind's name in messages to the sender.
func (k kind) String() string {
	return [nKinds]string{"sample", "histogram", "exemplar"}[k]
}

// tally counts items of each kind.
type tally [nKinds]int

// ledger is what appending one request (remote write or OTLP) keeps beside
// its Appender: the time window of the samples it accepts, and the tally of
// what was received, written and rejected, from which come the response and
// the rejected counters: received = written + rejected once it ends.
// ledger.reject is the one place that counts a rejection.
type ledger struct {
	h   *Handler
	st  *reqState
	app Appender
	// minT and maxT bound the sample times accepted, inclusive.
	minT, maxT int64
	// countNone counts rejections of no items too, which shows their
	// reason's counter at 0 (remote write does, OTLP does not).
	countNone bool

	received, written, rejected tally
}

// newLedger returns the ledger of a request of h held by st, with the time
// window as of now.
func (h *Handler) newLedger(st *reqState, countNone bool) ledger {
	l := ledger{h: h, st: st, minT: math.MinInt64, countNone: countNone}
	now := h.now()
	l.maxT = now.Add(h.opts.MaxFutureSkew).UnixMilli()
	if h.opts.MaxSampleAge > 0 {
		l.minT = now.Add(-h.opts.MaxSampleAge).UnixMilli()
	}
	return l
}

// reject counts n items of kind k as not written, for reason.
func (l *ledger) reject(k kind, reason string, n int) {
	if n == 0 && !l.countNone {
		return
	}
	l.h.m.rejected[k].WithLabelValues(reason).Add(float64(n))
	l.rejected[k] += n
}

// rejectOne rejects one item and tells the sender why.
func (l *ledger) rejectOne(k kind, reason string, format string, args ...any) {
	l.reject(k, reason, 1)
	l.st.problem(l.h.opts.MaxErrorMessages, format, args...)
}

// rejectStoredExemplar counts an exemplar of series ls that the storage
// refused with err, logging msg when err is not one a sender causes. It is
// not reported to the sender.
func (l *ledger) rejectStoredExemplar(ls labels.Labels, err error, msg string) {
	reason, unexpected := exemplarRejectReason(err)
	if unexpected {
		l.h.logger.Warn(msg, "series", ls.String(), "err", err)
	}
	l.reject(kindExemplars, reason, 1)
}

// inWindow reports whether time at is within [minT, maxT], and rejects the
// item of kind k if not.
func (l *ledger) inWindow(k kind, ls labels.Labels, at int64) bool {
	if at >= l.minT && at <= l.maxT {
		return true
	}
	l.rejectOutsideWindow(k, ls, at)
	return false
}

// rejectOutsideWindow rejects an item at time at, outside [minT, maxT].
func (l *ledger) rejectOutsideWindow(k kind, ls labels.Labels, at int64) {
	o := &l.h.opts
	if at > l.maxT {
		l.rejectOne(k, "too_far_in_future", "series %s: %s at %d: timestamp more than max_future_skew=%s ahead of the receiver's clock", ls, k, at, o.MaxFutureSkew)
		return
	}
	l.rejectOne(k, "too_old", "series %s: %s at %d: timestamp older than max_sample_age=%s", ls, k, at, o.MaxSampleAge)
}

// fail answers a request whose Appender was rolled back, or failed to
// commit, because of err (not bad data): nothing is written, so everything
// not rejected yet is rejected for the reason err's class names.
func (l *ledger) fail(what string, err error) result {
	code, reason := failure(err)
	l.written = tally{}
	for k := range nKinds {
		l.reject(k, reason, l.received[k]-l.rejected[k])
	}
	return result{
		code:       code,
		msg:        fmt.Sprintf("%s: %v", what, err),
		retryAfter: code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable,
	}
}

// txn appends one decoded remote-write request through one Appender.
type txn struct {
	ledger
	d       *decoder
	version int
}

// begin counts what a decoded request carries and takes its Appender.
func (h *Handler) begin(st *reqState, version int, app Appender) txn {
	t := txn{ledger: h.newLedger(st, true), d: &st.dec, version: version}
	t.received = tally{len(t.d.samples), len(t.d.hists), len(t.d.exemplars)}
	for k, n := range t.received {
		h.m.received[k].Add(float64(n))
	}
	t.app = app
	return t
}

// rejectSeries rejects everything series s carries, for reason.
func (t *txn) rejectSeries(s *seriesRec, reason string, err error) {
	t.reject(kindSamples, reason, s.samples.len())
	t.reject(kindHistograms, reason, s.histograms.len())
	t.reject(kindExemplars, reason, s.exemplars.len())
	t.st.problem(t.h.opts.MaxErrorMessages, "%v", err)
}

// failure classifies an error that is not bad data: the status code to
// answer and the reason to count the request's items under.
func failure(err error) (code int, reason string) {
	switch {
	case IsOverloaded(err):
		return http.StatusTooManyRequests, "overloaded"
	case IsUnavailable(err):
		return http.StatusServiceUnavailable, "unavailable"
	case errors.Is(err, context.Canceled):
		// The request's context ended: its client went away, or the
		// server is shutting down. Whoever still listens may retry.
		return http.StatusServiceUnavailable, "canceled"
	}
	return http.StatusInternalServerError, "storage_error"
}

// committed answers a committed request: 200, or 400 with the problems when
// anything was rejected.
func (t *txn) committed() result {
	res := result{
		code:       http.StatusOK,
		samples:    t.written[kindSamples],
		histograms: t.written[kindHistograms],
		exemplars:  t.written[kindExemplars],
	}
	if t.st.nProblems > 0 {
		res.code = http.StatusBadRequest
		res.msg = t.st.report(res)
	}
	return res
}

// appendSeries appends every series. Series go in batches: the labels of a
// whole batch are checked and built first and looked up together, then the
// samples of each series are appended in order. Without a SeriesResolver, a
// batch is one series: one label buffer, warm in the cache, serves them all.
// An error is one to roll the request back for.
func (t *txn) appendSeries() error {
	st, d := t.st, t.d
	resolver, _ := t.app.(SeriesResolver)
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
			sl := &slots[j]
			sl.reason, sl.err = t.prepareSeries(lo+j, sl)
		}
		if resolver != nil {
			st.resolveBatch(resolver, lo, slots)
		}
		for j := range slots {
			if err := t.appendOneSeries(&d.series[lo+j], &slots[j]); err != nil {
				return err
			}
		}
	}
	return nil
}

// appendOneSeries appends what series s carries, under the labels prepared
// in sl.
func (t *txn) appendOneSeries(s *seriesRec, sl *seriesSlot) error {
	if sl.err != nil {
		t.rejectSeries(s, sl.reason, sl.err)
		return nil
	}
	ref := sl.ref
	if t.version == 2 {
		if newRef, err := t.app.UpdateMetadata(0, sl.ls, sl.meta); err != nil {
			t.h.logger.Debug("remote write: metadata not stored", "series", sl.ls.String(), "err", err)
		} else if newRef != 0 {
			ref = newRef
		}
	}
	ref, err := t.appendSamples(s, sl.ls, ref)
	if err != nil {
		return err
	}
	if s.histograms.len() > 0 {
		if ref, err = t.appendHistograms(s, sl.ls, ref); err != nil {
			return err
		}
	}
	if s.exemplars.len() > 0 {
		t.appendExemplars(s, sl.ls, ref)
	}
	return nil
}

func (t *txn) appendSamples(s *seriesRec, ls labels.Labels, ref SeriesRef) (SeriesRef, error) {
	for i := s.samples.lo; i < s.samples.hi; i++ {
		smp := &t.d.samples[i]
		if !t.inWindow(kindSamples, ls, smp.t) {
			continue
		}
		newRef, err := t.app.Append(ref, ls, startTime(smp.st, s.createdTS), smp.t, smp.v)
		if err != nil {
			if err := t.appendFailed(kindSamples, ls, smp.t, err); err != nil {
				return ref, err
			}
			continue
		}
		ref = newRef
		t.written[kindSamples]++
	}
	return ref, nil
}

func (t *txn) appendHistograms(s *seriesRec, ls labels.Labels, ref SeriesRef) (SeriesRef, error) {
	for i := s.histograms.lo; i < s.histograms.hi; i++ {
		hr := &t.d.hists[i]
		if !t.inWindow(kindHistograms, ls, hr.t) {
			continue
		}
		h, fh := t.st.histogram(t.d, hr)
		if err := validate(h, fh); err != nil {
			t.rejectOne(kindHistograms, "invalid_histogram", "series %s: histogram at %d: %v", ls, hr.t, err)
			continue
		}
		newRef, err := t.app.AppendHistogram(ref, ls, startTime(hr.st, s.createdTS), hr.t, h, fh)
		if err != nil {
			if err := t.appendFailed(kindHistograms, ls, hr.t, err); err != nil {
				return ref, err
			}
			continue
		}
		ref = newRef
		t.written[kindHistograms]++
	}
	return ref, nil
}

// appendExemplars appends the exemplars of series s in time order. Senders
// resend exemplars, so out-of-order and duplicate exemplars are routine: the
// storage refusing one never fails the request, nor is it reported to the
// sender.
func (t *txn) appendExemplars(s *seriesRec, ls labels.Labels, ref SeriesRef) {
	st := t.st
	exs := t.d.exemplars[s.exemplars.lo:s.exemplars.hi]
	slices.SortStableFunc(exs, func(a, b exemplarRec) int { return cmp.Compare(a.ts, b.ts) })
	for j := range exs {
		e := &exs[j]
		lbls, knownUTF8, err := t.exemplarLabels(e)
		if err != nil {
			t.rejectOne(kindExemplars, "invalid_symbol_ref", "series %s: exemplar: %v", ls, err)
			continue
		}
		if reason, err := t.h.buildLabels(&st.exsb, &st.exls, lbls, true, knownUTF8); err != nil {
			t.rejectOne(kindExemplars, reason, "series %s: exemplar %s: %v", ls, describe(lbls), err)
			continue
		}
		ex := exemplar.Exemplar{Labels: st.exls, Value: e.v, Ts: e.ts, HasTs: e.ts != 0}
		newRef, err := t.app.AppendExemplar(ref, ls, ex)
		if err != nil {
			t.rejectStoredExemplar(ls, err, "remote write: exemplar not stored")
			continue
		}
		ref = newRef
		t.written[kindExemplars]++
	}
}

// exemplarLabels returns the raw labels of e and whether they are known to
// be valid UTF-8.
func (t *txn) exemplarLabels(e *exemplarRec) ([]labels.Label, bool, error) {
	if t.version == 2 {
		return t.st.resolve(t.d, t.d.exRefs[e.labels.lo:e.labels.hi], &t.st.exlb)
	}
	return t.d.exLabels[e.labels.lo:e.labels.hi], false, nil
}

// appendMetadataV1 records the 1.0 metadata, which is per metric family.
// Metadata errors never fail the request.
func (t *txn) appendMetadataV1() {
	st := t.st
	for i := range t.d.meta {
		md := &t.d.meta[i]
		if md.family == "" {
			continue
		}
		st.sb.Reset()
		st.sb.Add(model.MetricNameLabel, md.family)
		st.sb.Overwrite(&st.ls)
		meta := metadata.Metadata{Type: metricType(md.typ), Help: md.help, Unit: md.unit}
		if _, err := t.app.UpdateMetadata(0, st.ls, meta); err != nil {
			t.h.logger.Debug("remote write: metadata not stored", "family", md.family, "err", err)
		}
	}
}

// appendFailed handles an error of the Appender for an item at time at:
// bad data rejects the item, anything else is returned to fail the request.
func (t *txn) appendFailed(k kind, ls labels.Labels, at int64, err error) error {
	if !IsBadData(err) {
		return err
	}
	t.rejectOne(k, rejectReason(err), "series %s: %s at %d: %v", ls, k, at, err)
	return nil
}

// startTime is the start timestamp of a sample: its own, or that of its
// series (2.0-rc.3 senders).
func startTime(st, seriesST int64) int64 {
	if st == 0 {
		return seriesST
	}
	return st
}

func validate(h *histogram.Histogram, fh *histogram.FloatHistogram) error {
	if fh != nil {
		return fh.Validate()
	}
	return h.Validate()
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
// in sl, and returns why the series is rejected, if it is.
func (t *txn) prepareSeries(si int, sl *seriesSlot) (reason string, err error) {
	sl.meta, sl.ref = metadata.Metadata{}, 0
	st, d := t.st, t.d
	s := &d.series[si]
	var lbls []labels.Label
	knownUTF8 := false
	if t.version == 2 {
		if lbls, knownUTF8, err = st.resolve(d, d.refs[s.labels.lo:s.labels.hi], &st.lbls); err != nil {
			return "invalid_symbol_ref", fmt.Errorf("series %d: labels: %w", si, err)
		}
		if s.hasMeta {
			help, ok1 := symbol(d.symbols, s.helpRef)
			unit, ok2 := symbol(d.symbols, s.unitRef)
			if !ok1 || !ok2 {
				return "invalid_symbol_ref", fmt.Errorf("series %s: metadata refers to a symbol out of range (help %d, unit %d, %d symbols)",
					describe(lbls), s.helpRef, s.unitRef, len(d.symbols))
			}
			sl.meta = metadata.Metadata{Type: metricType(s.metaType), Help: help, Unit: unit}
		}
	} else {
		lbls = d.labels[s.labels.lo:s.labels.hi]
		knownUTF8 = s.asciiLabels
	}
	if len(st.extra) > 0 {
		st.extraLbls = extralabel.Apply(st.extraLbls[:0], lbls, st.extra)
		lbls = st.extraLbls
	}
	if reason, err := t.h.buildLabels(&sl.sb, &sl.ls, lbls, false, knownUTF8); err != nil {
		return reason, fmt.Errorf("series %s: %w", describe(lbls), err)
	}
	if t.version == 2 && s.samples.len()+s.histograms.len()+s.exemplars.len() == 0 {
		// 2.0-rc.4 allows a series with only exemplars, not one with
		// nothing.
		return "no_samples", fmt.Errorf("series %s: has no samples, histograms or exemplars", describe(lbls))
	}
	return "", nil
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
	refs := st.resolveScratch(r)
	for k, j := range st.rIdx {
		slots[j].ref = refs[k]
	}
}

// resolveScratch looks up the series st.rLsets (with their times st.rTs)
// through r, lets go of the label sets and returns their refs, valid until
// the next call.
func (st *reqState) resolveScratch(r SeriesResolver) []SeriesRef {
	st.rRefs = slices.Grow(st.rRefs[:0], len(st.rLsets))[:len(st.rLsets)]
	r.ResolveSeries(st.rLsets, st.rTs, st.rRefs)
	clear(st.rLsets)
	return st.rRefs
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
// Prometheus data model they are the same as absent labels. Label names that
// come unsorted are sorted, as Prometheus 3 does (senders that build label
// sets from maps send them in any order); a repeated name is an error.
// Exemplar labels need no metric name.
func (h *Handler) buildLabels(sb *labels.ScratchBuilder, dst *labels.Labels, lbls []labels.Label, exemplarLabels, knownUTF8 bool) (string, error) {
	o := &h.opts
	if len(lbls) > o.MaxLabelsPerSeries {
		return "limit_labels", fmt.Errorf("%d labels exceed max_labels_per_series=%d", len(lbls), o.MaxLabelsPerSeries)
	}
	sb.Reset()
	hasName, unsorted := false, false
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
				unsorted = true
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
	if !exemplarLabels && !hasName {
		return "missing_metric_name", fmt.Errorf("missing or empty metric name (%s)", model.MetricNameLabel)
	}
	if exemplarLabels || unsorted {
		sb.Sort()
	}
	sb.Overwrite(dst)
	if unsorted {
		// A repeated name is adjacent only once sorted.
		if name, dup := dst.HasDuplicateLabelNames(); dup {
			return "invalid_labels", fmt.Errorf("duplicate label name %q", trunc(name))
		}
	}
	return "", nil
}

// CheckLabels checks the labels of a series sent by another route (the
// import endpoint) as those of a remote-write request are checked: the
// limits of Options, a metric name, no repeated or empty label name, UTF-8.
// It returns the reason the remote-write metrics count such a refusal by
// ("limit_labels", "missing_metric_name" ...) and the error, or "" and nil.
func (h *Handler) CheckLabels(lset labels.Labels) (reason string, err error) {
	lbls := make([]labels.Label, 0, lset.Len())
	lset.Range(func(l labels.Label) { lbls = append(lbls, l) })
	var (
		sb  labels.ScratchBuilder
		dst labels.Labels
	)
	return h.buildLabels(&sb, &dst, lbls, false, false)
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
