package remotewrite

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/prometheus/common/model"
	"github.com/prometheus/otlptranslator"
	"github.com/prometheus/prometheus/model/exemplar"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/metadata"
	"github.com/prometheus/prometheus/model/value"
)

// otlpSink takes the samples the translator makes of a request, in the
// order Prometheus' translator appends them.
type otlpSink interface {
	// add appends one sample of the series lbls (sorted by name, as the
	// translator builds them; a repeated name can only come from repeated
	// attributes): a float v, or the integer native histogram h when it is
	// not nil. st is the start time (ms) or 0; exs are the exemplars,
	// sorted. family and meta are the metric family and its metadata.
	// Everything given aliases buffers reused for the next sample. An
	// error stops the metric being translated.
	add(lbls []labels.Label, st, t int64, v float64, h *histogram.Histogram, exs []exemplar.Exemplar, family string, meta metadata.Metadata) error
}

// otlpSettings say how OTLP becomes Prometheus series: the OTLPOptions
// in the form the translator reads.
type otlpSettings struct {
	addSuffixes, allowUTF8 bool
	// promoteAll promotes every resource attribute not in attrs; otherwise
	// those in attrs are promoted.
	promoteAll        bool
	attrs             map[string]struct{}
	keepIdentifying   bool
	nhcb              bool
	scopeMetadata     bool
	allowDelta        bool
	lookback          time.Duration
	underscoreLabels  bool
	keepUnderscoreRun bool
}

func newOTLPSettings(o OTLPOptions) *otlpSettings {
	attrs := o.PromoteResourceAttributes
	if o.PromoteAllResourceAttributes {
		attrs = o.IgnoreResourceAttributes
	}
	s := &otlpSettings{
		addSuffixes:       o.TranslationStrategy.ShouldAddSuffixes(),
		allowUTF8:         !o.TranslationStrategy.ShouldEscape(),
		promoteAll:        o.PromoteAllResourceAttributes,
		attrs:             make(map[string]struct{}, len(attrs)),
		keepIdentifying:   o.KeepIdentifyingResourceAttributes,
		nhcb:              o.ConvertHistogramsToNHCB,
		scopeMetadata:     o.PromoteScopeMetadata,
		allowDelta:        o.NativeDeltaIngestion,
		lookback:          o.LookbackDelta,
		underscoreLabels:  o.LabelNameUnderscoreSanitization,
		keepUnderscoreRun: o.LabelNamePreserveMultipleUnderscores,
	}
	for _, a := range attrs {
		s.attrs[strings.TrimSpace(a)] = struct{}{}
	}
	return s
}

// Names of OpenTelemetry's identifying resource attributes, and of the
// labels the translator makes.
const (
	attrServiceName       = "service.name"
	attrServiceNamespace  = "service.namespace"
	attrServiceInstanceID = "service.instance.id"
	targetInfoName        = "target_info"
)

// maxExemplarRunes bounds the runes of an exemplar's labels: the filtered
// attributes are left out when they would pass it (OpenMetrics' limit).
const maxExemplarRunes = 128

// zeroThreshold is the zero bucket width of the native histograms made of
// exponential ones.
const zeroThreshold = 1e-128

// otlpTranslator turns a decoded request into Prometheus samples as
// Prometheus 3's translator does, appending each straight to a sink from
// its own reused buffers. One translator serves one request at a time.
type otlpTranslator struct {
	set        *otlpSettings
	sink       otlpSink
	namer      otlptranslator.MetricNamer
	labelNamer otlptranslator.LabelNamer
	unitNamer  otlptranslator.UnitNamer
	// names caches sanitised label names within a request.
	names map[string]string

	ctx    context.Context
	ctxN   int
	ctxErr error
	errs   []error
	// warnOn asks for warnings: what the translator passes over without
	// refusing it (empty metrics, colliding names, +Inf bounds, histograms
	// of no count and some sum), each once, for a debug log.
	warnOn   bool
	warnings []string

	// Of the current resource and scope.
	job, instance string
	promoted      []labels.Label
	scopeOn       bool
	scope         *otlpScope
	scopeLbls     []labels.Label

	sorted, base, out []labels.Label
	// mapped is sorted with the names sanitised (mapNames).
	mapped []labels.Label
	// order and joined are joinCollisions' buffers, merged
	// withPromoted's.
	order          []int32
	joined, merged []labels.Label
	b              lblBuilder
	exs, sel       []exemplar.Exemplar
	exsb           labels.ScratchBuilder
	hex            [32]byte
	num            []byte
	h              histogram.Histogram
	spans          [2][]histogram.Span
	deltas         [2][]int64
	seen           map[targetKey]struct{}
}

type targetKey struct {
	hash uint64
	t    int64
}

func newOTLPTranslator(set *otlpSettings) *otlpTranslator {
	t := &otlpTranslator{
		set:   set,
		names: map[string]string{},
		seen:  map[targetKey]struct{}{},
		namer: otlptranslator.MetricNamer{WithMetricSuffixes: set.addSuffixes, UTF8Allowed: set.allowUTF8},
		labelNamer: otlptranslator.LabelNamer{
			UTF8Allowed: set.allowUTF8,
			//lint:ignore SA1019 the only way to have label_name_underscore_sanitization
			UnderscoreLabelSanitization: set.underscoreLabels,
			PreserveMultipleUnderscores: set.keepUnderscoreRun,
		},
		exsb: labels.NewScratchBuilder(4),
	}
	return t
}

// translate appends m to sink and returns the errors of what it could not
// translate; a context error ends it.
func (t *otlpTranslator) translate(ctx context.Context, m *otlpMetrics, sink otlpSink) []error {
	t.ctx, t.ctxN, t.ctxErr, t.sink = ctx, 0, nil, sink
	t.errs = t.errs[:0]
	t.warnings = t.warnings[:0]
	defer t.release()
	for ri := range m.resources {
		r := &m.resources[ri]
		rattrs := of(m.resAttrs, r.attrs)
		if err := t.setResource(rattrs); err != nil {
			t.errs = append(t.errs, err)
			continue
		}
		earliest, latest := uint64(math.MaxUint64), uint64(0)
		for si := r.scopes.lo; si < r.scopes.hi; si++ {
			s := &m.scopes[si]
			if err := t.setScope(s, of(m.scopeAttrs, s.attrs)); err != nil {
				t.errs = append(t.errs, err)
				continue
			}
			for mi := s.metrics.lo; mi < s.metrics.hi; mi++ {
				mt := &m.metrics[mi]
				if mt.skip {
					continue
				}
				if err := t.checkContext(); err != nil {
					t.errs = append(t.errs, err)
					return t.errs
				}
				pts := of(m.points, mt.points)
				for i := range pts {
					earliest, latest = min(earliest, pts[i].time), max(latest, pts[i].time)
				}
				if err := t.metric(m, mt, pts); err != nil {
					t.errs = append(t.errs, err)
					if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
						return t.errs
					}
				}
			}
		}
		if earliest < math.MaxUint64 {
			if err := t.targetInfo(rattrs, earliest, latest); err != nil {
				t.errs = append(t.errs, err)
			}
		}
	}
	return t.errs
}

// release drops what refers to the request, so that a pooled translator
// keeps no request memory alive.
func (t *otlpTranslator) release() {
	t.ctx, t.sink, t.scope = nil, nil, nil
	t.job, t.instance = "", ""
	if len(t.names) > 1024 {
		t.names = map[string]string{} // not cleared: its buckets would stay
	} else {
		clear(t.names)
	}
	clear(t.seen)
	clear(t.sorted[:cap(t.sorted)])
	clear(t.mapped[:cap(t.mapped)])
	clear(t.joined[:cap(t.joined)])
	clear(t.merged[:cap(t.merged)])
	clear(t.base[:cap(t.base)])
	clear(t.out[:cap(t.out)])
	clear(t.promoted[:cap(t.promoted)])
	clear(t.scopeLbls[:cap(t.scopeLbls)])
	clear(t.exs[:cap(t.exs)])
	clear(t.sel[:cap(t.sel)])
	t.b.release()
}

// maxOTLPWarnings bounds the warnings of a request.
const maxOTLPWarnings = 16

// warn records a warning, once.
func (t *otlpTranslator) warn(format string, args ...any) {
	if len(t.warnings) >= maxOTLPWarnings {
		return
	}
	if w := fmt.Sprintf(format, args...); !slices.Contains(t.warnings, w) {
		t.warnings = append(t.warnings, w)
	}
}

// checkContext looks at the context every 128 calls.
func (t *otlpTranslator) checkContext() error {
	if t.ctxErr != nil {
		return t.ctxErr
	}
	if t.ctxN++; t.ctxN >= 128 {
		t.ctxN = 0
		t.ctxErr = t.ctx.Err()
	}
	return t.ctxErr
}

// labelName returns the sanitised label name of attribute name a.
func (t *otlpTranslator) labelName(a string) (string, error) {
	if plainLabelName(a) {
		return a, nil
	}
	if n, ok := t.names[a]; ok {
		return n, nil
	}
	n, err := t.labelNamer.Build(a)
	if err != nil {
		return "", err
	}
	t.names[a] = n
	return n, nil
}

// plainLabelName reports whether a is a name the label namer leaves as it
// is whatever its settings: an ASCII letter, then ASCII letters, digits and
// single underscores (nothing to replace, no leading digit or underscore,
// no run of underscores to collapse). Most attribute keys are; they skip
// the cache's map. TestOTLPMatchesUpstream compares the names with the
// namer's under every setting.
func plainLabelName(a string) bool {
	if a == "" || !asciiLetter(a[0]) {
		return false
	}
	for i := 1; i < len(a); i++ {
		c := a[i]
		if c == '_' {
			if a[i-1] == '_' {
				return false
			}
			continue
		}
		if !asciiLetter(c) && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

func asciiLetter(c byte) bool { return c|0x20 >= 'a' && c|0x20 <= 'z' }

// lookup returns the value of the first attribute named key.
func lookup(attrs []otlpAttr, key string) (string, bool) {
	for i := range attrs {
		if attrs[i].key == key {
			return attrs[i].value, true
		}
	}
	return "", false
}

// setResource makes the labels every series of a resource gets: job and
// instance from the service attributes, and the promoted attributes.
func (t *otlpTranslator) setResource(attrs []otlpAttr) error {
	t.job, t.instance = "", ""
	if name, ok := lookup(attrs, attrServiceName); ok {
		t.job = name
		if ns, ok := lookup(attrs, attrServiceNamespace); ok {
			t.job = ns + "/" + name
		}
	}
	if id, ok := lookup(attrs, attrServiceInstanceID); ok {
		t.instance = id
	}
	t.b.reset(nil)
	set := t.set
	for i := range attrs {
		a := &attrs[i]
		if _, listed := set.attrs[a.key]; listed == set.promoteAll {
			continue
		}
		name, err := t.labelName(a.key)
		if err != nil {
			t.scopeOn = false
			return err
		}
		t.b.set(name, a.value)
	}
	t.promoted = t.b.labels(t.promoted[:0])
	return nil
}

// setScope makes the otel_scope_ labels of a scope, when they are asked
// for and the scope has a name.
func (t *otlpTranslator) setScope(s *otlpScope, attrs []otlpAttr) error {
	t.scopeOn = false
	if !t.set.scopeMetadata || s.name == "" {
		return nil
	}
	t.b.reset(nil)
	for i := range attrs {
		name, err := t.labelName("otel_scope_" + attrs[i].key)
		if err != nil {
			return err
		}
		t.b.set(name, attrs[i].value)
	}
	t.scopeLbls = t.b.labels(t.scopeLbls[:0])
	t.scopeOn, t.scope = true, s
	return nil
}

// Which attributes a series' labels leave out.
const (
	ignoreName        = iota // a data point's __name__
	ignoreIdentifying        // target_info's service attributes
	ignoreNone
)

// attributes starts the labels of a series in t.b: attrs, sanitised and
// with the values of colliding names joined by ";"; the promoted resource
// attributes where no attribute gave the label; job and instance; the
// scope's labels when withScope.
func (t *otlpTranslator) attributes(attrs []otlpAttr, ignore int, withPromoted, withScope bool) error {
	t.sorted = t.sorted[:0]
	for i := range attrs {
		a := &attrs[i]
		switch ignore {
		case ignoreName:
			if a.key == model.MetricNameLabel {
				continue
			}
		case ignoreIdentifying:
			if a.key == attrServiceNamespace || a.key == attrServiceName || a.key == attrServiceInstanceID {
				continue
			}
		}
		t.sorted = append(t.sorted, labels.Label{Name: a.key, Value: a.value})
	}
	slices.SortFunc(t.sorted, byName)
	if t.set.allowUTF8 {
		t.b.reset(t.sorted)
	} else if inOrder, err := t.mapNames(); err != nil {
		return err
	} else if inOrder {
		t.b.reset(t.mapped)
	} else {
		t.b.reset(t.joinCollisions())
	}
	if withPromoted && len(t.promoted) > 0 {
		t.b.reset(t.withPromoted(t.b.base))
	}
	if t.job != "" {
		t.b.set(model.JobLabel, t.job)
	}
	if t.instance != "" {
		t.b.set(model.InstanceLabel, t.instance)
	}
	if withScope && t.scopeOn {
		for _, l := range t.scopeLbls {
			t.b.set(l.Name, l.Value)
		}
		t.b.set("otel_scope_name", t.scope.name)
		t.b.set("otel_scope_version", t.scope.version)
		t.b.set("otel_scope_schema_url", t.scope.schemaURL)
	}
	return nil
}

func byName(a, b labels.Label) int { return strings.Compare(a.Name, b.Name) }

// mapNames sets t.mapped to t.sorted with every name sanitised, and reports
// whether the sanitised names are strictly increasing: then no two
// attributes collide and the order holds, and t.mapped is the label set as
// it is, without merging one attribute at a time into the builder. It fails
// on the first name, in order, that cannot be sanitised.
func (t *otlpTranslator) mapNames() (inOrder bool, err error) {
	t.mapped = t.mapped[:0]
	inOrder = true
	for i, l := range t.sorted {
		name, err := t.labelName(l.Name)
		if err != nil {
			return false, err
		}
		inOrder = inOrder && (i == 0 || name > t.mapped[i-1].Name)
		t.mapped = append(t.mapped, labels.Label{Name: name, Value: l.Value})
	}
	return inOrder, nil
}

// joinCollisions returns t.mapped with the labels whose sanitised names
// collide joined into one, sorted by name: each name's values are joined
// by ";" in the order of the attributes' own names, an empty one only
// after a value that is not (as the upstream translator joins them one
// attribute at a time). It takes time in proportion to the attributes'
// size, however many collide.
func (t *otlpTranslator) joinCollisions() []labels.Label {
	// The sort is stable: colliding labels stay in the order of the
	// attributes' names, which is the order their values are joined in.
	t.order = t.order[:0]
	for i := range t.mapped {
		t.order = append(t.order, int32(i))
	}
	slices.SortStableFunc(t.order, func(a, b int32) int { return strings.Compare(t.mapped[a].Name, t.mapped[b].Name) })
	t.joined = t.joined[:0]
	for i := 0; i < len(t.order); {
		l := t.mapped[t.order[i]]
		j := i + 1
		for j < len(t.order) && t.mapped[t.order[j]].Name == l.Name {
			j++
		}
		if j > i+1 {
			var v strings.Builder
			for _, k := range t.order[i:j] {
				if v.Len() > 0 {
					if t.warnOn {
						t.warn("OTLP attribute %q collides with another as label %q after name sanitization, values are concatenated with ';'", t.sorted[k].Name, l.Name)
					}
					v.WriteByte(';')
				}
				v.WriteString(t.mapped[k].Value)
			}
			l.Value = v.String()
		}
		t.joined = append(t.joined, l)
		i = j
	}
	return t.joined
}

// withPromoted returns base, sorted by name, with the promoted resource
// attributes merged in, sorted too: a promoted label goes where base has no
// label of its name, or one with an empty value (an attribute without a
// value, which drops every label of its name), as getting and setting each
// in the builder would put it, in one pass.
func (t *otlpTranslator) withPromoted(base []labels.Label) []labels.Label {
	out, pr := t.merged[:0], t.promoted
	for i := 0; i < len(base); {
		name := base[i].Name
		j, empty := i, false
		for ; j < len(base) && base[j].Name == name; j++ {
			empty = empty || base[j].Value == ""
		}
		for len(pr) > 0 && pr[0].Name < name {
			out, pr = append(out, pr[0]), pr[1:]
		}
		if len(pr) > 0 && pr[0].Name == name {
			if empty {
				out = append(out, pr[0])
				pr, i = pr[1:], j
				continue
			}
			pr = pr[1:]
		}
		out = append(out, base[i:j]...)
		i = j
	}
	t.merged = append(out, pr...)
	return t.merged
}

// seriesOf builds the labels of a series of a point into t.out: the
// point's attributes and name.
func (t *otlpTranslator) seriesOf(attrs []otlpAttr, name string) error {
	if err := t.attributes(attrs, ignoreName, true, true); err != nil {
		return err
	}
	t.b.set(model.MetricNameLabel, name)
	t.out = t.b.labels(t.out[:0])
	return nil
}

// pointLabels builds into t.base the labels of point p but the metric
// name, for the series that addDerived derives from them.
func (t *otlpTranslator) pointLabels(m *otlpMetrics, p *otlpPoint) error {
	if err := t.attributes(of(m.pointAttrs, p.attrs), ignoreName, true, true); err != nil {
		return err
	}
	t.base = t.b.labels(t.base[:0])
	return nil
}

// addDerived adds v at the time of point p, or the stale marker when p has
// no recorded value, to the series name whose other labels are t.base and
// one more label (extra="" for none), with exemplars exs.
func (t *otlpTranslator) addDerived(p *otlpPoint, name, extra, extraValue string, v float64, exs []exemplar.Exemplar, family string, meta metadata.Metadata) error {
	t.b.reset(t.base)
	if extra != "" {
		t.b.set(extra, extraValue)
	}
	t.b.set(model.MetricNameLabel, name)
	t.out = t.b.labels(t.out[:0])
	if p.noRecordedValue() {
		v = staleNaN
	}
	return t.sink.add(t.out, ms(p.start), ms(p.time), v, nil, exs, family, meta)
}

// temporality returns a metric's temporality, and whether its type has one.
func temporality(mt *otlpMetric) (int32, bool, error) {
	switch mt.typ {
	case otlpGauge, otlpSummary:
		return 0, false, nil
	case otlpSum, otlpHistogram, otlpExpHistogram:
		return mt.temporality, true, nil
	}
	return 0, false, fmt.Errorf("could not get aggregation temporality for %s as it has unsupported metric type %s", mt.name, mt.typ)
}

// promType is the Prometheus metadata type of a metric.
func promType(mt *otlpMetric) model.MetricType {
	delta := mt.temporality == temporalityDelta
	switch mt.typ {
	case otlpGauge:
		return model.MetricTypeGauge
	case otlpSum:
		switch {
		case delta:
			return model.MetricTypeUnknown
		case mt.monotonic:
			return model.MetricTypeCounter
		}
		return model.MetricTypeGauge
	case otlpHistogram, otlpExpHistogram:
		if delta {
			return model.MetricTypeUnknown
		}
		return model.MetricTypeHistogram
	case otlpSummary:
		return model.MetricTypeSummary
	}
	return model.MetricTypeUnknown
}

// namerType is the type the metric namer takes.
func namerType(mt *otlpMetric) otlptranslator.MetricType {
	switch mt.typ {
	case otlpGauge:
		return otlptranslator.MetricTypeGauge
	case otlpSum:
		if mt.monotonic {
			return otlptranslator.MetricTypeMonotonicCounter
		}
		return otlptranslator.MetricTypeNonMonotonicCounter
	case otlpSummary:
		return otlptranslator.MetricTypeSummary
	case otlpHistogram:
		return otlptranslator.MetricTypeHistogram
	case otlpExpHistogram:
		return otlptranslator.MetricTypeExponentialHistogram
	}
	return otlptranslator.MetricTypeUnknown
}

// metric translates the points of one metric.
func (t *otlpTranslator) metric(m *otlpMetrics, mt *otlpMetric, pts []otlpPoint) error {
	temp, has, err := temporality(mt)
	if err != nil {
		return err
	}
	if has && temp != temporalityCumulative && (!t.set.allowDelta || temp != temporalityDelta) {
		return fmt.Errorf("invalid temporality and type combination for metric %q", mt.name)
	}
	family, err := t.namer.Build(otlptranslator.Metric{Name: mt.name, Unit: mt.unit, Type: namerType(mt)})
	if err != nil {
		return err
	}
	meta := metadata.Metadata{Type: promType(mt), Unit: t.unitNamer.Build(mt.unit), Help: mt.description}
	if len(pts) == 0 {
		if t.warnOn {
			t.warn("empty data points. %s is dropped", mt.name)
		}
		return nil
	}
	delta := temp == temporalityDelta
	switch mt.typ {
	case otlpGauge, otlpSum:
		return t.numbers(m, pts, mt.typ == otlpSum, family, meta)
	case otlpHistogram:
		if t.set.nhcb {
			return t.nativeHistograms(m, pts, delta, "histogram", family, meta, t.customBuckets)
		}
		return t.classic(m, pts, family, meta)
	case otlpExpHistogram:
		return t.nativeHistograms(m, pts, delta, "exponential histogram", family, meta, t.exponential)
	case otlpSummary:
		return t.summaries(m, pts, family, meta)
	}
	return errors.New("unsupported metric type")
}

// ms converts a time in ns to ms as the translator does: truncated.
func ms(ns uint64) int64 { return int64(ns) / 1e6 }

var staleNaN = math.Float64frombits(value.StaleNaN)

func (t *otlpTranslator) numbers(m *otlpMetrics, pts []otlpPoint, withExemplars bool, family string, meta metadata.Metadata) error {
	for i := range pts {
		if err := t.checkContext(); err != nil {
			return err
		}
		p := &pts[i]
		if err := t.seriesOf(of(m.pointAttrs, p.attrs), family); err != nil {
			return err
		}
		var v float64
		switch p.valueType {
		case valueInt:
			v = float64(p.intValue)
		case valueDouble:
			v = p.value
		}
		if p.noRecordedValue() {
			v = staleNaN
		}
		var exs []exemplar.Exemplar
		if withExemplars {
			var err error
			if exs, err = t.exemplars(m, of(m.exemplars, p.exemplars)); err != nil {
				return err
			}
			slices.SortFunc(exs, exemplar.Compare)
		}
		if err := t.sink.add(t.out, ms(p.start), ms(p.time), v, nil, exs, family, meta); err != nil {
			return err
		}
	}
	return nil
}

// exemplars converts a point's exemplars, in their order, into t.exs.
func (t *otlpTranslator) exemplars(m *otlpMetrics, exs []otlpExemplar) ([]exemplar.Exemplar, error) {
	t.exs = t.exs[:0]
	for i := range exs {
		if err := t.checkContext(); err != nil {
			return nil, err
		}
		e := &exs[i]
		at := time.Unix(0, int64(e.time))
		out := exemplar.Exemplar{Ts: at.Unix()*1000 + int64(at.Nanosecond())/1e6}
		out.HasTs = out.Ts != 0
		switch e.valueType {
		case valueInt:
			out.Value = float64(e.intValue)
		case valueDouble:
			out.Value = e.value
		default:
			return nil, errors.New("unsupported exemplar value type: Empty")
		}
		t.exsb.Reset()
		runes := 0
		hasTrace, hasSpan := e.traceID != [16]byte{}, e.spanID != [8]byte{}
		if hasTrace {
			v := string(hex.AppendEncode(t.hex[:0], e.traceID[:]))
			runes += len("trace_id") + len(v)
			t.exsb.Add("trace_id", v)
		}
		if hasSpan {
			v := string(hex.AppendEncode(t.hex[:0], e.spanID[:]))
			runes += len("span_id") + len(v)
			t.exsb.Add("span_id", v)
		}
		attrs := of(m.exAttrs, e.attrs)
		overridden := func(k string) bool { return hasTrace && k == "trace_id" || hasSpan && k == "span_id" }
		for j := range attrs {
			if !overridden(attrs[j].key) {
				runes += utf8.RuneCountInString(attrs[j].key) + utf8.RuneCountInString(attrs[j].value)
			}
		}
		if runes <= maxExemplarRunes {
			for j := range attrs {
				if !overridden(attrs[j].key) {
					t.exsb.Add(attrs[j].key, attrs[j].value)
				}
			}
		}
		t.exsb.Sort()
		out.Labels = t.exsb.Labels()
		t.exs = append(t.exs, out)
	}
	return t.exs, nil
}

// sumsAndCounts translates histogram or summary points into their _sum
// series (a classic histogram's only where the point has a sum: a
// summary's is not optional), their _count series, and the series more
// adds of each (_bucket or quantiles).
func (t *otlpTranslator) sumsAndCounts(m *otlpMetrics, pts []otlpPoint, summary bool, family string, meta metadata.Metadata, more func(p *otlpPoint) error) error {
	sumName, countName := family+"_sum", family+"_count"
	for i := range pts {
		if err := t.checkContext(); err != nil {
			return err
		}
		p := &pts[i]
		if err := t.pointLabels(m, p); err != nil {
			return err
		}
		if p.hasSum || summary {
			if err := t.addDerived(p, sumName, "", "", p.sum, nil, family, meta); err != nil {
				return err
			}
		}
		if err := t.addDerived(p, countName, "", "", float64(p.count), nil, family, meta); err != nil {
			return err
		}
		if err := more(p); err != nil {
			return err
		}
	}
	return nil
}

// classic translates explicit-bucket histogram points into _sum, _count
// and cumulative _bucket series with an le label.
func (t *otlpTranslator) classic(m *otlpMetrics, pts []otlpPoint, family string, meta metadata.Metadata) error {
	bucketName := family + "_bucket"
	return t.sumsAndCounts(m, pts, false, family, meta, func(p *otlpPoint) error {
		exs, err := t.exemplars(m, of(m.exemplars, p.exemplars))
		if err != nil {
			return err
		}
		bounds, counts := of(m.bounds, p.bounds), of(m.counts, p.counts)
		var cumulative uint64
		next := 0
		for j := 0; j < len(bounds) && j < len(counts); j++ {
			if err := t.checkContext(); err != nil {
				return err
			}
			bound := bounds[j]
			cumulative += counts[j]
			if math.IsInf(bound, 1) { // +Inf is the bucket made from the count
				if t.warnOn {
					t.warn(`histogram data point has an explicit +Inf bound, le="+Inf" is taken from count`)
				}
				continue
			}
			// Exemplars go to the first bucket that holds them, in their
			// order (both are taken to be sorted).
			t.sel = t.sel[:0]
			for ; next < len(exs) && exs[next].Value <= bound; next++ {
				t.sel = append(t.sel, exs[next])
			}
			slices.SortFunc(t.sel, exemplar.Compare)
			t.num = strconv.AppendFloat(t.num[:0], bound, 'f', -1, 64)
			if err := t.addDerived(p, bucketName, model.BucketLabel, yoloString(t.num), float64(cumulative), t.sel, family, meta); err != nil {
				return err
			}
		}
		rest := exs[next:]
		slices.SortFunc(rest, exemplar.Compare)
		return t.addDerived(p, bucketName, model.BucketLabel, "+Inf", float64(p.count), rest, family, meta)
	})
}

// summaries translates summary points into _sum, _count and quantile
// series.
func (t *otlpTranslator) summaries(m *otlpMetrics, pts []otlpPoint, family string, meta metadata.Metadata) error {
	return t.sumsAndCounts(m, pts, true, family, meta, func(p *otlpPoint) error {
		for _, q := range of(m.quantiles, p.quantiles) {
			t.num = strconv.AppendFloat(t.num[:0], q.quantile, 'f', -1, 64)
			if err := t.addDerived(p, family, model.QuantileLabel, yoloString(t.num), q.value, nil, family, meta); err != nil {
				return err
			}
		}
		return nil
	})
}

// resetHint is the counter reset hint of a native histogram made of an
// OTLP one: unknown (always safe), or gauge for delta points.
func resetHint(delta bool) histogram.CounterResetHint {
	if delta {
		return histogram.GaugeType
	}
	return histogram.UnknownCounterReset
}

// setCounts sets the count and sum of h from p, or the stale marker.
func setCounts(h *histogram.Histogram, p *otlpPoint) {
	if p.noRecordedValue() {
		h.Sum = staleNaN
		h.Count = value.StaleNaN
		return
	}
	if p.hasSum {
		h.Sum = p.sum
	}
	h.Count = p.count
}

// nilIfEmpty keeps empty layouts nil, as the translator makes them.
func nilIfEmpty[T any](s []T) []T {
	if len(s) == 0 {
		return nil
	}
	return s
}

// nativeHistograms translates histogram points into native histograms, each
// built into t.h by build; what names the points' kind in a warning.
func (t *otlpTranslator) nativeHistograms(m *otlpMetrics, pts []otlpPoint, delta bool, what, family string, meta metadata.Metadata, build func(*otlpMetrics, *otlpPoint) error) error {
	for i := range pts {
		if err := t.checkContext(); err != nil {
			return err
		}
		p := &pts[i]
		if err := build(m, p); err != nil {
			return err
		}
		t.h.CounterResetHint = resetHint(delta)
		if err := t.addHistogram(m, p, what, family, meta); err != nil {
			return err
		}
	}
	return nil
}

// exponential builds into t.h the native histogram of exponential histogram
// point p.
func (t *otlpTranslator) exponential(m *otlpMetrics, p *otlpPoint) error {
	scale := p.scale
	if scale < histogram.ExponentialSchemaMin {
		return fmt.Errorf("cannot convert exponential to native histogram. Scale must be >= %d, was %d", histogram.ExponentialSchemaMin, scale)
	}
	var down int32
	if scale > histogram.ExponentialSchemaMax {
		down, scale = scale-histogram.ExponentialSchemaMax, histogram.ExponentialSchemaMax
	}
	t.spans[0], t.deltas[0] = sparseBuckets(t.spans[0][:0], t.deltas[0][:0], of(m.counts, p.pos), p.posOffset, down, true)
	t.spans[1], t.deltas[1] = sparseBuckets(t.spans[1][:0], t.deltas[1][:0], of(m.negCounts, p.neg), p.negOffset, down, true)
	t.h = histogram.Histogram{
		Schema:          scale,
		ZeroThreshold:   zeroThreshold,
		ZeroCount:       p.zeroCount,
		PositiveSpans:   nilIfEmpty(t.spans[0]),
		PositiveBuckets: nilIfEmpty(t.deltas[0]),
		NegativeSpans:   nilIfEmpty(t.spans[1]),
		NegativeBuckets: nilIfEmpty(t.deltas[1]),
	}
	return nil
}

// customBuckets builds into t.h the native histogram with custom buckets
// (the bounds as custom values) of explicit-bucket histogram point p.
func (t *otlpTranslator) customBuckets(m *otlpMetrics, p *otlpPoint) error {
	counts := of(m.counts, p.counts)
	first := 0
	for first < len(counts) && counts[first] == 0 {
		first++
	}
	t.spans[0], t.deltas[0] = sparseBuckets(t.spans[0][:0], t.deltas[0][:0], counts[first:], int32(first), 0, false)
	t.h = histogram.Histogram{
		Schema:          histogram.CustomBucketsSchema,
		PositiveSpans:   nilIfEmpty(t.spans[0]),
		PositiveBuckets: nilIfEmpty(t.deltas[0]),
		CustomValues:    nilIfEmpty(of(m.bounds, p.bounds)),
	}
	return nil
}

// addHistogram sets the counts of t.h, built from point p of m, and adds it
// with its series and exemplars; what names the point's kind in a warning.
func (t *otlpTranslator) addHistogram(m *otlpMetrics, p *otlpPoint, what, family string, meta metadata.Metadata) error {
	setCounts(&t.h, p)
	if t.warnOn && !p.noRecordedValue() && p.count == 0 && t.h.Sum != 0 {
		t.warn("%s data point has zero count, but non-zero sum: %f", what, t.h.Sum)
	}
	if err := t.seriesOf(of(m.pointAttrs, p.attrs), family); err != nil {
		return err
	}
	exs, err := t.exemplars(m, of(m.exemplars, p.exemplars))
	if err != nil {
		return err
	}
	slices.SortFunc(exs, exemplar.Compare)
	return t.sink.add(t.out, ms(p.start), ms(p.time), 0, &t.h, exs, family, meta)
}

// sparseBuckets appends the spans and deltas of dense bucket counts whose
// first has index offset, merging 2^down buckets into one. OTLP's
// exponential bucket i covers (base^i, base^(i+1)], Prometheus' bucket i
// (base^(i-1), base^i]: shift moves the indexes up by one (not for custom
// buckets). Empty buckets are left out where they make a gap of more than
// two, and filled in otherwise; the last bucket is always written.
func sparseBuckets(spans []histogram.Span, deltas []int64, counts []uint64, offset, down int32, shift bool) ([]histogram.Span, []int64) {
	if len(counts) == 0 {
		return spans, deltas
	}
	cur := offset>>down + 1 // the merged bucket being summed
	last := cur - 1         // the last bucket written
	start := offset
	if shift {
		start = cur
	}
	spans = append(spans, histogram.Span{Offset: start})
	var sum, prev int64
	write := func() {
		gap := cur - last - 1
		if gap > 2 {
			spans = append(spans, histogram.Span{Offset: gap})
		} else {
			for ; gap > 0; gap-- {
				spans[len(spans)-1].Length++
				deltas = append(deltas, -prev)
				prev = 0
			}
		}
		spans[len(spans)-1].Length++
		deltas = append(deltas, sum-prev)
		prev = sum
		last = cur
	}
	for i, c := range counts {
		idx := (int32(i)+offset)>>down + 1
		if idx == cur {
			sum += int64(c)
			continue
		}
		if sum != 0 {
			write()
		}
		sum, cur = int64(c), idx
	}
	write()
	return spans, deltas
}

// targetInfo writes the target_info series of a resource with more than
// its identifying attributes: a sample every half lookback delta from its
// earliest point to its latest, and one at the latest, each once per
// request.
func (t *otlpTranslator) targetInfo(attrs []otlpAttr, earliest, latest uint64) error {
	others := len(attrs)
	for _, k := range [...]string{attrServiceNamespace, attrServiceName, attrServiceInstanceID} {
		if _, ok := lookup(attrs, k); ok {
			others--
		}
	}
	if others == 0 {
		return nil
	}
	ignore := ignoreIdentifying
	if t.set.keepIdentifying {
		ignore = ignoreNone
	}
	if err := t.attributes(attrs, ignore, false, false); err != nil {
		return err
	}
	t.b.set(model.MetricNameLabel, targetInfoName)
	t.out = t.b.labels(t.out[:0])
	identified := false
	for _, l := range t.out {
		if l.Name == model.JobLabel || l.Name == model.InstanceLabel {
			identified = true
		}
	}
	if !identified {
		return nil
	}
	meta := metadata.Metadata{Type: model.MetricTypeGauge, Help: "Target metadata"}
	lookback := t.set.lookback
	if lookback == 0 {
		lookback = 5 * time.Minute
	}
	interval := max(lookback/2, time.Millisecond)
	hash := labels.New(t.out...).Hash()
	from, to := time.Unix(0, int64(earliest)), time.Unix(0, int64(latest))
	for at := from; ; at = at.Add(interval) {
		last := !at.Before(to)
		if last {
			at = to
		}
		k := targetKey{hash: hash, t: at.UnixMilli()}
		if _, dup := t.seen[k]; !dup {
			t.seen[k] = struct{}{}
			if err := t.sink.add(t.out, 0, k.t, 1, nil, nil, targetInfoName, meta); err != nil {
				return err
			}
		}
		if last {
			return nil
		}
	}
}

// lblBuilder builds a label set from a sorted base (which may repeat names
// and hold empty values, from repeated or empty attributes) and changes to
// it, as labels.Builder does, into a caller's slice. Looking a name up
// costs the same however many labels a request brings: the base is
// searched by halves, and add and del are indexed by maps once they are
// longer than a few labels (a request may hold thousands of attributes).
type lblBuilder struct {
	base []labels.Label
	add  []labels.Label
	del  []string
	// addAt and deleted index add and del once either is longer than
	// lblIndexFrom; nil until then.
	addAt   map[string]int
	deleted map[string]struct{}
}

// lblIndexFrom is the length past which add and del are indexed: a few
// labels are found sooner by comparing each.
const lblIndexFrom = 16

func (b *lblBuilder) reset(base []labels.Label) {
	b.base, b.add, b.del = base, b.add[:0], b.del[:0]
	b.addAt, b.deleted = nil, nil
	for _, l := range base {
		if l.Value == "" {
			b.markDeleted(l.Name)
		}
	}
}

func (b *lblBuilder) release() {
	b.base, b.addAt, b.deleted = nil, nil, nil
	clear(b.add[:cap(b.add)])
	clear(b.del[:cap(b.del)])
}

// addIndex returns the index of name in add, or -1.
func (b *lblBuilder) addIndex(name string) int {
	if b.addAt != nil {
		if i, ok := b.addAt[name]; ok {
			return i
		}
		return -1
	}
	for i := range b.add {
		if b.add[i].Name == name {
			return i
		}
	}
	return -1
}

func (b *lblBuilder) isDeleted(name string) bool {
	if b.deleted != nil {
		_, ok := b.deleted[name]
		return ok
	}
	return slices.Contains(b.del, name)
}

func (b *lblBuilder) markDeleted(name string) {
	if b.isDeleted(name) {
		return
	}
	b.del = append(b.del, name)
	if b.deleted != nil {
		b.deleted[name] = struct{}{}
	} else if len(b.del) > lblIndexFrom {
		b.deleted = make(map[string]struct{}, 2*len(b.del))
		for _, n := range b.del {
			b.deleted[n] = struct{}{}
		}
	}
}

func (b *lblBuilder) get(name string) string {
	if i := b.addIndex(name); i >= 0 {
		return b.add[i].Value
	}
	if b.isDeleted(name) {
		return ""
	}
	// The first base label of the name, as labels() keeps.
	i, found := slices.BinarySearchFunc(b.base, name, func(l labels.Label, n string) int { return strings.Compare(l.Name, n) })
	if found {
		return b.base[i].Value
	}
	return ""
}

// set sets a label; an empty value deletes it.
func (b *lblBuilder) set(name, value string) {
	i := b.addIndex(name)
	if value == "" {
		if i >= 0 {
			// Order does not matter in add: labels() sorts it.
			last := len(b.add) - 1
			b.add[i] = b.add[last]
			b.add = b.add[:last]
			if b.addAt != nil {
				delete(b.addAt, name)
				if i < last {
					b.addAt[b.add[i].Name] = i
				}
			}
		}
		b.markDeleted(name)
		return
	}
	if i >= 0 {
		b.add[i].Value = value
		return
	}
	b.add = append(b.add, labels.Label{Name: name, Value: value})
	if b.addAt != nil {
		b.addAt[name] = len(b.add) - 1
	} else if len(b.add) > lblIndexFrom {
		b.addAt = make(map[string]int, 2*len(b.add))
		for j, l := range b.add {
			b.addAt[l.Name] = j
		}
	}
}

// labels appends the result to dst, sorted by name: base without the
// deleted names, each set label in place of the first base label of its
// name.
func (b *lblBuilder) labels(dst []labels.Label) []labels.Label {
	slices.SortFunc(b.add, byName)
	slices.Sort(b.del)
	add, del := b.add, b.del
	for _, l := range b.base {
		for len(del) > 0 && del[0] < l.Name {
			del = del[1:]
		}
		if len(del) > 0 && del[0] == l.Name {
			continue
		}
		for len(add) > 0 && add[0].Name < l.Name {
			dst, add = append(dst, add[0]), add[1:]
		}
		if len(add) > 0 && add[0].Name == l.Name {
			dst, add = append(dst, add[0]), add[1:]
			continue
		}
		dst = append(dst, l)
	}
	return append(dst, add...)
}
