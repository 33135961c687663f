package importer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	promstorage "github.com/prometheus/prometheus/storage"
)

// AppendableSink writes batches through a storage appender: one
// transaction a batch, committed before Write returns (with the storage's
// WAL on, once it is durable).
type AppendableSink struct {
	app    promstorage.Appendable
	logger *slog.Logger
	// backoff bounds the waits between retries of a batch the storage
	// could not take for now.
	minBackoff, maxBackoff time.Duration
}

// NewAppendableSink returns a sink appending to app.
func NewAppendableSink(app promstorage.Appendable, logger *slog.Logger) *AppendableSink {
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
				r, err = app.AppendHistogram(ref, ser.Labels, smp.T, smp.H, smp.FH)
			} else {
				r, err = app.Append(ref, ser.Labels, smp.T, smp.V)
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
