package remotewrite

import (
	"context"
	"errors"

	"github.com/prometheus/prometheus/model/exemplar"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/metadata"
	"github.com/prometheus/prometheus/storage"
)

// SeriesRef is an opaque series handle returned by an [Appender]. It is the
// upstream storage.SeriesRef so that a storage engine built on the upstream
// types can satisfy [Appender] without importing this package.
type SeriesRef = storage.SeriesRef

// Appendable hands out appenders. It is implemented by the storage engine.
type Appendable interface {
	// Appender returns an Appender for one remote-write request. The handler
	// calls it once per request, from the request's goroutine, before it
	// reads the request's body (so that the storage knows a commit is on its
	// way: see storage/lsm Options.WALMinInterval), and finishes the Appender
	// with exactly one call to Commit or Rollback; a request refused before
	// anything is appended (a body that does not decode, say) is rolled
	// back. ctx is the request context; it is cancelled when the client goes
	// away.
	Appender(ctx context.Context) Appender
}

// Appender receives the decoded content of one remote-write request.
//
// Ownership: every argument (the labels and their strings, histograms and
// their span and bucket slices, exemplar labels, metadata strings) aliases
// buffers the handler reuses for the next series or the next request. They
// are valid only for the duration of the call. An Appender must copy (for
// labels: labels.Labels.Copy, or its own interning; for histograms: Copy) what
// it keeps, and must not modify what it is given.
//
// References: ref is 0 or a value this Appender returned earlier in the same
// request for the same label set. The handler passes the ref returned by the
// first call for a series to every later call for that series, so the Appender
// can skip the label lookup. A returned ref of 0 means "none"; the handler then
// passes 0 again. Refs never outlive the Appender.
//
// Errors: the handler classifies every error an Appender method returns (see
// [IsBadData], [IsOverloaded]). Bad data rejects only that sample and the rest
// of the request is still written (partial write, 400 to the sender).
// Overload rolls the request back and answers 429; any other error rolls the
// request back and answers 500 so that the sender retries.
//
// An Appender is used from one goroutine only.
type Appender interface {
	// Append adds a float sample. t is the sample time in milliseconds since
	// the Unix epoch. st is the start (created) timestamp of the series in
	// milliseconds, or 0 when unknown; remote write 1.0 never carries one. A
	// storage that supports it should store a zero sample at st when
	// 0 < st < t and no sample exists at st, as Prometheus does; otherwise it
	// ignores st. Stale markers (value.StaleNaN) and ±Inf must be kept
	// bit-exact.
	Append(ref SeriesRef, lset labels.Labels, st, t int64, v float64) (SeriesRef, error)

	// AppendHistogram adds a native histogram sample, integer (h != nil) or
	// float (fh != nil); exactly one of h and fh is set. The histogram has
	// already passed Validate, including custom-bucket (schema -53)
	// histograms. st is as for Append.
	AppendHistogram(ref SeriesRef, lset labels.Labels, st, t int64, h *histogram.Histogram, fh *histogram.FloatHistogram) (SeriesRef, error)

	// AppendExemplar adds an exemplar to the series. It is called after the
	// samples of the series, exemplars sorted by timestamp. A rejected
	// exemplar never fails the request.
	AppendExemplar(ref SeriesRef, lset labels.Labels, e exemplar.Exemplar) (SeriesRef, error)

	// UpdateMetadata records the metadata of a series. For remote write 2.0
	// it is called for every series, before its samples, with ref 0 and with
	// empty metadata when the series carries none; the metadata describes the
	// samples appended next. Remote write 1.0 carries metadata per metric
	// family, after all series: lset is then just {__name__="<family>"}.
	// Metadata errors never fail the request.
	UpdateMetadata(ref SeriesRef, lset labels.Labels, m metadata.Metadata) (SeriesRef, error)

	// Commit makes everything appended durable (or applied, without a WAL)
	// before it returns nil; only then is the request acknowledged.
	Commit() error

	// Rollback discards everything appended.
	Rollback() error
}

// SeriesResolver is an Appender that can look up many series at once. The
// handler gives it the label sets of a batch of a request's series before
// appending their samples, so that the storage can overlap the memory loads
// of many lookups rather than wait for each in turn.
type SeriesResolver interface {
	Appender

	// ResolveSeries sets refs[i] to a ref of the series lsets[i], whose
	// first sample in the request is at time ts[i] (ms), or to 0 when it
	// has none to give (a new series, say). The refs follow the rules of
	// refs an Appender returns. The label sets are valid, and alias the
	// handler's buffers, as for Append.
	ResolveSeries(lsets []labels.Labels, ts []int64, refs []SeriesRef)
}

// ErrOverloaded may be returned (wrapped) by an Appender, or produced by the
// handler's own in-flight limit, to ask the sender to back off: 429.
var ErrOverloaded = errors.New("overloaded")

// IsBadData reports whether err says that the data can never be written, so
// that the sender must drop it rather than retry (400). It recognises the
// upstream storage errors (out of order, out of bounds, too old, duplicate
// sample, native histograms disabled), native histogram validation errors, and
// any error in the chain with a method BadData() bool that returns true.
func IsBadData(err error) bool {
	if err == nil {
		return false
	}
	switch {
	case errors.Is(err, storage.ErrOutOfOrderSample),
		errors.Is(err, storage.ErrOutOfBounds),
		errors.Is(err, storage.ErrTooOldSample),
		errors.Is(err, storage.ErrDuplicateSampleForTimestamp),
		errors.Is(err, storage.ErrNativeHistogramsDisabled),
		errors.Is(err, storage.ErrOutOfOrderExemplar),
		errors.Is(err, storage.ErrDuplicateExemplar),
		errors.Is(err, storage.ErrExemplarLabelLength),
		errors.Is(err, storage.ErrExemplarsDisabled):
		return true
	}
	var he histogram.Error
	if errors.As(err, &he) {
		return true
	}
	var bd interface{ BadData() bool }
	return errors.As(err, &bd) && bd.BadData()
}

// IsUnavailable reports whether err says that the storage could not make the
// data durable in time (its object store is slow or failing), so that the
// sender must retry later (503 with Retry-After): it has a method
// Unavailable() bool that returns true.
func IsUnavailable(err error) bool {
	var u interface{ Unavailable() bool }
	return err != nil && errors.As(err, &u) && u.Unavailable()
}

// IsOverloaded reports whether err asks the sender to back off (429): it is
// or wraps [ErrOverloaded], or has a method Overloaded() bool that returns
// true.
func IsOverloaded(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrOverloaded) {
		return true
	}
	var ol interface{ Overloaded() bool }
	return errors.As(err, &ol) && ol.Overloaded()
}

// rejectReason names the label value of the *_rejected_total metrics for an
// error the storage returned for bad data.
func rejectReason(err error) string {
	var named interface{ RejectReason() string }
	if errors.As(err, &named) {
		return named.RejectReason()
	}
	switch {
	case errors.Is(err, storage.ErrOutOfOrderSample), errors.Is(err, storage.ErrOutOfOrderExemplar):
		return "out_of_order"
	case errors.Is(err, storage.ErrOutOfBounds):
		return "out_of_bounds"
	case errors.Is(err, storage.ErrTooOldSample):
		return "too_old"
	case errors.Is(err, storage.ErrDuplicateSampleForTimestamp), errors.Is(err, storage.ErrDuplicateExemplar):
		return "duplicate"
	case errors.Is(err, storage.ErrNativeHistogramsDisabled), errors.Is(err, storage.ErrExemplarsDisabled):
		return "disabled"
	}
	var he histogram.Error
	if errors.As(err, &he) {
		return "invalid_histogram"
	}
	return "bad_data"
}

// exemplarRejectReason names why the storage refused an exemplar and says
// whether that is unexpected (worth a warning): exemplars for series the
// storage does not know (exemplar-only 2.0 series) are routine.
func exemplarRejectReason(err error) (reason string, unexpected bool) {
	switch {
	case IsBadData(err):
		return rejectReason(err), false
	case errors.Is(err, storage.ErrNotFound):
		return "unknown_series", false
	}
	return "storage_error", true
}
