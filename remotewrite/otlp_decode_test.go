package remotewrite

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// kv joins encoded fields, in the order given.
func kv(fields ...[]byte) []byte {
	var b []byte
	for _, f := range fields {
		b = append(b, f...)
	}
	return b
}

func lenField(num protowire.Number, v []byte) []byte {
	b := protowire.AppendTag(nil, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

// TestAppendKeyValue covers the fast path for string attributes, in both
// field orders, and the cases it leaves to the general loop: each must
// decode as the general loop decodes it.
func TestAppendKeyValue(t *testing.T) {
	str := func(s string) []byte { return lenField(1, []byte(s)) }
	long := strings.Repeat("x", 200)
	intValue := protowire.AppendVarint(protowire.AppendTag(nil, 3, protowire.VarintType), 42)
	for _, tc := range []struct {
		name       string
		b          []byte
		key, value string
	}{
		{"key first", kv(lenField(1, []byte("k")), lenField(2, str("v"))), "k", "v"},
		{"value first, as pdata writes", kv(lenField(2, str("v")), lenField(1, []byte("k"))), "k", "v"},
		{"empty key", kv(lenField(2, str("v")), lenField(1, nil)), "", "v"},
		{"empty value", kv(lenField(1, []byte("k")), lenField(2, nil)), "k", ""},
		{"long key", kv(lenField(1, []byte(long)), lenField(2, str("v"))), long, "v"},
		{"long value", kv(lenField(2, str(long)), lenField(1, []byte("k"))), "k", long},
		{"int value", kv(lenField(1, []byte("k")), lenField(2, intValue)), "k", "42"},
		{"string value, then an int value that replaces it", kv(lenField(1, []byte("k")), lenField(2, append(str("v"), intValue...))), "k", "42"},
		{"key twice: the last wins", kv(lenField(1, []byte("a")), lenField(2, str("v")), lenField(1, []byte("k"))), "k", "v"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := appendKeyValue(nil, tc.b)
			if err != nil {
				t.Fatal(err)
			}
			if want := []otlpAttr{{key: tc.key, value: tc.value}}; len(got) != 1 || got[0] != want[0] {
				t.Fatalf("got %+v, want %+v", got, want)
			}
		})
	}
}

// TestFieldsErrors checks that the field walker ends at the first error,
// with the error the collector's decoder would give the sender.
func TestFieldsErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    []byte
		want string
	}{
		{"string_value as a varint", kv(lenField(1, []byte("k")), lenField(2, protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 1))), "field 1 of AnyValue has wire type 0"},
		{"length past the end", []byte{0x0a, 0x05, 'k'}, "length past the end"},
		{"field number 0", []byte{0x02, 0x00}, "field number 0"},
		{"truncated key", []byte{0x80}, "truncated or overlong varint"},
		{"end of a group never started", []byte{0x4c}, "end of group 9 without a start"},
		{"unterminated group", []byte{0x4b}, "truncated or overlong varint"},
		{"group, then a field", []byte{0x4b, 0x4c, 0x48, 0x01}, ""},
		{"group that ends the message", []byte{0x4b, 0x4c}, "unterminated group"}, // as the collector's decoder says
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := appendKeyValue(nil, tc.b)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an ErrMalformed saying %q", err, tc.want)
			}
		})
	}
}
