package remotewrite

import (
	"errors"
	"fmt"
	"time"
)

// Options are the settings of the receiver. Zero values are not defaults:
// start from DefaultOptions and call Validate.
type Options struct {
	// MaxCompressedBytes bounds the snappy-compressed request body (413).
	MaxCompressedBytes int64 `yaml:"max_compressed_bytes" json:"max_compressed_bytes"`
	// MaxDecompressedBytes bounds the decoded protobuf message (413). It is
	// checked against the length stored in the snappy header before the
	// buffer is allocated.
	MaxDecompressedBytes int64 `yaml:"max_decompressed_bytes" json:"max_decompressed_bytes"`
	// MaxSeriesPerRequest bounds the number of TimeSeries messages (413).
	MaxSeriesPerRequest int `yaml:"max_series_per_request" json:"max_series_per_request"`
	// MaxLabelsPerSeries bounds the labels of one series (400 for that
	// series; the rest of the request is written).
	MaxLabelsPerSeries int `yaml:"max_labels_per_series" json:"max_labels_per_series"`
	// MaxLabelNameLength bounds a label name in bytes (400 for that series).
	MaxLabelNameLength int `yaml:"max_label_name_length" json:"max_label_name_length"`
	// MaxLabelValueLength bounds a label value in bytes (400 for that
	// series).
	MaxLabelValueLength int `yaml:"max_label_value_length" json:"max_label_value_length"`
	// MaxFutureSkew rejects samples, histograms and exemplars timestamped
	// more than this ahead of the receiver's clock (400 for those samples).
	MaxFutureSkew time.Duration `yaml:"max_future_skew" json:"max_future_skew"`
	// MaxSampleAge, when positive, rejects samples older than this (400 for
	// those samples). 0 leaves the decision to the storage.
	MaxSampleAge time.Duration `yaml:"max_sample_age" json:"max_sample_age"`
	// MaxInflightRequests bounds requests being decoded and appended at
	// once; one more is answered 429 with Retry-After. 0 means no limit.
	MaxInflightRequests int `yaml:"max_inflight_requests" json:"max_inflight_requests"`
	// MaxInflightBytes bounds the memory of the requests being received,
	// decoded and appended at once, counting each one's body as its bytes
	// arrive and again as decompressed: one that would go beyond it beside
	// others is answered 429 with Retry-After, one alone is always let in. Without it,
	// max_inflight_requests requests of max_compressed_bytes that
	// decompress to max_decompressed_bytes could hold 20 GiB at once.
	// 0 means no limit.
	MaxInflightBytes int64 `yaml:"max_inflight_bytes" json:"max_inflight_bytes"`
	// RetryAfter is the Retry-After sent with a 429, and with a 503 when the
	// storage could not make a write durable in time.
	RetryAfter time.Duration `yaml:"retry_after" json:"retry_after"`
	// MaxErrorMessages bounds how many per-series problems a 400 body
	// lists; the rest are summarised as a count.
	MaxErrorMessages int `yaml:"max_error_messages" json:"max_error_messages"`
}

// DefaultOptions returns the default settings.
func DefaultOptions() Options {
	return Options{
		MaxCompressedBytes:   16 << 20,
		MaxDecompressedBytes: 64 << 20,
		MaxSeriesPerRequest:  1_000_000,
		MaxLabelsPerSeries:   128,
		MaxLabelNameLength:   1024,
		MaxLabelValueLength:  4096,
		MaxFutureSkew:        10 * time.Minute,
		MaxSampleAge:         0,
		MaxInflightRequests:  256,
		MaxInflightBytes:     1 << 30,
		RetryAfter:           time.Second,
		MaxErrorMessages:     10,
	}
}

// nonNegative refuses a negative setting (nil otherwise), printing a
// duration as one (10m0s).
func nonNegative[T ~int | ~int64](name string, v T) error {
	if v < 0 {
		return fmt.Errorf("%s must not be negative, got %v", name, v)
	}
	return nil
}

// Validate reports settings that cannot work.
func (o Options) Validate() error {
	var errs []error
	positive := func(name string, v int64) {
		if v <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive, got %d", name, v))
		}
	}
	positive("max_compressed_bytes", o.MaxCompressedBytes)
	positive("max_decompressed_bytes", o.MaxDecompressedBytes)
	positive("max_series_per_request", int64(o.MaxSeriesPerRequest))
	positive("max_labels_per_series", int64(o.MaxLabelsPerSeries))
	positive("max_label_name_length", int64(o.MaxLabelNameLength))
	positive("max_label_value_length", int64(o.MaxLabelValueLength))
	if o.MaxDecompressedBytes > 0 && o.MaxDecompressedBytes > 1<<31-1 {
		errs = append(errs, fmt.Errorf("max_decompressed_bytes must be below 2 GiB, got %d", o.MaxDecompressedBytes))
	}
	errs = append(errs,
		nonNegative("max_future_skew", o.MaxFutureSkew),
		nonNegative("max_sample_age", o.MaxSampleAge),
		nonNegative("max_inflight_requests", o.MaxInflightRequests),
		nonNegative("max_inflight_bytes", o.MaxInflightBytes),
		nonNegative("retry_after", o.RetryAfter))
	if o.MaxErrorMessages < 1 {
		errs = append(errs, fmt.Errorf("max_error_messages must be at least 1, got %d", o.MaxErrorMessages))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("remotewrite options: %w", err)
	}
	return nil
}
