package storage

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
)

// TestLabelValuesWithMatchers asks a label's values among the series that
// match, of a partition in the head and of the same written out to the LSM:
// many values (one scan of the label's postings), few (point reads), and
// matchers that select none, some and all of them.
func TestLabelValuesWithMatchers(t *testing.T) {
	ctx := context.Background()
	db, _ := openMemDB(t, DefaultOptions())
	ts := time.Now().Add(-time.Hour).UnixMilli()
	// Several series a value, so that the values' postings are read rather
	// than the selected series' labels.
	for i := range 40 {
		for j := range 4 {
			appendFloats(t, db, labels.FromStrings("__name__", "cpu", "instance", fmt.Sprintf("h%02d", i), "mode", []string{"idle", "user"}[(i+j)%2], "cpu", fmt.Sprint(j)), tsample{ts, 1})
		}
		if i%4 == 0 {
			appendFloats(t, db, labels.FromStrings("__name__", "up", "instance", fmt.Sprintf("h%02d", i)), tsample{ts, 1})
		}
	}
	want := func(step int, filter func(i int) bool) []string {
		var out []string
		for i := 0; i < 40; i += step {
			if filter(i) {
				out = append(out, fmt.Sprintf("h%02d", i))
			}
		}
		return out
	}
	cases := []struct {
		ms   []*labels.Matcher
		want []string
	}{
		{[]*labels.Matcher{labels.MustNewMatcher(labels.MatchEqual, "__name__", "cpu")}, want(1, func(int) bool { return true })},
		{[]*labels.Matcher{labels.MustNewMatcher(labels.MatchEqual, "__name__", "up")}, want(4, func(int) bool { return true })},
		{[]*labels.Matcher{labels.MustNewMatcher(labels.MatchEqual, "mode", "user"), labels.MustNewMatcher(labels.MatchEqual, "cpu", "0")}, want(1, func(i int) bool { return i%2 == 1 })},
		{[]*labels.Matcher{labels.MustNewMatcher(labels.MatchEqual, "mode", "none")}, nil},
		// Few values left by a matcher on the label itself: point reads.
		{[]*labels.Matcher{labels.MustNewMatcher(labels.MatchRegexp, "instance", "h0[0-3]"), labels.MustNewMatcher(labels.MatchEqual, "mode", "idle")}, []string{"h00", "h01", "h02", "h03"}},
	}
	check := func(where string) {
		t.Helper()
		q, err := db.Querier(math.MinInt64, math.MaxInt64)
		if err != nil {
			t.Fatal(err)
		}
		defer q.Close()
		for _, c := range cases {
			got, _, err := q.LabelValues(ctx, "instance", nil, c.ms...)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, c.want) && (len(got) != 0 || len(c.want) != 0) {
				t.Fatalf("%s: values of instance for %v: got %v, want %v", where, c.ms, got, c.want)
			}
		}
	}
	check("head")
	if err := db.flushHead(ctx, closeAll); err != nil {
		t.Fatal(err)
	}
	check("written out")
}
