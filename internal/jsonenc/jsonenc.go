// Package jsonenc appends the JSON forms Prometheus' HTTP API writes through
// json-iterator (strings, labels, floats, arrays) to byte slices, without
// reflection and without depending on encoders registered elsewhere in the
// process. The query API and the rules API both answer with these bytes.
package jsonenc

import (
	"math"
	"strconv"

	"github.com/prometheus/prometheus/model/labels"
)

const hexDigits = "0123456789abcdef"

// AppendList appends a JSON array of xs, each written by appendOne.
func AppendList[T any](dst []byte, xs []T, appendOne func([]byte, T) []byte) []byte {
	dst = append(dst, '[')
	for i, x := range xs {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendOne(dst, x)
	}
	return append(dst, ']')
}

// AppendLabels appends ls as an object in label order.
func AppendLabels(dst []byte, ls labels.Labels) []byte {
	dst = append(dst, '{')
	first := true
	ls.Range(func(l labels.Label) {
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = AppendString(append(AppendString(dst, l.Name), ':'), l.Value)
	})
	return append(dst, '}')
}

// AppendString quotes s as json-iterator's Stream.WriteString does: control
// characters, quotes and backslashes escaped, every other byte as it is.
func AppendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' {
			dst = AppendEscape(append(dst, s[start:i]...), c)
			start = i + 1
		}
	}
	return append(append(dst, s[start:]...), '"')
}

// AppendEscape appends the escaped form of the ASCII byte c.
func AppendEscape(dst []byte, c byte) []byte {
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

// AppendFloat appends f as json-iterator writes a float64, in exponent form
// below 1e-6 and from 1e21 as JavaScript does (unquoted; f finite).
func AppendFloat(dst []byte, f float64) []byte {
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	return strconv.AppendFloat(dst, f, format, -1, 64)
}
