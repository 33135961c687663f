package remotewrite

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/golang/snappy"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/exemplar"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"
)

// normalised forms of a decoded request, built from this package's decoder
// and from the generated gogo types, for differential tests.
type normHist struct {
	T, ST int64
	H     *histogram.Histogram
	FH    *histogram.FloatHistogram
}

type normEx struct {
	Labels []labels.Label
	Refs   []uint32
	V      float64
	Ts     int64
}

type normSeries struct {
	Labels    []labels.Label
	Refs      []uint32
	Samples   []sample
	Hists     []normHist
	Exemplars []normEx
	MetaType  string
	MetaRefs  [2]uint32 // help, unit
}

type normMeta struct {
	Type               string
	Family, Help, Unit string
}

type normReq struct {
	Symbols []string
	Series  []normSeries
	Meta    []normMeta
}

var normOpts = []cmp.Option{
	cmpopts.EquateEmpty(),
	cmp.AllowUnexported(sample{}),
	cmp.Comparer(func(a, b float64) bool { return a == b || (a != a && b != b) }),
}

func normHint(h histogram.CounterResetHint) histogram.CounterResetHint {
	if h > histogram.GaugeType {
		return histogram.UnknownCounterReset
	}
	return h
}

// clone copies s, keeping nil nil.
func clone[T any](s []T) []T {
	if s == nil {
		return nil
	}
	return append([]T{}, s...)
}

// normalize builds the normalised form of what d decoded.
func (d *decoder) normalize(version int) normReq {
	var st reqState
	var out normReq
	out.Symbols = append(out.Symbols, d.symbols...)
	for _, s := range d.series {
		ns := normSeries{}
		if version == 1 {
			ns.Labels = append(ns.Labels, d.labels[s.labels.lo:s.labels.hi]...)
		} else {
			ns.Refs = append(ns.Refs, d.refs[s.labels.lo:s.labels.hi]...)
			ns.MetaType, ns.MetaRefs = string(metricType(s.metaType)), [2]uint32{s.helpRef, s.unitRef}
		}
		ns.Samples = append(ns.Samples, d.samples[s.samples.lo:s.samples.hi]...)
		for _, hr := range d.hists[s.histograms.lo:s.histograms.hi] {
			h, fh := st.histogram(d, &hr)
			nh := normHist{T: hr.t, ST: hr.st}
			// Copy field by field: histogram.Copy drops custom values from
			// an exponential schema, which would hide a decoder that lost them.
			if h != nil {
				c := *h
				c.PositiveSpans, c.NegativeSpans = clone(h.PositiveSpans), clone(h.NegativeSpans)
				c.PositiveBuckets, c.NegativeBuckets = clone(h.PositiveBuckets), clone(h.NegativeBuckets)
				c.CustomValues = clone(h.CustomValues)
				nh.H = &c
			} else {
				c := *fh
				c.PositiveSpans, c.NegativeSpans = clone(fh.PositiveSpans), clone(fh.NegativeSpans)
				c.PositiveBuckets, c.NegativeBuckets = clone(fh.PositiveBuckets), clone(fh.NegativeBuckets)
				c.CustomValues = clone(fh.CustomValues)
				nh.FH = &c
			}
			ns.Hists = append(ns.Hists, nh)
		}
		for _, e := range d.exemplars[s.exemplars.lo:s.exemplars.hi] {
			ne := normEx{V: e.v, Ts: e.ts}
			if version == 1 {
				ne.Labels = append(ne.Labels, d.exLabels[e.labels.lo:e.labels.hi]...)
			} else {
				ne.Refs = append(ne.Refs, d.exRefs[e.labels.lo:e.labels.hi]...)
			}
			ns.Exemplars = append(ns.Exemplars, ne)
		}
		out.Series = append(out.Series, ns)
	}
	for _, m := range d.meta {
		out.Meta = append(out.Meta, normMeta{Type: string(metricType(m.typ)), Family: m.family, Help: m.help, Unit: m.unit})
	}
	return out
}

func normFromV1(req *prompb.WriteRequest) normReq {
	var out normReq
	for _, ts := range req.Timeseries {
		var ns normSeries
		for _, l := range ts.Labels {
			ns.Labels = append(ns.Labels, labels.Label{Name: l.Name, Value: l.Value})
		}
		for _, s := range ts.Samples {
			ns.Samples = append(ns.Samples, sample{v: s.Value, t: s.Timestamp})
		}
		for _, h := range ts.Histograms {
			ns.Hists = append(ns.Hists, normHistOf(&h, h.Timestamp, 0))
		}
		for _, e := range ts.Exemplars {
			ne := normEx{V: e.Value, Ts: e.Timestamp}
			for _, l := range e.Labels {
				ne.Labels = append(ne.Labels, labels.Label{Name: l.Name, Value: l.Value})
			}
			ns.Exemplars = append(ns.Exemplars, ne)
		}
		out.Series = append(out.Series, ns)
	}
	for _, m := range req.Metadata {
		out.Meta = append(out.Meta, normMeta{Type: string(metricType(uint64(uint32(m.Type)))), Family: m.MetricFamilyName, Help: m.Help, Unit: m.Unit})
	}
	return out
}

// wireHistogram is a histogram as a 1.0 or 2.0 message holds it.
type wireHistogram interface {
	IsFloatHistogram() bool
	ToIntHistogram() *histogram.Histogram
	ToFloatHistogram() *histogram.FloatHistogram
}

// normHistOf is a message's histogram at t (start time st), counter reset
// hint normalised.
func normHistOf(h wireHistogram, t, st int64) normHist {
	nh := normHist{T: t, ST: st}
	if h.IsFloatHistogram() {
		nh.FH = h.ToFloatHistogram()
		nh.FH.CounterResetHint = normHint(nh.FH.CounterResetHint)
	} else {
		nh.H = h.ToIntHistogram()
		nh.H.CounterResetHint = normHint(nh.H.CounterResetHint)
	}
	return nh
}

func normFromV2(req *writev2.Request) normReq {
	out := normReq{Symbols: req.Symbols}
	for _, ts := range req.Timeseries {
		ns := normSeries{Refs: ts.LabelsRefs}
		ns.MetaType, ns.MetaRefs = string(metricType(uint64(uint32(ts.Metadata.Type)))), [2]uint32{ts.Metadata.HelpRef, ts.Metadata.UnitRef}
		for _, s := range ts.Samples {
			ns.Samples = append(ns.Samples, sample{v: s.Value, t: s.Timestamp, st: s.StartTimestamp})
		}
		for _, h := range ts.Histograms {
			ns.Hists = append(ns.Hists, normHistOf(&h, h.Timestamp, h.StartTimestamp))
		}
		for _, e := range ts.Exemplars {
			ns.Exemplars = append(ns.Exemplars, normEx{Refs: e.LabelsRefs, V: e.Value, Ts: e.Timestamp})
		}
		out.Series = append(out.Series, ns)
	}
	return out
}

// checkAgainstGogo decodes b with this package's decoder and with the
// generated types. Garbage must give an error, never a panic; whenever this
// decoder accepts a message, the generated decoder must accept it too and
// both must agree on every field.
func checkAgainstGogo(t *testing.T, version int, b []byte) {
	t.Helper()
	d := decoder{maxSeries: 1 << 30}
	if err := d.decode(b, version); err != nil {
		return
	}
	got := d.normalize(version)
	var want normReq
	if version == 1 {
		var req prompb.WriteRequest
		if gerr := req.Unmarshal(b); gerr != nil {
			t.Fatalf("decoder accepted what the generated decoder rejects (%v)", gerr)
		}
		want = normFromV1(&req)
	} else {
		var req writev2.Request
		if gerr := req.Unmarshal(b); gerr != nil {
			t.Fatalf("decoder accepted what the generated decoder rejects (%v)", gerr)
		}
		want = normFromV2(&req)
	}
	if diff := cmp.Diff(want, got, normOpts...); diff != "" {
		t.Fatalf("decoders disagree (-generated +ours):\n%s", diff)
	}
}

// randomSeries returns series with random labels, samples, histograms and
// exemplars.
func randomSeries(rng *rand.Rand, n int) []recSeries {
	out := make([]recSeries, n)
	for i := range out {
		b := labels.NewScratchBuilder(4)
		b.Add(model.MetricNameLabel, "metric_"+strconv.Itoa(rng.IntN(50)))
		for j := range rng.IntN(5) {
			b.Add("l"+strconv.Itoa(j), strconv.FormatUint(rng.Uint64(), 36))
		}
		b.Sort()
		s := recSeries{Labels: b.Labels()}
		for j := range rng.IntN(4) {
			s.Samples = append(s.Samples, recSample{T: rng.Int64() - rng.Int64(), V: rng.NormFloat64() * 1e6, ST: int64(j)})
		}
		for j := range rng.IntN(3) {
			switch rng.IntN(4) {
			case 0:
				s.Hists = append(s.Hists, recHist{T: int64(j), ST: rng.Int64N(10), H: intHistogram(rng.IntN(5))})
			case 1:
				s.Hists = append(s.Hists, recHist{T: int64(j), FH: floatHistogram(rng.IntN(5))})
			case 2:
				s.Hists = append(s.Hists, recHist{T: int64(j), H: nhcbHistogram(rng.IntN(5))})
			case 3:
				s.Hists = append(s.Hists, recHist{T: int64(j), FH: nhcbFloatHistogram(rng.IntN(5))})
			}
		}
		for range rng.IntN(3) {
			s.Exemplars = append(s.Exemplars, exemplarOf(rng))
		}
		out[i] = s
	}
	return out
}

func TestDecoderMatchesGeneratedTypes(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 100 {
		series := randomSeries(rng, 1+rng.IntN(20))
		b1, b2 := marshal(t, toV1(series)), marshal(t, toV2(series))
		t.Run(fmt.Sprintf("case=%d", i), func(t *testing.T) {
			for _, v := range []struct {
				version int
				b       []byte
			}{{1, b1}, {2, b2}} {
				d := decoder{maxSeries: 1 << 20}
				if err := d.decode(v.b, v.version); err != nil {
					t.Fatalf("version %d: %v", v.version, err)
				}
				checkAgainstGogo(t, v.version, v.b)
			}
		})
	}
}

func TestDecoderUnpackedAndUnknownFields(t *testing.T) {
	// Repeated scalars may come unpacked, fields in any order, and unknown
	// fields anywhere; a decoder must accept all of it.
	req := toV2(richPayload(testNow, true))
	b, err := req.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	d := decoder{maxSeries: 100}
	if err := d.decode(b, 2); err != nil {
		t.Fatal(err)
	}
	want := d.normalize(2)

	// Re-encode by hand: timeseries first, then symbols; labels refs
	// unpacked; an unknown field of every wire type.
	var alt []byte
	for _, ts := range req.Timeseries {
		tb, err := ts.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		// Strip the packed labels_refs (field 1) written first and write
		// them unpacked at the end instead.
		var rest []byte
		for i := 0; i < len(tb); {
			field, wt, next, err := tag(tb, i)
			if err != nil {
				t.Fatal(err)
			}
			end, err := skip(tb, next, wt)
			if err != nil {
				t.Fatal(err)
			}
			if field != 1 {
				rest = append(rest, tb[i:end]...)
			}
			i = end
		}
		for _, r := range ts.LabelsRefs {
			rest = appendTag(rest, 1, wireVarint)
			rest = appendVarint(rest, uint64(r))
		}
		rest = appendTag(rest, 99, wireFixed32)
		rest = append(rest, 1, 2, 3, 4)
		rest = appendTag(rest, 98, wireBytes)
		rest = appendVarint(rest, 2)
		rest = append(rest, 'h', 'i')
		alt = appendTag(alt, 5, wireBytes)
		alt = appendVarint(alt, uint64(len(rest)))
		alt = append(alt, rest...)
	}
	alt = appendTag(alt, 1, wireFixed64) // reserved field number
	alt = append(alt, 0, 0, 0, 0, 0, 0, 0, 0)
	for _, s := range req.Symbols {
		alt = appendTag(alt, 4, wireBytes)
		alt = appendVarint(alt, uint64(len(s)))
		alt = append(alt, s...)
	}
	if err := d.decode(alt, 2); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, d.normalize(2), normOpts...); diff != "" {
		t.Fatalf("re-encoded request decodes differently:\n%s", diff)
	}
	checkAgainstGogo(t, 2, alt)
}

func TestDecoderUnpackedHistogramBuckets(t *testing.T) {
	// A histogram's repeated fields may come one element at a time, in
	// packed runs, or both; the decoders must read the same buckets.
	double := func(b []byte, v float64) []byte {
		return binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
	}
	zigzag := func(v int64) uint64 { return uint64(v<<1) ^ uint64(v>>63) }
	msg := func(b []byte, field int, m []byte) []byte {
		b = appendTag(b, field, wireBytes)
		b = appendVarint(b, uint64(len(m)))
		return append(b, m...)
	}
	var h []byte
	h = appendTag(h, 1, wireVarint) // count_int
	h = appendVarint(h, 7)
	h = appendTag(h, 4, wireVarint) // schema
	h = appendVarint(h, zigzag(1))
	h = msg(h, 11, []byte{0x08, 0x02, 0x10, 0x03}) // positive span at 1 of 3
	h = appendTag(h, 12, wireVarint)               // positive deltas, alone
	h = appendVarint(h, zigzag(2))
	h = msg(h, 12, appendVarint(appendVarint(nil, zigzag(-1)), zigzag(300)))
	h = msg(h, 8, []byte{0x08, 0x03, 0x10, 0x02})
	h = msg(h, 9, appendVarint(nil, zigzag(4))) // negative deltas, packed
	h = appendTag(h, 9, wireVarint)
	h = appendVarint(h, zigzag(-4))
	h = appendTag(h, 13, wireFixed64) // positive counts, alone
	h = double(h, 1.5)
	h = msg(h, 13, double(double(nil, 2.5), 3.5))
	h = appendTag(h, 10, wireFixed64)
	h = double(h, 0.5)
	h = msg(h, 16, double(nil, 1))
	h = appendTag(h, 16, wireFixed64)
	h = double(h, 2)
	h = appendTag(h, 15, wireVarint) // timestamp
	h = appendVarint(h, uint64(testNow))

	for _, tc := range []struct {
		version                int
		labelsField, histField int
		labels                 []byte // a label (1.0) or label references (2.0)
		symbols                []string
	}{
		{1, 1, 4, []byte{0x0a, 0x08, '_', '_', 'n', 'a', 'm', 'e', '_', '_', 0x12, 0x01, 'h'}, nil},
		{2, 1, 3, []byte{0x01, 0x02}, []string{"", "__name__", "h"}},
	} {
		t.Run(fmt.Sprintf("version=%d", tc.version), func(t *testing.T) {
			var ts, req []byte
			ts = msg(ts, tc.labelsField, tc.labels)
			ts = msg(ts, tc.histField, h)
			seriesField := 1
			if tc.version == 2 {
				seriesField = 5
				for _, s := range tc.symbols {
					req = msg(req, 4, []byte(s))
				}
			}
			req = msg(req, seriesField, ts)
			d := decoder{maxSeries: 10}
			if err := d.decode(req, tc.version); err != nil {
				t.Fatal(err)
			}
			if got, want := len(d.posDeltas)+len(d.negDeltas)+len(d.posCounts)+len(d.negCounts)+len(d.custom), 3+2+3+1+2; got != want {
				t.Fatalf("%d bucket elements decoded, want %d", got, want)
			}
			checkAgainstGogo(t, tc.version, req)
		})
	}
}

func appendTag(b []byte, field int, wt int) []byte {
	return appendVarint(b, uint64(field)<<3|uint64(wt))
}

func appendVarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

func TestDecoderRejectsGarbage(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"field zero", []byte{0x00}},
		{"truncated varint", []byte{0x08, 0xff}},
		{"length past end", []byte{0x0a, 0x05, 0x01}},
		{"group wire type", []byte{0x0b}},
		{"wire type 7", []byte{0x0f}},
		{"overlong varint", []byte{0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}},
		{"series with bad sample", []byte{0x0a, 0x04, 0x12, 0x02, 0x09, 0x01}},
		{"packed doubles of odd length", []byte{0x0a, 0x07, 0x22, 0x05, 0x6a, 0x03, 0x01, 0x02, 0x03}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := decoder{maxSeries: 10}
			if err := d.decode(tc.b, 1); err == nil {
				t.Fatal("no error")
			}
		})
	}
}

func exemplarOf(rng *rand.Rand) exemplar.Exemplar {
	return exemplar.Exemplar{
		Labels: labels.FromStrings("trace_id", strconv.FormatUint(rng.Uint64(), 16)),
		Value:  rng.Float64(),
		Ts:     rng.Int64N(1 << 45),
		HasTs:  true,
	}
}

// TestASCIILabelsV1 checks when the 1.0 decoder vouches for the UTF-8 of a
// series' labels without checking each string, and that invalid UTF-8 is
// still refused when it cannot (labels apart, long strings).
func TestASCIILabelsV1(t *testing.T) {
	label := func(b []byte, name, value string) []byte {
		var m []byte
		m = appendTag(m, 1, wireBytes)
		m = appendVarint(m, uint64(len(name)))
		m = append(m, name...)
		m = appendTag(m, 2, wireBytes)
		m = appendVarint(m, uint64(len(value)))
		m = append(m, value...)
		b = appendTag(b, 1, wireBytes)
		b = appendVarint(b, uint64(len(m)))
		return append(b, m...)
	}
	sampleField := func(b []byte) []byte {
		m := appendTag(nil, 1, wireFixed64)
		m = append(m, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f) // 1.0
		m = appendTag(m, 2, wireVarint)
		m = appendVarint(m, uint64(testNow))
		b = appendTag(b, 2, wireBytes)
		b = appendVarint(b, uint64(len(m)))
		return append(b, m...)
	}
	request := func(series []byte) []byte {
		b := appendTag(nil, 1, wireBytes)
		b = appendVarint(b, uint64(len(series)))
		return append(b, series...)
	}
	long := strings.Repeat("v", 200)
	for _, tc := range []struct {
		name   string
		series []byte
		ascii  bool
		// valid: the handler stores the sample (else: not valid UTF-8).
		valid bool
	}{
		{"adjacent ascii", sampleField(label(label(nil, "__name__", "up"), "job", "a")), true, true},
		{"adjacent, sample first", label(label(sampleField(nil), "__name__", "up"), "job", "a"), true, true},
		{"utf-8 beyond ascii", sampleField(label(label(nil, "__name__", "up"), "job", "é")), false, true},
		{"apart ascii", label(sampleField(label(nil, "__name__", "up")), "job", "a"), false, true},
		{"long value", sampleField(label(label(nil, "__name__", "up"), "job", long)), false, true},
		{"invalid value", sampleField(label(label(nil, "__name__", "up"), "job", "\xff")), false, false},
		{"invalid value apart", label(sampleField(label(nil, "__name__", "up")), "job", "\xff"), false, false},
		{"invalid name apart", label(sampleField(label(nil, "__name__", "up")), "\xc3", "a"), false, false},
		{"invalid long value", sampleField(label(label(nil, "__name__", "up"), "job", long+"\xff")), false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := decoder{maxSeries: 10}
			if err := d.decode(request(tc.series), 1); err != nil {
				t.Fatal(err)
			}
			if len(d.series) != 1 || d.series[0].asciiLabels != tc.ascii {
				t.Fatalf("asciiLabels = %v, want %v", d.series[0].asciiLabels, tc.ascii)
			}
			h, _ := newTestHandler(t, newRecorder(), func(o *Options) { o.MaxLabelValueLength = 1000 })
			resp := post(t, h, "", "snappy", snappy.Encode(nil, request(tc.series)))
			if tc.valid {
				assertCode(t, resp, http.StatusNoContent, "")
			} else {
				assertCode(t, resp, http.StatusBadRequest, "not valid UTF-8")
			}
		})
	}
}
