package storage

import (
	"encoding/binary"
	"math"
	"slices"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/metadata"
	"github.com/prometheus/prometheus/tsdb/tsdbutil"
)

// FuzzDecodeLogRecord feeds arbitrary bytes to the head log decoder: it
// must return an error or entries, never panic, and what it accepts must
// encode back to an equivalent record.
func FuzzDecodeLogRecord(f *testing.F) {
	seed := []logEntry{
		{part: 0, ref: 1, t: 1000, v: 1},
		{part: 7_200_000, ref: 42, t: 7_200_001, v: math.Inf(-1)},
		{part: 0, ref: 3, t: 5, h: tsdbutil.GenerateTestHistogram(1)},
		{part: 0, ref: 4, t: 6, fh: tsdbutil.GenerateTestFloatHistogram(2)},
	}
	rec, err := appendLogRecord(nil, seed)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(rec)
	f.Add(rec[:len(rec)/2])
	whole, err := appendLogRecord(nil, []logEntry{{part: 5, ref: 9, t: 10, v: -3}, {part: 5, ref: 8, t: 10, v: math.Copysign(0, -1)}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(whole)
	f.Add([]byte{1, 1, 1, 0, 6, 2, 0, 0, 0, 0, 0, 0, 0, 0}) // version 1, no longer read
	f.Add([]byte{1, 0})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var got []logEntry
		err := decodeLogRecord(b, func(e *logEntry) error {
			got = append(got, *e)
			return nil
		})
		if err != nil {
			return
		}
		again, err := appendLogRecord(nil, got)
		if err != nil {
			t.Fatalf("re-encode accepted entries: %v", err)
		}
		n := 0
		if err := decodeLogRecord(again, func(e *logEntry) error {
			w := got[n]
			if e.part != w.part || e.ref != w.ref || e.t != w.t || math.Float64bits(e.v) != math.Float64bits(w.v) && e.h == nil && e.fh == nil {
				t.Fatalf("entry %d changed in a round trip: %+v vs %+v", n, e, w)
			}
			n++
			return nil
		}); err != nil || n != len(got) {
			t.Fatalf("decode re-encoded record: %v (%d of %d entries)", err, n, len(got))
		}
	})
}

// FuzzDecodePartitionMeta feeds arbitrary bytes to the registry decoder.
func FuzzDecodePartitionMeta(f *testing.F) {
	f.Add(partitionMeta{closed: true, maxT: 123456789}.encode())
	f.Add(partitionMeta{maxT: math.MinInt64, dataMin: noDataMin, dataMax: noDataMax}.encode())
	f.Add(partitionMeta{maxT: 7_200_000, dataMin: -5, dataMax: 7_199_999}.encode())
	f.Add(partitionMeta{closed: true, maxT: 1, dataMin: math.MinInt64, dataMax: math.MaxInt64}.encode())
	f.Add([]byte{1})
	f.Add([]byte{2, 2, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodePartitionMeta(b)
		if err != nil {
			return
		}
		m2, err := decodePartitionMeta(m.encode())
		if err != nil || m2 != m {
			t.Fatalf("round trip of %+v: %+v, %v", m, m2, err)
		}
	})
}

func FuzzDecodeMetadata(f *testing.F) {
	f.Add(encodeMetadata(nil, metadata.Metadata{Type: model.MetricTypeCounter, Unit: "bytes", Help: "Bytes sent."}))
	f.Add(encodeMetadata(nil, metadata.Metadata{}))
	f.Add([]byte{1, 200})
	f.Fuzz(func(t *testing.T, b []byte) {
		md, err := decodeMetadata(b)
		if err != nil {
			return
		}
		md2, err := decodeMetadata(encodeMetadata(nil, md))
		if err != nil || md2 != md {
			t.Fatalf("round trip of %+v: %+v, %v", md, md2, err)
		}
	})
}

// FuzzDecodeSeriesTimes feeds arbitrary bytes to the series-times decoder.
func FuzzDecodeSeriesTimes(f *testing.F) {
	f.Add([]byte{seriesTimesVersion}, uint64(7_200_001))
	f.Add([]byte{seriesTimesVersion, 0, 1, 0x80, 0xbb, 0xb6, 0x03}, uint64(7_200_001))
	f.Add([]byte{seriesTimesVersion, 0xff, 0xff, 0xff, 0xff, 0x1f}, uint64(1<<40))
	f.Add([]byte{0}, uint64(10))
	f.Fuzz(func(t *testing.T, b []byte, limit uint64) {
		got, err := decodeSeriesTimes(nil, b, limit)
		if err != nil {
			return
		}
		if len(got) > timesChunk {
			t.Fatalf("%d entries, more than a chunk", len(got))
		}
		enc := []byte{seriesTimesVersion}
		for _, d := range got {
			if uint64(d) >= limit {
				t.Fatalf("entry %d not below the limit %d", d, limit)
			}
			enc = binary.AppendUvarint(enc, uint64(d))
		}
		again, err := decodeSeriesTimes(nil, enc, limit)
		if err != nil || !slices.Equal(again, got) {
			t.Fatalf("round trip of %v: %v, %v", got, again, err)
		}
	})
}
