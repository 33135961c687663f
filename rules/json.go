package rules

import (
	"time"
	"unicode/utf8"

	"github.com/shaledb/shale/internal/jsonenc"
)

// The answers are the JSON Prometheus writes, byte for byte: json-iterator in
// its standard-library mode, with Prometheus' encoder for labels
// (web/api/v1/json_codec.go). Strings are HTML-escaped except label names
// and values; floats are in the shortest form, with an exponent below 1e-6
// and from 1e21; times are RFC 3339 with nanoseconds. The encoders here
// append to a byte slice and depend on no encoder registered elsewhere in
// the process.

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
				dst = jsonenc.AppendEscape(append(dst, s[start:i]...), c)
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
			dst = append(dst, "0123456789abcdef"[r&0xf])
			start = i + size
		}
		i += size
	}
	return append(append(dst, s[start:]...), '"')
}

// appendTime appends t as time.Time's MarshalJSON does for the years 0 to
// 9999, the only ones an evaluation clock gives.
func appendTime(dst []byte, t time.Time) []byte {
	return append(t.AppendFormat(append(dst, '"'), time.RFC3339Nano), '"')
}
