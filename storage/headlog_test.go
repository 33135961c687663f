package storage

import (
	"math"
	"testing"

	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/tsdb/tsdbutil"
)

func TestLogRecordRoundTrip(t *testing.T) {
	entries := []logEntry{
		{part: 7_200_000, ref: 5, t: 7_200_015, v: 1},
		{part: 7_200_000, ref: 6, t: 7_200_015, v: 0},
		{part: 7_200_000, ref: 4, t: 7_200_030, v: math.Copysign(0, -1)},
		{part: 0, ref: 1 << 31, t: 15, v: -(1 << 53) + 1},
		{part: 0, ref: 0, t: -1, v: 1 << 53},
		{part: 0, ref: math.MaxUint32, t: math.MaxInt64, v: 0.1},
		{part: math.MinInt64 + 1, ref: 2, t: math.MinInt64, v: math.NaN()},
		{part: 0, ref: 3, t: 0, v: math.Float64frombits(value.StaleNaN)},
		{part: 0, ref: 3, t: 1, v: math.Inf(1)},
		{part: 0, ref: 3, t: 2, v: -12345678},
		{part: 0, ref: 7, t: 5, h: tsdbutil.GenerateTestHistogram(1)},
		{part: 0, ref: 8, t: 6, fh: tsdbutil.GenerateTestFloatHistogram(2)},
	}
	rec, err := appendLogRecord(nil, entries)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	err = decodeLogRecord(rec, func(e *logEntry) error {
		w := entries[n]
		n++
		if e.part != w.part || e.ref != w.ref || e.t != w.t {
			t.Errorf("entry %d: got part %d ref %d t %d, want %d %d %d", n-1, e.part, e.ref, e.t, w.part, w.ref, w.t)
		}
		switch {
		case w.h != nil:
			if e.h == nil || !e.h.Equals(w.h) {
				t.Errorf("entry %d: histogram %v, want %v", n-1, e.h, w.h)
			}
		case w.fh != nil:
			if e.fh == nil || !e.fh.Equals(w.fh) {
				t.Errorf("entry %d: float histogram %v, want %v", n-1, e.fh, w.fh)
			}
		case math.Float64bits(e.v) != math.Float64bits(w.v):
			t.Errorf("entry %d: value bits %x, want %x", n-1, math.Float64bits(e.v), math.Float64bits(w.v))
		}
		return nil
	})
	if err != nil || n != len(entries) {
		t.Fatalf("decode: %v after %d of %d entries", err, n, len(entries))
	}
}

// TestLogRecordSize: one request's worth of samples of consecutive series
// at one scrape costs a few bytes per sample besides values.
func TestLogRecordSize(t *testing.T) {
	var entries []logEntry
	for ref := uint32(1000); ref < 1500; ref++ {
		entries = append(entries, logEntry{part: 1_764_000_000_000, ref: ref, t: 1_764_000_015_000, v: float64(ref) * 1024})
	}
	rec, err := appendLogRecord(nil, entries)
	if err != nil {
		t.Fatal(err)
	}
	// kind + part delta + ref delta + time delta = 4 bytes, value <= 4.
	if per := float64(len(rec)) / float64(len(entries)); per > 8 {
		t.Fatalf("%.1f bytes per sample", per)
	}
}
