package remotewrite

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/otlptranslator"
	"github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/model/exemplar"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/metadata"
	"github.com/prometheus/prometheus/storage"
	prw "github.com/prometheus/prometheus/storage/remote/otlptranslator/prometheusremotewrite"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
	"google.golang.org/protobuf/encoding/protowire"
)

// This file checks Shale's OTLP decoder and translator against the
// upstream ones they replace: pdata's decoding of the same bytes, and
// Prometheus' translator (prometheusremotewrite, as Prometheus 3.16 runs
// it) with the settings OTLPHandler used to give it.

// otlpRec is one sample as a sink receives it, in a comparable form.
type otlpRec struct {
	Labels    string
	ST, T     int64
	V         uint64 // bits
	H         string
	Exemplars string
	Family    string
	Meta      metadata.Metadata
}

func (r otlpRec) String() string {
	return fmt.Sprintf("%s st=%d t=%d v=%x h=%s ex=%s family=%q meta=%+v", r.Labels, r.ST, r.T, r.V, r.H, r.Exemplars, r.Family, r.Meta)
}

func fmtLabels(ls []labels.Label) string {
	var sb strings.Builder
	for i, l := range ls {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, "%q=%q", l.Name, l.Value)
	}
	return "{" + sb.String() + "}"
}

func fmtHistogram(h *histogram.Histogram) string {
	if h == nil {
		return "-"
	}
	nilOr := func(isNil bool, v any) string {
		if isNil {
			return "nil"
		}
		return fmt.Sprint(v)
	}
	return fmt.Sprintf("hint=%d schema=%d zt=%x zc=%d count=%d sum=%x ps=%s pb=%s ns=%s nb=%s cv=%s",
		h.CounterResetHint, h.Schema, math.Float64bits(h.ZeroThreshold), h.ZeroCount, h.Count, math.Float64bits(h.Sum),
		nilOr(h.PositiveSpans == nil, h.PositiveSpans), nilOr(h.PositiveBuckets == nil, h.PositiveBuckets),
		nilOr(h.NegativeSpans == nil, h.NegativeSpans), nilOr(h.NegativeBuckets == nil, h.NegativeBuckets),
		nilOr(h.CustomValues == nil, h.CustomValues))
}

func fmtExemplars(exs []exemplar.Exemplar) string {
	var sb strings.Builder
	for _, e := range exs {
		var ls []labels.Label
		e.Labels.Range(func(l labels.Label) { ls = append(ls, l) })
		fmt.Fprintf(&sb, "[%s %x %d %v]", fmtLabels(ls), math.Float64bits(e.Value), e.Ts, e.HasTs)
	}
	return sb.String()
}

// upstreamRecorder is the storage.AppenderV2 the upstream translator
// appends to; from the failAt-th append on (if > 0) it fails.
type upstreamRecorder struct {
	recs   []otlpRec
	failAt int
}

var errRecorderFull = errors.New("appender failed")

func (u *upstreamRecorder) Append(_ storage.SeriesRef, ls labels.Labels, st, t int64, v float64, h *histogram.Histogram, fh *histogram.FloatHistogram, opts storage.AppendV2Options) (storage.SeriesRef, error) {
	if fh != nil {
		panic("the translator made a float histogram")
	}
	if u.failAt > 0 && len(u.recs)+1 >= u.failAt {
		u.recs = append(u.recs, otlpRec{Labels: "FAILED"})
		return 0, errRecorderFull
	}
	var lbls []labels.Label
	ls.Range(func(l labels.Label) { lbls = append(lbls, l) })
	u.recs = append(u.recs, otlpRec{Labels: fmtLabels(lbls), ST: st, T: t, V: math.Float64bits(v), H: fmtHistogram(h), Exemplars: fmtExemplars(opts.Exemplars), Family: opts.MetricFamilyName, Meta: opts.Metadata})
	return 0, nil
}

func (u *upstreamRecorder) Commit() error   { return nil }
func (u *upstreamRecorder) Rollback() error { return nil }

// sinkRecorder is the same for Shale's translator.
type sinkRecorder struct {
	recs   []otlpRec
	failAt int
}

func (s *sinkRecorder) add(lbls []labels.Label, st, t int64, v float64, h *histogram.Histogram, exs []exemplar.Exemplar, family string, meta metadata.Metadata) error {
	if s.failAt > 0 && len(s.recs)+1 >= s.failAt {
		s.recs = append(s.recs, otlpRec{Labels: "FAILED"})
		return errRecorderFull
	}
	s.recs = append(s.recs, otlpRec{Labels: fmtLabels(lbls), ST: st, T: t, V: math.Float64bits(v), H: fmtHistogram(h), Exemplars: fmtExemplars(exs), Family: family, Meta: meta})
	return nil
}

// upstreamSettings are the settings OTLPHandler gave the upstream
// translator.
func upstreamSettings(o OTLPOptions) prw.Settings {
	trim := func(attrs []string) []string {
		out := make([]string, len(attrs))
		for i, a := range attrs {
			out[i] = strings.TrimSpace(a)
		}
		return out
	}
	return prw.Settings{
		AddMetricSuffixes: o.TranslationStrategy.ShouldAddSuffixes(),
		AllowUTF8:         !o.TranslationStrategy.ShouldEscape(),
		PromoteResourceAttributes: prw.NewPromoteResourceAttributes(config.OTLPConfig{
			PromoteAllResourceAttributes: o.PromoteAllResourceAttributes,
			PromoteResourceAttributes:    trim(o.PromoteResourceAttributes),
			IgnoreResourceAttributes:     trim(o.IgnoreResourceAttributes),
		}),
		KeepIdentifyingResourceAttributes:    o.KeepIdentifyingResourceAttributes,
		ConvertHistogramsToNHCB:              o.ConvertHistogramsToNHCB,
		PromoteScopeMetadata:                 o.PromoteScopeMetadata,
		AllowDeltaTemporality:                o.NativeDeltaIngestion,
		LookbackDelta:                        o.LookbackDelta,
		LabelNameUnderscoreSanitization:      o.LabelNameUnderscoreSanitization,
		LabelNamePreserveMultipleUnderscores: o.LabelNamePreserveMultipleUnderscores,
	}
}

// flatErrors lists the errors of a tree of joined errors.
func flatErrors(err error) []string {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []string
		for _, e := range j.Unwrap() {
			out = append(out, flatErrors(e)...)
		}
		return out
	}
	return []string{err.Error()}
}

// translateBoth translates md with upstream's translator and m with
// Shale's, and reports any difference.
func translateBoth(t *testing.T, md pmetric.Metrics, m *otlpMetrics, o OTLPOptions, failAt int) {
	t.Helper()
	up := &upstreamRecorder{failAt: failAt}
	conv := prw.NewPrometheusConverter(up)
	_, uerr := conv.FromMetrics(context.Background(), md, upstreamSettings(o))
	mine := &sinkRecorder{failAt: failAt}
	tr := newOTLPTranslator(newOTLPSettings(o))
	var merrs []string
	for _, e := range tr.translate(context.Background(), m, mine) {
		merrs = append(merrs, e.Error())
	}
	if !slices.Equal(flatErrors(uerr), merrs) {
		t.Errorf("options %+v: errors differ:\nupstream %q\nshale    %q", o, flatErrors(uerr), merrs)
	}
	n := max(len(up.recs), len(mine.recs))
	for i := range n {
		var u, s otlpRec
		if i < len(up.recs) {
			u = up.recs[i]
		}
		if i < len(mine.recs) {
			s = mine.recs[i]
		}
		// An attribute with an empty key makes a label with an empty name
		// (allowed names are not escaped): the receiver refuses the series.
		// Upstream's labels.Builder then misreads its base, whose encoding
		// takes the value's length for the name's first byte.
		if strings.HasPrefix(u.Labels, `{""=`) && strings.HasPrefix(s.Labels, `{""=`) {
			u.Labels, s.Labels = "refused", "refused"
		}
		if u != s {
			t.Fatalf("options %+v: sample %d of %d/%d differs:\nupstream %s\nshale    %s", o, i, len(up.recs), len(mine.recs), u, s)
		}
	}
}

// canonical renders what the translator reads of decoded metrics, from
// pdata and from Shale's decoder, in one form.
func canonicalPdata(md pmetric.Metrics) string {
	var sb strings.Builder
	attrs := func(m pcommon.Map) {
		m.Range(func(k string, v pcommon.Value) bool {
			fmt.Fprintf(&sb, " %q=%q", k, v.AsString())
			return true
		})
		sb.WriteByte('\n')
	}
	exemplars := func(es pmetric.ExemplarSlice) {
		for i := range es.Len() {
			e := es.At(i)
			tid, sid := e.TraceID(), e.SpanID()
			fmt.Fprintf(&sb, "    E t=%d v=%s trace=%x span=%x", e.Timestamp(), canonValue(e.ValueType() == pmetric.ExemplarValueTypeInt, e.ValueType() == pmetric.ExemplarValueTypeDouble, e.IntValue(), e.DoubleValue()), tid[:], sid[:])
			attrs(e.FilteredAttributes())
		}
	}
	rms := md.ResourceMetrics()
	for i := range rms.Len() {
		rm := rms.At(i)
		sb.WriteString("R")
		attrs(rm.Resource().Attributes())
		sms := rm.ScopeMetrics()
		for j := range sms.Len() {
			sm := sms.At(j)
			fmt.Fprintf(&sb, " S %q %q %q", sm.Scope().Name(), sm.Scope().Version(), sm.SchemaUrl())
			attrs(sm.Scope().Attributes())
			ms := sm.Metrics()
			for k := range ms.Len() {
				m := ms.At(k)
				fmt.Fprintf(&sb, "  M %q %q %q %s", m.Name(), m.Description(), m.Unit(), m.Type())
				switch m.Type() {
				case pmetric.MetricTypeGauge:
					sb.WriteByte('\n')
					numberPoints(&sb, m.Gauge().DataPoints(), attrs, exemplars)
				case pmetric.MetricTypeSum:
					fmt.Fprintf(&sb, " mono=%v temp=%d\n", m.Sum().IsMonotonic(), m.Sum().AggregationTemporality())
					numberPoints(&sb, m.Sum().DataPoints(), attrs, exemplars)
				case pmetric.MetricTypeHistogram:
					fmt.Fprintf(&sb, " temp=%d\n", m.Histogram().AggregationTemporality())
					dps := m.Histogram().DataPoints()
					for x := range dps.Len() {
						p := dps.At(x)
						fmt.Fprintf(&sb, "   P %d %d %d count=%d sum=%x/%v bounds=%v counts=%v", p.StartTimestamp(), p.Timestamp(), p.Flags(), p.Count(), math.Float64bits(p.Sum()), p.HasSum(), fmtFloats(p.ExplicitBounds().AsRaw()), p.BucketCounts().AsRaw())
						attrs(p.Attributes())
						exemplars(p.Exemplars())
					}
				case pmetric.MetricTypeExponentialHistogram:
					fmt.Fprintf(&sb, " temp=%d\n", m.ExponentialHistogram().AggregationTemporality())
					dps := m.ExponentialHistogram().DataPoints()
					for x := range dps.Len() {
						p := dps.At(x)
						fmt.Fprintf(&sb, "   P %d %d %d count=%d sum=%x/%v scale=%d zc=%d pos=%d%v neg=%d%v", p.StartTimestamp(), p.Timestamp(), p.Flags(), p.Count(), math.Float64bits(p.Sum()), p.HasSum(), p.Scale(), p.ZeroCount(),
							p.Positive().Offset(), p.Positive().BucketCounts().AsRaw(), p.Negative().Offset(), p.Negative().BucketCounts().AsRaw())
						attrs(p.Attributes())
						exemplars(p.Exemplars())
					}
				case pmetric.MetricTypeSummary:
					sb.WriteByte('\n')
					dps := m.Summary().DataPoints()
					for x := range dps.Len() {
						p := dps.At(x)
						fmt.Fprintf(&sb, "   P %d %d %d count=%d sum=%x q=", p.StartTimestamp(), p.Timestamp(), p.Flags(), p.Count(), math.Float64bits(p.Sum()))
						qs := p.QuantileValues()
						for q := range qs.Len() {
							fmt.Fprintf(&sb, "%x:%x,", math.Float64bits(qs.At(q).Quantile()), math.Float64bits(qs.At(q).Value()))
						}
						attrs(p.Attributes())
					}
				default:
					sb.WriteByte('\n')
				}
			}
		}
	}
	return sb.String()
}

func fmtFloats(fs []float64) string {
	var sb strings.Builder
	for _, f := range fs {
		fmt.Fprintf(&sb, "%x,", math.Float64bits(f))
	}
	return "[" + sb.String() + "]"
}

func numberPoints(sb *strings.Builder, dps pmetric.NumberDataPointSlice, attrs func(pcommon.Map), exemplars func(pmetric.ExemplarSlice)) {
	for x := range dps.Len() {
		p := dps.At(x)
		fmt.Fprintf(sb, "   P %d %d %d v=%s", p.StartTimestamp(), p.Timestamp(), p.Flags(), canonValue(p.ValueType() == pmetric.NumberDataPointValueTypeInt, p.ValueType() == pmetric.NumberDataPointValueTypeDouble, p.IntValue(), p.DoubleValue()))
		attrs(p.Attributes())
		exemplars(p.Exemplars())
	}
}

func canonicalShale(md *otlpMetrics) string {
	var sb strings.Builder
	attrs := func(as []otlpAttr) {
		for _, a := range as {
			fmt.Fprintf(&sb, " %q=%q", a.key, a.value)
		}
		sb.WriteByte('\n')
	}
	exemplars := func(es []otlpExemplar) {
		for _, e := range es {
			fmt.Fprintf(&sb, "    E t=%d v=%s trace=%x span=%x", e.time, canonValue(e.valueType == valueInt, e.valueType == valueDouble, e.intValue, e.value), e.traceID[:], e.spanID[:])
			attrs(of(md.exAttrs, e.attrs))
		}
	}
	typeNames := [...]string{"Empty", "Gauge", "Sum", "Histogram", "ExponentialHistogram", "Summary"}
	for _, r := range md.resources {
		sb.WriteString("R")
		attrs(of(md.resAttrs, r.attrs))
		for _, s := range of(md.scopes, r.scopes) {
			fmt.Fprintf(&sb, " S %q %q %q", s.name, s.version, s.schemaURL)
			attrs(of(md.scopeAttrs, s.attrs))
			for _, m := range of(md.metrics, s.metrics) {
				fmt.Fprintf(&sb, "  M %q %q %q %s", m.name, m.description, m.unit, typeNames[m.typ])
				switch m.typ {
				case otlpGauge, otlpSummary, otlpEmpty:
					sb.WriteByte('\n')
				case otlpSum:
					fmt.Fprintf(&sb, " mono=%v temp=%d\n", m.monotonic, m.temporality)
				default:
					fmt.Fprintf(&sb, " temp=%d\n", m.temporality)
				}
				for _, p := range of(md.points, m.points) {
					switch m.typ {
					case otlpGauge, otlpSum:
						fmt.Fprintf(&sb, "   P %d %d %d v=%s", p.start, p.time, p.flags, canonValue(p.valueType == valueInt, p.valueType == valueDouble, p.intValue, p.value))
						attrs(of(md.pointAttrs, p.attrs))
						exemplars(of(md.exemplars, p.exemplars))
					case otlpHistogram:
						fmt.Fprintf(&sb, "   P %d %d %d count=%d sum=%x/%v bounds=%v counts=%v", p.start, p.time, p.flags, p.count, math.Float64bits(p.sum), p.hasSum, fmtFloats(of(md.bounds, p.bounds)), nilEmpty(of(md.counts, p.counts)))
						attrs(of(md.pointAttrs, p.attrs))
						exemplars(of(md.exemplars, p.exemplars))
					case otlpExpHistogram:
						fmt.Fprintf(&sb, "   P %d %d %d count=%d sum=%x/%v scale=%d zc=%d pos=%d%v neg=%d%v", p.start, p.time, p.flags, p.count, math.Float64bits(p.sum), p.hasSum, p.scale, p.zeroCount,
							p.posOffset, nilEmpty(of(md.counts, p.pos)), p.negOffset, nilEmpty(of(md.negCounts, p.neg)))
						attrs(of(md.pointAttrs, p.attrs))
						exemplars(of(md.exemplars, p.exemplars))
					case otlpSummary:
						fmt.Fprintf(&sb, "   P %d %d %d count=%d sum=%x q=", p.start, p.time, p.flags, p.count, math.Float64bits(p.sum))
						for _, q := range of(md.quantiles, p.quantiles) {
							fmt.Fprintf(&sb, "%x:%x,", math.Float64bits(q.quantile), math.Float64bits(q.value))
						}
						attrs(of(md.pointAttrs, p.attrs))
					}
				}
			}
		}
	}
	return sb.String()
}

// canonValue renders the value of a number point or an exemplar, an int or
// a double or neither.
func canonValue(isInt, isDouble bool, i int64, d float64) string {
	switch {
	case isInt:
		return fmt.Sprint("i", i)
	case isDouble:
		return fmt.Sprintf("d%x", math.Float64bits(d))
	}
	return ""
}

// nilEmpty prints an empty list as pdata's AsRaw does.
func nilEmpty(s []uint64) []uint64 {
	if len(s) == 0 {
		return nil
	}
	return s
}

// otlpGen makes random requests that reach every branch of the
// translation: every metric type, temporality and flag, attribute names
// that collide or are reserved once sanitised, values of every type,
// bucket layouts with gaps, scales past the native histogram range,
// exemplars with and without trace context.
type otlpGen struct {
	r    *rand.Rand
	base uint64 // ns
}

var genKeys = []string{
	"service.name", "service.namespace", "service.instance.id", "host.name", "a.b", "a_b", "a__b", "a-b",
	"_under", "__dunder", "__name__", "1digit", "", "ünï", "k8s.pod.name", "trace_id", "span_id", "le",
	"quantile", "job", "instance", "otel_scope_name", "___", "x", "http.method", "Ünicode.Ä",
}

var genStrings = []string{"", "v", "v;w", "svc", "ns", "i-1", "ü", "a long value " + strings.Repeat("x", 120), "0", "\x00\xff"}

func (g *otlpGen) pick(n int) bool { return g.r.IntN(n) == 0 }

func (g *otlpGen) value(v pcommon.Value, depth int) {
	switch k := g.r.IntN(10); {
	case k < 4:
		v.SetStr(genStrings[g.r.IntN(len(genStrings))])
	case k == 4:
		v.SetInt(g.r.Int64N(2000) - 1000)
	case k == 5:
		v.SetDouble([]float64{0.1, 1e21, 1e-7, -2.5, math.NaN(), math.Inf(1), math.Inf(-1), 3, 123456789.125}[g.r.IntN(9)])
	case k == 6:
		v.SetBool(g.pick(2))
	case k == 7:
		if g.pick(3) {
			v.SetEmptyBytes()
		} else {
			v.SetEmptyBytes().FromRaw([]byte{0, 1, 2, 0xff})
		}
	case k == 8 && depth < 3:
		s := v.SetEmptySlice()
		for range g.r.IntN(3) {
			g.value(s.AppendEmpty(), depth+1)
		}
	case k == 9 && depth < 3:
		m := v.SetEmptyMap()
		for range g.r.IntN(3) {
			g.value(m.PutEmpty(genKeys[g.r.IntN(len(genKeys))]), depth+1)
		}
	default:
		// empty
	}
}

func (g *otlpGen) attrs(m pcommon.Map, n int) {
	if g.pick(10) {
		n = 20 // past the 12 that slices.Sort sorts by insertion
	}
	for range g.r.IntN(n + 1) {
		g.value(m.PutEmpty(genKeys[g.r.IntN(len(genKeys))]), 0)
	}
	if g.pick(8) {
		// More attributes than lblBuilder looks through one by one: names
		// that collide once sanitised, out of the order of their sanitised
		// names, and empty values among them.
		for range lblIndexFrom + 1 + g.r.IntN(60) {
			k := []string{"w.", "w-", "w", "w_", "W.", "w..", "w.-."}[g.r.IntN(7)] + strconv.Itoa(g.r.IntN(25))
			m.PutStr(k, genStrings[g.r.IntN(len(genStrings))])
		}
	}
}

// time returns a point time near the base, rarely 0 or in ns past 2^63.
func (g *otlpGen) time() pcommon.Timestamp {
	return pcommon.Timestamp(g.base + uint64(g.r.Int64N(int64(2*time.Hour))))
}

func (g *otlpGen) exemplars(es pmetric.ExemplarSlice) {
	for range g.r.IntN(4) {
		e := es.AppendEmpty()
		switch g.r.IntN(5) {
		case 0:
		case 1, 2:
			e.SetDoubleValue([]float64{0.5, 1, 2, 7, 100, math.Inf(1)}[g.r.IntN(6)])
		default:
			e.SetIntValue(g.r.Int64N(10))
		}
		if !g.pick(4) {
			e.SetTimestamp(g.time())
		}
		if !g.pick(3) {
			e.SetTraceID(pcommon.TraceID{byte(g.r.IntN(3)), 2, 3})
		}
		if !g.pick(3) {
			e.SetSpanID(pcommon.SpanID{byte(g.r.IntN(3)), 5})
		}
		g.attrs(e.FilteredAttributes(), 3)
	}
}

func (g *otlpGen) flags() pmetric.DataPointFlags {
	if g.pick(8) {
		return pmetric.DefaultDataPointFlags.WithNoRecordedValue(true)
	}
	return pmetric.DataPointFlags(g.r.IntN(3) * 2)
}

func (g *otlpGen) temporality() pmetric.AggregationTemporality {
	if g.pick(6) {
		return pmetric.AggregationTemporality(g.r.IntN(4))
	}
	return []pmetric.AggregationTemporality{pmetric.AggregationTemporalityCumulative, pmetric.AggregationTemporalityDelta}[g.r.IntN(2)]
}

func (g *otlpGen) counts(n int) []uint64 {
	c := make([]uint64, n)
	for i := range c {
		if !g.pick(3) {
			c[i] = uint64(g.r.IntN(5))
		}
	}
	return c
}

var genNames = []string{"requests", "http.server.duration", "latency", "queue size", "temperature", "mem", "a.b", "1bad", "__x", "ünï.metric", "", "total_total"}
var genUnits = []string{"", "s", "ms", "By", "1", "{requests}", "%", "Cel", "By/s", "m/s"}

func (g *otlpGen) metric(m pmetric.Metric) {
	m.SetName(genNames[g.r.IntN(len(genNames))])
	m.SetUnit(genUnits[g.r.IntN(len(genUnits))])
	if g.pick(2) {
		m.SetDescription("Help of " + m.Name())
	}
	points := g.r.IntN(4)
	setCommon := func(attrs pcommon.Map, start, ts func(pcommon.Timestamp), flags func(pmetric.DataPointFlags)) {
		g.attrs(attrs, 4)
		t := g.time()
		ts(t)
		if !g.pick(3) {
			start(t - pcommon.Timestamp(g.r.Int64N(int64(time.Hour))))
		}
		flags(g.flags())
	}
	switch g.r.IntN(12) {
	case 0, 1:
		dps := m.SetEmptyGauge().DataPoints()
		for range points {
			p := dps.AppendEmpty()
			setCommon(p.Attributes(), p.SetStartTimestamp, p.SetTimestamp, p.SetFlags)
			g.number(p)
		}
	case 2, 3, 4:
		s := m.SetEmptySum()
		s.SetIsMonotonic(g.pick(2))
		s.SetAggregationTemporality(g.temporality())
		for range points {
			p := s.DataPoints().AppendEmpty()
			setCommon(p.Attributes(), p.SetStartTimestamp, p.SetTimestamp, p.SetFlags)
			g.number(p)
		}
	case 5, 6:
		h := m.SetEmptyHistogram()
		h.SetAggregationTemporality(g.temporality())
		for range points {
			p := h.DataPoints().AppendEmpty()
			setCommon(p.Attributes(), p.SetStartTimestamp, p.SetTimestamp, p.SetFlags)
			bounds := [][]float64{{}, {1}, {0.5, 1, 2, 5}, {1, math.Inf(1)}, {-1, 0, 1, 2, 3, 4, 5, 6}}[g.r.IntN(5)]
			p.ExplicitBounds().FromRaw(bounds)
			n := len(bounds) + 1
			if g.pick(5) {
				n = g.r.IntN(len(bounds) + 3)
			}
			c := g.counts(n)
			p.BucketCounts().FromRaw(c)
			var total uint64
			for _, x := range c {
				total += x
			}
			p.SetCount(total + uint64(g.r.IntN(2)))
			if !g.pick(3) {
				p.SetSum(float64(g.r.IntN(100)) / 4)
			}
			g.exemplars(p.Exemplars())
		}
	case 7, 8:
		h := m.SetEmptyExponentialHistogram()
		h.SetAggregationTemporality(g.temporality())
		for range points {
			p := h.DataPoints().AppendEmpty()
			setCommon(p.Attributes(), p.SetStartTimestamp, p.SetTimestamp, p.SetFlags)
			p.SetScale(int32(g.r.IntN(18)) - 6)
			p.SetZeroCount(uint64(g.r.IntN(3)))
			p.Positive().SetOffset(int32(g.r.IntN(40)) - 20)
			p.Positive().BucketCounts().FromRaw(g.counts(g.r.IntN(12)))
			if g.pick(2) {
				p.Negative().SetOffset(int32(g.r.IntN(40)) - 20)
				p.Negative().BucketCounts().FromRaw(g.counts(g.r.IntN(8)))
			}
			p.SetCount(uint64(g.r.IntN(30)))
			if !g.pick(3) {
				p.SetSum(float64(g.r.IntN(100)) / 8)
			}
			g.exemplars(p.Exemplars())
		}
	case 9, 10:
		dps := m.SetEmptySummary().DataPoints()
		for range points {
			p := dps.AppendEmpty()
			setCommon(p.Attributes(), p.SetStartTimestamp, p.SetTimestamp, p.SetFlags)
			p.SetCount(uint64(g.r.IntN(10)))
			p.SetSum(float64(g.r.IntN(10)) / 3)
			for range g.r.IntN(4) {
				q := p.QuantileValues().AppendEmpty()
				q.SetQuantile([]float64{0, 0.5, 0.99, 1, 0.25}[g.r.IntN(5)])
				q.SetValue(float64(g.r.IntN(100)))
			}
		}
	default:
		// no data
	}
}

func (g *otlpGen) number(p pmetric.NumberDataPoint) {
	switch g.r.IntN(5) {
	case 0:
	case 1, 2:
		p.SetDoubleValue([]float64{1.5, 0, -3, math.Inf(1), 1e300}[g.r.IntN(5)])
	default:
		p.SetIntValue(g.r.Int64N(1000))
	}
	g.exemplars(p.Exemplars())
}

func (g *otlpGen) metrics() pmetric.Metrics {
	md := pmetric.NewMetrics()
	for range g.r.IntN(3) + 1 {
		rm := md.ResourceMetrics().AppendEmpty()
		ra := rm.Resource().Attributes()
		if !g.pick(4) {
			ra.PutStr("service.name", []string{"svc", "", "api"}[g.r.IntN(3)])
		}
		if g.pick(2) {
			ra.PutStr("service.namespace", "ns")
		}
		if g.pick(2) {
			ra.PutStr("service.instance.id", "i-1")
		}
		if g.pick(3) {
			ra.PutInt("service.instance.id", 7)
		}
		g.attrs(ra, 4)
		for range g.r.IntN(3) {
			sm := rm.ScopeMetrics().AppendEmpty()
			if !g.pick(3) {
				sm.Scope().SetName("scope-" + fmt.Sprint(g.r.IntN(3)))
			}
			if g.pick(2) {
				sm.Scope().SetVersion("1.2")
			}
			if g.pick(2) {
				sm.SetSchemaUrl("https://opentelemetry.io/schemas/1.0")
			}
			g.attrs(sm.Scope().Attributes(), 2)
			for range g.r.IntN(5) {
				g.metric(sm.Metrics().AppendEmpty())
			}
		}
		if g.pick(5) { // the same target_info twice in a request
			rm.CopyTo(md.ResourceMetrics().AppendEmpty())
		}
	}
	return md
}

// genOptions returns the options of case i: the default, then each
// translation strategy with random settings.
func genOptions(r *rand.Rand, i int) OTLPOptions {
	o := DefaultOTLPOptions()
	if i == 0 {
		return o
	}
	o.TranslationStrategy = []otlptranslator.TranslationStrategyOption{
		otlptranslator.UnderscoreEscapingWithSuffixes, otlptranslator.UnderscoreEscapingWithoutSuffixes,
		otlptranslator.NoUTF8EscapingWithSuffixes, otlptranslator.NoTranslation,
	}[i%4]
	switch r.IntN(3) {
	case 0:
		o.PromoteResourceAttributes = []string{"host.name", " a.b", "service.name", "_under"}
	case 1:
		o.PromoteAllResourceAttributes = true
		o.IgnoreResourceAttributes = []string{"host.name", "a_b"}
	}
	o.KeepIdentifyingResourceAttributes = r.IntN(2) == 0
	o.ConvertHistogramsToNHCB = r.IntN(2) == 0
	o.PromoteScopeMetadata = r.IntN(2) == 0
	o.LabelNameUnderscoreSanitization = r.IntN(2) == 0
	o.LabelNamePreserveMultipleUnderscores = r.IntN(2) == 0
	o.NativeDeltaIngestion = r.IntN(2) == 0
	o.LookbackDelta = []time.Duration{0, time.Minute, 5 * time.Minute, time.Hour}[r.IntN(4)]
	return o
}

// snake turns a lowerCamelCase JSON name into the .proto's.
func snake(s string) string {
	var sb strings.Builder
	for _, c := range s {
		if c >= 'A' && c <= 'Z' {
			sb.WriteByte('_')
			c += 'a' - 'A'
		}
		sb.WriteRune(c)
	}
	return sb.String()
}

// jsonIntFields are the fields pdata writes as strings.
var jsonIntFields = map[string]bool{
	"timeUnixNano": true, "startTimeUnixNano": true, "count": true, "zeroCount": true, "bucketCounts": true, "intValue": true, "asInt": true,
}

var temporalityNames = []string{"AGGREGATION_TEMPORALITY_UNSPECIFIED", "AGGREGATION_TEMPORALITY_DELTA", "AGGREGATION_TEMPORALITY_CUMULATIVE"}

// mutateJSON rewrites pdata's JSON into other forms the mapping allows:
// snake_case names, integers as numbers, enums by name, and repeated
// attributes (which pdata's API cannot make).
func mutateJSON(r *rand.Rand, b []byte) []byte {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		panic(err)
	}
	var walk func(v any) any
	walk = func(v any) any {
		switch x := v.(type) {
		case map[string]any:
			out := map[string]any{}
			for k, val := range x {
				val = walk(val)
				if jsonIntFields[k] && r.IntN(2) == 0 {
					switch s := val.(type) {
					case string:
						val = json.Number(s)
					case []any:
						for i, e := range s {
							if str, ok := e.(string); ok && r.IntN(2) == 0 {
								s[i] = json.Number(str)
							}
						}
					}
				}
				if k == "aggregationTemporality" && r.IntN(2) == 0 {
					if n, ok := val.(json.Number); ok {
						if i, err := n.Int64(); err == nil && i >= 0 && i < 3 {
							val = temporalityNames[i]
						}
					}
				}
				if (k == "attributes" || k == "filteredAttributes") && r.IntN(3) == 0 {
					if l, ok := val.([]any); ok && len(l) > 0 {
						dup := map[string]any{"key": l[0].(map[string]any)["key"], "value": map[string]any{"stringValue": "dup"}}
						val = append(l, dup)
					}
				}
				if r.IntN(2) == 0 {
					k = snake(k)
				}
				out[k] = val
			}
			return out
		case []any:
			for i := range x {
				x[i] = walk(x[i])
			}
			return x
		}
		return v
	}
	out, err := json.Marshal(walk(v))
	if err != nil {
		panic(err)
	}
	return out
}

// TestOTLPMatchesUpstream decodes random requests with pdata and with
// Shale's decoders (protobuf, and JSON in several spellings) and
// translates them with Prometheus' translator and Shale's under many
// settings: the decoded content, the samples, histograms, exemplars,
// metadata and errors must be the same.
func TestOTLPMatchesUpstream(t *testing.T) {
	// The upstream translator logs a line to the standard logger for each
	// attribute that __name__ overwrites.
	log.SetOutput(io.Discard)
	t.Cleanup(func() { log.SetOutput(os.Stderr) })
	cases := 400
	if testing.Short() {
		cases = 50
	}
	if n, err := strconv.Atoi(os.Getenv("SHALE_OTLP_DIFF_CASES")); err == nil {
		cases = n
	}
	for c := range cases {
		r := rand.New(rand.NewPCG(uint64(c), 42))
		g := &otlpGen{r: r, base: uint64(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())}
		switch c % 10 {
		case 7:
			g.base = 0 // times near the epoch: truncation and flooring agree
		case 8:
			g.base = math.MaxUint64 - uint64(3*time.Hour) // past 2^63: negative once signed
		}
		md := g.metrics()
		jsonBody, err := pmetricotlp.NewExportRequestFromMetrics(md).MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		jsonBody = mutateJSON(r, jsonBody)
		fromJSON := pmetricotlp.NewExportRequest()
		if err := fromJSON.UnmarshalJSON(jsonBody); err != nil {
			t.Fatalf("case %d: pdata refuses %s: %v", c, jsonBody, err)
		}
		var mj otlpMetrics
		if err := decodeOTLPJSON(&mj, jsonBody); err != nil {
			t.Fatalf("case %d: %v\n%s", c, err, jsonBody)
		}
		if want, got := canonicalPdata(fromJSON.Metrics()), canonicalShale(&mj); want != got {
			t.Fatalf("case %d: JSON decoded differently:\n%s\npdata:\n%s\nshale:\n%s", c, jsonBody, want, got)
		}
		protoBody, err := fromJSON.MarshalProto()
		if err != nil {
			t.Fatal(err)
		}
		fromProto := pmetricotlp.NewExportRequest()
		if err := fromProto.UnmarshalProto(protoBody); err != nil {
			t.Fatal(err)
		}
		var mp otlpMetrics
		if err := decodeOTLPProto(&mp, protoBody); err != nil {
			t.Fatalf("case %d: %v", c, err)
		}
		if want, got := canonicalPdata(fromProto.Metrics()), canonicalShale(&mp); want != got {
			t.Fatalf("case %d: protobuf decoded differently:\npdata:\n%s\nshale:\n%s", c, want, got)
		}
		for i := range 4 {
			o := genOptions(r, (c+i)%8)
			failAt := 0
			if r.IntN(10) == 0 {
				failAt = 1 + r.IntN(20)
			}
			t.Run(fmt.Sprintf("case=%d/options=%d", c, i), func(t *testing.T) {
				translateBoth(t, fromProto.Metrics(), &mp, o, failAt)
				if i == 0 {
					translateBoth(t, fromJSON.Metrics(), &mj, o, failAt)
				}
			})
		}
	}
}

// checkDecodeLikePdata decodes b with pdata and Shale: Shale must accept
// what pdata accepts (and, if strict, refuse what pdata refuses), with the
// same content.
func checkDecodeLikePdata(t *testing.T, b []byte, isJSON, strict bool) {
	t.Helper()
	var m otlpMetrics
	var err error
	if isJSON {
		err = decodeOTLPJSON(&m, b)
	} else {
		err = decodeOTLPProto(&m, b)
	}
	md, ok := pdataDecode(b, isJSON)
	switch {
	case ok && err != nil:
		t.Fatalf("pdata decodes what Shale refuses: %v\n%q", err, b)
	case !ok && err == nil && strict:
		t.Fatalf("Shale decodes what pdata refuses:\n%q\n%s", b, canonicalShale(&m))
	case ok:
		if want, got := canonicalPdata(md), canonicalShale(&m); want != got {
			t.Fatalf("decoded differently: %q\npdata:\n%s\nshale:\n%s", b, want, got)
		}
	}
}

func TestOTLPJSONLikePdata(t *testing.T) {
	point := func(s string) string {
		return `{"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"name":"m","sum":{"aggregationTemporality":2,"dataPoints":[` + s + `]}}]}]}]}`
	}
	attr := func(v string) string {
		return `{"resourceMetrics":[{"resource":{"attributes":[{"key":"k","value":` + v + `}]}}]}`
	}
	for _, tc := range []struct {
		body    string
		strict  bool // Shale refuses what pdata refuses
		notJSON bool // pdata takes it, Shale refuses it: not JSON
	}{
		{`{}`, true, false},
		{`{"resourceMetrics":null}`, true, false},
		{`{"resourceMetrics":[{"resource":null,"scopeMetrics":[{"scope":{"name":"s","attributes":null},"metrics":null}]}]}`, true, false},
		{attr(`{"stringValue":"a\"b\\c\/d\b\f\n\r\t\u00e9\ud83d\ude00"}`), true, false},
		{attr(`{"stringValue":"\u00"}`), true, false},
		{attr(`{"stringValue":"x","intValue":"12"}`), true, false},
		{attr(`{"intValue":12}`), true, false},
		{attr(`{"intValue":"-9223372036854775808"}`), true, false},
		{attr(`{"intValue":"9223372036854775808"}`), true, false},
		{attr(`{"doubleValue":"NaN"}`), true, false},
		{attr(`{"doubleValue":"Infinity"}`), true, false},
		{attr(`{"doubleValue":"-Infinity"}`), true, false},
		{attr(`{"doubleValue":1e400}`), true, false},
		{attr(`{"doubleValue":1.5e-7}`), true, false},
		{attr(`{"boolValue":true}`), true, false},
		{attr(`{"boolValue":"true"}`), true, false},
		{attr(`{"bytesValue":"AAEC/w=="}`), true, false},
		{attr(`{"bytesValue":"@@"}`), true, false},
		{attr(`{"bytesValue":""}`), true, false},
		{attr(`{"arrayValue":{"values":[{"stringValue":"a<b>&"},{"intValue":"1"},{"doubleValue":2.5},{"boolValue":false},{"bytesValue":""},{"bytesValue":"AQ=="},{},{"arrayValue":{}},{"kvlistValue":{"values":[{"key":"z","value":{"intValue":1}},{"key":"a","value":{"intValue":2}},{"key":"z","value":{"intValue":3}}]}}]}}`), true, false},
		{attr(`{"arrayValue":{"values":[{"doubleValue":"NaN"}]}}`), true, false},
		{attr(`{"kvlistValue":{"values":[{"key":"\u00ff\ud800","value":{"stringValue":"\xff"}}]}}`), false, false},
		{attr(`{"unknown":{"a":[1,2,{"b":null}]},"stringValue":"v"}`), true, false},
		{attr(`null`), true, false},
		{`{"resourceMetrics":[{"resource":{"attributes":[{"key":"a","value":{"stringValue":"1"}}]},"resource":{"attributes":[{"key":"b","value":{"stringValue":"2"}}]}}]}`, true, false},
		{point(`{"timeUnixNano":"1000","startTimeUnixNano":999,"asInt":"5","flags":1}`), true, false},
		{point(`{"timeUnixNano":"-1"}`), true, false},
		{point(`{"timeUnixNano":"18446744073709551615","asDouble":"1.5"}`), true, false},
		{point(`{"time_unix_nano":"18446744073709551616"}`), true, false},
		{point(`{"flags":4294967296}`), true, false},
		{point(`{"asDouble":"Infinity","asInt":3}`), true, false},
		{point(`{"exemplars":[{"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"0102030405060708","asInt":"3","filteredAttributes":[{"key":"a","value":{"stringValue":"b"}}]}]}`), true, false},
		{point(`{"exemplars":[{"traceId":"0102030405060708090A0B0C0D0E0F10","span_id":"","timeUnixNano":"5"}]}`), true, false},
		{point(`{"exemplars":[{"traceId":"0102"}]}`), true, false},
		{point(`{"exemplars":[{"spanId":"zz02030405060708"}]}`), true, false},
		{`{"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"name":"m","sum":{"aggregationTemporality":"AGGREGATION_TEMPORALITY_DELTA","isMonotonic":true}}]}]}]}`, true, false},
		{`{"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"name":"m","sum":{"aggregationTemporality":"BOGUS"}}]}]}]}`, true, false},
		{`{"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"name":"m","sum":{"aggregationTemporality":7}}]}]}]}`, true, false},
		{`{"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"name":"m","gauge":{"dataPoints":[{"asInt":1}]},"sum":{"dataPoints":[{"asInt":2}]}}]}]}]}`, true, false},
		{`{"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"name":"h","histogram":{"aggregationTemporality":2,"dataPoints":[{"bucketCounts":["1",2],"explicitBounds":[1],"bucketCounts":[3],"sum":0,"min":1,"max":2}]}}]}]}]}`, true, false},
		{`{"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"name":"e","exponentialHistogram":{"aggregationTemporality":2,"dataPoints":[{"scale":-3,"zeroCount":"2","positive":{"offset":-2,"bucketCounts":["1"]},"negative":{"bucketCounts":[4]},"positive":{"bucketCounts":["5"]},"zeroThreshold":0.5}]}}]}]}]}`, true, false},
		{`{"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"name":"s","summary":{"dataPoints":[{"count":"3","sum":1.5,"quantileValues":[{"quantile":0.5,"value":1},{}]}]}}]}]}]}`, true, false},
		{`{"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"name":"s","summary":{"dataPoints":[{"scale":1}]}}]}]}]}`, true, false},
		{`{"resourceMetrics":[]} `, true, false},
		{`{"resourceMetrics":[]} x`, false, true},
		{`{"resourceMetrics":[{]}`, true, false},
		{`[]`, true, false},
		{`{"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"name":1}]}]}]}`, true, false},
	} {
		t.Run(tc.body, func(t *testing.T) {
			if tc.notJSON {
				var m otlpMetrics
				if err := decodeOTLPJSON(&m, []byte(tc.body)); err == nil {
					t.Fatal("decoded")
				}
				return
			}
			checkDecodeLikePdata(t, []byte(tc.body), true, tc.strict)
		})
	}
}

// protoMsg builds a protobuf message from fields: each is a number, a wire
// type and a value (uint64, []byte, or string).
func protoMsg(fields ...any) []byte {
	var b []byte
	for i := 0; i < len(fields); i += 3 {
		num, typ := protowire.Number(fields[i].(int)), fields[i+1].(protowire.Type)
		b = protowire.AppendTag(b, num, typ)
		switch v := fields[i+2].(type) {
		case uint64:
			if typ == protowire.Fixed64Type {
				b = protowire.AppendFixed64(b, v)
			} else if typ == protowire.Fixed32Type {
				b = protowire.AppendFixed32(b, uint32(v))
			} else if typ != protowire.StartGroupType && typ != protowire.EndGroupType {
				b = protowire.AppendVarint(b, v)
			}
		case []byte:
			b = protowire.AppendBytes(b, v)
		case string:
			b = protowire.AppendString(b, v)
		}
	}
	return b
}

func TestOTLPProtoLikePdata(t *testing.T) {
	const (
		vt  = protowire.VarintType
		bt  = protowire.BytesType
		f64 = protowire.Fixed64Type
		f32 = protowire.Fixed32Type
		sg  = protowire.StartGroupType
		eg  = protowire.EndGroupType
	)
	kv := func(k string, v []byte) []byte { return protoMsg(1, bt, k, 2, bt, v) }
	str := func(s string) []byte { return protoMsg(1, bt, s) }
	req := func(rm ...[]byte) []byte {
		var b []byte
		for _, r := range rm {
			b = append(b, protoMsg(1, bt, r)...)
		}
		return b
	}
	metric := func(fields ...any) []byte {
		return req(protoMsg(2, bt, protoMsg(2, bt, protoMsg(fields...))))
	}
	packed := func(vs ...uint64) []byte {
		var b []byte
		for _, v := range vs {
			b = protowire.AppendFixed64(b, v)
		}
		return b
	}
	hist := func(point []byte) []byte {
		return metric(1, bt, "h", 9, bt, protoMsg(1, bt, point, 2, vt, uint64(2)))
	}
	for name, body := range map[string][]byte{
		"empty":                   nil,
		"unknown fields":          protoMsg(5, vt, uint64(1), 6, f32, uint64(1), 7, f64, uint64(1), 8, bt, "x", 1, bt, protoMsg(99, bt, "y")),
		"group":                   protoMsg(5, sg, nil, 6, vt, uint64(1), 5, eg, nil),
		"empty group":             protoMsg(5, sg, nil, 5, eg, nil),
		"empty group inside":      protoMsg(5, sg, nil, 5, eg, nil, 6, vt, uint64(1)),
		"unterminated group":      protoMsg(5, sg, nil),
		"stray end group":         protoMsg(5, eg, nil),
		"wrong wire type":         protoMsg(1, vt, uint64(1)),
		"truncated":               protoMsg(1, bt, "abc")[:3],
		"field 0":                 {0x02, 0x00},
		"field past 2^29":         append(protowire.AppendVarint(nil, 1<<30<<3|uint64(vt)), 1),
		"field number wraps":      append(protowire.AppendVarint(nil, (1<<32+1)<<3|uint64(bt)), 0),
		"negative field number":   append(protowire.AppendVarint(nil, (1<<31)<<3|uint64(vt)), 1),
		"overlong varint":         {0x28, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x02},
		"11-byte varint":          {0x28, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00},
		"overlong length":         {0x2a, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x02},
		"resource merge":          req(protoMsg(1, bt, protoMsg(1, bt, kv("a", str("1"))), 1, bt, protoMsg(1, bt, kv("b", str("2")), 2, vt, uint64(3)))),
		"value merge":             req(protoMsg(1, bt, protoMsg(1, bt, protoMsg(1, bt, "k", 2, bt, str("s"), 2, bt, protoMsg(3, vt, uint64(7)), 2, bt, nil)))),
		"strindex":                req(protoMsg(1, bt, protoMsg(1, bt, kv("k", protoMsg(8, vt, uint64(3)))))),
		"deprecated scopes":       req(protoMsg(1000, bt, protoMsg(2, bt, protoMsg(1, bt, "old")))),
		"deprecated and current":  req(protoMsg(1000, bt, protoMsg(2, bt, protoMsg(1, bt, "old")), 2, bt, protoMsg(2, bt, protoMsg(1, bt, "new")), 1000, bt, protoMsg(2, bt, protoMsg(1, bt, "old2")))),
		"data replaced":           metric(1, bt, "m", 5, bt, protoMsg(1, bt, protoMsg(6, f64, uint64(1))), 7, bt, protoMsg(2, vt, uint64(1), 3, vt, uint64(5))),
		"packed counts replace":   hist(protoMsg(6, bt, packed(1, 2), 6, f64, uint64(3), 6, bt, packed(4), 6, f64, uint64(5), 7, bt, packed(0x3ff0000000000000), 7, f64, uint64(0x4000000000000000))),
		"packed counts bad":       hist(protoMsg(6, bt, []byte{1, 2, 3})),
		"hist sum":                hist(protoMsg(5, f64, uint64(0), 11, f64, uint64(0), 12, f64, uint64(0))),
		"hist wrong wire":         hist(protoMsg(11, vt, uint64(0))),
		"exp buckets merge":       metric(1, bt, "e", 10, bt, protoMsg(1, bt, protoMsg(6, vt, uint64(5), 8, bt, protoMsg(1, vt, uint64(3), 2, bt, []byte{1, 2}), 9, bt, protoMsg(2, vt, uint64(4)), 8, bt, protoMsg(2, vt, uint64(9)), 14, f64, uint64(0)))),
		"exp scale sint32":        metric(1, bt, "e", 10, bt, protoMsg(1, bt, protoMsg(6, vt, uint64(0xffffffff), 8, bt, protoMsg(1, vt, uint64(0x1ffffffff))))),
		"summary":                 metric(1, bt, "s", 11, bt, protoMsg(1, bt, protoMsg(4, f64, uint64(3), 6, bt, protoMsg(1, f64, uint64(0x3fe0000000000000), 2, f64, uint64(7), 3, vt, uint64(1)), 6, bt, nil))),
		"exemplar ids":            metric(1, bt, "m", 7, bt, protoMsg(1, bt, protoMsg(5, bt, protoMsg(5, bt, string(make([]byte, 16)), 4, bt, "12345678", 6, f64, uint64(2))))),
		"exemplar bad trace":      metric(1, bt, "m", 7, bt, protoMsg(1, bt, protoMsg(5, bt, protoMsg(5, bt, "short")))),
		"exemplar empty trace":    metric(1, bt, "m", 7, bt, protoMsg(1, bt, protoMsg(5, bt, protoMsg(5, bt, "")))),
		"metric metadata":         metric(1, bt, "m", 12, bt, kv("a", str("b"))),
		"metric metadata bad":     metric(1, bt, "m", 12, bt, protoMsg(1, vt, uint64(1))),
		"entity ref":              req(protoMsg(1, bt, protoMsg(3, bt, protoMsg(1, bt, "u", 3, bt, "id", 9, vt, uint64(1))))),
		"entity ref bad":          req(protoMsg(1, bt, protoMsg(3, bt, protoMsg(3, vt, uint64(1))))),
		"nested attribute values": req(protoMsg(1, bt, protoMsg(1, bt, kv("k", protoMsg(5, bt, protoMsg(1, bt, str("a"), 1, bt, protoMsg(4, f64, uint64(0x7ff8000000000001)))))))),
		"kvlist":                  req(protoMsg(1, bt, protoMsg(1, bt, kv("k", protoMsg(6, bt, protoMsg(1, bt, kv("z", protoMsg(7, bt, "")), 1, bt, kv("a", protoMsg(7, bt, "\x01")), 1, bt, kv("z", protoMsg(2, vt, uint64(1))))))))),
	} {
		t.Run(name, func(t *testing.T) {
			checkDecodeLikePdata(t, body, false, true)
		})
	}
}

// TestOTLPDecodeBounded checks that what a request takes once decoded is
// bounded by a multiple of its size: empty data points (2 bytes each in
// protobuf) are refused before they take more.
func TestOTLPDecodeBounded(t *testing.T) {
	const n = 200_000
	var points, jsonPoints []byte
	for range n {
		points = protowire.AppendTag(points, 1, protowire.BytesType)
		points = protowire.AppendBytes(points, nil)
		jsonPoints = append(jsonPoints, "{},"...)
	}
	metric := protoMsg(1, protowire.BytesType, "m", 5, protowire.BytesType, points)
	protoBody := protoMsg(1, protowire.BytesType, protoMsg(2, protowire.BytesType, protoMsg(2, protowire.BytesType, metric)))
	jsonBody := []byte(`{"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"name":"m","gauge":{"dataPoints":[` + string(jsonPoints[:len(jsonPoints)-1]) + `]}}]}]}]}`)
	for name, tc := range map[string]struct {
		body   []byte
		decode func(*otlpMetrics, []byte) error
	}{
		"protobuf": {protoBody, decodeOTLPProto},
		"json":     {jsonBody, decodeOTLPJSON},
	} {
		t.Run(name, func(t *testing.T) {
			if _, ok := pdataDecode(tc.body, name == "json"); !ok {
				t.Fatal("pdata refuses it too")
			}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			var m otlpMetrics
			err := tc.decode(&m, tc.body)
			runtime.GC()
			runtime.ReadMemStats(&after)
			runtime.KeepAlive(&m)
			if err == nil || !strings.Contains(err.Error(), "decodes to more than") {
				t.Fatalf("error %v, want one about the size", err)
			}
			// Slices grow past what they hold by a quarter at most.
			if used := int64(after.HeapAlloc) - int64(before.HeapAlloc); used > int64(2*maxOTLPExpansion*len(tc.body)+1<<20) {
				t.Errorf("decoding %d bytes holds %d", len(tc.body), used)
			}
		})
	}
}

// decodedOTLP is md as the protobuf decoder decodes it.
func decodedOTLP(t *testing.T, md pmetric.Metrics) *otlpMetrics {
	t.Helper()
	var m otlpMetrics
	if err := decodeOTLPProto(&m, otlpProto(t, md)); err != nil {
		t.Fatal(err)
	}
	return &m
}

// TestOTLPTranslateCanceled checks that translation stops soon after its
// context ends, with the context's error.
func TestOTLPTranslateCanceled(t *testing.T) {
	md := pmetric.NewMetrics()
	m := md.ResourceMetrics().AppendEmpty().ScopeMetrics().AppendEmpty().Metrics().AppendEmpty()
	m.SetName("g")
	dps := m.SetEmptyGauge().DataPoints()
	for i := range 1000 {
		dps.AppendEmpty().SetTimestamp(otlpTS(testNow + int64(i)))
	}
	decoded := decodedOTLP(t, md)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	sink := &sinkRecorder{}
	errs := newOTLPTranslator(newOTLPSettings(DefaultOTLPOptions())).translate(ctx, decoded, sink)
	if len(errs) != 1 || !errors.Is(errs[0], context.Canceled) {
		t.Fatalf("errors %v, want context.Canceled", errs)
	}
	if len(sink.recs) >= 256 {
		t.Errorf("%d samples appended after the context ended", len(sink.recs))
	}
}

// TestOTLPTranslateWarnings checks the warnings of what translation passes
// over, each once, and only when asked for.
func TestOTLPTranslateWarnings(t *testing.T) {
	md := pmetric.NewMetrics()
	ms := md.ResourceMetrics().AppendEmpty().ScopeMetrics().AppendEmpty().Metrics()
	empty := ms.AppendEmpty()
	empty.SetName("empty")
	empty.SetEmptyGauge()
	g := ms.AppendEmpty()
	g.SetName("g")
	for range 2 {
		p := g.SetEmptyGauge().DataPoints().AppendEmpty()
		p.SetTimestamp(otlpTS(testNow))
		p.Attributes().PutStr("a.b", "1")
		p.Attributes().PutStr("a_b", "2")
	}
	h := ms.AppendEmpty()
	h.SetName("h")
	hs := h.SetEmptyHistogram()
	hs.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
	hp := hs.DataPoints().AppendEmpty()
	hp.SetTimestamp(otlpTS(testNow))
	hp.ExplicitBounds().FromRaw([]float64{1, math.Inf(1)})
	hp.BucketCounts().FromRaw([]uint64{0, 0, 0})
	e := ms.AppendEmpty()
	e.SetName("e")
	es := e.SetEmptyExponentialHistogram()
	es.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
	ep := es.DataPoints().AppendEmpty()
	ep.SetTimestamp(otlpTS(testNow))
	ep.SetSum(2)
	m := decodedOTLP(t, md)
	tr := newOTLPTranslator(newOTLPSettings(DefaultOTLPOptions()))
	tr.translate(context.Background(), m, &sinkRecorder{})
	if len(tr.warnings) != 0 {
		t.Errorf("warnings not asked for: %q", tr.warnings)
	}
	tr.warnOn = true
	tr.translate(context.Background(), m, &sinkRecorder{})
	want := []string{
		"empty data points. empty is dropped",
		`OTLP attribute "a_b" collides with another as label "a_b" after name sanitization, values are concatenated with ';'`,
		`histogram data point has an explicit +Inf bound, le="+Inf" is taken from count`,
		"exponential histogram data point has zero count, but non-zero sum: 2.000000",
	}
	if !slices.Equal(tr.warnings, want) {
		t.Errorf("warnings\n%q\nwant\n%q", tr.warnings, want)
	}
}
