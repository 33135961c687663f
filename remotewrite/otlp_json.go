package remotewrite

import (
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"math"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// decodeOTLPJSON decodes an ExportMetricsServiceRequest in the JSON
// encoding of OTLP/HTTP into m (reset first): the protobuf JSON mapping,
// with field names in lowerCamelCase or as in the .proto, 64-bit integers
// as numbers or strings, enums as numbers or names, null for a default
// value, and trace and span IDs in hex. Repeated keys behave as repeated
// protobuf fields: lists append, messages merge, a oneof's last field
// wins. Strings without escapes alias b.
func decodeOTLPJSON(m *otlpMetrics, b []byte) error {
	if err := m.start(len(b)); err != nil {
		return err
	}
	d := jsonDecoder{b: b, m: m}
	d.request()
	if d.err == nil {
		d.ws()
		if d.i < len(d.b) {
			d.fail("data after the request object")
		}
	}
	if d.err != nil {
		return fmt.Errorf("%w: %v", ErrMalformed, d.err)
	}
	return nil
}

// jsonDecoder reads JSON from b. The first error is kept in err, after which
// every method returns zero values and loops end.
type jsonDecoder struct {
	b     []byte
	i     int
	err   error
	depth int
	m     *otlpMetrics
	key   []byte // the key of the current object member
}

func (d *jsonDecoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("JSON at offset %d: %s", d.i, fmt.Sprintf(format, args...))
	}
}

func (d *jsonDecoder) ws() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// peek returns the next non-space byte, or 0 at the end.
func (d *jsonDecoder) peek() byte {
	d.ws()
	if d.i >= len(d.b) {
		return 0
	}
	return d.b[d.i]
}

// null consumes a null and reports whether there was one.
func (d *jsonDecoder) null() bool {
	if d.peek() == 'n' {
		if len(d.b)-d.i >= 4 && string(d.b[d.i:d.i+4]) == "null" {
			d.i += 4
			return true
		}
		d.fail("invalid literal")
	}
	return false
}

// jsonIter iterates over an object's members or an array's elements.
type jsonIter struct{ started, done bool }

// object starts or continues an object: it reports whether there is one
// more member, whose key is then in d.key with the decoder at its value. A
// null is an empty object.
func (d *jsonDecoder) object(it *jsonIter) bool {
	if !d.next(it, '{', '}', "an object") {
		return false
	}
	if d.peek() != '"' {
		d.fail("want an object key")
		return false
	}
	d.key = d.rawString()
	if d.peek() != ':' {
		d.fail("want :")
		return false
	}
	d.i++
	return d.err == nil
}

// array starts or continues an array: it reports whether there is one
// more element, the decoder then at it. A null is an empty array.
func (d *jsonDecoder) array(it *jsonIter) bool { return d.next(it, '[', ']', "an array") }

// next starts or continues a container between open and close, what by
// name: it reports whether there is one more item, the decoder then at it.
// A null is an empty container.
func (d *jsonDecoder) next(it *jsonIter, open, close byte, what string) bool {
	if d.err != nil || it.done {
		return false
	}
	if !it.started {
		it.started = true
		if d.null() {
			it.done = true
			return false
		}
		if d.peek() != open {
			d.fail("want %s", what)
			return false
		}
		d.i++
		if d.depth++; d.depth > maxOTLPDepth*4 {
			d.fail("nested too deep")
			return false
		}
		if d.peek() == close {
			d.i++
			d.depth--
			it.done = true
			return false
		}
		return true
	}
	switch d.peek() {
	case ',':
		d.i++
		return true
	case close:
		d.i++
		d.depth--
		it.done = true
		return false
	}
	d.fail("want , or %c", close)
	return false
}

// rawString reads a string and returns its content, aliasing b when it has
// no escapes (else in a new buffer).
func (d *jsonDecoder) rawString() []byte {
	if d.peek() != '"' {
		d.fail("want a string")
		return nil
	}
	d.i++
	start := d.i
	for d.i < len(d.b) {
		switch c := d.b[d.i]; c {
		case '"':
			s := d.b[start:d.i]
			d.i++
			return s
		case '\\':
			return d.escapedString(start)
		default:
			d.i++
		}
	}
	d.fail("unterminated string")
	return nil
}

// escapedString decodes a string with escapes, from its start.
func (d *jsonDecoder) escapedString(start int) []byte {
	out := append([]byte(nil), d.b[start:d.i]...)
	for d.i < len(d.b) {
		c := d.b[d.i]
		switch {
		case c == '"':
			d.i++
			return out
		case c != '\\':
			out = append(out, c)
			d.i++
			continue
		}
		if d.i+1 >= len(d.b) {
			break
		}
		e := d.b[d.i+1]
		d.i += 2
		switch e {
		case '"', '\\', '/':
			out = append(out, e)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r := d.hex4()
			if utf16.IsSurrogate(r) {
				// A pair makes one rune; a lone surrogate is invalid.
				r2 := utf8.RuneError
				if len(d.b)-d.i >= 6 && d.b[d.i] == '\\' && d.b[d.i+1] == 'u' {
					save := d.i
					d.i += 2
					if r2 = utf16.DecodeRune(r, d.hex4()); r2 == utf8.RuneError {
						d.i = save
					}
				}
				r = r2
			}
			out = utf8.AppendRune(out, r)
		default:
			d.fail("invalid escape \\%c", e)
			return nil
		}
		if d.err != nil {
			return nil
		}
	}
	d.fail("unterminated string")
	return nil
}

func (d *jsonDecoder) hex4() rune {
	if len(d.b)-d.i < 4 {
		d.fail("short \\u escape")
		return 0
	}
	v, err := strconv.ParseUint(string(d.b[d.i:d.i+4]), 16, 32)
	if err != nil {
		d.fail("invalid \\u escape")
		return 0
	}
	d.i += 4
	return rune(v)
}

// str reads a string value (null is "").
func (d *jsonDecoder) str() string {
	if d.null() {
		return ""
	}
	return yoloString(d.rawString())
}

// number reads a number token, or the content of a string (as protobuf's
// JSON mapping allows for numbers); ok is false for null.
func (d *jsonDecoder) number() (tok []byte, quoted, ok bool) {
	if d.null() {
		return nil, false, false
	}
	switch c := d.peek(); {
	case c == '"':
		return d.rawString(), true, d.err == nil
	case c == '-' || c >= '0' && c <= '9':
		start := d.i
		for d.i < len(d.b) {
			c := d.b[d.i]
			if c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E' || c >= '0' && c <= '9' {
				d.i++
				continue
			}
			break
		}
		return d.b[start:d.i], false, true
	}
	d.fail("want a number")
	return nil, false, false
}

func (d *jsonDecoder) uint64() uint64 {
	tok, _, ok := d.number()
	if !ok {
		return 0
	}
	v, err := strconv.ParseUint(yoloString(tok), 10, 64)
	if err != nil {
		f, ferr := strconv.ParseFloat(yoloString(tok), 64)
		if ferr != nil || f < 0 || f >= 1<<64 || f != math.Trunc(f) {
			d.fail("invalid unsigned integer %q", tok)
			return 0
		}
		return uint64(f)
	}
	return v
}

func (d *jsonDecoder) int64() int64 {
	tok, _, ok := d.number()
	if !ok {
		return 0
	}
	v, err := strconv.ParseInt(yoloString(tok), 10, 64)
	if err != nil {
		f, ferr := strconv.ParseFloat(yoloString(tok), 64)
		if ferr != nil || f < -1<<63 || f >= 1<<63 || f != math.Trunc(f) {
			d.fail("invalid integer %q", tok)
			return 0
		}
		return int64(f)
	}
	return v
}

func (d *jsonDecoder) uint32() uint32 {
	v := d.uint64()
	if v > math.MaxUint32 {
		d.fail("%d overflows uint32", v)
	}
	return uint32(v)
}

func (d *jsonDecoder) int32() int32 {
	v := d.int64()
	if v > math.MaxInt32 || v < math.MinInt32 {
		d.fail("%d overflows int32", v)
	}
	return int32(v)
}

func (d *jsonDecoder) float64() float64 {
	tok, _, ok := d.number()
	if !ok {
		return 0
	}
	v, err := strconv.ParseFloat(yoloString(tok), 64)
	if err != nil {
		d.fail("invalid number %q", tok)
	}
	return v
}

func (d *jsonDecoder) bool() bool {
	if d.null() {
		return false
	}
	switch {
	case len(d.b)-d.i >= 4 && string(d.b[d.i:d.i+4]) == "true":
		d.i += 4
		return true
	case len(d.b)-d.i >= 5 && string(d.b[d.i:d.i+5]) == "false":
		d.i += 5
		return false
	}
	d.fail("want true or false")
	return false
}

// temporality reads an AggregationTemporality, by number or name.
func (d *jsonDecoder) temporality() int32 {
	if d.peek() == '"' {
		s := d.rawString()
		switch string(s) {
		case "AGGREGATION_TEMPORALITY_UNSPECIFIED":
			return temporalityUnspecified
		case "AGGREGATION_TEMPORALITY_DELTA":
			return temporalityDelta
		case "AGGREGATION_TEMPORALITY_CUMULATIVE":
			return temporalityCumulative
		}
		if v, err := strconv.ParseInt(string(s), 10, 32); err == nil {
			return int32(v)
		}
		d.fail("unknown aggregation temporality %q", s)
		return 0
	}
	return d.int32()
}

// skip passes over any value.
func (d *jsonDecoder) skip() {
	switch c := d.peek(); {
	case c == '{':
		var it jsonIter
		for d.object(&it) {
			d.skip()
		}
	case c == '[':
		var it jsonIter
		for d.array(&it) {
			d.skip()
		}
	case c == '"':
		d.rawString()
	case c == 't' || c == 'f':
		d.bool()
	case c == 'n':
		d.null()
	default:
		d.number()
	}
}

func (d *jsonDecoder) request() {
	var it jsonIter
	for d.object(&it) {
		switch string(d.key) {
		case "resourceMetrics", "resource_metrics":
			var ai jsonIter
			for d.array(&ai) {
				d.resourceMetrics()
			}
		default:
			d.skip()
		}
	}
}

func (d *jsonDecoder) resourceMetrics() {
	m := d.m
	ri := m.addResource()
	var it jsonIter
	for d.object(&it) {
		switch string(d.key) {
		case "resource":
			var ri2 jsonIter
			for d.object(&ri2) {
				switch string(d.key) {
				case "attributes":
					m.resAttrs = d.keyValues(m.resAttrs)
				default:
					d.skip()
				}
			}
			m.resources[ri].attrs.hi = int32(len(m.resAttrs))
		case "scopeMetrics", "scope_metrics":
			var ai jsonIter
			for d.array(&ai) {
				d.scopeMetrics()
			}
			m.resources[ri].scopes.hi = int32(len(m.scopes))
		case "schemaUrl", "schema_url":
			d.str()
		default:
			d.skip()
		}
	}
}

func (d *jsonDecoder) scopeMetrics() {
	m := d.m
	si, ok := m.addScope(false)
	if !ok {
		d.fail("%v", errOTLPExpansion)
		return
	}
	var it jsonIter
	for d.object(&it) {
		switch string(d.key) {
		case "scope":
			var si2 jsonIter
			for d.object(&si2) {
				switch string(d.key) {
				case "name":
					m.scopes[si].name = d.str()
				case "version":
					m.scopes[si].version = d.str()
				case "attributes":
					m.scopeAttrs = d.keyValues(m.scopeAttrs)
					m.scopes[si].attrs.hi = int32(len(m.scopeAttrs))
				default:
					d.skip()
				}
			}
		case "metrics":
			var ai jsonIter
			for d.array(&ai) {
				d.metric()
			}
			m.scopes[si].metrics.hi = int32(len(m.metrics))
		case "schemaUrl", "schema_url":
			m.scopes[si].schemaURL = d.str()
		default:
			d.skip()
		}
	}
}

func (d *jsonDecoder) metric() {
	m := d.m
	mi, ok := m.addMetric()
	if !ok {
		d.fail("%v", errOTLPExpansion)
		return
	}
	var it jsonIter
	for d.object(&it) {
		var typ otlpType
		switch string(d.key) {
		case "name":
			m.metrics[mi].name = d.str()
		case "description":
			m.metrics[mi].description = d.str()
		case "unit":
			m.metrics[mi].unit = d.str()
		case "gauge":
			typ = otlpGauge
		case "sum":
			typ = otlpSum
		case "histogram":
			typ = otlpHistogram
		case "exponentialHistogram", "exponential_histogram":
			typ = otlpExpHistogram
		case "summary":
			typ = otlpSummary
		default:
			d.skip()
		}
		if typ == otlpEmpty {
			continue
		}
		m.setData(mi, typ)
		var di jsonIter
		for d.object(&di) {
			switch string(d.key) {
			case "dataPoints", "data_points":
				var ai jsonIter
				for d.array(&ai) {
					d.point(typ)
				}
				m.metrics[mi].points.hi = int32(len(m.points))
			case "aggregationTemporality", "aggregation_temporality":
				t := d.temporality()
				if typ != otlpGauge && typ != otlpSummary {
					m.metrics[mi].temporality = t
				}
			case "isMonotonic", "is_monotonic":
				v := d.bool()
				if typ == otlpSum {
					m.metrics[mi].monotonic = v
				}
			default:
				d.skip()
			}
		}
	}
}

func (d *jsonDecoder) point(typ otlpType) {
	m := d.m
	pi, ok := m.addPoint()
	if !ok {
		d.fail("%v", errOTLPExpansion)
		return
	}
	var it jsonIter
	for d.object(&it) {
		p := &m.points[pi]
		key := string(d.key)
		switch key {
		case "attributes":
			m.pointAttrs = d.keyValues(m.pointAttrs)
			m.points[pi].attrs.hi = int32(len(m.pointAttrs))
			continue
		case "startTimeUnixNano", "start_time_unix_nano":
			p.start = d.uint64()
			continue
		case "timeUnixNano", "time_unix_nano":
			p.time = d.uint64()
			continue
		case "flags":
			p.flags = d.uint32()
			continue
		case "exemplars":
			if typ != otlpSummary {
				var ai jsonIter
				for d.array(&ai) {
					d.exemplar()
				}
				m.points[pi].exemplars.hi = int32(len(m.exemplars))
				continue
			}
		case "count":
			if typ != otlpGauge && typ != otlpSum {
				p.count = d.uint64()
				continue
			}
		case "sum":
			if typ != otlpGauge && typ != otlpSum {
				p.sum, p.hasSum = d.float64(), typ != otlpSummary // a summary's sum is not optional
				continue
			}
		}
		switch typ {
		case otlpGauge, otlpSum:
			switch key {
			case "asDouble", "as_double":
				p.valueType, p.value = valueDouble, d.float64()
				continue
			case "asInt", "as_int":
				p.valueType, p.intValue = valueInt, d.int64()
				continue
			}
		case otlpHistogram:
			switch key {
			case "bucketCounts", "bucket_counts":
				var ai jsonIter
				for d.array(&ai) {
					m.counts = append(m.counts, d.uint64())
				}
				m.points[pi].counts.hi = int32(len(m.counts))
				continue
			case "explicitBounds", "explicit_bounds":
				var ai jsonIter
				for d.array(&ai) {
					m.bounds = append(m.bounds, d.float64())
				}
				m.points[pi].bounds.hi = int32(len(m.bounds))
				continue
			case "min", "max":
				d.float64()
				continue
			}
		case otlpExpHistogram:
			switch key {
			case "scale":
				p.scale = d.int32()
				continue
			case "zeroCount", "zero_count":
				p.zeroCount = d.uint64()
				continue
			case "positive", "negative":
				counts, offset, s := &m.counts, &p.posOffset, &m.points[pi].pos
				if key == "negative" {
					counts, offset, s = &m.negCounts, &p.negOffset, &m.points[pi].neg
				}
				var bi jsonIter
				for d.object(&bi) {
					switch string(d.key) {
					case "offset":
						*offset = d.int32()
					case "bucketCounts", "bucket_counts":
						var ai jsonIter
						for d.array(&ai) {
							*counts = append(*counts, d.uint64())
						}
						s.hi = int32(len(*counts))
					default:
						d.skip()
					}
				}
				continue
			case "min", "max", "zeroThreshold", "zero_threshold":
				d.float64()
				continue
			}
		case otlpSummary:
			switch key {
			case "quantileValues", "quantile_values":
				var ai jsonIter
				for d.array(&ai) {
					var q otlpQuantile
					var qi jsonIter
					for d.object(&qi) {
						switch string(d.key) {
						case "quantile":
							q.quantile = d.float64()
						case "value":
							q.value = d.float64()
						default:
							d.skip()
						}
					}
					m.quantiles = append(m.quantiles, q)
				}
				m.points[pi].quantiles.hi = int32(len(m.quantiles))
				continue
			}
		}
		d.skip()
	}
}

func (d *jsonDecoder) exemplar() {
	m := d.m
	ei, ok := m.addExemplar()
	if !ok {
		d.fail("%v", errOTLPExpansion)
		return
	}
	var it jsonIter
	for d.object(&it) {
		e := &m.exemplars[ei]
		switch string(d.key) {
		case "filteredAttributes", "filtered_attributes":
			m.exAttrs = d.keyValues(m.exAttrs)
			m.exemplars[ei].attrs.hi = int32(len(m.exAttrs))
		case "timeUnixNano", "time_unix_nano":
			e.time = d.uint64()
		case "asDouble", "as_double":
			e.valueType, e.value = valueDouble, d.float64()
		case "asInt", "as_int":
			e.valueType, e.intValue = valueInt, d.int64()
		case "traceId", "trace_id":
			e.traceID = [16]byte{}
			d.hexID(e.traceID[:])
		case "spanId", "span_id":
			e.spanID = [8]byte{}
			d.hexID(e.spanID[:])
		default:
			d.skip()
		}
	}
}

// hexID reads a trace or span ID in hex (OTLP's JSON rule); "" is zero.
func (d *jsonDecoder) hexID(dst []byte) {
	s := d.str()
	if s == "" {
		return
	}
	if len(s) != 2*len(dst) {
		d.fail("ID of %d hex digits, want %d", len(s), 2*len(dst))
		return
	}
	if _, err := hex.Decode(dst, []byte(s)); err != nil {
		d.fail("ID: %v", err)
	}
}

// keyValues reads a list of KeyValue and appends it to dst. A kvlistValue
// reads its KeyValues with a loop of its own: sharing this one would cost a
// call per attribute of every point.
func (d *jsonDecoder) keyValues(dst []otlpAttr) []otlpAttr {
	var ai jsonIter
	for d.array(&ai) {
		var key string
		var v anyValue
		var it jsonIter
		for d.object(&it) {
			switch string(d.key) {
			case "key":
				key = d.str()
			case "value":
				d.anyValue(&v, 0)
			default:
				d.skip()
			}
		}
		dst = append(dst, otlpAttr{key: key, value: v.asString()})
	}
	return dst
}

// listValues reads an ArrayValue or a KeyValueList, calling each with the
// decoder at every element of its values.
func (d *jsonDecoder) listValues(each func()) {
	var it jsonIter
	for d.object(&it) {
		if string(d.key) != "values" {
			d.skip()
			continue
		}
		var ai jsonIter
		for d.array(&ai) {
			each()
		}
	}
}

// anyValue reads an AnyValue into v, merging.
func (d *jsonDecoder) anyValue(v *anyValue, depth int) {
	if depth > maxOTLPDepth {
		d.fail("attribute values nested more than %d deep", maxOTLPDepth)
		return
	}
	var it jsonIter
	for d.object(&it) {
		switch string(d.key) {
		case "stringValue", "string_value":
			v.kind, v.str = anyString, d.str()
		case "boolValue", "bool_value":
			v.kind, v.num = anyBool, 0
			if d.bool() {
				v.num = 1
			}
		case "intValue", "int_value":
			v.kind, v.num = anyInt, uint64(d.int64())
		case "doubleValue", "double_value":
			v.kind, v.num = anyDouble, math.Float64bits(d.float64())
		case "bytesValue", "bytes_value":
			s := d.str()
			v.kind, v.bytes = anyBytes, nil
			if s != "" {
				b, err := base64.StdEncoding.DecodeString(s)
				if err != nil {
					d.fail("bytesValue: %v", err)
				}
				v.bytes = b
			}
		case "arrayValue", "array_value":
			v.kind = anyArray
			out := []any{}
			d.listValues(func() {
				var e anyValue
				d.anyValue(&e, depth+1)
				out = append(out, e.asRaw())
			})
			v.raw = out
		case "kvlistValue", "kvlist_value":
			v.kind = anyKVList
			out := map[string]any{}
			d.listValues(func() {
				var key string
				var e anyValue
				var ki jsonIter
				for d.object(&ki) {
					switch string(d.key) {
					case "key":
						key = d.str()
					case "value":
						d.anyValue(&e, depth+1)
					default:
						d.skip()
					}
				}
				out[key] = e.asRaw()
			})
			v.raw = out
		default:
			d.skip()
		}
	}
}
