package extralabel

import (
	"net/url"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
)

// FuzzParse reads a request's query string as the write endpoints do: what
// Parse accepts is sorted, one label a name, every name valid and every
// value UTF-8, and Apply sets each of them on a series, keeping its other
// labels.
func FuzzParse(f *testing.F) {
	f.Fuzz(func(t *testing.T, query []byte) {
		q, err := url.ParseQuery(string(query))
		if err != nil {
			return
		}
		set, err := Parse(q[Arg])
		if err != nil {
			return
		}
		for i, l := range set {
			if !model.UTF8Validation.IsValidLabelName(l.Name) || !utf8.ValidString(l.Value) {
				t.Fatalf("accepted %q=%q", l.Name, l.Value)
			}
			if i > 0 && set[i-1].Name >= l.Name {
				t.Fatalf("not sorted and unique: %v", set)
			}
		}
		series := []labels.Label{{Name: "__name__", Value: "m"}, {Name: "job", Value: "x"}}
		got := Apply(nil, series, set)
		for _, l := range set {
			if !slices.Contains(got, l) {
				t.Fatalf("Apply(%v) = %v, without %v", set, got, l)
			}
		}
		for _, l := range series {
			if _, in := slices.BinarySearchFunc(set, l.Name, func(e labels.Label, n string) int { return strings.Compare(e.Name, n) }); !in && !slices.Contains(got, l) {
				t.Fatalf("Apply(%v) = %v, lost %v", set, got, l)
			}
		}
	})
}
