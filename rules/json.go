package rules

import (
	"math"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/prometheus/prometheus/model/labels"
)

// The answers are the JSON Prometheus writes, byte for byte: json-iterator in
// its standard-library mode, with Prometheus' encoder for labels
// (web/api/v1/json_codec.go). Strings are HTML-escaped except label names
// and values; floats are in the shortest form, with an exponent below 1e-6
// and from 1e21; times are RFC 3339 with nanoseconds. The encoders here
// append to a byte slice and depend on no encoder registered elsewhere in
// the process.

// appendList appends a JSON array of xs.
func appendList[T any](dst []byte, xs []T, appendOne func([]byte, T) []byte) []byte {
	dst = append(dst, '[')
	for i, x := range xs {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendOne(dst, x)
	}
	return append(dst, ']')
}

// appendLabels appends ls as an object in label order.
func appendLabels(dst []byte, ls labels.Labels) []byte {
	dst = append(dst, '{')
	first := true
	ls.Range(func(l labels.Label) {
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = appendString(append(appendString(dst, l.Name), ':'), l.Value)
	})
	return append(dst, '}')
}

const hexDigits = "0123456789abcdef"

// appendString quotes s as json-iterator's Stream.WriteString does: control
// characters, quotes and backslashes escaped, every other byte as it is.
func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' {
			dst = appendEscape(append(dst, s[start:i]...), c)
			start = i + 1
		}
	}
	return append(append(dst, s[start:]...), '"')
}

// appendHTMLString quotes s as json-iterator's standard-library mode does
// (and encoding/json did before Go 1.22): also <, > and & escaped, invalid
// UTF-8 replaced by U+FFFD, U+2028 and U+2029 escaped.
func appendHTMLString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c < 0x20 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
				dst = appendEscape(append(dst, s[start:i]...), c)
				start = i + 1
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(append(dst, s[start:i]...), `\ufffd`...)
			start = i + size
		case r == '\u2028' || r == '\u2029':
			dst = append(append(dst, s[start:i]...), `\u202`...)
			dst = append(dst, hexDigits[r&0xf])
			start = i + size
		}
		i += size
	}
	return append(append(dst, s[start:]...), '"')
}

func appendEscape(dst []byte, c byte) []byte {
	switch c {
	case '"', '\\':
		return append(dst, '\\', c)
	case '\n':
		return append(dst, '\\', 'n')
	case '\r':
		return append(dst, '\\', 'r')
	case '\t':
		return append(dst, '\\', 't')
	}
	return append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
}

// appendFloat appends f as json-iterator writes a float64 (finite: the
// durations here always are).
func appendFloat(dst []byte, f float64) []byte {
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	return strconv.AppendFloat(dst, f, format, -1, 64)
}

// appendTime appends t as time.Time's MarshalJSON does for the years 0 to
// 9999, the only ones an evaluation clock gives.
func appendTime(dst []byte, t time.Time) []byte {
	return append(t.AppendFormat(append(dst, '"'), time.RFC3339Nano), '"')
}
