package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shaledb/shale/internal/promreg"
)

// bucketMetrics are the collectors shared by every MetricsBucket of one
// registry; each bucket curries them with its name.
type bucketMetrics struct {
	ops       *prometheus.CounterVec
	failures  *prometheus.CounterVec
	bytesRead *prometheus.CounterVec
	written   *prometheus.CounterVec
	duration  *prometheus.HistogramVec
}

func newBucketMetrics(reg prometheus.Registerer) (*bucketMetrics, error) {
	set := promreg.NewSet(reg)
	m := &bucketMetrics{
		ops: set.CounterVec("shale_objstore_operations_total", "Object store operations started.", "bucket", "operation"),
		failures: set.CounterVec("shale_objstore_operation_failures_total",
			"Object store operations that failed, by reason (not_found, precondition_failed, invalid_range, transient, canceled, other).",
			"bucket", "operation", "reason"),
		bytesRead: set.CounterVec("shale_objstore_bytes_read_total", "Bytes read from object bodies.", "bucket"),
		written:   set.CounterVec("shale_objstore_bytes_written_total", "Bytes of objects written successfully.", "bucket"),
		duration: set.HistogramVec(prometheus.HistogramOpts{
			Name:                            "shale_objstore_operation_duration_seconds",
			Help:                            "Time until an object store operation answered (for reads: until the body starts).",
			Buckets:                         []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30},
			NativeHistogramBucketFactor:     1.1,
			NativeHistogramMaxBucketNumber:  100,
			NativeHistogramMinResetDuration: time.Hour,
		}, "bucket", "operation"),
	}
	return m, set.Err()
}

// MetricsBucket counts and times the operations of an inner bucket. Its
// metrics carry the label bucket=<name>, so several buckets can share one
// registry.
type MetricsBucket struct {
	inner     Bucket
	ops       map[Op]prometheus.Counter
	durations map[Op]prometheus.Observer
	failures  *prometheus.CounterVec // curried with bucket
	bytesRead prometheus.Counter
	written   prometheus.Counter
}

// NewMetricsBucket wraps b and registers its metrics with reg (nil: not
// registered). Buckets on one registry share the metrics, told apart by
// name; a registration error (reg holds other metrics of those names) is
// returned.
func NewMetricsBucket(b Bucket, reg prometheus.Registerer, name string) (*MetricsBucket, error) {
	m, err := newBucketMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("objstore: metrics of bucket %s: %w", name, err)
	}
	labels := prometheus.Labels{"bucket": name}
	mb := &MetricsBucket{
		inner:     b,
		ops:       map[Op]prometheus.Counter{},
		durations: map[Op]prometheus.Observer{},
		failures:  m.failures.MustCurryWith(labels),
		bytesRead: m.bytesRead.With(labels),
		written:   m.written.With(labels),
	}
	for _, op := range Ops {
		mb.ops[op] = m.ops.WithLabelValues(name, string(op))
		mb.durations[op] = m.duration.WithLabelValues(name, string(op))
		// Expose zeros for the common reasons so rate() works from the start.
		for _, reason := range []string{"transient", "other"} {
			mb.failures.WithLabelValues(string(op), reason)
		}
	}
	return mb, nil
}

// FailureReason names the class of err for metrics and logs: not_found,
// precondition_failed, invalid_range, transient, canceled or other.
func FailureReason(err error) string {
	switch {
	case errors.Is(err, ErrNotFound):
		return "not_found"
	case errors.Is(err, ErrPreconditionFailed):
		return "precondition_failed"
	case errors.Is(err, ErrInvalidRange):
		return "invalid_range"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "canceled"
	case errors.Is(err, ErrTransient):
		return "transient"
	default:
		return "other"
	}
}

func (b *MetricsBucket) start(op Op) time.Time {
	b.ops[op].Inc()
	return time.Now()
}

func (b *MetricsBucket) done(op Op, start time.Time, err error) {
	b.durations[op].Observe(time.Since(start).Seconds())
	if err != nil {
		b.failures.WithLabelValues(string(op), FailureReason(err)).Inc()
	}
}

// countingReader counts the bytes read from an object body and the failure
// of a read that breaks off.
type countingReader struct {
	io.ReadCloser
	b  *MetricsBucket
	op Op
}

func (r *countingReader) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	r.b.bytesRead.Add(float64(n))
	if err != nil && err != io.EOF {
		r.b.failures.WithLabelValues(string(r.op), FailureReason(err)).Inc()
	}
	return n, err
}

func (b *MetricsBucket) Get(ctx context.Context, name string) (io.ReadCloser, error) {
	start := b.start(OpGet)
	rc, err := b.inner.Get(ctx, name)
	b.done(OpGet, start, err)
	if err != nil {
		return nil, err
	}
	return &countingReader{rc, b, OpGet}, nil
}

func (b *MetricsBucket) GetRange(ctx context.Context, name string, off, length int64) (io.ReadCloser, error) {
	start := b.start(OpGetRange)
	rc, err := b.inner.GetRange(ctx, name, off, length)
	b.done(OpGetRange, start, err)
	if err != nil {
		return nil, err
	}
	return &countingReader{rc, b, OpGetRange}, nil
}

func (b *MetricsBucket) Attributes(ctx context.Context, name string) (Attributes, error) {
	start := b.start(OpAttributes)
	a, err := b.inner.Attributes(ctx, name)
	b.done(OpAttributes, start, err)
	return a, err
}

// Put passes r through untouched (an io.Seeker stays one); the bytes written
// are counted from the result.
func (b *MetricsBucket) Put(ctx context.Context, name string, r io.Reader, size int64, opts PutOptions) (Attributes, error) {
	start := b.start(OpPut)
	a, err := b.inner.Put(ctx, name, r, size, opts)
	b.done(OpPut, start, err)
	if err == nil {
		b.written.Add(float64(a.Size))
	}
	return a, err
}

func (b *MetricsBucket) Delete(ctx context.Context, name string) error {
	start := b.start(OpDelete)
	err := b.inner.Delete(ctx, name)
	b.done(OpDelete, start, err)
	return err
}

func (b *MetricsBucket) List(ctx context.Context, prefix, startAfter string, limit int) (ListPage, error) {
	start := b.start(OpList)
	p, err := b.inner.List(ctx, prefix, startAfter, limit)
	b.done(OpList, start, err)
	return p, err
}

// Close closes the inner bucket.
func (b *MetricsBucket) Close() error { return b.inner.Close() }
