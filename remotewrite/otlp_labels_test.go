package remotewrite

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/model/labels"
	"go.opentelemetry.io/collector/pdata/pmetric"
)

// linearBuilder is lblBuilder as it was before its lookups were indexed:
// every lookup compares each label. It is the reference the indexed one
// must agree with.
type linearBuilder struct {
	base, add []labels.Label
	del       []string
}

func (b *linearBuilder) reset(base []labels.Label) {
	b.base, b.add, b.del = base, nil, nil
	for _, l := range base {
		if l.Value == "" {
			b.del = append(b.del, l.Name)
		}
	}
}

func (b *linearBuilder) get(name string) string {
	for _, l := range b.add {
		if l.Name == name {
			return l.Value
		}
	}
	if slices.Contains(b.del, name) {
		return ""
	}
	for _, l := range b.base {
		if l.Name == name {
			return l.Value
		}
	}
	return ""
}

func (b *linearBuilder) set(name, value string) {
	if value == "" {
		b.add = slices.DeleteFunc(b.add, func(l labels.Label) bool { return l.Name == name })
		b.del = append(b.del, name)
		return
	}
	for i := range b.add {
		if b.add[i].Name == name {
			b.add[i].Value = value
			return
		}
	}
	b.add = append(b.add, labels.Label{Name: name, Value: value})
}

// TestLabelBuilderMatchesLinear runs random resets, sets and gets on
// lblBuilder and on linearBuilder, from a few labels to many more than
// lblIndexFrom, so that both the compared and the indexed lookups are
// taken, and requires the same answers and the same label sets.
func TestLabelBuilderMatchesLinear(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var b lblBuilder
	var want linearBuilder
	for c := range 3000 {
		names := 1 + r.IntN(4*lblIndexFrom)
		name := func() string { return "n" + strconv.Itoa(r.IntN(names)) }
		value := func() string { return []string{"", "a", "b", "c"}[r.IntN(4)] }
		// A sorted base that may repeat names and hold empty values.
		var base []labels.Label
		for range r.IntN(3 * lblIndexFrom) {
			base = append(base, labels.Label{Name: name(), Value: value()})
		}
		slices.SortStableFunc(base, byName)
		b.reset(base)
		want.reset(base)
		ops := r.IntN(6 * lblIndexFrom)
		for i := range ops {
			n := name()
			if r.IntN(3) == 0 {
				if g, w := b.get(n), want.get(n); g != w {
					t.Fatalf("case %d, op %d: get(%q) = %q, want %q", c, i, n, g, w)
				}
				continue
			}
			v := value()
			b.set(n, v)
			want.set(n, v)
		}
		for i := range names {
			n := "n" + strconv.Itoa(i)
			if g, w := b.get(n), want.get(n); g != w {
				t.Fatalf("case %d: at the end, get(%q) = %q, want %q", c, n, g, w)
			}
		}
		got := b.labels(nil)
		ref := lblBuilder{base: want.base, add: want.add, del: want.del}
		if w := ref.labels(nil); !slices.Equal(got, w) {
			t.Fatalf("case %d: labels %v, want %v", c, got, w)
		}
	}
}

// manyAttributes is an OTLP request of one gauge point whose attributes, in
// the resource, the scope or the point, are n pairs of names that collide
// or fall out of order once sanitised, or n names that all collide.
func manyAttributes(n int, where, shape string) pmetric.Metrics {
	md := pmetric.NewMetrics()
	rm := md.ResourceMetrics().AppendEmpty()
	sm := rm.ScopeMetrics().AppendEmpty()
	sm.Scope().SetName("scope")
	m := sm.Metrics().AppendEmpty()
	m.SetName("g")
	dp := m.SetEmptyGauge().DataPoints().AppendEmpty()
	dp.SetTimestamp(otlpTS(testNow))
	dp.SetDoubleValue(1)
	a := dp.Attributes()
	switch where {
	case "resource":
		a = rm.Resource().Attributes()
	case "scope":
		a = sm.Scope().Attributes()
	}
	for i := range n {
		switch shape {
		case "unordered": // "k.1" sorts before "k1", "k_1" after it
			a.PutStr(fmt.Sprintf("k.%d", i), "v")
			a.PutStr(fmt.Sprintf("k%d", i), "v")
		case "pairs": // "k.1" and "k-1" are both "k_1"
			a.PutStr(fmt.Sprintf("k.%d", i), "v")
			a.PutStr(fmt.Sprintf("k-%d", i), "v")
		case "one": // every name is "a" and 20 underscores: one value of n joined
			k := []byte("a")
			for b := range 20 {
				k = append(k, ".-"[(i>>b)&1])
			}
			a.PutStr(string(k), "vv")
		}
	}
	return md
}

// TestOTLPManyAttributes sends requests of thousands of attributes that
// collide or fall out of order once sanitised: each is refused for its
// label count, as a request of as many valid names is, and a thousand
// names that all collide give one label of the values joined in order.
func TestOTLPManyAttributes(t *testing.T) {
	opts := func(o *OTLPOptions) { o.PromoteAllResourceAttributes, o.PromoteScopeMetadata = true, true }
	for _, where := range []string{"point", "resource", "scope"} {
		for _, shape := range []string{"unordered", "pairs"} {
			rec := newRecorder()
			oh, _ := newOTLPHandler(t, rec, nil, opts)
			w := post(t, oh, ContentTypeOTLPProto, "", otlpProto(t, manyAttributes(4000, where, shape)))
			if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "labels exceed max_labels_per_series=128") {
				t.Errorf("%s, %s: %d %.300s", where, shape, w.Code, w.Body)
			}
			if len(rec.series) != 0 {
				t.Errorf("%s, %s: %d series stored", where, shape, len(rec.series))
			}
		}
	}
	rec := newRecorder()
	oh, _ := newOTLPHandler(t, rec, nil, nil)
	if w := post(t, oh, ContentTypeOTLPProto, "", otlpProto(t, manyAttributes(1000, "point", "one"))); w.Code != http.StatusOK {
		t.Fatalf("%d %.300s", w.Code, w.Body)
	}
	want := labels.FromStrings("__name__", "g", "a"+strings.Repeat("_", 20), strings.Repeat("vv;", 999)+"vv")
	if rec.get(want) == nil {
		t.Errorf("no series %.200s", want)
	}
}

// BenchmarkOTLPManyAttributes measures a request of one gauge point with
// 64,000 attributes (about 1 MB) in the point, the resource (all promoted)
// or the scope (promoted), whose names collide or fall out of order once
// sanitised; each is refused for its label count. Before the label
// builder's lookups were indexed, each took time in the square of the
// attributes. Run with
//
//	go test -run '^$' -bench BenchmarkOTLPManyAttributes -benchmem -count 6 ./remotewrite
func BenchmarkOTLPManyAttributes(b *testing.B) {
	opts := func(o *OTLPOptions) { o.PromoteAllResourceAttributes, o.PromoteScopeMetadata = true, true }
	for _, c := range []struct{ where, shape string }{
		{"point", "unordered"}, {"point", "pairs"}, {"point", "one"}, {"resource", "unordered"}, {"scope", "unordered"},
	} {
		b.Run(c.where+"/"+c.shape, func(b *testing.B) {
			n := 32000
			if c.shape == "one" {
				n = 64000
			}
			oh, _ := newOTLPHandler(b, nopAppendable{}, nil, opts)
			postEach(b, oh, ContentTypeOTLPProto, otlpProto(b, manyAttributes(n, c.where, c.shape)), http.StatusBadRequest)
		})
	}
}
