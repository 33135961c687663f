package remotewrite

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"unsafe"
)

// Protocol buffers wire types (https://protobuf.dev/programming-guides/encoding/).
const (
	wireVarint  = 0
	wireFixed64 = 1
	wireBytes   = 2
	wireFixed32 = 5
)

// ErrMalformed marks a request body that is not a valid protobuf message of
// the announced type. Decode errors wrap it.
var ErrMalformed = errors.New("malformed request")

var (
	errTruncated = fmt.Errorf("%w: truncated message", ErrMalformed)
	errVarint    = fmt.Errorf("%w: invalid varint", ErrMalformed)
)

// uvarint reads a varint at b[i:] and returns it and the next offset.
func uvarint(b []byte, i int) (uint64, int, error) {
	if i < len(b) && b[i] < 0x80 {
		return uint64(b[i]), i + 1, nil
	}
	if i >= len(b) {
		return 0, i, errTruncated
	}
	v, n := binary.Uvarint(b[i:])
	if n <= 0 {
		return 0, i, errVarint
	}
	return v, i + n, nil
}

// tag reads a field key.
func tag(b []byte, i int) (field uint64, wt int, next int, err error) {
	v, next, err := uvarint(b, i)
	if err != nil {
		return 0, 0, i, err
	}
	field = v >> 3
	if field == 0 || field > 1<<29-1 {
		return 0, 0, i, fmt.Errorf("%w: invalid field number %d", ErrMalformed, field)
	}
	return field, int(v & 7), next, nil
}

// lenDelim reads a length-delimited field body.
func lenDelim(b []byte, i int) ([]byte, int, error) {
	l, i, err := uvarint(b, i)
	if err != nil {
		return nil, i, err
	}
	if l > uint64(len(b)-i) {
		return nil, i, errTruncated
	}
	end := i + int(l)
	return b[i:end:end], end, nil
}

// bytesField reads a length-delimited field of message msg whose key gave
// wire type wt. The hottest loops check wt themselves and call lenDelim,
// which spares a call and three arguments per field.
func bytesField(b []byte, i, wt int, msg string, field uint64) ([]byte, int, error) {
	if wt != wireBytes {
		return nil, i, wrongType(msg, field, wt)
	}
	return lenDelim(b, i)
}

// varintField reads a varint field of message msg whose key gave wire type
// wt.
func varintField(b []byte, i, wt int, msg string, field uint64) (uint64, int, error) {
	if wt != wireVarint {
		return 0, i, wrongType(msg, field, wt)
	}
	return uvarint(b, i)
}

// doubleField reads a double field of message msg whose key gave wire type
// wt.
func doubleField(b []byte, i, wt int, msg string, field uint64) (float64, int, error) {
	if wt != wireFixed64 {
		return 0, i, wrongType(msg, field, wt)
	}
	return double(b, i)
}

func fixed64(b []byte, i int) (uint64, int, error) {
	if len(b)-i < 8 {
		return 0, i, errTruncated
	}
	return binary.LittleEndian.Uint64(b[i:]), i + 8, nil
}

func double(b []byte, i int) (float64, int, error) {
	v, i, err := fixed64(b, i)
	return math.Float64frombits(v), i, err
}

// skip passes over a field of an unknown number.
func skip(b []byte, i int, wt int) (int, error) {
	switch wt {
	case wireVarint:
		_, i, err := uvarint(b, i)
		return i, err
	case wireBytes:
		_, i, err := lenDelim(b, i)
		return i, err
	case wireFixed64, wireFixed32:
		size := 8
		if wt == wireFixed32 {
			size = 4
		}
		if len(b)-i < size {
			return i, errTruncated
		}
		return i + size, nil
	default:
		return i, fmt.Errorf("%w: unsupported wire type %d", ErrMalformed, wt)
	}
}

func wrongType(msg string, field uint64, wt int) error {
	return fmt.Errorf("%w: %s field %d has wire type %d", ErrMalformed, msg, field, wt)
}

// yoloString returns a string that shares b's memory. The caller guarantees
// that b is not modified while the string is in use.
func yoloString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

func zigzag32(v uint64) int32 {
	u := uint32(v)
	return int32(u>>1) ^ -int32(u&1)
}

func zigzag64(v uint64) int64 {
	return int64(v>>1) ^ -int64(v&1)
}

// ref32 truncates a decoded varint to uint32, as protobuf does for uint32
// fields.
func ref32(v uint64) uint32 { return uint32(v) }
