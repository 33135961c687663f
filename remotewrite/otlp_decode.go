package remotewrite

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
	"unsafe"

	"google.golang.org/protobuf/encoding/protowire"
)

// otlpMetrics is a decoded ExportMetricsServiceRequest, reduced to what the
// translator reads. Each level is a flat slice, and a parent holds the range
// of its children: a message's children are decoded before its next
// sibling, and each slice has only one kind of parent, so they are
// contiguous. Strings alias the request body (or its decompressed copy) and
// are valid only while it is. The slices are reused across requests.
type otlpMetrics struct {
	resources []otlpResource
	scopes    []otlpScope
	metrics   []otlpMetric
	points    []otlpPoint
	exemplars []otlpExemplar
	quantiles []otlpQuantile
	// Attributes, by owner.
	resAttrs, scopeAttrs, pointAttrs, exAttrs []otlpAttr
	// Explicit bounds, and bucket counts of explicit histograms and of
	// the positive and negative ranges of exponential ones.
	bounds            []float64
	counts, negCounts []uint64
	// budget is what is left of the bytes the decoded request may take.
	budget int
	// validUTF8 says that every string a label can take from the request
	// was found valid UTF-8 while decoding: attribute keys and string
	// values, metric names and units, scope names, versions and schema
	// URLs. The labels then need no check of their own. Only the protobuf
	// decoder sets it.
	validUTF8 bool
}

// maxOTLPExpansion bounds the memory a decoded request takes, relative to
// its encoded size: an empty data point is 2 bytes in protobuf and over a
// hundred decoded; real points are well under the bound.
const maxOTLPExpansion = 16

// errOTLPExpansion refuses a request that would take too much memory once
// decoded.
var errOTLPExpansion = fmt.Errorf("%w: the request decodes to more than %d times its size (empty data points?)", ErrMalformed, maxOTLPExpansion)

// Sizes of the decoded elements that can take more than maxOTLPExpansion
// times their encoded size.
const (
	scopeSize    = int(unsafe.Sizeof(otlpScope{}))
	metricSize   = int(unsafe.Sizeof(otlpMetric{}))
	pointSize    = int(unsafe.Sizeof(otlpPoint{}))
	exemplarSize = int(unsafe.Sizeof(otlpExemplar{}))
)

// The add methods append an element whose ranges start at the ends of the
// shared slices and return its index. Those of the elements that can take
// more than maxOTLPExpansion times their encoded size return false instead
// when the request would decode to more than its bound (see spend).

func (m *otlpMetrics) addResource() int {
	m.resources = append(m.resources, otlpResource{attrs: at(len(m.resAttrs)), scopes: at(len(m.scopes))})
	return len(m.resources) - 1
}

// addScope adds a scope; deprecated marks one of the deprecated
// instrumentation_library_metrics.
func (m *otlpMetrics) addScope(deprecated bool) (int, bool) {
	if !m.spend(scopeSize) {
		return 0, false
	}
	m.scopes = append(m.scopes, otlpScope{
		attrs:      at(len(m.scopeAttrs)),
		metrics:    at(len(m.metrics)),
		deprecated: deprecated,
	})
	return len(m.scopes) - 1, true
}

func (m *otlpMetrics) addMetric() (int, bool) {
	if !m.spend(metricSize) {
		return 0, false
	}
	m.metrics = append(m.metrics, otlpMetric{})
	return len(m.metrics) - 1, true
}

// setData starts the data of metric mi, of type typ: the data is a oneof,
// and the last one replaces any before.
func (m *otlpMetrics) setData(mi int, typ otlpType) *otlpMetric {
	mt := &m.metrics[mi]
	mt.typ, mt.monotonic, mt.temporality = typ, false, 0
	mt.points = at(len(m.points))
	return mt
}

func (m *otlpMetrics) addPoint() (int, bool) {
	if !m.spend(pointSize) {
		return 0, false
	}
	m.points = append(m.points, otlpPoint{
		attrs:     at(len(m.pointAttrs)),
		exemplars: at(len(m.exemplars)),
		bounds:    at(len(m.bounds)),
		counts:    at(len(m.counts)),
		pos:       at(len(m.counts)),
		neg:       at(len(m.negCounts)),
		quantiles: at(len(m.quantiles)),
	})
	return len(m.points) - 1, true
}

func (m *otlpMetrics) addExemplar() (int, bool) {
	if !m.spend(exemplarSize) {
		return 0, false
	}
	m.exemplars = append(m.exemplars, otlpExemplar{attrs: at(len(m.exAttrs))})
	return len(m.exemplars) - 1, true
}

// spend takes n bytes from the budget and reports whether they were there.
func (m *otlpMetrics) spend(n int) bool {
	m.budget -= n
	return m.budget >= 0
}

// maxOTLPBody bounds the body the decoder takes, so that the int32 ranges
// of otlpMetrics cannot overflow (an element takes at least a byte).
const maxOTLPBody = 1 << 30

// start resets m for decoding a request of n bytes.
func (m *otlpMetrics) start(n int) error {
	m.reset()
	m.validUTF8 = false
	if n > maxOTLPBody {
		return fmt.Errorf("%w: a request of %d bytes is more than the decoder takes (%d)", ErrMalformed, n, maxOTLPBody)
	}
	m.budget = maxOTLPExpansion*n + 1<<16
	return nil
}

// span32 is the range [lo, hi) of a slice of otlpMetrics.
type span32 struct{ lo, hi int32 }

func (s span32) len() int { return int(s.hi - s.lo) }

// at is the empty range at i.
func at(i int) span32 { return span32{int32(i), int32(i)} }

// of returns all[s] with its capacity cut.
func of[T any](all []T, s span32) []T { return all[s.lo:s.hi:s.hi] }

// otlpAttr is an attribute with its value as the translator renders it:
// strings as they are, other types as OpenTelemetry's AsString renders
// them (numbers and booleans as in JSON, bytes in base64, arrays and maps as
// JSON).
type otlpAttr struct{ key, value string }

type otlpResource struct {
	attrs  span32
	scopes span32
}

type otlpScope struct {
	name, version, schemaURL string
	attrs                    span32
	metrics                  span32
	deprecated               bool // from instrumentation_library_metrics
}

// OTLP metric data types, as pmetric numbers them.
type otlpType uint8

const (
	otlpEmpty otlpType = iota
	otlpGauge
	otlpSum
	otlpHistogram
	otlpExpHistogram
	otlpSummary
)

var otlpTypeNames = [...]string{"Empty", "Gauge", "Sum", "Histogram", "ExponentialHistogram", "Summary"}

func (t otlpType) String() string { return otlpTypeNames[t] }

// Aggregation temporalities.
const (
	temporalityUnspecified = 0
	temporalityDelta       = 1
	temporalityCumulative  = 2
)

func temporalityString(t int32) string {
	switch t {
	case temporalityUnspecified:
		return "Unspecified"
	case temporalityDelta:
		return "Delta"
	case temporalityCumulative:
		return "Cumulative"
	}
	return strconv.Itoa(int(t))
}

type otlpMetric struct {
	name, description, unit string
	typ                     otlpType
	monotonic               bool
	temporality             int32
	points                  span32
	skip                    bool // refused before translation
}

// Value types of number data points and exemplars.
const (
	valueNone uint8 = iota
	valueDouble
	valueInt
)

// flagNoRecordedValue is DataPointFlags.FLAG_NO_RECORDED_VALUE.
const flagNoRecordedValue = 1

// otlpPoint is a data point of any type; a metric's type says which fields
// count.
type otlpPoint struct {
	attrs, exemplars span32
	start, time      uint64 // ns since the epoch
	flags            uint32
	valueType        uint8 // number points
	hasSum           bool
	intValue         int64
	value, sum       float64
	count            uint64
	// Explicit histograms.
	bounds, counts span32
	// Exponential histograms.
	scale                int32
	zeroCount            uint64
	posOffset, negOffset int32
	pos, neg             span32 // counts, negCounts
	// Summaries.
	quantiles span32
}

func (p *otlpPoint) noRecordedValue() bool { return p.flags&flagNoRecordedValue != 0 }

type otlpQuantile struct{ quantile, value float64 }

type otlpExemplar struct {
	attrs     span32
	time      uint64
	valueType uint8
	intValue  int64
	value     float64
	traceID   [16]byte
	spanID    [8]byte
}

func (m *otlpMetrics) reset() {
	m.resources = m.resources[:0]
	m.scopes = m.scopes[:0]
	m.metrics = m.metrics[:0]
	m.points = m.points[:0]
	m.exemplars = m.exemplars[:0]
	m.quantiles = m.quantiles[:0]
	clear(m.resAttrs)
	clear(m.scopeAttrs)
	clear(m.pointAttrs)
	clear(m.exAttrs)
	m.resAttrs = m.resAttrs[:0]
	m.scopeAttrs = m.scopeAttrs[:0]
	m.pointAttrs = m.pointAttrs[:0]
	m.exAttrs = m.exAttrs[:0]
	m.bounds = m.bounds[:0]
	m.counts = m.counts[:0]
	m.negCounts = m.negCounts[:0]
	// Metrics and scopes hold strings into the last body.
	clear(m.metrics[:cap(m.metrics)])
	clear(m.scopes[:cap(m.scopes)])
}

// trim drops slices grown past max elements (points, the largest, past
// max/16), so that one huge request does not pin its memory in a pooled
// state.
func (m *otlpMetrics) trim(max int) {
	if cap(m.points) > max/16 || cap(m.pointAttrs) > max || cap(m.counts) > max || cap(m.metrics) > max || cap(m.exemplars) > max {
		*m = otlpMetrics{}
	}
}

// errOTLPDepth refuses values nested deeper than maxOTLPDepth.
var errOTLPDepth = fmt.Errorf("%w: attribute values nested more than %d deep", ErrMalformed, maxOTLPDepth)

// maxOTLPDepth bounds the nesting of array and map attribute values.
const maxOTLPDepth = 100

// protoDecoder decodes an ExportMetricsServiceRequest in protobuf.
type protoDecoder struct {
	m *otlpMetrics
}

// decodeOTLPProto decodes b into m (reset first). Strings alias b.
func decodeOTLPProto(m *otlpMetrics, b []byte) error {
	if err := m.start(len(b)); err != nil {
		return err
	}
	m.validUTF8 = true
	d := protoDecoder{m: m}
	return d.request(b)
}

// checkUTF8 clears validUTF8 when s, a string a label can take, is not
// valid UTF-8, and returns s.
func (m *otlpMetrics) checkUTF8(s []byte) []byte {
	if !isASCII(s) && !utf8.Valid(s) {
		m.validUTF8 = false
	}
	return s
}

// The decoder reads varints, tags and lengths as the collector's decoder
// does, which OpenTelemetry senders are tested against: a varint of up to
// 10 bytes whose bits past 64 are dropped, a field number of the tag's bits
// past 3 truncated to int32 and positive.

var (
	errVarintOTLP = fmt.Errorf("%w: truncated or overlong varint", ErrMalformed)
	errLengthOTLP = fmt.Errorf("%w: length past the end of the message", ErrMalformed)
)

// consumeVarint reads a varint; n < 0 if there is none.
func consumeVarint(b []byte) (v uint64, n int) {
	for i := 0; i < len(b) && i < 10; i++ {
		c := b[i]
		v |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			return v, i + 1
		}
	}
	return 0, -1
}

// consumeBytes reads a length-delimited value; n < 0 if there is none.
func consumeBytes(b []byte) ([]byte, int) {
	l, n := consumeVarint(b)
	if n < 0 || int(l) < 0 || l > uint64(len(b)-n) {
		return nil, -1
	}
	end := n + int(l)
	return b[n:end:end], end
}

// fields walks the fields of one message: next reads a key, then one of
// bytes, varint, fixed64, repeated or skip reads its value, checking the
// wire type. A value that cannot be read is zero, and its error ends the
// walk (next returns false) and stays in err. Take it by address
// (f := &fields{...}), as the remote-write decoder's fieldReader: a value
// literal is built aside and copied.
type fields struct {
	b   []byte // what follows the last key or value read
	msg string // the message's name, for errors
	num protowire.Number
	typ protowire.Type
	err error
}

// next reads the next key; false at the end of the message or after an
// error. A key of one byte (fields 1 to 15, nearly all of OTLP's) is read
// here, a longer one by nextLong.
func (f *fields) next() bool {
	if f.err != nil || len(f.b) == 0 {
		return false
	}
	if c := f.b[0]; c >= 1<<3 && c < 0x80 {
		f.num, f.typ, f.b = protowire.Number(c>>3), protowire.Type(c&7), f.b[1:]
		return true
	}
	return f.nextLong()
}

func (f *fields) nextLong() bool {
	tag, n := consumeVarint(f.b)
	if n < 0 {
		f.err = errVarintOTLP
		return false
	}
	f.num, f.typ, f.b = protowire.Number(int32(tag>>3)), protowire.Type(tag&7), f.b[n:]
	if f.num <= 0 {
		f.err = fmt.Errorf("%w: field number %d", ErrMalformed, f.num)
		return false
	}
	return true
}

// ok reports whether the walk has met no error.
func (f *fields) ok() bool { return f.err == nil }

// wrongType ends the walk: the field has a wire type its number does not
// allow.
func (f *fields) wrongType() {
	f.err = fmt.Errorf("%w: field %d of %s has wire type %d", ErrMalformed, f.num, f.msg, f.typ)
}

// bytes reads a length-delimited value: here when it is shorter than 128
// bytes, else by bytesLong.
func (f *fields) bytes() []byte {
	if b := f.b; f.typ == protowire.BytesType && len(b) > 0 && int(b[0]) < len(b) {
		if n := int(b[0]) + 1; b[0] < 0x80 {
			f.b = b[n:]
			return b[1:n:n]
		}
	}
	return f.bytesLong()
}

func (f *fields) bytesLong() []byte {
	if f.typ != protowire.BytesType {
		f.wrongType()
		return nil
	}
	v, n := consumeBytes(f.b)
	if n < 0 {
		f.err = errLengthOTLP
		return nil
	}
	f.b = f.b[n:]
	return v
}

// varint reads a varint value.
func (f *fields) varint() uint64 {
	if f.typ != protowire.VarintType {
		f.wrongType()
		return 0
	}
	v, n := consumeVarint(f.b)
	if n < 0 {
		f.err = errVarintOTLP
		return 0
	}
	f.b = f.b[n:]
	return v
}

// fixed64 reads a fixed64 or double value.
func (f *fields) fixed64() uint64 {
	if f.typ != protowire.Fixed64Type {
		f.wrongType()
		return 0
	}
	if len(f.b) < 8 {
		f.err = errTruncated
		return 0
	}
	v := binary.LittleEndian.Uint64(f.b)
	f.b = f.b[8:]
	return v
}

// repeated reads one occurrence of a repeated scalar field whose single
// values have wire type single: that value alone, or a packed run of them.
// It returns the value, or the run, and whether it is a run.
func (f *fields) repeated(single protowire.Type) (v uint64, run []byte, packed bool) {
	switch f.typ {
	case single:
		if single == protowire.VarintType {
			return f.varint(), nil, false
		}
		return f.fixed64(), nil, false
	case protowire.BytesType:
		return 0, f.bytes(), true
	}
	f.wrongType()
	return 0, nil, false
}

// skip passes over the value of a field the message does not have, or one
// the translator does not read. A group is skipped as the collector's
// decoder skips it, which OpenTelemetry senders are tested against: up to
// its first field that is not a group tag, or to its end group (groups are
// deprecated and absent from OTLP).
func (f *fields) skip() {
	depth := 0
	for {
		switch f.typ {
		case protowire.StartGroupType:
			depth++
		case protowire.EndGroupType:
			if depth == 0 {
				f.err = fmt.Errorf("%w: end of group %d without a start", ErrMalformed, f.num)
				return
			}
			depth--
		case protowire.VarintType:
			f.varint()
			return
		case protowire.BytesType:
			f.bytes()
			return
		case protowire.Fixed64Type:
			f.fixed64()
			return
		case protowire.Fixed32Type:
			if len(f.b) < 4 {
				f.err = errTruncated
				return
			}
			f.b = f.b[4:]
			return
		default:
			f.err = fmt.Errorf("%w: field %d has wire type %d", ErrMalformed, f.num, f.typ)
			return
		}
		if depth == 0 {
			return
		}
		if len(f.b) == 0 {
			f.err = errVarintOTLP // no key where one must be
			return
		}
		if !f.next() {
			return
		}
		if len(f.b) == 0 { // even an end group: the collector wants more
			f.err = fmt.Errorf("%w: unterminated group", ErrMalformed)
			return
		}
	}
}

// sint32 decodes a zigzag varint as the collector's decoder does, from
// bits 1 to 32 of the varint.
func sint32(x uint64) int32 {
	v := uint32(x >> 1)
	if x&1 != 0 {
		v = ^v
	}
	return int32(v)
}

func (d *protoDecoder) request(b []byte) error {
	return eachField1(b, "ExportMetricsServiceRequest", func(v []byte) error {
		if err := d.resourceMetrics(v); err != nil {
			return fmt.Errorf("resource_metrics %d: %w", len(d.m.resources)-1, err)
		}
		return nil
	})
}

// eachField1 calls fn with the value of each occurrence of field 1 of
// message msg, a repeated message or bytes field, passing over the other
// fields.
func eachField1(b []byte, msg string, fn func(v []byte) error) error {
	f := &fields{b: b, msg: msg}
	for f.next() {
		if f.num != 1 {
			f.skip()
		} else if v := f.bytes(); f.ok() {
			f.err = fn(v)
		}
	}
	return f.err
}

func (d *protoDecoder) resourceMetrics(b []byte) error {
	m := d.m
	ri := m.addResource()
	current, deprecated := false, false
	f := &fields{b: b, msg: "ResourceMetrics"}
	for f.next() {
		switch f.num {
		case 1: // resource: repeated occurrences merge
			if v := f.bytes(); f.ok() {
				if err := d.resource(v); err != nil {
					f.err = fmt.Errorf("resource: %w", err)
				}
				m.resources[ri].attrs.hi = int32(len(m.resAttrs))
			}
		case 2, 1000: // scope_metrics, and the deprecated instrumentation_library_metrics
			if v := f.bytes(); f.ok() {
				if err := d.scopeMetrics(v, f.num == 1000); err != nil {
					f.err = fmt.Errorf("scope_metrics: %w", err)
				}
				current = current || f.num == 2
				deprecated = deprecated || f.num == 1000
			}
		case 3:
			f.bytes()
		default:
			f.skip()
		}
	}
	if f.err != nil {
		return f.err
	}
	r := &m.resources[ri]
	r.scopes.hi = int32(len(m.scopes))
	if deprecated {
		// As pdata does: the deprecated scopes stand in for absent ones.
		keep := r.scopes.lo
		for i := r.scopes.lo; i < r.scopes.hi; i++ {
			if m.scopes[i].deprecated != current {
				m.scopes[keep] = m.scopes[i]
				keep++
			}
		}
		r.scopes.hi = keep
		m.scopes = m.scopes[:keep]
	}
	return nil
}

func (d *protoDecoder) resource(b []byte) error {
	f := &fields{b: b, msg: "Resource"}
	for f.next() {
		switch f.num {
		case 1:
			if v := f.bytes(); f.ok() {
				d.m.resAttrs, f.err = d.m.appendKeyValue(d.m.resAttrs, v)
			}
		case 2:
			f.varint()
		case 3:
			if v := f.bytes(); f.ok() {
				f.err = checkEntityRef(v)
			}
		default:
			f.skip()
		}
	}
	return f.err
}

// checkEntityRef checks the wire types of an EntityRef, which the
// translator does not read.
func checkEntityRef(b []byte) error {
	f := &fields{b: b, msg: "EntityRef"}
	for f.next() {
		if f.num >= 1 && f.num <= 4 {
			f.bytes()
		} else {
			f.skip()
		}
	}
	return f.err
}

func (d *protoDecoder) scopeMetrics(b []byte, deprecated bool) error {
	m := d.m
	si, ok := m.addScope(deprecated)
	if !ok {
		return errOTLPExpansion
	}
	f := &fields{b: b, msg: "ScopeMetrics"}
	for f.next() {
		switch f.num {
		case 1: // scope: repeated occurrences merge
			if v := f.bytes(); f.ok() {
				if err := d.scope(&m.scopes[si], v); err != nil {
					f.err = fmt.Errorf("scope: %w", err)
				}
			}
		case 2:
			if v := f.bytes(); f.ok() {
				if err := d.metric(v); err != nil {
					f.err = fmt.Errorf("metric %d: %w", len(m.metrics)-1, err)
				}
			}
		case 3:
			m.scopes[si].schemaURL = yoloString(m.checkUTF8(f.bytes()))
		default:
			f.skip()
		}
	}
	m.scopes[si].metrics.hi = int32(len(m.metrics))
	return f.err
}

func (d *protoDecoder) scope(s *otlpScope, b []byte) error {
	f := &fields{b: b, msg: "InstrumentationScope"}
	for f.next() {
		switch f.num {
		case 1:
			s.name = yoloString(d.m.checkUTF8(f.bytes()))
		case 2:
			s.version = yoloString(d.m.checkUTF8(f.bytes()))
		case 3:
			if v := f.bytes(); f.ok() {
				d.m.scopeAttrs, f.err = d.m.appendKeyValue(d.m.scopeAttrs, v)
				s.attrs.hi = int32(len(d.m.scopeAttrs))
			}
		case 4:
			f.varint()
		default:
			f.skip()
		}
	}
	return f.err
}

func (d *protoDecoder) metric(b []byte) error {
	m := d.m
	mi, ok := m.addMetric()
	if !ok {
		return errOTLPExpansion
	}
	f := &fields{b: b, msg: "Metric"}
	for f.next() {
		switch f.num {
		case 1:
			m.metrics[mi].name = yoloString(m.checkUTF8(f.bytes()))
		case 2:
			m.metrics[mi].description = yoloString(f.bytes())
		case 3:
			m.metrics[mi].unit = yoloString(m.checkUTF8(f.bytes()))
		case 5, 7, 9, 10, 11:
			if v := f.bytes(); f.ok() {
				mt := m.setData(mi, dataType(f.num))
				if err := d.data(mi, v); err != nil {
					f.err = fmt.Errorf("%s: %w", strings.ToLower(mt.typ.String()), err)
				}
			}
		case 12:
			if v := f.bytes(); f.ok() {
				var kv [1]otlpAttr
				_, f.err = m.appendKeyValue(kv[:0], v)
			}
		default:
			f.skip()
		}
	}
	return f.err
}

// dataType is the type of a field of Metric's data oneof.
func dataType(num protowire.Number) otlpType {
	switch num {
	case 5:
		return otlpGauge
	case 7:
		return otlpSum
	case 9:
		return otlpHistogram
	case 10:
		return otlpExpHistogram
	}
	return otlpSummary
}

// data decodes a Gauge, Sum, Histogram, ExponentialHistogram or Summary.
func (d *protoDecoder) data(mi int, b []byte) error {
	m := d.m
	typ := m.metrics[mi].typ
	f := &fields{b: b, msg: typ.String()}
	for f.next() {
		switch {
		case f.num == 1:
			if v := f.bytes(); f.ok() {
				if err := d.point(typ, v); err != nil {
					f.err = fmt.Errorf("data point %d: %w", m.metrics[mi].points.len(), err)
				}
				m.metrics[mi].points.hi = int32(len(m.points))
			}
		case f.num == 2 && typ != otlpGauge && typ != otlpSummary:
			m.metrics[mi].temporality = int32(f.varint())
		case f.num == 3 && typ == otlpSum:
			m.metrics[mi].monotonic = f.varint() != 0
		default:
			f.skip()
		}
	}
	return f.err
}

// Field numbers of the data point messages, by type: attributes, start
// time, time, flags, exemplars.
var pointFields = [...]struct{ attrs, start, time, flags, exemplars protowire.Number }{
	otlpGauge:        {7, 2, 3, 8, 5},
	otlpSum:          {7, 2, 3, 8, 5},
	otlpHistogram:    {9, 2, 3, 10, 8},
	otlpExpHistogram: {1, 2, 3, 10, 11},
	otlpSummary:      {7, 2, 3, 8, 0},
}

var pointMessages = [...]string{
	otlpGauge:        "NumberDataPoint",
	otlpSum:          "NumberDataPoint",
	otlpHistogram:    "HistogramDataPoint",
	otlpExpHistogram: "ExponentialHistogramDataPoint",
	otlpSummary:      "SummaryDataPoint",
}

func (d *protoDecoder) point(typ otlpType, b []byte) error {
	m := d.m
	pi, ok := m.addPoint()
	if !ok {
		return errOTLPExpansion
	}
	pf := pointFields[typ]
	f := &fields{b: b, msg: pointMessages[typ]}
	for f.next() {
		p := &m.points[pi]
		switch f.num {
		case pf.attrs:
			if v := f.bytes(); f.ok() {
				m.pointAttrs, f.err = m.appendKeyValue(m.pointAttrs, v)
				m.points[pi].attrs.hi = int32(len(m.pointAttrs))
			}
		case pf.start:
			p.start = f.fixed64()
		case pf.time:
			p.time = f.fixed64()
		case pf.flags:
			p.flags = uint32(f.varint())
		case pf.exemplars:
			if v := f.bytes(); f.ok() {
				if err := d.exemplar(v); err != nil {
					f.err = fmt.Errorf("exemplar %d: %w", m.points[pi].exemplars.len(), err)
				}
				m.points[pi].exemplars.hi = int32(len(m.exemplars))
			}
		default:
			d.pointField(typ, pi, f)
		}
	}
	return f.err
}

// pointField decodes the fields particular to each type of data point.
func (d *protoDecoder) pointField(typ otlpType, pi int, f *fields) {
	m := d.m
	p := &m.points[pi]
	// Histograms, exponential histograms and summaries number count and sum
	// alike.
	if typ != otlpGauge && typ != otlpSum && (f.num == 4 || f.num == 5) {
		if x := f.fixed64(); f.num == 4 {
			p.count = x
		} else {
			p.sum, p.hasSum = math.Float64frombits(x), typ != otlpSummary // a summary's sum is not optional
		}
		return
	}
	switch typ {
	case otlpGauge, otlpSum:
		switch f.num {
		case 4: // as_double
			p.valueType, p.value = valueDouble, math.Float64frombits(f.fixed64())
			return
		case 6: // as_int
			p.valueType, p.intValue = valueInt, int64(f.fixed64())
			return
		}
	case otlpHistogram:
		switch f.num {
		case 11, 12: // min, max
			f.fixed64()
			return
		case 6:
			m.counts = f.appendFixed64s(m.counts, &p.counts)
			return
		case 7:
			lo := len(m.bounds)
			raw := f.appendFixed64s(nil, &span32{})
			for _, r := range raw {
				m.bounds = append(m.bounds, math.Float64frombits(r))
			}
			if f.typ == protowire.BytesType { // a packed run replaces, as in pdata
				p.bounds.lo = int32(lo)
			}
			p.bounds.hi = int32(len(m.bounds))
			return
		}
	case otlpExpHistogram:
		switch f.num {
		case 7, 12, 13, 14: // zero_count, min, max, zero_threshold
			if x := f.fixed64(); f.num == 7 {
				p.zeroCount = x
			}
			return
		case 6:
			p.scale = sint32(f.varint())
			return
		case 8:
			if v := f.bytes(); f.ok() {
				m.counts, f.err = buckets(m.counts, &p.posOffset, &p.pos, v)
			}
			return
		case 9:
			if v := f.bytes(); f.ok() {
				m.negCounts, f.err = buckets(m.negCounts, &p.negOffset, &p.neg, v)
			}
			return
		}
	case otlpSummary:
		if f.num == 6 {
			if v := f.bytes(); f.ok() {
				f.err = quantile(m, p, v)
			}
			return
		}
	}
	f.skip()
}

// quantile decodes a ValueAtQuantile of summary point p.
func quantile(m *otlpMetrics, p *otlpPoint, b []byte) error {
	var q otlpQuantile
	f := &fields{b: b, msg: "ValueAtQuantile"}
	for f.next() {
		switch f.num {
		case 1:
			q.quantile = math.Float64frombits(f.fixed64())
		case 2:
			q.value = math.Float64frombits(f.fixed64())
		default:
			f.skip()
		}
	}
	if f.err != nil {
		return f.err
	}
	m.quantiles = append(m.quantiles, q)
	p.quantiles.hi = int32(len(m.quantiles))
	return nil
}

// appendFixed64s reads an occurrence of a repeated fixed64 or double field,
// one value or a packed run, appends it to dst and sets s.hi to the new
// length. A packed run replaces what came before, as in pdata: s.lo moves
// to its start.
func (f *fields) appendFixed64s(dst []uint64, s *span32) []uint64 {
	lo := len(dst)
	x, run, packed := f.repeated(protowire.Fixed64Type)
	switch {
	case !f.ok():
		return dst
	case !packed:
		dst = append(dst, x)
	case len(run)%8 != 0:
		f.err = fmt.Errorf("%w: packed field %d of %s has %d bytes, not a multiple of 8", ErrMalformed, f.num, f.msg, len(run))
		return dst
	default:
		for ; len(run) > 0; run = run[8:] {
			dst = append(dst, binary.LittleEndian.Uint64(run))
		}
		s.lo = int32(lo)
	}
	s.hi = int32(len(dst))
	return dst
}

// buckets decodes the Buckets of an exponential histogram; repeated
// occurrences merge (offset replaced, counts appended).
func buckets(counts []uint64, offset *int32, s *span32, b []byte) ([]uint64, error) {
	f := &fields{b: b, msg: "Buckets"}
	for f.next() {
		switch f.num {
		case 1:
			*offset = sint32(f.varint())
		case 2:
			x, run, packed := f.repeated(protowire.VarintType)
			switch {
			case !f.ok():
			case !packed:
				counts = append(counts, x)
			default:
				for len(run) > 0 {
					x, k := consumeVarint(run)
					if k < 0 {
						return counts, errVarintOTLP
					}
					counts, run = append(counts, x), run[k:]
				}
			}
			s.hi = int32(len(counts))
		default:
			f.skip()
		}
	}
	return counts, f.err
}

func (d *protoDecoder) exemplar(b []byte) error {
	m := d.m
	ei, ok := m.addExemplar()
	if !ok {
		return errOTLPExpansion
	}
	f := &fields{b: b, msg: "Exemplar"}
	for f.next() {
		e := &m.exemplars[ei]
		switch f.num {
		case 7:
			if v := f.bytes(); f.ok() {
				m.exAttrs, f.err = m.appendKeyValue(m.exAttrs, v)
				m.exemplars[ei].attrs.hi = int32(len(m.exAttrs))
			}
		case 2:
			e.time = f.fixed64()
		case 3:
			e.valueType, e.value = valueDouble, math.Float64frombits(f.fixed64())
		case 6:
			e.valueType, e.intValue = valueInt, int64(f.fixed64())
		case 4:
			v := f.bytes()
			if len(v) != 0 && len(v) != len(e.spanID) {
				return fmt.Errorf("%w: span_id of %d bytes, want 8", ErrMalformed, len(v))
			}
			e.spanID = [8]byte{}
			copy(e.spanID[:], v)
		case 5:
			v := f.bytes()
			if len(v) != 0 && len(v) != len(e.traceID) {
				return fmt.Errorf("%w: trace_id of %d bytes, want 16", ErrMalformed, len(v))
			}
			e.traceID = [16]byte{}
			copy(e.traceID[:], v)
		default:
			f.skip()
		}
	}
	return f.err
}

// anyValue is an AnyValue being decoded.
type anyValue struct {
	kind  uint8 // anyEmpty...
	str   string
	num   uint64 // bool, int64 or float64 bits
	bytes []byte
	raw   any // array or kvlist, as pcommon's AsRaw gives them
}

const (
	anyEmpty uint8 = iota
	anyString
	anyBool
	anyInt
	anyDouble
	anyArray
	anyKVList
	anyBytes
)

// appendKeyValue decodes a KeyValue and appends it, checking that its key,
// and its value if a string, are valid UTF-8 (see validUTF8; array and map
// values are rendered as JSON, which is). decodeKVList decodes KeyValues
// with a loop of its own: sharing this one would cost a call per attribute
// of every point.
func (m *otlpMetrics) appendKeyValue(dst []otlpAttr, b []byte) ([]otlpAttr, error) {
	// Fast path for a string attribute: key (tag 0x0a) and value (tag
	// 0x12) in either order (pdata writes the value first), each shorter
	// than 128 bytes, the value holding string_value (tag 0x0a) alone.
	if len(b) >= 6 && b[1] < 0x80 {
		n := 2 + int(b[1])
		if n+2 <= len(b) && b[n+1] < 0x80 && n+2+int(b[n+1]) == len(b) {
			var key, val []byte
			switch first, second := b[2:n], b[n+2:]; {
			case b[0] == 0x0a && b[n] == 0x12:
				key, val = first, second
			case b[0] == 0x12 && b[n] == 0x0a:
				key, val = second, first
			}
			if len(val) >= 2 && val[0] == 0x0a && int(val[1])+2 == len(val) {
				// Tags and lengths are ASCII: b is when key and value are.
				if !isASCII(b) && (!utf8.Valid(key) || !utf8.Valid(val[2:])) {
					m.validUTF8 = false
				}
				return append(dst, otlpAttr{key: yoloString(key), value: yoloString(val[2:])}), nil
			}
		}
	}
	var key string
	var val anyValue
	f := &fields{b: b, msg: "KeyValue"}
	for f.next() {
		switch f.num {
		case 1:
			key = yoloString(m.checkUTF8(f.bytes()))
		case 2: // repeated occurrences merge
			if v := f.bytes(); f.ok() {
				f.err = decodeAnyValue(&val, v, 0)
			}
		case 3:
			f.varint()
		default:
			f.skip()
		}
	}
	if f.err != nil {
		return dst, f.err
	}
	if val.kind == anyString && !utf8.ValidString(val.str) {
		m.validUTF8 = false
	}
	return append(dst, otlpAttr{key: key, value: val.asString()}), nil
}

// decodeAnyValue decodes an AnyValue into v, merging as protobuf does.
func decodeAnyValue(v *anyValue, b []byte, depth int) error {
	if depth > maxOTLPDepth {
		return errOTLPDepth
	}
	f := &fields{b: b, msg: "AnyValue"}
	for f.next() {
		switch f.num {
		case 1:
			v.kind, v.str = anyString, yoloString(f.bytes())
		case 7:
			v.kind, v.bytes = anyBytes, f.bytes()
		case 2:
			v.kind, v.num = anyBool, f.varint()
		case 3:
			v.kind, v.num = anyInt, f.varint()
		case 8: // string_value_strindex: a value pcommon cannot render
			f.varint()
			v.kind = anyEmpty
		case 4:
			v.kind, v.num = anyDouble, f.fixed64()
		case 5:
			if s := f.bytes(); f.ok() {
				v.kind = anyArray
				v.raw, f.err = decodeArrayValue(s, depth+1)
			}
		case 6:
			if s := f.bytes(); f.ok() {
				v.kind = anyKVList
				v.raw, f.err = decodeKVList(s, depth+1)
			}
		default:
			f.skip()
		}
	}
	return f.err
}

func decodeArrayValue(b []byte, depth int) (any, error) {
	out := []any{}
	err := eachField1(b, "ArrayValue", func(s []byte) error {
		var v anyValue
		if err := decodeAnyValue(&v, s, depth); err != nil {
			return err
		}
		out = append(out, v.asRaw())
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func decodeKVList(b []byte, depth int) (any, error) {
	out := map[string]any{}
	err := eachField1(b, "KeyValueList", func(s []byte) error {
		var key string
		var v anyValue
		f := &fields{b: s, msg: "KeyValue"}
		for f.next() {
			switch f.num {
			case 1:
				key = string(f.bytes())
			case 2:
				if kv := f.bytes(); f.ok() {
					f.err = decodeAnyValue(&v, kv, depth)
				}
			case 3:
				f.varint()
			default:
				f.skip()
			}
		}
		if f.err != nil {
			return f.err
		}
		out[key] = v.asRaw()
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// asRaw returns v as pcommon's Value.AsRaw does: the form that
// encoding/json renders for arrays and maps.
func (v *anyValue) asRaw() any {
	switch v.kind {
	case anyString:
		return v.str
	case anyBool:
		return v.num != 0
	case anyInt:
		return int64(v.num)
	case anyDouble:
		return math.Float64frombits(v.num)
	case anyBytes:
		if len(v.bytes) == 0 {
			return []byte(nil)
		}
		return append([]byte(nil), v.bytes...)
	case anyArray, anyKVList:
		return v.raw
	}
	return nil
}

// asString renders v as pcommon's Value.AsString does.
func (v *anyValue) asString() string {
	switch v.kind {
	case anyString:
		return v.str
	case anyBool:
		if v.num != 0 {
			return "true"
		}
		return "false"
	case anyInt:
		return strconv.FormatInt(int64(v.num), 10)
	case anyDouble:
		return formatJSONFloat(math.Float64frombits(v.num))
	case anyBytes:
		return base64.StdEncoding.EncodeToString(v.bytes)
	case anyArray, anyKVList:
		var sb strings.Builder
		enc := json.NewEncoder(&sb)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(v.raw); err != nil {
			return "" // NaN or an infinity inside: encoding/json renders nothing
		}
		return strings.TrimSuffix(sb.String(), "\n")
	}
	return ""
}

// formatJSONFloat formats f as ECMAScript does (and encoding/json), with
// NaN and infinities spelled as OpenTelemetry spells them.
func formatJSONFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	var buf [32]byte
	fmtc := byte('f')
	if a := math.Abs(f); a != 0 && (a < 1e-6 || a >= 1e21) {
		fmtc = 'e'
	}
	b := strconv.AppendFloat(buf[:0], f, fmtc, -1, 64)
	if fmtc == 'e' {
		// e-07 to e-7
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return string(b)
}
