package remotewrite

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
)

// errTooManySeries is returned by the decoder when a request holds more
// TimeSeries than Options.MaxSeriesPerRequest.
var errTooManySeries = errors.New("too many series")

// rng is a half-open range [lo, hi) into one of the decoder's flat arrays.
type rng struct{ lo, hi uint32 }

func (r rng) len() int { return int(r.hi - r.lo) }

type sample struct {
	v     float64
	t, st int64
}

// seriesRec is one decoded TimeSeries. Its labels index decoder.labels (1.0)
// or decoder.refs (2.0, name/value reference pairs).
type seriesRec struct {
	labels, samples, histograms, exemplars rng
	// 2.0 only.
	metaType         uint64
	helpRef, unitRef uint32
	hasMeta          bool
	createdTS        int64 // TimeSeries field 6 of 2.0-rc.3 senders.
	// 1.0 only: the label fields are adjacent and all their bytes ASCII, so
	// every name and value is valid UTF-8 (see seriesV1).
	asciiLabels bool
}

type exemplarRec struct {
	labels rng // into exLabels (1.0) or exRefs (2.0)
	v      float64
	ts     int64
}

type histRec struct {
	countInt, zeroCountInt     uint64
	countFloat, zeroCountFloat float64
	isFloat                    bool // count is count_float
	sum, zeroThreshold         float64
	schema                     int32
	resetHint                  uint64
	t, st                      int64
	posSpans, negSpans         rng
	posDeltas, negDeltas       rng
	posCounts, negCounts       rng
	custom                     rng
}

type metaRec struct {
	typ                uint64
	family, help, unit string
}

// decoder decodes remote-write 1.0 and 2.0 messages into flat arrays that are
// reused across requests. Strings alias the decoded body. It is not safe for
// concurrent use.
type decoder struct {
	maxSeries int

	series    []seriesRec
	samples   []sample
	hists     []histRec
	exemplars []exemplarRec

	// 1.0
	labels   []labels.Label
	exLabels []labels.Label
	meta     []metaRec

	// 2.0
	symbols []string
	refs    []uint32
	exRefs  []uint32

	posSpans, negSpans   []histogram.Span
	posDeltas, negDeltas []int64
	posCounts, negCounts []float64
	custom               []float64
}

// reset empties the decoder for the next body. Strings decoded before may
// still be referenced beyond the slices' lengths: they point into the
// decoded body, which the caller keeps for the next request or drops after
// calling forget.
func (d *decoder) reset() {
	d.series = d.series[:0]
	d.samples = d.samples[:0]
	d.hists = d.hists[:0]
	d.exemplars = d.exemplars[:0]
	d.labels = d.labels[:0]
	d.exLabels = d.exLabels[:0]
	clear(d.meta)
	d.meta = d.meta[:0]
	d.symbols = d.symbols[:0]
	d.refs = d.refs[:0]
	d.exRefs = d.exRefs[:0]
	d.posSpans = d.posSpans[:0]
	d.negSpans = d.negSpans[:0]
	d.posDeltas = d.posDeltas[:0]
	d.negDeltas = d.negDeltas[:0]
	d.posCounts = d.posCounts[:0]
	d.negCounts = d.negCounts[:0]
	d.custom = d.custom[:0]
}

// forget drops every reference into the decoded bodies, for when the buffer
// that held them goes (clearing a request's labels after each request was
// 1.2% of the server's CPU at 1M series).
func (d *decoder) forget() {
	clear(d.labels[:cap(d.labels)])
	clear(d.exLabels[:cap(d.exLabels)])
	clear(d.symbols[:cap(d.symbols)])
}

// trim drops arrays that grew unusually large so that a pooled decoder does
// not pin the memory of one huge request.
func (d *decoder) trim(maxElems int) {
	if cap(d.samples) > maxElems {
		d.samples = nil
	}
	if cap(d.labels) > maxElems {
		d.labels = nil
	}
	if cap(d.refs) > maxElems {
		d.refs = nil
	}
	if cap(d.series) > maxElems {
		d.series = nil
	}
	if cap(d.symbols) > maxElems {
		d.symbols = nil
	}
}

func pos32(n int) uint32 { return uint32(n) }

// decode decodes a request of version 1 (a prometheus.WriteRequest) or 2
// (an io.prometheus.write.v2.Request). Symbol references of 2.0 are kept as
// numbers and resolved, with a range check, when the series is appended, so
// symbols may come before or after the series that use them.
func (d *decoder) decode(b []byte, version int) error {
	d.reset()
	f := &fieldReader{b: b, msg: "WriteRequest"}
	seriesField := uint64(1)
	var v2Field uint64 // the first field of a 2.0 Request in a 1.0 one
	if version == 2 {
		f.msg, seriesField = "Request", 5
	}
	for f.next() {
		switch {
		case f.field == seriesField:
			if msg := f.bytes(); f.err == nil {
				f.err = d.timeseries(msg, version)
			}
		case f.field == 3 && version == 1: // metadata
			if msg := f.bytes(); f.err == nil {
				if err := d.metadataV1(msg); err != nil {
					f.err = fmt.Errorf("metadata %d: %w", len(d.meta), err)
				}
			}
		case f.field == 4 && version == 2: // symbols
			if s := f.bytes(); f.err == nil {
				d.symbols = append(d.symbols, yoloString(s))
			}
		case version == 2 && f.field <= 3 && f.wt == wireBytes:
			// Reserved in 2.0 so that a 1.0 body decodes to nothing: it
			// would be stored as nothing, and answered 204.
			return fmt.Errorf("field %d is reserved in io.prometheus.write.v2.Request and is a prometheus.WriteRequest's: the body looks like remote write 1.0 sent as 2.0 (send Content-Type: %s, or a 2.0 body)", f.field, ContentTypeV1)
		default:
			if version == 1 && v2Field == 0 && (f.field == 4 || f.field == 5) && f.wt == wireBytes {
				v2Field = f.field
			}
			f.skip()
		}
	}
	if f.err != nil {
		return f.err
	}
	if v2Field != 0 && len(d.series) == 0 && len(d.meta) == 0 {
		// A 2.0 body decodes to nothing as 1.0. (1.0 has no fields 4 and
		// 5; a body that has them beside 1.0 series is taken, as
		// protobuf takes unknown fields.)
		return fmt.Errorf("field %d is not in prometheus.WriteRequest and is an io.prometheus.write.v2.Request's, and nothing else is in the body: it looks like remote write 2.0 sent as 1.0 (send Content-Type: %s)", v2Field, ContentTypeV2)
	}
	return nil
}

// timeseries decodes a TimeSeries message of a request of version 1 or 2.
func (d *decoder) timeseries(b []byte, version int) error {
	if len(d.series) >= d.maxSeries {
		return errTooManySeries
	}
	s := seriesRec{
		samples:    rng{pos32(len(d.samples)), 0},
		histograms: rng{pos32(len(d.hists)), 0},
		exemplars:  rng{pos32(len(d.exemplars)), 0},
	}
	var err error
	if version == 2 {
		err = d.seriesV2(b, &s)
	} else {
		err = d.seriesV1(b, &s)
	}
	if err != nil {
		return fmt.Errorf("timeseries %d: %w", len(d.series), err)
	}
	s.samples.hi = pos32(len(d.samples))
	s.histograms.hi = pos32(len(d.hists))
	s.exemplars.hi = pos32(len(d.exemplars))
	d.series = append(d.series, s)
	return nil
}

// seriesV1 decodes the fields of a 1.0 TimeSeries into s and the flat
// arrays; timeseries sets the ranges of samples, histograms and exemplars.
func (d *decoder) seriesV1(b []byte, s *seriesRec) error {
	s.labels.lo = pos32(len(d.labels))
	// Label fields from lblLo to lblHi: when they are adjacent, one pass
	// over their bytes finds whether all are ASCII, framing included (tags,
	// and lengths under 128), which makes every name and value valid UTF-8
	// without checking strings one by one.
	lblLo, lblHi, adjacent := -1, -1, true
	f := &fieldReader{b: b, msg: "TimeSeries"}
	for start := 0; f.next(); start = f.i {
		if f.field < 1 || f.field > 4 {
			f.skip()
			continue
		}
		msg := f.bytes()
		if f.err != nil {
			break
		}
		switch f.field {
		case 1:
			l, err := labelPair(msg)
			if err != nil {
				return fmt.Errorf("label %d: %w", len(d.labels)-int(s.labels.lo), err)
			}
			d.labels = append(d.labels, l)
			if lblLo < 0 {
				lblLo = start
			} else if start != lblHi {
				adjacent = false
			}
			lblHi = f.i
		case 2:
			f.err = d.sample(msg, false)
		case 3:
			f.err = d.exemplar(msg, 1)
		case 4:
			f.err = d.histogram(msg, false)
		}
	}
	if f.err != nil {
		return f.err
	}
	s.labels.hi = pos32(len(d.labels))
	s.asciiLabels = lblLo >= 0 && adjacent && isASCII(b[lblLo:lblHi])
	return nil
}

// seriesV2 decodes the fields of a 2.0 TimeSeries into s and the flat
// arrays, as seriesV1.
func (d *decoder) seriesV2(b []byte, s *seriesRec) error {
	s.labels.lo = pos32(len(d.refs))
	f := &fieldReader{b: b, msg: "TimeSeries"}
	for f.next() {
		switch f.field {
		case 1:
			f.i, f.err = appendUint32s(&d.refs, f.b, f.i, f.wt)
		case 2, 3, 4, 5:
			msg := f.bytes()
			if f.err != nil {
				break
			}
			switch f.field {
			case 2:
				f.err = d.sample(msg, true)
			case 3:
				f.err = d.histogram(msg, true)
			case 4:
				f.err = d.exemplar(msg, 2)
			case 5:
				f.err = metadataV2(msg, s)
			}
		case 6:
			s.createdTS = int64(f.varint())
		default:
			f.skip()
		}
	}
	if f.err != nil {
		return f.err
	}
	s.labels.hi = pos32(len(d.refs))
	return nil
}

// isASCII reports whether every byte of b is below 0x80.
func isASCII(b []byte) bool {
	var or uint64
	for len(b) >= 8 {
		or |= binary.LittleEndian.Uint64(b)
		b = b[8:]
	}
	for _, c := range b {
		or |= uint64(c)
	}
	return or&0x8080808080808080 == 0
}

func labelPair(b []byte) (labels.Label, error) {
	// Fast path for the canonical encoding: name (tag 0x0a) then value (tag
	// 0x12), each shorter than 128 bytes.
	if len(b) >= 4 && b[0] == 0x0a && b[1] < 0x80 {
		n := 2 + int(b[1])
		if n+2 <= len(b) && b[n] == 0x12 && b[n+1] < 0x80 && n+2+int(b[n+1]) == len(b) {
			return labels.Label{Name: yoloString(b[2:n]), Value: yoloString(b[n+2:])}, nil
		}
	}
	var l labels.Label
	f := &fieldReader{b: b, msg: "Label"}
	for f.next() {
		switch f.field {
		case 1:
			l.Name = yoloString(f.bytes())
		case 2:
			l.Value = yoloString(f.bytes())
		default:
			f.skip()
		}
	}
	return l, f.err
}

// sample decodes a Sample; withST also reads start_timestamp (2.0).
func (d *decoder) sample(b []byte, withST bool) error {
	// Fast path for the canonical encoding: value (tag 0x09) then timestamp
	// (tag 0x10) and nothing else.
	if len(b) >= 11 && b[0] == 0x09 && b[9] == 0x10 {
		if t, n := binary.Uvarint(b[10:]); n > 0 && 10+n == len(b) {
			d.samples = append(d.samples, sample{v: math.Float64frombits(binary.LittleEndian.Uint64(b[1:9])), t: int64(t)})
			return nil
		}
	}
	var s sample
	f := &fieldReader{b: b, msg: "Sample"}
	for f.next() {
		switch {
		case f.field == 1:
			s.v = f.double()
		case f.field == 2:
			s.t = int64(f.varint())
		case f.field == 3 && withST:
			s.st = int64(f.varint())
		default:
			f.skip()
		}
	}
	if f.err != nil {
		return f.err
	}
	d.samples = append(d.samples, s)
	return nil
}

// exemplar decodes an Exemplar, whose labels are pairs in 1.0 and symbol
// references in 2.0.
func (d *decoder) exemplar(b []byte, version int) error {
	e := exemplarRec{labels: rng{d.exLabelsEnd(version), 0}}
	f := &fieldReader{b: b, msg: "Exemplar"}
	for f.next() {
		switch f.field {
		case 1:
			if version == 2 {
				f.i, f.err = appendUint32s(&d.exRefs, f.b, f.i, f.wt)
				break
			}
			msg := f.bytes()
			if f.err != nil {
				break
			}
			l, err := labelPair(msg)
			if err != nil {
				return fmt.Errorf("exemplar label: %w", err)
			}
			d.exLabels = append(d.exLabels, l)
		case 2:
			e.v = f.double()
		case 3:
			e.ts = int64(f.varint())
		default:
			f.skip()
		}
	}
	if f.err != nil {
		return f.err
	}
	e.labels.hi = d.exLabelsEnd(version)
	d.exemplars = append(d.exemplars, e)
	return nil
}

// exLabelsEnd is the end of the array an exemplar's labels index: exLabels
// (1.0) or exRefs (2.0).
func (d *decoder) exLabelsEnd(version int) uint32 {
	if version == 2 {
		return pos32(len(d.exRefs))
	}
	return pos32(len(d.exLabels))
}

// metricType reads the metric type of a metadata message: an enum, which is
// an int32 on the wire.
func (f *fieldReader) metricType() uint64 { return uint64(uint32(f.varint())) }

func (d *decoder) metadataV1(b []byte) error {
	var m metaRec
	f := &fieldReader{b: b, msg: "MetricMetadata"}
	for f.next() {
		switch f.field {
		case 1:
			m.typ = f.metricType()
		case 2:
			m.family = yoloString(f.bytes())
		case 4:
			m.help = yoloString(f.bytes())
		case 5:
			m.unit = yoloString(f.bytes())
		default:
			f.skip()
		}
	}
	if f.err != nil {
		return f.err
	}
	d.meta = append(d.meta, m)
	return nil
}

func metadataV2(b []byte, s *seriesRec) error {
	s.hasMeta = true
	f := &fieldReader{b: b, msg: "Metadata"}
	for f.next() {
		switch f.field {
		case 1:
			s.metaType = f.metricType()
		case 3:
			s.helpRef = ref32(f.varint())
		case 4:
			s.unitRef = ref32(f.varint())
		default:
			f.skip()
		}
	}
	return f.err
}

// histogram decodes a Histogram message, the same in 1.0 and 2.0 except for
// start_timestamp (field 17, 2.0 only).
func (d *decoder) histogram(b []byte, withST bool) error {
	h := histRec{
		posSpans:  rng{pos32(len(d.posSpans)), 0},
		negSpans:  rng{pos32(len(d.negSpans)), 0},
		posDeltas: rng{pos32(len(d.posDeltas)), 0},
		negDeltas: rng{pos32(len(d.negDeltas)), 0},
		posCounts: rng{pos32(len(d.posCounts)), 0},
		negCounts: rng{pos32(len(d.negCounts)), 0},
		custom:    rng{pos32(len(d.custom)), 0},
	}
	f := &fieldReader{b: b, msg: "Histogram"}
	for f.next() {
		switch f.field {
		case 1: // oneof count: the last one set wins
			h.countInt, h.countFloat, h.isFloat = f.varint(), 0, false
		case 2:
			h.countFloat, h.countInt, h.isFloat = f.double(), 0, true
		case 3:
			h.sum = f.double()
		case 4:
			h.schema = zigzag32(f.varint())
		case 5:
			h.zeroThreshold = f.double()
		case 6: // oneof zero_count
			h.zeroCountInt, h.zeroCountFloat = f.varint(), 0
		case 7:
			h.zeroCountFloat, h.zeroCountInt = f.double(), 0
		case 8, 11: // spans
			msg := f.bytes()
			if f.err != nil {
				break
			}
			var sp histogram.Span
			if sp, f.err = bucketSpan(msg); f.field == 8 {
				d.negSpans = append(d.negSpans, sp)
			} else {
				d.posSpans = append(d.posSpans, sp)
			}
		case 9: // sint64 deltas, packed or not
			f.i, f.err = appendSint64s(&d.negDeltas, f.b, f.i, f.wt)
		case 12:
			f.i, f.err = appendSint64s(&d.posDeltas, f.b, f.i, f.wt)
		case 10: // doubles, packed or not
			f.i, f.err = appendDoubles(&d.negCounts, f.b, f.i, f.wt)
		case 13:
			f.i, f.err = appendDoubles(&d.posCounts, f.b, f.i, f.wt)
		case 16:
			f.i, f.err = appendDoubles(&d.custom, f.b, f.i, f.wt)
		case 14:
			h.resetHint = uint64(uint32(f.varint()))
		case 15:
			h.t = int64(f.varint())
		case 17:
			if withST {
				h.st = int64(f.varint())
			} else {
				f.skip()
			}
		default:
			f.skip()
		}
	}
	if f.err != nil {
		return f.err
	}
	h.posSpans.hi = pos32(len(d.posSpans))
	h.negSpans.hi = pos32(len(d.negSpans))
	h.posDeltas.hi = pos32(len(d.posDeltas))
	h.negDeltas.hi = pos32(len(d.negDeltas))
	h.posCounts.hi = pos32(len(d.posCounts))
	h.negCounts.hi = pos32(len(d.negCounts))
	h.custom.hi = pos32(len(d.custom))
	d.hists = append(d.hists, h)
	return nil
}

func bucketSpan(b []byte) (histogram.Span, error) {
	var s histogram.Span
	f := &fieldReader{b: b, msg: "BucketSpan"}
	for f.next() {
		switch f.field {
		case 1:
			s.Offset = zigzag32(f.varint())
		case 2:
			s.Length = uint32(f.varint())
		default:
			f.skip()
		}
	}
	return s, f.err
}

// appendSint64s appends the elements of a repeated sint64 field, packed or
// not.
func appendSint64s(dst *[]int64, b []byte, i, wt int) (int, error) {
	p, next, err := varintRun(b, i, wt, "bucket deltas")
	if err != nil {
		return i, err
	}
	for j := 0; j < len(p); {
		var v uint64
		if v, j, err = uvarint(p, j); err != nil {
			return i, err
		}
		*dst = append(*dst, zigzag64(v))
	}
	return next, nil
}

// appendDoubles appends the elements of a repeated double field, packed or
// not.
func appendDoubles(dst *[]float64, b []byte, i, wt int) (int, error) {
	var p []byte
	next := i
	switch wt {
	case wireFixed64:
		if len(b)-i < 8 {
			return i, errTruncated
		}
		next += 8
		p = b[i:next]
	case wireBytes:
		var err error
		if p, next, err = lenDelim(b, i); err != nil {
			return i, err
		}
		if len(p)%8 != 0 {
			return i, fmt.Errorf("%w: packed doubles of %d bytes", ErrMalformed, len(p))
		}
	default:
		return i, fmt.Errorf("%w: doubles have wire type %d", ErrMalformed, wt)
	}
	for j := 0; j < len(p); j += 8 {
		v, _, _ := double(p, j)
		*dst = append(*dst, v)
	}
	return next, nil
}

// appendUint32s appends the elements of a repeated uint32 field (symbol
// references), packed or not.
func appendUint32s(dst *[]uint32, b []byte, i, wt int) (int, error) {
	p, next, err := varintRun(b, i, wt, "references")
	if err != nil {
		return i, err
	}
	for j := 0; j < len(p); {
		if p[j] < 0x80 { // one-byte refs dominate small symbol tables
			*dst = append(*dst, uint32(p[j]))
			j++
			continue
		}
		var v uint64
		if v, j, err = uvarint(p, j); err != nil {
			return i, err
		}
		*dst = append(*dst, ref32(v))
	}
	return next, nil
}

// varintRun returns the varints of a repeated varint field and the offset
// after them: a packed run, or the one varint of an element on its own.
// what names the field in an error.
func varintRun(b []byte, i, wt int, what string) ([]byte, int, error) {
	switch wt {
	case wireVarint:
		_, next, err := uvarint(b, i)
		return b[i:next], next, err
	case wireBytes:
		return lenDelim(b, i)
	default:
		return nil, i, fmt.Errorf("%w: %s have wire type %d", ErrMalformed, what, wt)
	}
}
