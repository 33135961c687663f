package index

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/prometheus/prometheus/model/labels"
)

// Select returns the refs of the series that match every matcher, with
// Prometheus semantics: a series without label l has the value "" for l, so
// a matcher that matches the empty string also selects series that lack the
// label (`l=""`, `l!="x"`, `l=~"|a"`, `l!~"a"`), and one that does not
// (`l!=""`, `l=~".+"`, `l!~""`) requires it. No matchers select nothing.
//
// Each matcher on label l becomes an intersection with, or a subtraction of,
// S (the series whose l value satisfies the matcher without its negation) or
// L (the series that carry l), or L \ S. Intersections that need no scan of
// label values go first, smallest first; then those that do; then the
// subtractions. When the candidates left are fewer than the postings lists a
// matcher would read and r is a SeriesReader, the candidates' labels are
// checked instead. Optional interfaces make it cheaper: MultiPostingsReader
// (batched reads), LabelPostingsReader (L in one read) and PostingsCombiner
// (in-place intersection, no copies).
//
// The result is owned by the caller.
func Select(ctx context.Context, r Reader, ms ...*labels.Matcher) (*roaring.Bitmap, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if len(ms) == 0 {
		return roaring.New(), nil
	}
	s := selector{r: r}
	s.sr, _ = r.(SeriesReader)
	s.comb, _ = r.(PostingsCombiner)
	_, s.hasLabelPostings = r.(LabelPostingsReader)
	return s.run(ctx, ms)
}

// termKind says which set of series a term reads. For a matcher on label l,
// with p its positive predicate (the regexp or the equality, without the
// negation), S = series whose l value v is non-empty and p(v), and
// L = series that carry l at all.
type termKind uint8

const (
	termS       termKind = iota // S
	termL                       // L
	termLMinusS                 // L \ S
)

type term struct {
	m    *labels.Matcher
	kind termKind
	// negated is set for != and !~: p is then the matcher without its
	// negation, so that m.Matches(v) == p(v) != negated.
	negated bool
	// values are the non-empty label values v with p(v), once known; all
	// means every value of the label (S = L).
	values      []string
	valuesKnown bool
	all         bool
}

func (t *term) p(v string) bool { return t.m.Matches(v) != t.negated }

type selector struct {
	r                Reader
	sr               SeriesReader
	comb             PostingsCombiner
	hasLabelPostings bool
	cand             *roaring.Bitmap // owned; nil until the first intersecting term
	filters          []*labels.Matcher
}

// classify turns m into the terms that together give its series set as
// intersections (inter) and subtractions (sub). ok=false means m matches
// nothing at all.
func classify(m *labels.Matcher) (inter, sub []term, ok bool) {
	t := term{m: m, negated: m.Type == labels.MatchNotEqual || m.Type == labels.MatchNotRegexp}
	switch m.Type {
	case labels.MatchEqual, labels.MatchNotEqual:
		t.valuesKnown = true
		if m.Value != "" {
			t.values = []string{m.Value}
		}
	case labels.MatchRegexp, labels.MatchNotRegexp:
		switch m.Value {
		case ".*":
			if m.Type == labels.MatchRegexp {
				return nil, nil, true
			}
			return nil, nil, false
		case ".+":
			t.valuesKnown, t.all = true, true
		default:
			if set := m.SetMatches(); len(set) > 0 {
				t.valuesKnown = true
				t.values = make([]string, 0, len(set))
				for _, v := range set {
					if v != "" {
						t.values = append(t.values, v)
					}
				}
			}
		}
	default:
		// labels.NewMatcher admits no other type; a hand-built one matches
		// nothing rather than panicking in Matches.
		return nil, nil, false
	}
	pEmpty := t.p("")
	switch {
	case !t.negated && !pEmpty: // l="a", l=~"a.*"
		t.kind = termS
		return []term{t}, nil, true
	case !t.negated && pEmpty: // l="", l=~"|a"
		t.kind = termLMinusS
		return nil, []term{t}, true
	case t.negated && !pEmpty: // l!="a", l!~"a.*"
		t.kind = termS
		return nil, []term{t}, true
	default: // l!="", l!~"|a": L \ S
		lt := term{m: m, kind: termL, valuesKnown: true, all: true}
		if t.valuesKnown && !t.all && len(t.values) == 0 {
			return []term{lt}, nil, true // S is empty
		}
		if t.all {
			return nil, nil, false // L \ L
		}
		t.kind = termS
		return []term{lt}, []term{t}, true
	}
}

func (s *selector) run(ctx context.Context, ms []*labels.Matcher) (*roaring.Bitmap, error) {
	var inter, sub []term
	for _, m := range ms {
		in, su, ok := classify(m)
		if !ok {
			return roaring.New(), nil
		}
		inter = append(inter, in...)
		sub = append(sub, su...)
	}

	// Cheap intersections first (known values, or a label postings list the
	// reader keeps), smallest first.
	var cheap, costly []*term
	for i := range inter {
		if inter[i].cheap(s.hasLabelPostings) {
			cheap = append(cheap, &inter[i])
		} else {
			costly = append(costly, &inter[i])
		}
	}
	if s.comb != nil {
		if err := s.intersectCheapInPlace(ctx, cheap); err != nil {
			return nil, err
		}
	} else if err := s.intersectCheap(ctx, cheap); err != nil {
		return nil, err
	}
	if s.cand != nil && s.cand.IsEmpty() {
		return s.cand, nil
	}

	for i := range costly {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := s.intersect(ctx, costly[i]); err != nil {
			return nil, err
		}
		if s.cand != nil && s.cand.IsEmpty() {
			return s.cand, nil
		}
	}

	if s.cand == nil {
		all, err := s.r.AllPostings(ctx)
		if err != nil {
			return nil, fmt.Errorf("read all postings: %w", err)
		}
		s.cand = orEmpty(all).Clone()
	}

	// Subtractions: known ones before those that need a scan of values, so
	// the candidates shrink before the filter-or-read decision.
	slices.SortStableFunc(sub, func(a, b term) int {
		return cmpBool(!a.valuesKnown, !b.valuesKnown)
	})
	for i := range sub {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if s.cand.IsEmpty() {
			return s.cand, nil
		}
		if err := s.subtract(ctx, &sub[i]); err != nil {
			return nil, err
		}
	}

	if len(s.filters) > 0 && !s.cand.IsEmpty() {
		if err := s.filter(ctx); err != nil {
			return nil, err
		}
	}
	return s.cand, nil
}

// intersectCheap reads every cheap term and intersects them, smallest
// first.
func (s *selector) intersectCheap(ctx context.Context, terms []*term) error {
	if len(terms) == 0 {
		return nil
	}
	bms := make([]*roaring.Bitmap, len(terms))
	owned := make([]bool, len(terms))
	card := make([]uint64, len(terms))
	for i, t := range terms {
		bm, own, err := s.read(ctx, t)
		if err != nil {
			return err
		}
		if bm.IsEmpty() {
			s.cand = roaring.New()
			return nil
		}
		bms[i], owned[i], card[i] = bm, own, bm.GetCardinality()
	}
	idx := byCardinality(card)
	first := idx[0]
	switch {
	case len(idx) == 1 && owned[first]:
		s.cand = bms[first]
	case len(idx) == 1:
		s.cand = bms[first].Clone()
	default:
		s.cand = roaring.And(bms[first], bms[idx[1]])
		for _, i := range idx[2:] {
			if s.cand.IsEmpty() {
				break
			}
			s.cand.And(bms[i])
		}
	}
	return nil
}

// intersectCheapInPlace asks the reader for the sizes of the cheap terms,
// copies the smallest and intersects the others into it in place.
func (s *selector) intersectCheapInPlace(ctx context.Context, terms []*term) error {
	if len(terms) == 0 {
		return nil
	}
	card := make([]uint64, len(terms))
	for i, t := range terms {
		c, err := s.comb.PostingsCardinality(ctx, t.m.Name, t.set())
		if err != nil {
			return fmt.Errorf("read postings of %s: %w", t.m, err)
		}
		if c == 0 {
			s.cand = roaring.New()
			return nil
		}
		card[i] = c
	}
	idx := byCardinality(card)
	bm, owned, err := s.read(ctx, terms[idx[0]])
	if err != nil {
		return err
	}
	if !owned {
		bm = bm.Clone()
	}
	s.cand = bm
	for _, i := range idx[1:] {
		if s.cand.IsEmpty() {
			return nil
		}
		if err := s.and(ctx, terms[i], terms[i].set()); err != nil {
			return err
		}
	}
	return nil
}

func byCardinality(card []uint64) []int {
	idx := make([]int, len(card))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(card[a], card[b]) })
	return idx
}

// set is the values argument of PostingsCombiner for t's series: nil for
// L, the values for S.
func (t *term) set() []string {
	if t.kind == termL || t.all {
		return nil
	}
	if t.values == nil {
		return []string{} // no value: not to be read as L
	}
	return t.values
}

// and intersects the candidates with the union of name=v over values, or
// with L if values is nil.
func (s *selector) and(ctx context.Context, t *term, values []string) error {
	if values != nil && len(values) == 0 {
		s.cand.Clear()
		return nil
	}
	if s.comb != nil {
		if err := s.comb.AndPostings(ctx, s.cand, t.m.Name, values); err != nil {
			return fmt.Errorf("intersect postings of %s: %w", t.m, err)
		}
		return nil
	}
	bm, _, err := s.readSet(ctx, t, values)
	if err != nil {
		return err
	}
	s.cand.And(bm)
	return nil
}

// andNot removes from the candidates the union of name=v over values, or L
// if values is nil.
func (s *selector) andNot(ctx context.Context, t *term, values []string) error {
	if values != nil && len(values) == 0 {
		return nil
	}
	if s.comb != nil {
		if err := s.comb.AndNotPostings(ctx, s.cand, t.m.Name, values); err != nil {
			return fmt.Errorf("subtract postings of %s: %w", t.m, err)
		}
		return nil
	}
	bm, _, err := s.readSet(ctx, t, values)
	if err != nil {
		return err
	}
	s.cand.AndNot(bm)
	return nil
}

// cheap reports whether reading t's series needs no scan of label values.
func (t *term) cheap(hasLabelPostings bool) bool {
	if !t.valuesKnown {
		return false
	}
	if t.kind == termL || t.all {
		return hasLabelPostings
	}
	return true
}

// resolve fills t.values by scanning the label's values.
func (s *selector) resolve(ctx context.Context, t *term) error {
	if t.valuesKnown {
		return nil
	}
	all, err := s.r.LabelValues(ctx, t.m.Name)
	if err != nil {
		return fmt.Errorf("read values of label %q: %w", t.m.Name, err)
	}
	t.values = matchingValues(ctx, all, t)
	t.valuesKnown = true
	return ctx.Err()
}

// matchingValues returns the values v of the sorted all for which t.p(v),
// looking only at those with the regexp's literal prefix.
func matchingValues(ctx context.Context, all []string, t *term) []string {
	lo, hi := 0, len(all)
	if prefix := t.m.Prefix(); prefix != "" {
		lo = sort.SearchStrings(all, prefix)
		hi = lo + sort.Search(len(all)-lo, func(i int) bool { return !strings.HasPrefix(all[lo+i], prefix) })
	}
	var out []string
	for i, v := range all[lo:hi] {
		if i%checkContextEvery == 0 && ctx.Err() != nil {
			return nil
		}
		if v != "" && t.p(v) {
			out = append(out, v)
		}
	}
	return out
}

// read returns the series of t (S or L; not L \ S), resolving its values
// first if needed. owned says whether the caller may modify the bitmap.
func (s *selector) read(ctx context.Context, t *term) (*roaring.Bitmap, bool, error) {
	if t.kind != termL && !t.all {
		if err := s.resolve(ctx, t); err != nil {
			return nil, false, err
		}
	}
	return s.readSet(ctx, t, t.set())
}

// readSet returns the union of name=v over values, or L if values is nil.
func (s *selector) readSet(ctx context.Context, t *term, values []string) (bm *roaring.Bitmap, owned bool, err error) {
	if values == nil {
		bm, err = labelPostings(ctx, s.r, t.m.Name, nil)
		if err != nil {
			return nil, false, fmt.Errorf("read postings of label %q: %w", t.m.Name, err)
		}
		return bm, !s.hasLabelPostings, nil
	}
	if len(values) == 0 {
		return roaring.New(), true, nil
	}
	bm, err = postingsForValues(ctx, s.r, t.m.Name, values)
	if err != nil {
		return nil, false, fmt.Errorf("read postings of %s: %w", t.m, err)
	}
	return bm, true, nil
}

// filterCheaper reports whether checking the labels of the candidates costs
// less than reading n postings lists.
func (s *selector) filterCheaper(n int) bool {
	if s.sr == nil || s.cand == nil {
		return false
	}
	card := s.cand.GetCardinality()
	if s.comb != nil {
		// In-memory postings combine for less than decoding a series costs.
		card *= 4
	}
	return card <= uint64(n)
}

func (s *selector) intersect(ctx context.Context, t *term) error {
	n := 1
	if t.kind == termS && !t.all {
		if err := s.resolve(ctx, t); err != nil {
			return err
		}
		n = len(t.values)
		if n == 0 {
			s.cand = roaring.New()
			return nil
		}
	} else if !s.hasLabelPostings {
		vals, err := s.r.LabelValues(ctx, t.m.Name)
		if err != nil {
			return fmt.Errorf("read values of label %q: %w", t.m.Name, err)
		}
		n = len(vals)
	}
	if s.filterCheaper(n) {
		s.filters = append(s.filters, t.m)
		return nil
	}
	if s.cand != nil {
		return s.and(ctx, t, t.set())
	}
	bm, owned, err := s.read(ctx, t)
	if err != nil {
		return err
	}
	if !owned {
		bm = bm.Clone()
	}
	s.cand = bm
	return nil
}

func (s *selector) subtract(ctx context.Context, t *term) error {
	if t.kind == termLMinusS && t.valuesKnown && !t.all && len(t.values) == 0 {
		t.kind = termL // S is empty: subtract L.
	}
	if t.all {
		// S = L: l="" and l=~"" subtract L; "l!~.+" subtracts S = L.
		t.kind = termL
	}
	n := 1
	if t.kind != termL {
		if err := s.resolve(ctx, t); err != nil {
			return err
		}
		n = len(t.values)
		if t.kind == termS && n == 0 {
			return nil
		}
	}
	if t.kind != termS && !s.hasLabelPostings {
		vals, err := s.r.LabelValues(ctx, t.m.Name)
		if err != nil {
			return fmt.Errorf("read values of label %q: %w", t.m.Name, err)
		}
		n += len(vals)
	}
	if s.filterCheaper(n) {
		s.filters = append(s.filters, t.m)
		return nil
	}
	switch t.kind {
	case termS:
		return s.andNot(ctx, t, t.set())
	case termL:
		return s.andNot(ctx, t, nil)
	default:
		// cand \ (L \ S) = (cand \ L) ∪ (cand ∩ S)
		orig := s.cand
		s.cand = orig.Clone()
		if err := s.and(ctx, t, t.set()); err != nil {
			return err
		}
		inS := s.cand
		s.cand = orig
		if err := s.andNot(ctx, t, nil); err != nil {
			return err
		}
		s.cand.Or(inS)
		return nil
	}
}

// filter drops the candidates whose labels fail a deferred matcher.
func (s *selector) filter(ctx context.Context) error {
	builder := labels.NewScratchBuilder(16)
	drop := roaring.New()
	it := s.cand.Iterator()
	for i := 0; it.HasNext(); i++ {
		ref := it.Next()
		if i%checkContextEvery == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		lset, err := s.sr.Series(ctx, ref, &builder)
		if err != nil {
			return fmt.Errorf("read series %d: %w", ref, err)
		}
		if !matchesAll(lset, s.filters) {
			drop.Add(ref)
		}
	}
	s.cand.AndNot(drop)
	return nil
}

// matchesAll reports whether lset matches every matcher of ms.
func matchesAll(lset labels.Labels, ms []*labels.Matcher) bool {
	for _, m := range ms {
		if !m.Matches(lset.Get(m.Name)) {
			return false
		}
	}
	return true
}

func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	}
	return 1
}
