package storage

import (
	"context"
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/exemplar"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/metadata"
	promstorage "github.com/prometheus/prometheus/storage"
)

// IngestAppender is the appender the remote-write receiver uses: one per
// request, from one goroutine. Labels, histograms and exemplars it is given
// may alias the caller's buffers; it copies what it keeps.
//
// The refs it returns index the series it met in this request (see
// ResolveSeries); they are meaningless to any other appender.
//
// Labels given to ResolveSeries, and to an Append that returned a new ref,
// must stay unchanged until the next ResolveSeries, Commit or Rollback: an
// Append whose ref was given since the last ResolveSeries, with labels equal
// to those the ref was given for, goes to the ref's series without the
// series' labels being read from the index again.
type IngestAppender struct {
	a   appender
	buf *ingestBuffers
	// gen is the first index of buf.series given since the last
	// ResolveSeries.
	gen int
}

// ingestBuffers are the buffers of one ingest appender, recycled through
// ingestPool when it finishes: a request appends hundreds of samples, and
// growing the buffers anew for each was most of the bytes the ingest
// allocated per sample.
type ingestBuffers struct {
	pending []pendingSample
	// series are the series met in the request; ref i+1 is series[i],
	// met with the labels lsets[i].
	series []*memSeries
	lsets  []labels.Labels
	// Scratch of ResolveSeries.
	hashes []uint64
	found  []*memSeries
	refs   []int64
}

var ingestPool = sync.Pool{New: func() any { return new(ingestBuffers) }}

// maxPooledPending bounds the buffers kept (48 bytes a sample).
const maxPooledPending = 1 << 14

// IngestAppender returns an appender for one remote-write request.
func (db *DB) IngestAppender(ctx context.Context) *IngestAppender {
	buf := ingestPool.Get().(*ingestBuffers)
	ia := &IngestAppender{a: appender{db: db, ctx: ctx, pending: buf.pending[:0]}, buf: buf}
	ia.a.expect()
	return ia
}

// release gives the buffers back to the pool once the transaction is over.
func (ia *IngestAppender) release(pending []pendingSample) {
	buf := ia.buf
	if buf == nil {
		return
	}
	ia.buf = nil
	if cap(pending) > maxPooledPending || cap(buf.series) > maxPooledPending {
		return
	}
	// What lies beyond len is zero already.
	clear(pending)
	clear(buf.series)
	clear(buf.found)
	clear(buf.lsets)
	buf.pending, buf.series, buf.lsets = pending[:0], buf.series[:0], buf.lsets[:0]
	ingestPool.Put(buf)
}

// ResolveSeries sets refs[i] to a ref of the series lsets[i] of the open
// partition of time ts[i] if the head holds it, else to 0; Append then
// finds the series by its ref. Looking up a request's series together, under
// one lock and in one pass over the dictionary, lets the CPU overlap their
// cache misses, which dominated the cost of a sample of a known series.
func (ia *IngestAppender) ResolveSeries(lsets []labels.Labels, ts []int64, refs []promstorage.SeriesRef) {
	db := ia.a.db
	buf := ia.buf
	clear(refs)
	if buf == nil || ia.a.done || db.readOnly || len(lsets) == 0 {
		return
	}
	ia.gen = len(buf.series)
	buf.hashes = slices.Grow(buf.hashes[:0], len(lsets))[:len(lsets)]
	buf.found = slices.Grow(buf.found[:0], len(lsets))[:len(lsets)]
	for i, lset := range lsets {
		buf.hashes[i] = lset.Hash()
	}
	// Runs of series in one partition: usually the whole request.
	for i := 0; i < len(lsets); {
		start := db.partitionOf(ts[i])
		j := i + 1
		for j < len(lsets) && db.partitionOf(ts[j]) == start {
			j++
		}
		if p := db.head.openPart(start); p != nil {
			buf.refs = p.getMany(buf.hashes[i:j], lsets[i:j], buf.found[i:j], buf.refs[:0])
		} else {
			clear(buf.found[i:j])
		}
		i = j
	}
	for i, s := range buf.found {
		if s != nil {
			buf.series = append(buf.series, s)
			buf.lsets = append(buf.lsets, lsets[i])
			refs[i] = promstorage.SeriesRef(len(buf.series))
		}
	}
	clear(buf.found)
}

// hint makes the series that ref names, if any, the first one the appender
// tries for the next sample, and returns it. If ref was given since the last
// ResolveSeries for labels equal to lset, the appender takes the series
// without reading its labels from the index (until unhint).
func (ia *IngestAppender) hint(ref promstorage.SeriesRef, lset labels.Labels) *memSeries {
	if ia.buf == nil || ref == 0 || uint64(ref) > uint64(len(ia.buf.series)) {
		return nil
	}
	s := ia.buf.series[ref-1]
	ia.a.last = s
	if int(ref-1) >= ia.gen && labels.Equal(lset, ia.buf.lsets[ref-1]) {
		ia.a.known = s
	}
	return s
}

// unhint ends what hint said.
func (ia *IngestAppender) unhint() { ia.a.known = nil }

// refOf returns the ref of the series the last append went to: the ref the
// caller gave if it names that series, else a new one.
func (ia *IngestAppender) refOf(ref promstorage.SeriesRef, lset labels.Labels, hinted *memSeries) promstorage.SeriesRef {
	s := ia.a.last
	if s == nil || ia.buf == nil {
		return 0
	}
	if s == hinted {
		return ref
	}
	ia.buf.series = append(ia.buf.series, s)
	ia.buf.lsets = append(ia.buf.lsets, lset)
	return promstorage.SeriesRef(len(ia.buf.series))
}

// Append adds a float sample. When 0 < st < t and the series has nothing at
// or after st yet, a zero sample is stored at st first, as Prometheus does
// with created timestamps.
func (ia *IngestAppender) Append(ref promstorage.SeriesRef, lset labels.Labels, st, t int64, v float64) (promstorage.SeriesRef, error) {
	hinted := ia.hint(ref, lset)
	defer ia.unhint()
	ia.stZero(lset, st, t, nil, nil)
	if _, err := ia.a.Append(0, lset, 0, t, v, nil, nil, promstorage.AppendV2Options{}); err != nil {
		return 0, err
	}
	return ia.refOf(ref, lset, hinted), nil
}

// AppendHistogram adds a native histogram sample (h or fh).
func (ia *IngestAppender) AppendHistogram(ref promstorage.SeriesRef, lset labels.Labels, st, t int64, h *histogram.Histogram, fh *histogram.FloatHistogram) (promstorage.SeriesRef, error) {
	hinted := ia.hint(ref, lset)
	defer ia.unhint()
	ia.stZero(lset, st, t, h, fh)
	if _, err := ia.a.Append(0, lset, 0, t, 0, h, fh, promstorage.AppendV2Options{}); err != nil {
		return 0, err
	}
	return ia.refOf(ref, lset, hinted), nil
}

// stZero stores the zero sample of a created timestamp when it is new: as in
// Prometheus, only when the series has no sample at or after it, neither
// stored nor earlier in the same transaction (a zero sample at the time of a
// pending sample would replace it).
func (ia *IngestAppender) stZero(lset labels.Labels, st, t int64, h *histogram.Histogram, fh *histogram.FloatHistogram) {
	if st <= 0 || st >= t {
		return
	}
	a := &ia.a
	if a.newestPending == nil {
		a.newestPending = make(map[uint64]int64)
		for _, ps := range a.pending {
			a.notePending(ps.s.lset().Hash(), ps.smp.t)
		}
	}
	if newest, ok := a.newestPending[lset.Hash()]; ok && newest >= st {
		return
	}
	if s := ia.a.last; s != nil && (s == ia.a.known || s.is(lset)) {
		s.lock()
		known := s.maxT() >= st
		s.unlock()
		if known {
			return
		}
	}
	var zh *histogram.Histogram
	var zfh *histogram.FloatHistogram
	switch {
	case h != nil:
		zh = &histogram.Histogram{Schema: h.Schema, ZeroThreshold: h.ZeroThreshold, CustomValues: h.CustomValues, CounterResetHint: histogram.CounterReset}
	case fh != nil:
		zfh = &histogram.FloatHistogram{Schema: fh.Schema, ZeroThreshold: fh.ZeroThreshold, CustomValues: fh.CustomValues, CounterResetHint: histogram.CounterReset}
	}
	// A zero sample that cannot be stored (out of order, too old) is
	// dropped: it only helps rate() at the series' start.
	_, _ = ia.a.Append(0, lset, 0, st, 0, zh, zfh, promstorage.AppendV2Options{RejectOutOfOrder: true})
}

// AppendExemplar adds an exemplar of the series.
func (ia *IngestAppender) AppendExemplar(ref promstorage.SeriesRef, lset labels.Labels, e exemplar.Exemplar) (promstorage.SeriesRef, error) {
	e.Labels = e.Labels.Copy()
	ia.a.ex = append(ia.a.ex, pendingExemplar{lset: lset.Copy(), e: e})
	return ref, nil
}

// UpdateMetadata records the metadata of a metric family.
func (ia *IngestAppender) UpdateMetadata(ref promstorage.SeriesRef, lset labels.Labels, m metadata.Metadata) (promstorage.SeriesRef, error) {
	ia.a.updateMetadata(lset, m)
	return ref, nil
}

// updateMetadata queues the metadata m of the family of the series lset,
// copying what it keeps.
func (a *appender) updateMetadata(lset labels.Labels, m metadata.Metadata) {
	if m.IsEmpty() {
		// Nothing to record: a remote-write 2.0 sender that sends no
		// metadata leaves the type unspecified (unknown) and no help or
		// unit, which must not replace what another sender said.
		return
	}
	family := lset.Get(model.MetricNameLabel)
	if family == "" {
		return
	}
	a.queueMetadata(metricFamily(family, m), m, true)
}

// queueMetadata queues m as the metadata of family, unless the transaction
// holds the same already; a different m replaces the transaction's earlier
// one (the later wins, as it would when stored in order). clone copies the
// strings kept. Remote write 2.0 sends metadata with every series, so most
// of a request's repeat their family's, one after another.
func (a *appender) queueMetadata(family string, m metadata.Metadata, clone bool) {
	i, ok := len(a.meta)-1, false
	if i >= 0 && a.meta[i].family == family {
		ok = true
	} else {
		i, ok = a.metaAt[family]
	}
	if ok && a.meta[i].m == m {
		return
	}
	if clone {
		m = metadata.Metadata{Type: model.MetricType(strings.Clone(string(m.Type))), Help: strings.Clone(m.Help), Unit: strings.Clone(m.Unit)}
	}
	if ok {
		a.meta[i].m = m
		return
	}
	if clone {
		family = strings.Clone(family)
	}
	if a.metaAt == nil {
		a.metaAt = make(map[string]int)
	}
	a.metaAt[family] = len(a.meta)
	a.meta = append(a.meta, pendingMetadata{family: family, m: m})
}

// metricFamily strips the suffixes a series name adds to its family name
// (histogram and summary series), so metadata is keyed as Prometheus keys it.
func metricFamily(name string, m metadata.Metadata) string {
	switch m.Type {
	case "histogram", "gaugehistogram":
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			if len(name) > len(suf) && name[len(name)-len(suf):] == suf {
				return name[:len(name)-len(suf)]
			}
		}
	case "summary":
		for _, suf := range []string{"_sum", "_count"} {
			if len(name) > len(suf) && name[len(name)-len(suf):] == suf {
				return name[:len(name)-len(suf)]
			}
		}
	}
	return name
}

// Commit stores the request's samples (durably, with the WAL on).
func (ia *IngestAppender) Commit() error {
	err := ia.a.Commit()
	if ia.a.done {
		ia.release(ia.a.pending)
		ia.a.pending, ia.a.last = nil, nil
	}
	return err
}

// Rollback drops the request's samples.
func (ia *IngestAppender) Rollback() error {
	pending := ia.a.pending
	err := ia.a.Rollback()
	ia.release(pending)
	ia.a.last = nil
	return err
}
