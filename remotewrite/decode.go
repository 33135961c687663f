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
	msgName, seriesField := "WriteRequest", uint64(1)
	var v2Field uint64 // the first field of a 2.0 Request in a 1.0 one
	if version == 2 {
		msgName, seriesField = "Request", 5
	}
	for i := 0; i < len(b); {
		field, wt, next, err := tag(b, i)
		if err != nil {
			return err
		}
		i = next
		switch {
		case field == seriesField:
			var msg []byte
			if msg, i, err = bytesField(b, i, wt, msgName, field); err != nil {
				return err
			}
			if err := d.timeseries(msg, version); err != nil {
				return err
			}
		case field == 3 && version == 1: // metadata
			var msg []byte
			if msg, i, err = bytesField(b, i, wt, msgName, field); err != nil {
				return err
			}
			if err := d.metadataV1(msg); err != nil {
				return fmt.Errorf("metadata %d: %w", len(d.meta), err)
			}
		case field == 4 && version == 2: // symbols
			var s []byte
			if s, i, err = bytesField(b, i, wt, msgName, field); err != nil {
				return err
			}
			d.symbols = append(d.symbols, yoloString(s))
		case version == 2 && field <= 3 && wt == wireBytes:
			// Reserved in 2.0 so that a 1.0 body decodes to nothing: it
			// would be stored as nothing, and answered 204.
			return fmt.Errorf("field %d is reserved in io.prometheus.write.v2.Request and is a prometheus.WriteRequest's: the body looks like remote write 1.0 sent as 2.0 (send Content-Type: %s, or a 2.0 body)", field, ContentTypeV1)
		default:
			if version == 1 && v2Field == 0 && (field == 4 || field == 5) && wt == wireBytes {
				v2Field = field
			}
			if i, err = skip(b, i, wt); err != nil {
				return err
			}
		}
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
	for i := 0; i < len(b); {
		start := i
		field, wt, next, err := tag(b, i)
		if err != nil {
			return err
		}
		i = next
		if field < 1 || field > 4 {
			if i, err = skip(b, i, wt); err != nil {
				return err
			}
			continue
		}
		if wt != wireBytes {
			return wrongType("TimeSeries", field, wt)
		}
		var msg []byte
		if msg, i, err = lenDelim(b, i); err != nil {
			return err
		}
		switch field {
		case 1:
			var l labels.Label
			if l, err = labelPair(msg); err != nil {
				return fmt.Errorf("label %d: %w", len(d.labels)-int(s.labels.lo), err)
			}
			d.labels = append(d.labels, l)
			if lblLo < 0 {
				lblLo = start
			} else if start != lblHi {
				adjacent = false
			}
			lblHi = i
		case 2:
			err = d.sample(msg, false)
		case 3:
			err = d.exemplar(msg, 1)
		case 4:
			err = d.histogram(msg, false)
		}
		if err != nil {
			return err
		}
	}
	s.labels.hi = pos32(len(d.labels))
	s.asciiLabels = lblLo >= 0 && adjacent && isASCII(b[lblLo:lblHi])
	return nil
}

// seriesV2 decodes the fields of a 2.0 TimeSeries into s and the flat
// arrays, as seriesV1.
func (d *decoder) seriesV2(b []byte, s *seriesRec) error {
	s.labels.lo = pos32(len(d.refs))
	for i := 0; i < len(b); {
		field, wt, next, err := tag(b, i)
		if err != nil {
			return err
		}
		i = next
		switch field {
		case 1:
			i, err = appendUint32s(&d.refs, b, i, wt)
		case 2, 3, 4, 5:
			if wt != wireBytes {
				return wrongType("TimeSeries", field, wt)
			}
			var msg []byte
			if msg, i, err = lenDelim(b, i); err != nil {
				return err
			}
			switch field {
			case 2:
				err = d.sample(msg, true)
			case 3:
				err = d.histogram(msg, true)
			case 4:
				err = d.exemplar(msg, 2)
			case 5:
				err = metadataV2(msg, s)
			}
		case 6:
			s.createdTS, i, err = int64Field(b, i, wt, "TimeSeries", field)
		default:
			i, err = skip(b, i, wt)
		}
		if err != nil {
			return err
		}
	}
	s.labels.hi = pos32(len(d.refs))
	return nil
}

// int64Field reads an int64 field (a timestamp) of message msg whose key
// gave wire type wt.
func int64Field(b []byte, i, wt int, msg string, field uint64) (int64, int, error) {
	v, i, err := varintField(b, i, wt, msg, field)
	return int64(v), i, err
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
	for i := 0; i < len(b); {
		field, wt, next, err := tag(b, i)
		if err != nil {
			return l, err
		}
		i = next
		if field == 1 || field == 2 {
			var s []byte
			if s, i, err = bytesField(b, i, wt, "Label", field); err != nil {
				return l, err
			}
			if field == 1 {
				l.Name = yoloString(s)
			} else {
				l.Value = yoloString(s)
			}
			continue
		}
		if i, err = skip(b, i, wt); err != nil {
			return l, err
		}
	}
	return l, nil
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
	for i := 0; i < len(b); {
		field, wt, next, err := tag(b, i)
		if err != nil {
			return err
		}
		i = next
		switch {
		case field == 1:
			s.v, i, err = doubleField(b, i, wt, "Sample", field)
		case field == 2:
			s.t, i, err = int64Field(b, i, wt, "Sample", field)
		case field == 3 && withST:
			s.st, i, err = int64Field(b, i, wt, "Sample", field)
		default:
			i, err = skip(b, i, wt)
		}
		if err != nil {
			return err
		}
	}
	d.samples = append(d.samples, s)
	return nil
}

// exemplar decodes an Exemplar, whose labels are pairs in 1.0 and symbol
// references in 2.0.
func (d *decoder) exemplar(b []byte, version int) error {
	e := exemplarRec{labels: rng{d.exLabelsEnd(version), 0}}
	for i := 0; i < len(b); {
		field, wt, next, err := tag(b, i)
		if err != nil {
			return err
		}
		i = next
		switch field {
		case 1:
			if version == 2 {
				i, err = appendUint32s(&d.exRefs, b, i, wt)
			} else {
				var msg []byte
				if msg, i, err = bytesField(b, i, wt, "Exemplar", field); err != nil {
					return err
				}
				var l labels.Label
				if l, err = labelPair(msg); err != nil {
					return fmt.Errorf("exemplar label: %w", err)
				}
				d.exLabels = append(d.exLabels, l)
			}
		case 2:
			e.v, i, err = doubleField(b, i, wt, "Exemplar", field)
		case 3:
			e.ts, i, err = int64Field(b, i, wt, "Exemplar", field)
		default:
			i, err = skip(b, i, wt)
		}
		if err != nil {
			return err
		}
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

func (d *decoder) metadataV1(b []byte) error {
	var m metaRec
	for i := 0; i < len(b); {
		field, wt, next, err := tag(b, i)
		if err != nil {
			return err
		}
		i = next
		switch field {
		case 1:
			m.typ, i, err = varintField(b, i, wt, "MetricMetadata", field)
			m.typ = uint64(uint32(m.typ)) // enums are int32 on the wire
		case 2, 4, 5:
			var s []byte
			if s, i, err = bytesField(b, i, wt, "MetricMetadata", field); err != nil {
				return err
			}
			switch field {
			case 2:
				m.family = yoloString(s)
			case 4:
				m.help = yoloString(s)
			case 5:
				m.unit = yoloString(s)
			}
		default:
			i, err = skip(b, i, wt)
		}
		if err != nil {
			return err
		}
	}
	d.meta = append(d.meta, m)
	return nil
}

func metadataV2(b []byte, s *seriesRec) error {
	s.hasMeta = true
	for i := 0; i < len(b); {
		field, wt, next, err := tag(b, i)
		if err != nil {
			return err
		}
		i = next
		var v uint64
		switch field {
		case 1:
			v, i, err = varintField(b, i, wt, "Metadata", field)
			s.metaType = uint64(uint32(v))
		case 3:
			v, i, err = varintField(b, i, wt, "Metadata", field)
			s.helpRef = ref32(v)
		case 4:
			v, i, err = varintField(b, i, wt, "Metadata", field)
			s.unitRef = ref32(v)
		default:
			i, err = skip(b, i, wt)
		}
		if err != nil {
			return err
		}
	}
	return nil
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
	for i := 0; i < len(b); {
		field, wt, next, err := tag(b, i)
		if err != nil {
			return err
		}
		i = next
		switch field {
		case 1, 4, 6, 14, 15, 17: // varints
			if field == 17 && !withST {
				if i, err = skip(b, i, wt); err != nil {
					return err
				}
				continue
			}
			if wt != wireVarint {
				return wrongType("Histogram", field, wt)
			}
			var v uint64
			if v, i, err = uvarint(b, i); err != nil {
				return err
			}
			switch field {
			case 1: // oneof count: the last one set wins
				h.countInt, h.countFloat, h.isFloat = v, 0, false
			case 4:
				h.schema = zigzag32(v)
			case 6: // oneof zero_count
				h.zeroCountInt, h.zeroCountFloat = v, 0
			case 14:
				h.resetHint = uint64(uint32(v))
			case 15:
				h.t = int64(v)
			case 17:
				h.st = int64(v)
			}
		case 2, 3, 5, 7: // doubles
			if wt != wireFixed64 {
				return wrongType("Histogram", field, wt)
			}
			var v float64
			if v, i, err = double(b, i); err != nil {
				return err
			}
			switch field {
			case 2:
				h.countFloat, h.countInt, h.isFloat = v, 0, true
			case 3:
				h.sum = v
			case 5:
				h.zeroThreshold = v
			case 7:
				h.zeroCountFloat, h.zeroCountInt = v, 0
			}
		case 8, 11: // spans
			var msg []byte
			if msg, i, err = bytesField(b, i, wt, "Histogram", field); err != nil {
				return err
			}
			var sp histogram.Span
			if sp, err = bucketSpan(msg); err != nil {
				return err
			}
			if field == 8 {
				d.negSpans = append(d.negSpans, sp)
			} else {
				d.posSpans = append(d.posSpans, sp)
			}
		case 9, 12: // sint64 deltas, packed or not
			dst := &d.negDeltas
			if field == 12 {
				dst = &d.posDeltas
			}
			if i, err = appendSint64s(dst, b, i, wt); err != nil {
				return err
			}
		case 10, 13, 16: // doubles, packed or not
			dst := &d.negCounts
			switch field {
			case 13:
				dst = &d.posCounts
			case 16:
				dst = &d.custom
			}
			if i, err = appendDoubles(dst, b, i, wt); err != nil {
				return err
			}
		default:
			if i, err = skip(b, i, wt); err != nil {
				return err
			}
		}
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
	for i := 0; i < len(b); {
		field, wt, next, err := tag(b, i)
		if err != nil {
			return s, err
		}
		i = next
		if field == 1 || field == 2 {
			if wt != wireVarint {
				return s, wrongType("BucketSpan", field, wt)
			}
			var v uint64
			if v, i, err = uvarint(b, i); err != nil {
				return s, err
			}
			if field == 1 {
				s.Offset = zigzag32(v)
			} else {
				s.Length = uint32(v)
			}
			continue
		}
		if i, err = skip(b, i, wt); err != nil {
			return s, err
		}
	}
	return s, nil
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
