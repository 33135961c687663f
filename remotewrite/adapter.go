package remotewrite

import (
	"context"
	"errors"
	"strings"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/exemplar"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/metadata"
	"github.com/prometheus/prometheus/storage"
)

// FromAppendableV2 adapts an upstream storage.AppendableV2 to Appendable.
// Start timestamps are passed as st; the metadata of a 2.0 series is attached
// to its samples through AppendV2Options.Metadata, with MetricFamilyName set;
// exemplars go through storage.ExemplarAppenderV2 when the appender implements
// it and are otherwise rejected with storage.ErrExemplarsDisabled; 1.0
// per-family metadata is dropped, as the upstream receiver does.
//
// Upstream lets an AppenderV2 keep metadata strings and exemplars, so the
// adapter hands it copies of those (one allocation per distinct metadata and
// per exemplar). Series labels and histograms still alias reused buffers, as
// the Appender contract says: the wrapped appender must copy what it keeps
// (Shale's storage does).
func FromAppendableV2(a storage.AppendableV2) Appendable {
	return appendableV2{a}
}

type appendableV2 struct{ a storage.AppendableV2 }

func (a appendableV2) Appender(ctx context.Context) Appender {
	app := a.a.AppenderV2(ctx)
	ex, _ := app.(storage.ExemplarAppenderV2)
	return &appenderV2{app: app, ex: ex}
}

type appenderV2 struct {
	app  storage.AppenderV2
	ex   storage.ExemplarAppenderV2
	opts storage.AppendV2Options
	one  [1]exemplar.Exemplar
}

func (a *appenderV2) Append(ref SeriesRef, lset labels.Labels, st, t int64, v float64) (SeriesRef, error) {
	return a.app.Append(ref, lset, st, t, v, nil, nil, a.opts)
}

func (a *appenderV2) AppendHistogram(ref SeriesRef, lset labels.Labels, st, t int64, h *histogram.Histogram, fh *histogram.FloatHistogram) (SeriesRef, error) {
	return a.app.Append(ref, lset, st, t, 0, h, fh, a.opts)
}

func (a *appenderV2) AppendExemplar(ref SeriesRef, lset labels.Labels, e exemplar.Exemplar) (SeriesRef, error) {
	if a.ex == nil {
		return ref, storage.ErrExemplarsDisabled
	}
	e.Labels = e.Labels.Copy()
	a.one[0] = e
	newRef, err := a.ex.AppendExemplars(ref, lset, a.one[:])
	a.one[0] = exemplar.Exemplar{}
	if pe, ok := errors.AsType[*storage.AppendPartialError](err); ok && len(pe.ExemplarErrors) > 0 {
		return newRef, pe.ExemplarErrors[0].Err
	}
	return newRef, err
}

func (a *appenderV2) UpdateMetadata(ref SeriesRef, lset labels.Labels, m metadata.Metadata) (SeriesRef, error) {
	// 1.0 family metadata arrives after the last sample, so it attaches to
	// nothing: upstream AppenderV2 has no per-family metadata.
	if m.IsEmpty() {
		a.opts.Metadata, a.opts.MetricFamilyName = metadata.Metadata{}, ""
		return ref, nil
	}
	if m.Type != a.opts.Metadata.Type || m.Help != a.opts.Metadata.Help || m.Unit != a.opts.Metadata.Unit {
		a.opts.Metadata = metadata.Metadata{Type: m.Type, Help: strings.Clone(m.Help), Unit: strings.Clone(m.Unit)}
	}
	if name := lset.Get(model.MetricNameLabel); name != a.opts.MetricFamilyName {
		a.opts.MetricFamilyName = strings.Clone(name)
	}
	return ref, nil
}

func (a *appenderV2) Commit() error   { return a.app.Commit() }
func (a *appenderV2) Rollback() error { return a.app.Rollback() }
