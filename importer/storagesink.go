package importer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	promstorage "github.com/prometheus/prometheus/storage"
)

// Appender is one transaction of the storage the import writes to. It is
// used from one goroutine.
type Appender interface {
	// Append adds a float sample of the series lset at t (ms). ref is 0 or
	// what the previous Append or AppendHistogram of this transaction
	// returned for the same lset (the appender may then skip looking the
	// series up); st is 0 (no created timestamp). Stale markers and ±Inf
	// must be kept bit-exact. An error with a method BadData() bool
	// returning true, or wrapping one of the storage package's sample
	// errors (ErrOutOfBounds ...), refuses this sample only.
	Append(ref promstorage.SeriesRef, lset labels.Labels, st, t int64, v float64) (promstorage.SeriesRef, error)
	// AppendHistogram adds a native histogram sample (exactly one of h and
	// fh set), already validated, as Append.
	AppendHistogram(ref promstorage.SeriesRef, lset labels.Labels, st, t int64, h *histogram.Histogram, fh *histogram.FloatHistogram) (promstorage.SeriesRef, error)
	// Commit stores what was appended; with a write-ahead log it returns
	// once that is durable. An error with a method Unavailable() bool or
	// Overloaded() bool returning true may be retried.
	Commit() error
	// Rollback drops what was appended.
	Rollback() error
}

// Appendable gives appenders; it is safe for concurrent use.
type Appendable interface {
	Appender(ctx context.Context) Appender
}

// AppendableSink writes batches through a storage appender: one
// transaction a batch, committed before Write returns (with the storage's
// WAL on, once it is durable).
type AppendableSink struct {
	app    Appendable
	logger *slog.Logger
	// backoff bounds the waits between retries of a batch the storage
	// could not take for now.
	minBackoff, maxBackoff time.Duration
}

// NewAppendableSink returns a sink appending to app.
func NewAppendableSink(app Appendable, logger *slog.Logger) *AppendableSink {
	return &AppendableSink{app: app, logger: logger, minBackoff: 100 * time.Millisecond, maxBackoff: 10 * time.Second}
}

// Write implements Sink.
func (s *AppendableSink) Write(ctx context.Context, b Batch) (Refused, error) {
	wait := s.minBackoff
	for {
		refused, err := s.write(ctx, b)
		if err == nil || !retryable(err) {
			return refused, err
		}
		s.logger.Warn("import: the storage could not take a batch; retrying it", "err", err, "in", wait)
		select {
		case <-ctx.Done():
			return Refused{}, fmt.Errorf("%w (retrying after: %w)", context.Cause(ctx), err)
		case <-time.After(wait):
		}
		wait = min(2*wait, s.maxBackoff)
	}
}

func (s *AppendableSink) write(ctx context.Context, b Batch) (Refused, error) {
	var refused Refused
	app := s.app.Appender(ctx)
	for _, ser := range b {
		var ref promstorage.SeriesRef
		for _, smp := range ser.Samples {
			var err error
			var r promstorage.SeriesRef
			if smp.IsHistogram() {
				if err := validHistogram(smp); err != nil {
					refused.Add(true, "invalid native histogram")
					continue
				}
				r, err = app.AppendHistogram(ref, ser.Labels, 0, smp.T, smp.H, smp.FH)
			} else {
				r, err = app.Append(ref, ser.Labels, 0, smp.T, smp.V)
			}
			if err != nil {
				if reason, bad := refusal(err); bad {
					refused.Add(smp.IsHistogram(), reason)
					continue
				}
				_ = app.Rollback()
				return Refused{}, fmt.Errorf("append to %s: %w", ser.Labels, err)
			}
			ref = r
		}
	}
	if err := app.Commit(); err != nil {
		return Refused{}, fmt.Errorf("commit: %w", err)
	}
	return refused, nil
}

func validHistogram(s Sample) error {
	if s.H != nil {
		return s.H.Validate()
	}
	return s.FH.Validate()
}

// refusal returns the reason a sample is refused for good when err says
// so; a retry cannot change the answer.
func refusal(err error) (string, bool) {
	switch {
	case errors.Is(err, promstorage.ErrOutOfBounds):
		return "older than the retention", true
	case errors.Is(err, promstorage.ErrOutOfOrderSample):
		return "out of order", true
	case errors.Is(err, promstorage.ErrDuplicateSampleForTimestamp):
		return "another value at the same timestamp", true
	case errors.Is(err, promstorage.ErrTooOldSample):
		return "too old", true
	}
	var bd interface{ BadData() bool }
	if errors.As(err, &bd) && bd.BadData() {
		msg := err.Error()
		if i := strings.IndexByte(msg, ':'); i > 0 {
			msg = msg[:i]
		}
		return msg, true
	}
	return "", false
}

// retryable reports whether err is one the storage may not give again: it
// was overloaded, or the object store was failing.
func retryable(err error) bool {
	var u interface{ Unavailable() bool }
	if errors.As(err, &u) && u.Unavailable() {
		return true
	}
	var o interface{ Overloaded() bool }
	return errors.As(err, &o) && o.Overloaded()
}
