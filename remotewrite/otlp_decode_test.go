package remotewrite

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/otlptranslator"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
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
			got, err := (&otlpMetrics{}).appendKeyValue(nil, tc.b)
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
			_, err := (&otlpMetrics{}).appendKeyValue(nil, tc.b)
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

// TestOTLPInvalidUTF8 checks that a string which is not valid UTF-8 is
// refused from every place a label can take it, although labels skip their
// own check when the decoder found the whole request valid: each request
// has one good point and one with the bad string, of which only the good
// one is written.
func TestOTLPInvalidUTF8(t *testing.T) {
	const bad = "\xff\xfe"
	long := strings.Repeat("v", 200) // past the attributes' fast path
	utf8Names := func(o *OTLPOptions) { o.TranslationStrategy = otlptranslator.NoUTF8EscapingWithSuffixes }
	scopeLabels := func(o *OTLPOptions) { o.PromoteScopeMetadata = true }
	for _, tc := range []struct {
		name string
		opts func(*OTLPOptions)
		// set spoils the point's resource, scope, metric or point.
		set func(r pcommon.Resource, s pcommon.InstrumentationScope, m pmetric.Metric, p pmetric.NumberDataPoint)
	}{
		{"attribute value", nil, func(_ pcommon.Resource, _ pcommon.InstrumentationScope, _ pmetric.Metric, p pmetric.NumberDataPoint) {
			p.Attributes().PutStr("a", bad)
		}},
		{"long attribute value", nil, func(_ pcommon.Resource, _ pcommon.InstrumentationScope, _ pmetric.Metric, p pmetric.NumberDataPoint) {
			p.Attributes().PutStr("a", long+bad)
		}},
		{"attribute key", utf8Names, func(_ pcommon.Resource, _ pcommon.InstrumentationScope, _ pmetric.Metric, p pmetric.NumberDataPoint) {
			p.Attributes().PutStr("a"+bad, "v")
		}},
		{"service.name", nil, func(r pcommon.Resource, _ pcommon.InstrumentationScope, _ pmetric.Metric, _ pmetric.NumberDataPoint) {
			r.Attributes().PutStr("service.name", bad)
		}},
		{"service.instance.id", nil, func(r pcommon.Resource, _ pcommon.InstrumentationScope, _ pmetric.Metric, _ pmetric.NumberDataPoint) {
			r.Attributes().PutStr("service.instance.id", long+bad)
		}},
		{"scope name", scopeLabels, func(_ pcommon.Resource, s pcommon.InstrumentationScope, _ pmetric.Metric, _ pmetric.NumberDataPoint) {
			s.SetName("lib" + bad)
		}},
		{"scope attribute", scopeLabels, func(_ pcommon.Resource, s pcommon.InstrumentationScope, _ pmetric.Metric, _ pmetric.NumberDataPoint) {
			s.SetName("lib")
			s.Attributes().PutStr("a", bad)
		}},
		{"metric name", utf8Names, func(_ pcommon.Resource, _ pcommon.InstrumentationScope, m pmetric.Metric, _ pmetric.NumberDataPoint) {
			m.SetName("bad" + bad)
		}},
		{"unit", utf8Names, func(_ pcommon.Resource, _ pcommon.InstrumentationScope, m pmetric.Metric, _ pmetric.NumberDataPoint) {
			m.SetUnit("By" + bad)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			md := pmetric.NewMetrics()
			for i, spoil := range []bool{false, true} {
				rm := md.ResourceMetrics().AppendEmpty()
				rm.Resource().Attributes().PutStr("service.name", "svc")
				sm := rm.ScopeMetrics().AppendEmpty()
				m := sm.Metrics().AppendEmpty()
				m.SetName("g" + strconv.Itoa(i))
				p := m.SetEmptyGauge().DataPoints().AppendEmpty()
				p.SetTimestamp(otlpTS(testNow))
				p.SetDoubleValue(1)
				if spoil {
					tc.set(rm.Resource(), sm.Scope(), m, p)
				}
			}
			rec := newRecorder()
			oh, _ := newOTLPHandler(t, rec, nil, tc.opts)
			w := post(t, oh, ContentTypeOTLPProto, "", otlpProto(t, md))
			if w.Code != http.StatusOK {
				t.Fatalf("status %d: %s", w.Code, w.Body)
			}
			ps := exportResponse(t, ContentTypeOTLPProto, w.Body.Bytes()).PartialSuccess()
			if ps.RejectedDataPoints() != 1 || !strings.Contains(ps.ErrorMessage(), "not valid UTF-8") {
				t.Fatalf("partial success %d %q, want the spoilt point refused as not valid UTF-8", ps.RejectedDataPoints(), ps.ErrorMessage())
			}
			if n := len(rec.series); n != 1 {
				t.Fatalf("%d series written, want only the good one", n)
			}
		})
	}
}
