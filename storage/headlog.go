package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/tsdb/chunkenc"

	"github.com/shaledb/shale/gorilla"
)

// A head log record holds the samples of one committed append, so that with
// the WAL on they are durable before Commit returns and can be replayed into
// the head after a crash. Records are deleted once the head has written the
// samples to sample blocks.
//
//	record  := version(1)=1 count(uvarint) entry*
//	entry   := kind(1) part(varint) ref(uvarint) t(varint) payload
//	payload := float64 bits (8, little endian)        for kind 1
//	         | len(uvarint) gorilla block of 1 sample for kinds 2 and 3
const headLogVersion = 1

const (
	logFloat          = 1
	logHistogram      = 2
	logFloatHistogram = 3
)

var errBadHeadLog = errors.New("corrupt head log record")

type logEntry struct {
	part int64
	ref  uint32
	t    int64
	v    float64
	h    *histogram.Histogram
	fh   *histogram.FloatHistogram
}

func appendLogRecord(dst []byte, entries []logEntry) ([]byte, error) {
	dst = append(dst, headLogVersion)
	dst = binary.AppendUvarint(dst, uint64(len(entries)))
	var app *gorilla.Appender
	for i := range entries {
		e := &entries[i]
		kind := byte(logFloat)
		switch {
		case e.fh != nil:
			kind = logFloatHistogram
		case e.h != nil:
			kind = logHistogram
		}
		dst = append(dst, kind)
		dst = binary.AppendVarint(dst, e.part)
		dst = binary.AppendUvarint(dst, uint64(e.ref))
		dst = binary.AppendVarint(dst, e.t)
		if kind == logFloat {
			dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(e.v))
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
	if len(b) == 0 || b[0] != headLogVersion {
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
	for i := uint64(0); i < n; i++ {
		if len(b) < 1 {
			return fmt.Errorf("%w: truncated", errBadHeadLog)
		}
		kind := b[0]
		b = b[1:]
		var ref uint64
		var ok bool
		if e.part, b, ok = readVarint(b); !ok {
			return fmt.Errorf("%w: bad partition", errBadHeadLog)
		}
		if ref, b, ok = readUvarint(b); !ok || ref > math.MaxUint32 {
			return fmt.Errorf("%w: bad series ref", errBadHeadLog)
		}
		e.ref = uint32(ref)
		if e.t, b, ok = readVarint(b); !ok {
			return fmt.Errorf("%w: bad timestamp", errBadHeadLog)
		}
		e.h, e.fh = nil, nil
		switch kind {
		case logFloat:
			if len(b) < 8 {
				return fmt.Errorf("%w: truncated value", errBadHeadLog)
			}
			e.v = math.Float64frombits(binary.LittleEndian.Uint64(b))
			b = b[8:]
		case logHistogram, logFloatHistogram:
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
