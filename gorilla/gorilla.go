// Package gorilla is Shale's sample block codec. A block holds the samples of
// one series in time order: float samples (timestamp in ms, float64 value) or
// native histograms (integer or float counts), and is self-describing.
//
// Float blocks use delta-of-delta timestamps and XOR values as in the Gorilla
// paper when nothing better fits, and otherwise pick, per block, the smallest
// of several integer encodings: values that are integers or fixed-point
// decimals are stored as scaled integers, timestamps and integers as
// residuals against a predicted step, and residuals with a prefix code whose
// bucket widths are fitted to the block. Constant values and regular scrape
// intervals therefore cost no bits per sample at all. Every float64 round
// trips bit-exactly, including NaN payloads such as the Prometheus stale
// marker, ±Inf and -0.
//
// Histogram samples are stored as Prometheus chunkenc histogram chunks inside
// a block. The format is described in docs/format/gorilla.md.
//
// A block is decoded by an Iterator, which implements chunkenc.Iterator and
// reuses its allocations across Reset calls. A float block whose values take
// bits carries a seek table, so that a reader of a time range
// (Iterator.ResetRange) decodes its values from the point before the range
// rather than from the block's start. An Appender builds a block one
// sample at a time with little memory. Merge combines blocks in time order.
package gorilla

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/shaledb/shale/corrupt"
)

// ErrCorrupt marks a block that cannot be decoded: it was truncated, altered
// or never was a block. Test for it with errors.Is; it wraps corrupt.Err.
var ErrCorrupt = corrupt.New("gorilla: corrupt block")

// ErrOutOfOrder is returned when a sample is not newer than the last one
// appended.
var ErrOutOfOrder = errors.New("gorilla: sample out of order")

// ErrKindChange is returned by an Appender when a sample's kind (float,
// histogram, float histogram) differs from the samples already appended. The
// caller cuts the block and starts a new Appender.
var ErrKindChange = errors.New("gorilla: sample kind changed")

// ErrTooManySamples is returned when a block would hold more than
// MaxBlockSamples samples.
var ErrTooManySamples = errors.New("gorilla: too many samples in one block")

// MaxBlockSamples bounds the samples of one block, so that a decoder never
// allocates more than a known amount for a block it has not checked yet.
const MaxBlockSamples = 1 << 21

// Kind is what a block holds.
type Kind uint8

const (
	// KindFloat blocks hold float samples only.
	KindFloat Kind = 1
	// KindHistogram blocks hold integer native histograms only.
	KindHistogram Kind = 2
	// KindFloatHistogram blocks hold float native histograms only.
	KindFloatHistogram Kind = 3
	// KindMixed blocks hold runs of samples of different kinds; they come
	// from merging blocks of different kinds.
	KindMixed Kind = 4
)

func (k Kind) String() string {
	switch k {
	case KindFloat:
		return "float"
	case KindHistogram:
		return "histogram"
	case KindFloatHistogram:
		return "floathistogram"
	case KindMixed:
		return "mixed"
	default:
		return fmt.Sprintf("kind(%d)", uint8(k))
	}
}

// Meta describes a block without decoding its samples.
type Meta struct {
	Kind  Kind
	Count int
	// MinTime and MaxTime are the first and last sample timestamps in ms,
	// both inclusive.
	MinTime int64
	MaxTime int64
}

// ReadMeta reads the header of a block. It does not check the samples; an
// Iterator does.
func ReadMeta(block []byte) (Meta, error) {
	var h header
	if _, err := h.parse(block); err != nil {
		return Meta{}, err
	}
	return Meta{Kind: h.kind, Count: h.count, MinTime: h.mint, MaxTime: h.maxt}, nil
}

// header is the part common to every block kind:
//
//	kind byte | count uvarint | mint varint | maxt-mint uvarint (only if count > 1)
type header struct {
	kind       Kind
	count      int
	mint, maxt int64
}

func appendHeader(dst []byte, kind Kind, count int, mint, maxt int64) []byte {
	dst = append(dst, byte(kind))
	dst = binary.AppendUvarint(dst, uint64(count))
	dst = binary.AppendVarint(dst, mint)
	if count > 1 {
		dst = binary.AppendUvarint(dst, uint64(maxt-mint))
	}
	return dst
}

// parse reads the header from b and returns the number of bytes it used.
func (h *header) parse(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, corruptf("empty block")
	}
	h.kind = Kind(b[0])
	if h.kind < KindFloat || h.kind > KindMixed {
		return 0, corruptf("unknown block kind %d", b[0])
	}
	n := 1
	c, m := binary.Uvarint(b[n:])
	if m <= 0 {
		return 0, corruptf("bad sample count")
	}
	n += m
	if c == 0 || c > MaxBlockSamples {
		return 0, corruptf("sample count %d out of range", c)
	}
	h.count = int(c)
	h.mint, m = binary.Varint(b[n:])
	if m <= 0 {
		return 0, corruptf("bad min time")
	}
	n += m
	h.maxt = h.mint
	if h.count > 1 {
		span, m := binary.Uvarint(b[n:])
		if m <= 0 {
			return 0, corruptf("bad time span")
		}
		n += m
		// With strictly increasing timestamps, count samples span at least
		// count-1 ms, and the last one must not wrap around.
		if span < uint64(h.count-1) {
			return 0, corruptf("time span %d does not fit %d samples", span, h.count)
		}
		h.maxt = h.mint + int64(span) // wraps below mint exactly when it overflows
		if h.maxt < h.mint {
			return 0, corruptf("time span %d overflows from %d", span, h.mint)
		}
	}
	return n, nil
}

func corruptf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...))
}
