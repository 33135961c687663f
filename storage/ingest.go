package storage

import (
	"context"
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
type IngestAppender struct {
	a appender
}

// IngestAppender returns an appender for one remote-write request.
func (db *DB) IngestAppender(ctx context.Context) *IngestAppender {
	ia := &IngestAppender{a: appender{db: db, ctx: ctx}}
	if buf, ok := pendingPool.Get().(*[]pendingSample); ok {
		ia.a.pending = *buf
	}
	return ia
}

// pendingPool recycles the pending-sample buffers of finished ingest
// appenders: a request appends hundreds of samples, and growing a buffer
// for each was most of the bytes the ingest allocated per sample.
var pendingPool sync.Pool // of *[]pendingSample

// maxPooledPending bounds the buffers kept (48 bytes a sample).
const maxPooledPending = 1 << 14

// recycle gives the buffer of a finished transaction back to the pool.
func recycle(pending []pendingSample) {
	if cap(pending) == 0 || cap(pending) > maxPooledPending {
		return
	}
	clear(pending) // what lies beyond len is zero already
	pending = pending[:0]
	pendingPool.Put(&pending)
}

// Append adds a float sample. When 0 < st < t and the series has nothing at
// or after st yet, a zero sample is stored at st first, as Prometheus does
// with created timestamps.
func (ia *IngestAppender) Append(ref promstorage.SeriesRef, lset labels.Labels, st, t int64, v float64) (promstorage.SeriesRef, error) {
	ia.stZero(lset, st, t, nil, nil)
	return ia.a.Append(ref, lset, 0, t, v, nil, nil, promstorage.AppendV2Options{})
}

// AppendHistogram adds a native histogram sample (h or fh).
func (ia *IngestAppender) AppendHistogram(ref promstorage.SeriesRef, lset labels.Labels, st, t int64, h *histogram.Histogram, fh *histogram.FloatHistogram) (promstorage.SeriesRef, error) {
	ia.stZero(lset, st, t, h, fh)
	return ia.a.Append(ref, lset, 0, t, 0, h, fh, promstorage.AppendV2Options{})
}

// stZero stores the zero sample of a created timestamp when it is new.
func (ia *IngestAppender) stZero(lset labels.Labels, st, t int64, h *histogram.Histogram, fh *histogram.FloatHistogram) {
	if st <= 0 || st >= t {
		return
	}
	if s := ia.a.last; s != nil && labels.Equal(s.lset, lset) {
		s.mu.Lock()
		known := s.maxT >= st
		s.mu.Unlock()
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
	if m.Type == "" && m.Help == "" && m.Unit == "" {
		return ref, nil
	}
	family := lset.Get(model.MetricNameLabel)
	if family == "" {
		return ref, nil
	}
	ia.a.meta = append(ia.a.meta, pendingMetadata{
		family: strings.Clone(metricFamily(family, m)),
		m:      metadata.Metadata{Type: model.MetricType(strings.Clone(string(m.Type))), Help: strings.Clone(m.Help), Unit: strings.Clone(m.Unit)},
	})
	return ref, nil
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
		recycle(ia.a.pending)
		ia.a.pending = nil
	}
	return err
}

// Rollback drops the request's samples.
func (ia *IngestAppender) Rollback() error {
	pending := ia.a.pending
	err := ia.a.Rollback()
	recycle(pending)
	return err
}
