package remotewrite

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
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
	d := protoDecoder{m: m}
	return d.request(b)
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

// field reads the key at b[0:] and returns the field number, wire type and
// the rest.
func field(b []byte) (protowire.Number, protowire.Type, []byte, error) {
	tag, n := consumeVarint(b)
	if n < 0 {
		return 0, 0, b, errVarintOTLP
	}
	num := protowire.Number(int32(tag >> 3))
	if num <= 0 {
		return 0, 0, b, fmt.Errorf("%w: field number %d", ErrMalformed, num)
	}
	return num, protowire.Type(tag & 7), b[n:], nil
}

// wireErr says which field of which message has the wrong wire type.
func wireErr(msg string, num protowire.Number, typ protowire.Type) error {
	return fmt.Errorf("%w: field %d of %s has wire type %d", ErrMalformed, num, msg, typ)
}

// protoBytes reads a length-delimited field.
func protoBytes(b []byte, msg string, num protowire.Number, typ protowire.Type) ([]byte, []byte, error) {
	if typ != protowire.BytesType {
		return nil, b, wireErr(msg, num, typ)
	}
	v, n := consumeBytes(b)
	if n < 0 {
		return nil, b, errLengthOTLP
	}
	return v, b[n:], nil
}

func protoVarint(b []byte, msg string, num protowire.Number, typ protowire.Type) (uint64, []byte, error) {
	if typ != protowire.VarintType {
		return 0, b, wireErr(msg, num, typ)
	}
	v, n := consumeVarint(b)
	if n < 0 {
		return 0, b, errVarintOTLP
	}
	return v, b[n:], nil
}

func protoFixed64(b []byte, msg string, num protowire.Number, typ protowire.Type) (uint64, []byte, error) {
	if typ != protowire.Fixed64Type {
		return 0, b, wireErr(msg, num, typ)
	}
	if len(b) < 8 {
		return 0, b, errTruncated
	}
	return binary.LittleEndian.Uint64(b), b[8:], nil
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

// protoSkip passes over the value of an unknown field. A group is skipped
// as the collector's decoder skips it, which OpenTelemetry senders are
// tested against: up to its first field that is not a group tag, or to its
// end group (groups are deprecated and absent from OTLP).
func protoSkip(b []byte, num protowire.Number, typ protowire.Type) ([]byte, error) {
	depth := 0
	for {
		switch typ {
		case protowire.StartGroupType:
			depth++
		case protowire.EndGroupType:
			if depth == 0 {
				return b, fmt.Errorf("%w: end of group %d without a start", ErrMalformed, num)
			}
			depth--
		case protowire.VarintType:
			if _, n := consumeVarint(b); n >= 0 {
				return b[n:], nil
			}
			return b, errVarintOTLP
		case protowire.BytesType:
			if _, n := consumeBytes(b); n >= 0 {
				return b[n:], nil
			}
			return b, errLengthOTLP
		case protowire.Fixed64Type, protowire.Fixed32Type:
			size := 8
			if typ == protowire.Fixed32Type {
				size = 4
			}
			if len(b) < size {
				return b, errTruncated
			}
			return b[size:], nil
		default:
			return b, fmt.Errorf("%w: field %d has wire type %d", ErrMalformed, num, typ)
		}
		if depth == 0 {
			return b, nil
		}
		var err error
		if num, typ, b, err = field(b); err != nil {
			return b, err
		}
		if len(b) == 0 { // even an end group: the collector wants more
			return b, fmt.Errorf("%w: unterminated group", ErrMalformed)
		}
	}
}

func (d *protoDecoder) request(b []byte) error {
	return eachField1(b, "ExportMetricsServiceRequest", func(v []byte) error {
		if err := d.resourceMetrics(v); err != nil {
			return fmt.Errorf("resource_metrics %d: %w", len(d.m.resources)-1, err)
		}
		return nil
	})
}

// eachField1 calls f with the value of each occurrence of field 1 of
// message msg, a repeated message or bytes field, passing over the other
// fields.
func eachField1(b []byte, msg string, f func(v []byte) error) error {
	for len(b) > 0 {
		num, wt, rest, err := field(b)
		if err != nil {
			return err
		}
		if num != 1 {
			if b, err = protoSkip(rest, num, wt); err != nil {
				return err
			}
			continue
		}
		var v []byte
		if v, b, err = protoBytes(rest, msg, num, wt); err != nil {
			return err
		}
		if err := f(v); err != nil {
			return err
		}
	}
	return nil
}

func (d *protoDecoder) resourceMetrics(b []byte) error {
	m := d.m
	ri := m.addResource()
	current, deprecated := false, false
	for len(b) > 0 {
		num, typ, rest, err := field(b)
		if err != nil {
			return err
		}
		var v []byte
		switch num {
		case 1: // resource: repeated occurrences merge
			if v, b, err = protoBytes(rest, "ResourceMetrics", num, typ); err != nil {
				return err
			}
			if err := d.resource(v); err != nil {
				return fmt.Errorf("resource: %w", err)
			}
			m.resources[ri].attrs.hi = int32(len(m.resAttrs))
		case 2, 1000: // scope_metrics, and the deprecated instrumentation_library_metrics
			if v, b, err = protoBytes(rest, "ResourceMetrics", num, typ); err != nil {
				return err
			}
			if err := d.scopeMetrics(v, num == 1000); err != nil {
				return fmt.Errorf("scope_metrics: %w", err)
			}
			current = current || num == 2
			deprecated = deprecated || num == 1000
		case 3:
			if _, b, err = protoBytes(rest, "ResourceMetrics", num, typ); err != nil {
				return err
			}
		default:
			if b, err = protoSkip(rest, num, typ); err != nil {
				return err
			}
		}
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
	for len(b) > 0 {
		num, typ, rest, err := field(b)
		if err != nil {
			return err
		}
		var v []byte
		switch num {
		case 1:
			if v, b, err = protoBytes(rest, "Resource", num, typ); err != nil {
				return err
			}
			if d.m.resAttrs, err = appendKeyValue(d.m.resAttrs, v); err != nil {
				return err
			}
		case 2:
			if _, b, err = protoVarint(rest, "Resource", num, typ); err != nil {
				return err
			}
		case 3:
			if v, b, err = protoBytes(rest, "Resource", num, typ); err != nil {
				return err
			}
			if err := checkEntityRef(v); err != nil {
				return err
			}
		default:
			if b, err = protoSkip(rest, num, typ); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkEntityRef checks the wire types of an EntityRef, which the
// translator does not read.
func checkEntityRef(b []byte) error {
	for len(b) > 0 {
		num, typ, rest, err := field(b)
		if err != nil {
			return err
		}
		if num >= 1 && num <= 4 {
			if _, b, err = protoBytes(rest, "EntityRef", num, typ); err != nil {
				return err
			}
			continue
		}
		if b, err = protoSkip(rest, num, typ); err != nil {
			return err
		}
	}
	return nil
}

func (d *protoDecoder) scopeMetrics(b []byte, deprecated bool) error {
	m := d.m
	si, ok := m.addScope(deprecated)
	if !ok {
		return errOTLPExpansion
	}
	for len(b) > 0 {
		num, typ, rest, err := field(b)
		if err != nil {
			return err
		}
		var v []byte
		switch num {
		case 1: // scope: repeated occurrences merge
			if v, b, err = protoBytes(rest, "ScopeMetrics", num, typ); err != nil {
				return err
			}
			if err := d.scope(&m.scopes[si], v); err != nil {
				return fmt.Errorf("scope: %w", err)
			}
		case 2:
			if v, b, err = protoBytes(rest, "ScopeMetrics", num, typ); err != nil {
				return err
			}
			if err := d.metric(v); err != nil {
				return fmt.Errorf("metric %d: %w", len(m.metrics)-1, err)
			}
		case 3:
			if v, b, err = protoBytes(rest, "ScopeMetrics", num, typ); err != nil {
				return err
			}
			m.scopes[si].schemaURL = yoloString(v)
		default:
			if b, err = protoSkip(rest, num, typ); err != nil {
				return err
			}
		}
	}
	m.scopes[si].metrics.hi = int32(len(m.metrics))
	return nil
}

func (d *protoDecoder) scope(s *otlpScope, b []byte) error {
	for len(b) > 0 {
		num, typ, rest, err := field(b)
		if err != nil {
			return err
		}
		var v []byte
		switch num {
		case 1, 2:
			if v, b, err = protoBytes(rest, "InstrumentationScope", num, typ); err != nil {
				return err
			}
			if num == 1 {
				s.name = yoloString(v)
			} else {
				s.version = yoloString(v)
			}
		case 3:
			if v, b, err = protoBytes(rest, "InstrumentationScope", num, typ); err != nil {
				return err
			}
			if d.m.scopeAttrs, err = appendKeyValue(d.m.scopeAttrs, v); err != nil {
				return err
			}
			s.attrs.hi = int32(len(d.m.scopeAttrs))
		case 4:
			if _, b, err = protoVarint(rest, "InstrumentationScope", num, typ); err != nil {
				return err
			}
		default:
			if b, err = protoSkip(rest, num, typ); err != nil {
				return err
			}
		}
	}
	return nil
}

func (d *protoDecoder) metric(b []byte) error {
	m := d.m
	mi, ok := m.addMetric()
	if !ok {
		return errOTLPExpansion
	}
	for len(b) > 0 {
		num, typ, rest, err := field(b)
		if err != nil {
			return err
		}
		var v []byte
		switch num {
		case 1, 2, 3:
			if v, b, err = protoBytes(rest, "Metric", num, typ); err != nil {
				return err
			}
			switch num {
			case 1:
				m.metrics[mi].name = yoloString(v)
			case 2:
				m.metrics[mi].description = yoloString(v)
			case 3:
				m.metrics[mi].unit = yoloString(v)
			}
		case 5, 7, 9, 10, 11:
			if v, b, err = protoBytes(rest, "Metric", num, typ); err != nil {
				return err
			}
			mt := m.setData(mi, dataType(num))
			if err := d.data(mi, v); err != nil {
				return fmt.Errorf("%s: %w", strings.ToLower(mt.typ.String()), err)
			}
		case 12:
			if v, b, err = protoBytes(rest, "Metric", num, typ); err != nil {
				return err
			}
			var kv [1]otlpAttr
			if _, err := appendKeyValue(kv[:0], v); err != nil {
				return err
			}
		default:
			if b, err = protoSkip(rest, num, typ); err != nil {
				return err
			}
		}
	}
	return nil
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
	msg := typ.String()
	for len(b) > 0 {
		num, wt, rest, err := field(b)
		if err != nil {
			return err
		}
		var v []byte
		var x uint64
		switch {
		case num == 1:
			if v, b, err = protoBytes(rest, msg, num, wt); err != nil {
				return err
			}
			if err := d.point(typ, v); err != nil {
				return fmt.Errorf("data point %d: %w", m.metrics[mi].points.len(), err)
			}
			m.metrics[mi].points.hi = int32(len(m.points))
		case num == 2 && typ != otlpGauge && typ != otlpSummary:
			if x, b, err = protoVarint(rest, msg, num, wt); err != nil {
				return err
			}
			m.metrics[mi].temporality = int32(x)
		case num == 3 && typ == otlpSum:
			if x, b, err = protoVarint(rest, msg, num, wt); err != nil {
				return err
			}
			m.metrics[mi].monotonic = x != 0
		default:
			if b, err = protoSkip(rest, num, wt); err != nil {
				return err
			}
		}
	}
	return nil
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
	msg := pointMessages[typ]
	for len(b) > 0 {
		num, wt, rest, err := field(b)
		if err != nil {
			return err
		}
		p := &m.points[pi]
		var v []byte
		var x uint64
		switch {
		case num == pf.attrs:
			if v, b, err = protoBytes(rest, msg, num, wt); err != nil {
				return err
			}
			if m.pointAttrs, err = appendKeyValue(m.pointAttrs, v); err != nil {
				return err
			}
			m.points[pi].attrs.hi = int32(len(m.pointAttrs))
		case num == pf.start || num == pf.time:
			if x, b, err = protoFixed64(rest, msg, num, wt); err != nil {
				return err
			}
			if num == pf.start {
				p.start = x
			} else {
				p.time = x
			}
		case num == pf.flags:
			if x, b, err = protoVarint(rest, msg, num, wt); err != nil {
				return err
			}
			p.flags = uint32(x)
		case num == pf.exemplars:
			if v, b, err = protoBytes(rest, msg, num, wt); err != nil {
				return err
			}
			if err := d.exemplar(v); err != nil {
				return fmt.Errorf("exemplar %d: %w", m.points[pi].exemplars.len(), err)
			}
			m.points[pi].exemplars.hi = int32(len(m.exemplars))
		default:
			if b, err = d.pointField(typ, pi, msg, num, wt, rest); err != nil {
				return err
			}
		}
	}
	return nil
}

// pointField decodes the fields particular to each type of data point.
func (d *protoDecoder) pointField(typ otlpType, pi int, msg string, num protowire.Number, wt protowire.Type, b []byte) ([]byte, error) {
	m := d.m
	p := &m.points[pi]
	var x uint64
	var v []byte
	var err error
	// Histograms, exponential histograms and summaries number count and sum
	// alike.
	if typ != otlpGauge && typ != otlpSum && (num == 4 || num == 5) {
		if x, b, err = protoFixed64(b, msg, num, wt); err != nil {
			return b, err
		}
		if num == 4 {
			p.count = x
		} else {
			p.sum, p.hasSum = math.Float64frombits(x), typ != otlpSummary // a summary's sum is not optional
		}
		return b, nil
	}
	switch typ {
	case otlpGauge, otlpSum:
		switch num {
		case 4, 6: // as_double, as_int
			if x, b, err = protoFixed64(b, msg, num, wt); err != nil {
				return b, err
			}
			if num == 4 {
				p.valueType, p.value = valueDouble, math.Float64frombits(x)
			} else {
				p.valueType, p.intValue = valueInt, int64(x)
			}
			return b, nil
		}
	case otlpHistogram:
		switch num {
		case 11, 12: // min, max
			_, b, err = protoFixed64(b, msg, num, wt)
			return b, err
		case 6:
			lo := len(m.counts)
			if m.counts, b, err = appendFixed64s(m.counts, b, msg, num, wt); err != nil {
				return b, err
			}
			if wt == protowire.BytesType { // a packed run replaces, as in pdata
				p.counts.lo = int32(lo)
			}
			p.counts.hi = int32(len(m.counts))
			return b, nil
		case 7:
			lo := len(m.bounds)
			var raw []uint64
			if raw, b, err = appendFixed64s(nil, b, msg, num, wt); err != nil {
				return b, err
			}
			for _, r := range raw {
				m.bounds = append(m.bounds, math.Float64frombits(r))
			}
			if wt == protowire.BytesType {
				p.bounds.lo = int32(lo)
			}
			p.bounds.hi = int32(len(m.bounds))
			return b, nil
		}
	case otlpExpHistogram:
		switch num {
		case 7, 12, 13, 14: // zero_count, min, max, zero_threshold
			if x, b, err = protoFixed64(b, msg, num, wt); err != nil {
				return b, err
			}
			if num == 7 {
				p.zeroCount = x
			}
			return b, nil
		case 6:
			if x, b, err = protoVarint(b, msg, num, wt); err != nil {
				return b, err
			}
			p.scale = sint32(x)
			return b, nil
		case 8, 9:
			if v, b, err = protoBytes(b, msg, num, wt); err != nil {
				return b, err
			}
			if num == 8 {
				m.counts, err = buckets(m.counts, &p.posOffset, &p.pos, v)
			} else {
				m.negCounts, err = buckets(m.negCounts, &p.negOffset, &p.neg, v)
			}
			return b, err
		}
	case otlpSummary:
		switch num {
		case 6:
			if v, b, err = protoBytes(b, msg, num, wt); err != nil {
				return b, err
			}
			var q otlpQuantile
			for len(v) > 0 {
				qn, qt, rest, err := field(v)
				if err != nil {
					return b, err
				}
				if qn == 1 || qn == 2 {
					if x, v, err = protoFixed64(rest, "ValueAtQuantile", qn, qt); err != nil {
						return b, err
					}
					if qn == 1 {
						q.quantile = math.Float64frombits(x)
					} else {
						q.value = math.Float64frombits(x)
					}
					continue
				}
				if v, err = protoSkip(rest, qn, qt); err != nil {
					return b, err
				}
			}
			m.quantiles = append(m.quantiles, q)
			p.quantiles.hi = int32(len(m.quantiles))
			return b, nil
		}
	}
	return protoSkip(b, num, wt)
}

// appendFixed64s reads a repeated fixed64 or double field, packed or not.
func appendFixed64s(dst []uint64, b []byte, msg string, num protowire.Number, wt protowire.Type) ([]uint64, []byte, error) {
	switch wt {
	case protowire.Fixed64Type:
		if len(b) < 8 {
			return dst, b, errTruncated
		}
		return append(dst, binary.LittleEndian.Uint64(b)), b[8:], nil
	case protowire.BytesType:
		v, n := consumeBytes(b)
		if n < 0 {
			return dst, b, errLengthOTLP
		}
		if len(v)%8 != 0 {
			return dst, b, fmt.Errorf("%w: packed field %d of %s has %d bytes, not a multiple of 8", ErrMalformed, num, msg, len(v))
		}
		for ; len(v) > 0; v = v[8:] {
			dst = append(dst, binary.LittleEndian.Uint64(v))
		}
		return dst, b[n:], nil
	}
	return dst, b, wireErr(msg, num, wt)
}

// buckets decodes the Buckets of an exponential histogram; repeated
// occurrences merge (offset replaced, counts appended).
func buckets(counts []uint64, offset *int32, s *span32, b []byte) ([]uint64, error) {
	for len(b) > 0 {
		num, wt, rest, err := field(b)
		if err != nil {
			return counts, err
		}
		switch num {
		case 1:
			var x uint64
			if x, b, err = protoVarint(rest, "Buckets", num, wt); err != nil {
				return counts, err
			}
			*offset = sint32(x)
		case 2:
			switch wt {
			case protowire.VarintType:
				x, n := consumeVarint(rest)
				if n < 0 {
					return counts, errVarintOTLP
				}
				counts, b = append(counts, x), rest[n:]
			case protowire.BytesType:
				v, n := consumeBytes(rest)
				if n < 0 {
					return counts, errLengthOTLP
				}
				for len(v) > 0 {
					x, k := consumeVarint(v)
					if k < 0 {
						return counts, errVarintOTLP
					}
					counts, v = append(counts, x), v[k:]
				}
				b = rest[n:]
			default:
				return counts, wireErr("Buckets", num, wt)
			}
			s.hi = int32(len(counts))
		default:
			if b, err = protoSkip(rest, num, wt); err != nil {
				return counts, err
			}
		}
	}
	return counts, nil
}

func (d *protoDecoder) exemplar(b []byte) error {
	m := d.m
	ei, ok := m.addExemplar()
	if !ok {
		return errOTLPExpansion
	}
	for len(b) > 0 {
		num, wt, rest, err := field(b)
		if err != nil {
			return err
		}
		e := &m.exemplars[ei]
		var v []byte
		var x uint64
		switch num {
		case 7:
			if v, b, err = protoBytes(rest, "Exemplar", num, wt); err != nil {
				return err
			}
			if m.exAttrs, err = appendKeyValue(m.exAttrs, v); err != nil {
				return err
			}
			m.exemplars[ei].attrs.hi = int32(len(m.exAttrs))
		case 2, 3, 6:
			if x, b, err = protoFixed64(rest, "Exemplar", num, wt); err != nil {
				return err
			}
			switch num {
			case 2:
				e.time = x
			case 3:
				e.valueType, e.value = valueDouble, math.Float64frombits(x)
			case 6:
				e.valueType, e.intValue = valueInt, int64(x)
			}
		case 4, 5:
			if v, b, err = protoBytes(rest, "Exemplar", num, wt); err != nil {
				return err
			}
			if num == 5 {
				if len(v) != 0 && len(v) != len(e.traceID) {
					return fmt.Errorf("%w: trace_id of %d bytes, want 16", ErrMalformed, len(v))
				}
				e.traceID = [16]byte{}
				copy(e.traceID[:], v)
			} else {
				if len(v) != 0 && len(v) != len(e.spanID) {
					return fmt.Errorf("%w: span_id of %d bytes, want 8", ErrMalformed, len(v))
				}
				e.spanID = [8]byte{}
				copy(e.spanID[:], v)
			}
		default:
			if b, err = protoSkip(rest, num, wt); err != nil {
				return err
			}
		}
	}
	return nil
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

// appendKeyValue decodes a KeyValue and appends it. decodeKVList decodes
// KeyValues with a loop of its own: sharing this one would cost a call per
// attribute of every point.
func appendKeyValue(dst []otlpAttr, b []byte) ([]otlpAttr, error) {
	var key string
	var val anyValue
	for len(b) > 0 {
		num, wt, rest, err := field(b)
		if err != nil {
			return dst, err
		}
		var v []byte
		switch num {
		case 1:
			if v, b, err = protoBytes(rest, "KeyValue", num, wt); err != nil {
				return dst, err
			}
			key = yoloString(v)
		case 2: // repeated occurrences merge
			if v, b, err = protoBytes(rest, "KeyValue", num, wt); err != nil {
				return dst, err
			}
			if err = decodeAnyValue(&val, v, 0); err != nil {
				return dst, err
			}
		case 3:
			if _, b, err = protoVarint(rest, "KeyValue", num, wt); err != nil {
				return dst, err
			}
		default:
			if b, err = protoSkip(rest, num, wt); err != nil {
				return dst, err
			}
		}
	}
	return append(dst, otlpAttr{key: key, value: val.asString()}), nil
}

// decodeAnyValue decodes an AnyValue into v, merging as protobuf does.
func decodeAnyValue(v *anyValue, b []byte, depth int) error {
	if depth > maxOTLPDepth {
		return errOTLPDepth
	}
	for len(b) > 0 {
		num, wt, rest, err := field(b)
		if err != nil {
			return err
		}
		var x uint64
		var s []byte
		switch num {
		case 1, 7:
			if s, b, err = protoBytes(rest, "AnyValue", num, wt); err != nil {
				return err
			}
			if num == 1 {
				v.kind, v.str = anyString, yoloString(s)
			} else {
				v.kind, v.bytes = anyBytes, s
			}
		case 2, 3, 8:
			if x, b, err = protoVarint(rest, "AnyValue", num, wt); err != nil {
				return err
			}
			switch num {
			case 2:
				v.kind, v.num = anyBool, x
			case 3:
				v.kind, v.num = anyInt, x
			case 8: // string_value_strindex: a value pcommon cannot render
				v.kind = anyEmpty
			}
		case 4:
			if x, b, err = protoFixed64(rest, "AnyValue", num, wt); err != nil {
				return err
			}
			v.kind, v.num = anyDouble, x
		case 5, 6:
			if s, b, err = protoBytes(rest, "AnyValue", num, wt); err != nil {
				return err
			}
			if num == 5 {
				v.kind = anyArray
				v.raw, err = decodeArrayValue(s, depth+1)
			} else {
				v.kind = anyKVList
				v.raw, err = decodeKVList(s, depth+1)
			}
			if err != nil {
				return err
			}
		default:
			if b, err = protoSkip(rest, num, wt); err != nil {
				return err
			}
		}
	}
	return nil
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
		for len(s) > 0 {
			num, wt, rest, err := field(s)
			if err != nil {
				return err
			}
			var kv []byte
			switch num {
			case 1:
				if kv, s, err = protoBytes(rest, "KeyValue", num, wt); err != nil {
					return err
				}
				key = string(kv)
			case 2:
				if kv, s, err = protoBytes(rest, "KeyValue", num, wt); err != nil {
					return err
				}
				if err := decodeAnyValue(&v, kv, depth); err != nil {
					return err
				}
			case 3:
				if _, s, err = protoVarint(rest, "KeyValue", num, wt); err != nil {
					return err
				}
			default:
				if s, err = protoSkip(rest, num, wt); err != nil {
					return err
				}
			}
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
