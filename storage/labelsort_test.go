package storage

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/prometheus/prometheus/model/labels"
)

// TestSortByLabels sorts series in random order, below and above the size
// from which sortByLabels sorts a slice of labels, and wants label order.
func TestSortByLabels(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{0, 1, keyedSortMin - 1, keyedSortMin, 3 * keyedSortMin} {
		all := make([]*qSeries, n)
		for i := range all {
			b := labels.NewScratchBuilder(3)
			b.Add("__name__", fmt.Sprintf("m%d", rng.IntN(7)))
			b.Add("a", fmt.Sprintf("%d", rng.IntN(50)))
			if rng.IntN(2) == 0 {
				b.Add("b", fmt.Sprintf("%d", i)) // unique, and some sets are prefixes of others
			}
			b.Sort()
			all[i] = &qSeries{lset: b.Labels()}
		}
		want := slices.Clone(all)
		slices.SortStableFunc(want, func(a, b *qSeries) int { return labels.Compare(a.lset, b.lset) })
		sortByLabels(all)
		for i := range all {
			if labels.Compare(all[i].lset, want[i].lset) != 0 {
				t.Fatalf("n=%d: position %d is %s, want %s", n, i, all[i].lset, want[i].lset)
			}
		}
	}
}
