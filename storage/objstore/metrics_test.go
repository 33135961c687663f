package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestMetricsCount(t *testing.T) {
	reg := prometheus.NewRegistry()
	fault := NewFaultBucket(NewMemoryBucket())
	b := newMetricsBucket(t, fault, reg, "main")
	ctx := t.Context()

	PutBytes(ctx, b, "a", []byte("hello"), PutOptions{})
	PutBytes(ctx, b, "b", []byte("world!"), PutOptions{})
	PutBytes(ctx, b, "a", []byte("again"), PutOptions{IfAbsent: true}) // precondition_failed
	ReadAll(ctx, b, "a")                                               // 5 bytes
	ReadRange(ctx, b, "b", 1, 3)                                       // 3 bytes
	ReadAll(ctx, b, "missing")                                         // not_found
	ReadRange(ctx, b, "a", 100, 1)                                     // invalid_range
	fault.FailNext(OpList, 1, nil)
	b.List(ctx, "", "", 0) // transient
	b.List(ctx, "", "", 0)
	b.Attributes(ctx, "a")
	b.Delete(ctx, "b")

	counter := func(name string, labels ...string) float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
		metric:
			for _, m := range mf.GetMetric() {
				have := map[string]string{}
				for _, lp := range m.GetLabel() {
					have[lp.GetName()] = lp.GetValue()
				}
				for i := 0; i < len(labels); i += 2 {
					if have[labels[i]] != labels[i+1] {
						continue metric
					}
				}
				if m.Counter != nil {
					return m.Counter.GetValue()
				}
				return float64(m.Histogram.GetSampleCount())
			}
		}
		return -1
	}
	for _, tc := range []struct {
		metric string
		labels []string
		want   float64
	}{
		{"shale_objstore_operations_total", []string{"bucket", "main", "operation", "put"}, 3},
		{"shale_objstore_operations_total", []string{"operation", "get"}, 2},
		{"shale_objstore_operations_total", []string{"operation", "get_range"}, 2},
		{"shale_objstore_operations_total", []string{"operation", "list"}, 2},
		{"shale_objstore_operations_total", []string{"operation", "attributes"}, 1},
		{"shale_objstore_operations_total", []string{"operation", "delete"}, 1},
		{"shale_objstore_operation_failures_total", []string{"operation", "put", "reason", "precondition_failed"}, 1},
		{"shale_objstore_operation_failures_total", []string{"operation", "get", "reason", "not_found"}, 1},
		{"shale_objstore_operation_failures_total", []string{"operation", "get_range", "reason", "invalid_range"}, 1},
		{"shale_objstore_operation_failures_total", []string{"operation", "list", "reason", "transient"}, 1},
		{"shale_objstore_operation_failures_total", []string{"operation", "attributes", "reason", "transient"}, 0},
		{"shale_objstore_bytes_read_total", []string{"bucket", "main"}, 8},
		{"shale_objstore_bytes_written_total", []string{"bucket", "main"}, 11},
		{"shale_objstore_operation_duration_seconds", []string{"operation", "put"}, 3},
		{"shale_objstore_operation_duration_seconds", []string{"operation", "list"}, 2},
	} {
		if got := counter(tc.metric, tc.labels...); got != tc.want {
			t.Errorf("%s%v = %v, want %v", tc.metric, tc.labels, got, tc.want)
		}
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP shale_objstore_bytes_written_total Bytes of objects written successfully.
# TYPE shale_objstore_bytes_written_total counter
shale_objstore_bytes_written_total{bucket="main"} 11
`), "shale_objstore_bytes_written_total"); err != nil {
		t.Fatal(err)
	}
}

func TestMetricsShareRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	a := newMetricsBucket(t, NewMemoryBucket(), reg, "a")
	b := newMetricsBucket(t, NewMemoryBucket(), reg, "b")
	again := newMetricsBucket(t, NewMemoryBucket(), reg, "a") // same name: shares the series
	PutBytes(t.Context(), a, "x", []byte("1"), PutOptions{})
	PutBytes(t.Context(), again, "x", []byte("1"), PutOptions{})
	PutBytes(t.Context(), b, "x", []byte("22"), PutOptions{})
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP shale_objstore_bytes_written_total Bytes of objects written successfully.
# TYPE shale_objstore_bytes_written_total counter
shale_objstore_bytes_written_total{bucket="a"} 2
shale_objstore_bytes_written_total{bucket="b"} 2
`), "shale_objstore_bytes_written_total"); err != nil {
		t.Fatal(err)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Fatalf("lint: %v %v", problems, err)
	}
}

type brokenBody struct{}

func (brokenBody) Read([]byte) (int, error) { return 0, Transient(errors.New("reset")) }
func (brokenBody) Close() error             { return nil }

func TestMetricsCountBrokenBody(t *testing.T) {
	b := newMetricsBucket(t, NewMemoryBucket(), nil, "x")
	r := &countingReader{brokenBody{}, b, OpGet}
	if _, err := io.ReadAll(r); !IsTransient(err) {
		t.Fatalf("err = %v", err)
	}
	if got := testutil.ToFloat64(b.failures.WithLabelValues("get", "transient")); got != 1 {
		t.Fatalf("failures = %v", got)
	}
}

func TestFailureReason(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{ErrNotFound, "not_found"},
		{Transient(ErrNotFound), "not_found"},
		{ErrPreconditionFailed, "precondition_failed"},
		{ErrInvalidRange, "invalid_range"},
		{Transient(errors.New("x")), "transient"},
		{fmt.Errorf("get: %w; last error: %w", context.Canceled, Transient(errors.New("x"))), "canceled"},
		{context.DeadlineExceeded, "canceled"},
		{errors.Join(errors.New("x"), errors.ErrUnsupported), "other"},
	} {
		if got := FailureReason(tc.err); got != tc.want {
			t.Errorf("FailureReason(%v) = %s, want %s", tc.err, got, tc.want)
		}
	}
}

func newMetricsBucket(t *testing.T, b Bucket, reg prometheus.Registerer, name string) *MetricsBucket {
	t.Helper()
	m, err := NewMetricsBucket(b, reg, name)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// A registry that holds other metrics of the bucket's names is an error at
// construction, not a panic and not metrics silently missing.
func TestMetricsRegistryConflict(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "shale_objstore_operations_total", Help: "someone else's"}))
	if _, err := NewMetricsBucket(NewMemoryBucket(), reg, "a"); err == nil {
		t.Fatal("no error with a conflicting metric in the registry")
	}
}
