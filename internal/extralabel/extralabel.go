// Package extralabel reads VictoriaMetrics' extra_label query arguments,
// which set a label on every series a write carries (vmagent, vmctl and the
// users of VictoriaMetrics' ingestion endpoints send them), and sets them.
package extralabel

import (
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
)

// Arg is the name of the query argument.
const Arg = "extra_label"

// Parse reads the values of extra_label arguments, each name=value, into
// labels sorted by name. A name given twice keeps its last value, as
// VictoriaMetrics applies them in order. An empty value removes the label,
// as an empty label value is no label in Prometheus' data model.
func Parse(args []string) ([]labels.Label, error) {
	var out []labels.Label
	for _, a := range args {
		name, value, ok := strings.Cut(a, "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("%s %q: want name=value", Arg, a)
		}
		if !model.UTF8Validation.IsValidLabelName(name) {
			return nil, fmt.Errorf("%s %q: invalid label name %q", Arg, a, name)
		}
		if !utf8.ValidString(value) {
			return nil, fmt.Errorf("%s %q: value is not valid UTF-8", Arg, a)
		}
		if i := slices.IndexFunc(out, func(l labels.Label) bool { return l.Name == name }); i >= 0 {
			out = slices.Delete(out, i, i+1)
		}
		out = append(out, labels.Label{Name: name, Value: value})
	}
	slices.SortFunc(out, func(a, b labels.Label) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Apply appends to dst the labels lbls with set applied: a label of set
// replaces the one of the same name in lbls, or is added. The result is in
// lbls' order with the added labels at the end, so unsorted when any is
// added; set must be sorted by name (Parse's result).
func Apply(dst, lbls, set []labels.Label) []labels.Label {
	for _, l := range lbls {
		if _, found := slices.BinarySearchFunc(set, l.Name, func(e labels.Label, name string) int { return strings.Compare(e.Name, name) }); !found {
			dst = append(dst, l)
		}
	}
	return append(dst, set...)
}
