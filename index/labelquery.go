package index

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/prometheus/prometheus/model/labels"
)

// LabelNamesFor returns the sorted names of the labels carried by at least
// one series in postings.
//
// It checks each name's label postings when r keeps them
// (LabelPostingsReader); otherwise it reads the labels of the series when
// they are fewer than the label values, and the values' postings if not.
func LabelNamesFor(ctx context.Context, r Reader, postings *roaring.Bitmap) ([]string, error) {
	if postings.IsEmpty() {
		return nil, nil
	}
	names, err := r.LabelNames(ctx)
	if err != nil {
		return nil, fmt.Errorf("read label names: %w", err)
	}
	var out []string
	if ni, ok := r.(NamesIntersecter); ok {
		return ni.NamesIntersecting(ctx, names, postings)
	}
	if lr, ok := r.(LabelPostingsReader); ok {
		for _, name := range names {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			lp, err := lr.LabelPostings(ctx, name)
			if err != nil {
				return nil, fmt.Errorf("read postings of label %q: %w", name, err)
			}
			if Intersects(orEmpty(lp), postings) {
				out = append(out, name)
			}
		}
		return out, nil
	}

	values := make([][]string, len(names))
	total := 0
	for i, name := range names {
		if values[i], err = r.LabelValues(ctx, name); err != nil {
			return nil, fmt.Errorf("read values of label %q: %w", name, err)
		}
		total += len(values[i])
	}
	if sr, ok := r.(SeriesReader); ok && postings.GetCardinality() <= uint64(total) {
		seen := make(map[string]struct{}, len(names))
		err := eachSeries(ctx, sr, postings, func(lset labels.Labels) bool {
			lset.Range(func(l labels.Label) { seen[l.Name] = struct{}{} })
			return len(seen) < len(names)
		})
		if err != nil {
			return nil, err
		}
		return slices.Sorted(maps.Keys(seen)), nil
	}
	for i, name := range names {
		found, err := anyIntersects(ctx, r, name, values[i], postings)
		if err != nil {
			return nil, err
		}
		if found {
			out = append(out, name)
		}
	}
	return out, nil
}

func anyIntersects(ctx context.Context, r Reader, name string, values []string, postings *roaring.Bitmap) (bool, error) {
	for _, v := range values {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		bm, err := r.Postings(ctx, name, v)
		if err != nil {
			return false, fmt.Errorf("read postings of %s=%q: %w", name, v, err)
		}
		if Intersects(orEmpty(bm), postings) {
			return true, nil
		}
	}
	return false, nil
}

// LabelNamesForMatchers returns the sorted label names of the series that
// match ms, as Prometheus' LabelNames with matchers; without matchers, every
// label name.
func LabelNamesForMatchers(ctx context.Context, r Reader, ms ...*labels.Matcher) ([]string, error) {
	if len(ms) == 0 {
		return r.LabelNames(ctx)
	}
	p, err := Select(ctx, r, ms...)
	if err != nil {
		return nil, fmt.Errorf("select series: %w", err)
	}
	return LabelNamesFor(ctx, r, p)
}

// LabelValuesFor returns the sorted distinct values of label name among the
// series that match ms, as Prometheus' LabelValues with matchers; without
// matchers, every value of name. The result is owned by the caller.
func LabelValuesFor(ctx context.Context, r Reader, name string, ms ...*labels.Matcher) ([]string, error) {
	all, err := r.LabelValues(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("read values of label %q: %w", name, err)
	}
	// Matchers on name itself filter the values without touching postings.
	values := all
	others := false
	for _, m := range ms {
		if m.Name != name {
			others = true
			continue
		}
		kept := make([]string, 0, len(values))
		for _, v := range values {
			if m.Matches(v) {
				kept = append(kept, v)
			}
		}
		values = kept
	}
	if len(values) == 0 {
		return nil, nil
	}
	if !others {
		return slices.Clone(values), nil
	}

	p, err := Select(ctx, r, ms...)
	if err != nil {
		return nil, fmt.Errorf("select series: %w", err)
	}
	if p.IsEmpty() {
		return nil, nil
	}
	var out []string
	if sr, ok := r.(SeriesReader); ok && p.GetCardinality() <= uint64(len(values)) {
		seen := make(map[string]struct{})
		err := eachSeries(ctx, sr, p, func(lset labels.Labels) bool {
			// p satisfies every matcher on name already.
			if v := lset.Get(name); v != "" {
				seen[v] = struct{}{}
			}
			return true
		})
		if err != nil {
			return nil, err
		}
		return slices.Sorted(maps.Keys(seen)), nil
	}
	if vi, ok := r.(ValuesIntersecter); ok {
		return vi.ValuesIntersecting(ctx, name, values, p)
	}
	for i, v := range values {
		if i%checkContextEvery == 0 && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		bm, err := r.Postings(ctx, name, v)
		if err != nil {
			return nil, fmt.Errorf("read postings of %s=%q: %w", name, v, err)
		}
		if Intersects(orEmpty(bm), p) {
			out = append(out, v)
		}
	}
	return out, nil
}

// eachSeries reads the labels of every series of postings, in order, and
// hands them to fn until it returns false. The labels are valid only during
// the call.
func eachSeries(ctx context.Context, sr SeriesReader, postings *roaring.Bitmap, fn func(labels.Labels) bool) error {
	builder := labels.NewScratchBuilder(16)
	it := postings.Iterator()
	for i := 0; it.HasNext(); i++ {
		if i%checkContextEvery == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		ref := it.Next()
		lset, err := sr.Series(ctx, ref, &builder)
		if err != nil {
			return fmt.Errorf("read series %d: %w", ref, err)
		}
		if !fn(lset) {
			return nil
		}
	}
	return nil
}
