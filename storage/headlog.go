package storage

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/tsdb/chunkenc"

	"github.com/shaledb/shale/corrupt"
	"github.com/shaledb/shale/gorilla"
)

// A head log record holds the samples of one committed append, so that with
// the WAL on they are durable before Commit returns and can be replayed into
// the head after a crash. Records live only in the LSM's WAL (lsm.DB.Log);
// each head flush truncates the log up to the records it wrote out.
//
//	record  := version(1)=2 count(uvarint) entry*
//	entry   := kind(1) dpart(varint) dref(varint) dt(varint) payload
//	payload := float64 bits (8, little endian)           for kind 1
//	         | value(varint)                             for kind 4
//	         | len(uvarint) gorilla block of 1 sample    for kinds 2 and 3
//
// dpart, dref and dt are differences from the previous entry's partition,
// series ref and timestamp (the first entry's from zero): the entries of one
// request share a partition and mostly a timestamp and have near refs.
// Kind 4 holds a float that is a whole number of magnitude below 2^53 (not
// -0): counters and many gauges take 1 to 5 bytes instead of 8.
//
// Version 1 (absolute partitions, refs and timestamps) is no longer read:
// no release wrote it.
const headLogV2 = 2

const (
	logFloat          = 1
	logHistogram      = 2
	logFloatHistogram = 3
	logFloatInt       = 4
)

var errBadHeadLog = corrupt.New("storage: corrupt head log record")

type logEntry struct {
	part int64
	ref  uint32
	t    int64
	v    float64
	h    *histogram.Histogram
	fh   *histogram.FloatHistogram
}

// wholeFloat reports whether v is an integer that kind 4 holds exactly.
func wholeFloat(v float64) (int64, bool) {
	const limit = 1 << 53
	if v != math.Trunc(v) || v <= -limit || v >= limit || (v == 0 && math.Signbit(v)) {
		return 0, false // also NaN and the infinities
	}
	return int64(v), true
}

func appendLogRecord(dst []byte, entries []logEntry) ([]byte, error) {
	dst = append(dst, headLogV2)
	dst = binary.AppendUvarint(dst, uint64(len(entries)))
	var app *gorilla.Appender
	var part, ref, t int64
	for i := range entries {
		e := &entries[i]
		kind := byte(logFloat)
		iv, whole := int64(0), false
		switch {
		case e.fh != nil:
			kind = logFloatHistogram
		case e.h != nil:
			kind = logHistogram
		default:
			if iv, whole = wholeFloat(e.v); whole {
				kind = logFloatInt
			}
		}
		dst = append(dst, kind)
		dst = binary.AppendVarint(dst, e.part-part)
		dst = binary.AppendVarint(dst, int64(e.ref)-ref)
		dst = binary.AppendVarint(dst, e.t-t)
		part, ref, t = e.part, int64(e.ref), e.t
		switch kind {
		case logFloat:
			dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(e.v))
			continue
		case logFloatInt:
			dst = binary.AppendVarint(dst, iv)
			continue
		}
		app = gorilla.NewAppender()
		var err error
		if kind == logHistogram {
			err = app.AppendHistogram(e.t, e.h)
		} else {
			err = app.AppendFloatHistogram(e.t, e.fh)
		}
		if err != nil {
			return nil, fmt.Errorf("encode histogram sample of series %d: %w", e.ref, err)
		}
		blk := app.AppendBlock(nil)
		dst = binary.AppendUvarint(dst, uint64(len(blk)))
		dst = append(dst, blk...)
	}
	return dst, nil
}

// decodeLogRecord calls fn for each entry of a record in order.
func decodeLogRecord(b []byte, fn func(e *logEntry) error) error {
	if len(b) == 0 || b[0] != headLogV2 {
		return fmt.Errorf("%w: unknown version", errBadHeadLog)
	}
	b = b[1:]
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)) {
		return fmt.Errorf("%w: bad entry count", errBadHeadLog)
	}
	b = b[k:]
	var it gorilla.Iterator
	var e logEntry
	var part, ref, t int64
	for i := uint64(0); i < n; i++ {
		if len(b) < 1 {
			return fmt.Errorf("%w: truncated", errBadHeadLog)
		}
		kind := b[0]
		b = b[1:]
		var dpart, dref, dt int64
		var ok bool
		if dpart, b, ok = readVarint(b); !ok {
			return fmt.Errorf("%w: bad partition", errBadHeadLog)
		}
		if dref, b, ok = readVarint(b); !ok {
			return fmt.Errorf("%w: bad series ref", errBadHeadLog)
		}
		if dt, b, ok = readVarint(b); !ok {
			return fmt.Errorf("%w: bad timestamp", errBadHeadLog)
		}
		part, ref, t = part+dpart, ref+dref, t+dt
		if ref < 0 || ref > math.MaxUint32 {
			return fmt.Errorf("%w: bad series ref %d", errBadHeadLog, ref)
		}
		e.part, e.ref, e.t = part, uint32(ref), t
		e.h, e.fh = nil, nil
		switch {
		case kind == logFloat:
			if len(b) < 8 {
				return fmt.Errorf("%w: truncated value", errBadHeadLog)
			}
			e.v = math.Float64frombits(binary.LittleEndian.Uint64(b))
			b = b[8:]
		case kind == logFloatInt:
			var iv int64
			if iv, b, ok = readVarint(b); !ok {
				return fmt.Errorf("%w: bad value", errBadHeadLog)
			}
			e.v = float64(iv)
		case kind == logHistogram || kind == logFloatHistogram:
			var l uint64
			if l, b, ok = readUvarint(b); !ok || l > uint64(len(b)) {
				return fmt.Errorf("%w: bad histogram length", errBadHeadLog)
			}
			if err := it.Reset(b[:l]); err != nil {
				return fmt.Errorf("%w: %w", errBadHeadLog, err)
			}
			b = b[l:]
			switch it.Next() {
			case chunkenc.ValHistogram:
				_, e.h = it.AtHistogram(nil)
			case chunkenc.ValFloatHistogram:
				_, e.fh = it.AtFloatHistogram(nil)
			default:
				return fmt.Errorf("%w: histogram entry without a histogram sample", errBadHeadLog)
			}
		default:
			return fmt.Errorf("%w: unknown entry kind %d", errBadHeadLog, kind)
		}
		if err := fn(&e); err != nil {
			return err
		}
	}
	if len(b) != 0 {
		return fmt.Errorf("%w: %d trailing bytes", errBadHeadLog, len(b))
	}
	return nil
}

func readVarint(b []byte) (int64, []byte, bool) {
	v, n := binary.Varint(b)
	if n <= 0 {
		return 0, b, false
	}
	return v, b[n:], true
}

func readUvarint(b []byte) (uint64, []byte, bool) {
	v, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, b, false
	}
	return v, b[n:], true
}
