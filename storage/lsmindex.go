package storage

import (
	"context"
	"fmt"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/prometheus/prometheus/model/labels"

	"github.com/shaledb/shale/index"
)

// lsmIndex reads the index of a closed partition from the LSM.
type lsmIndex struct {
	db   *DB
	part int64
}

func (r *lsmIndex) LabelNames(ctx context.Context) ([]string, error) {
	var names []string
	pre := partSub(r.part, subNames, 0)
	err := r.db.scan(ctx, pre, prefixEnd(pre), func(k, _ []byte) error {
		names = append(names, string(k[len(pre):]))
		return nil
	})
	return names, err
}

func (r *lsmIndex) LabelValues(ctx context.Context, name string) ([]string, error) {
	var values []string
	pre := postingsNamePrefix(r.part, name)
	err := r.db.scan(ctx, pre, prefixEnd(pre), func(k, _ []byte) error {
		values = append(values, string(k[len(pre):]))
		return nil
	})
	return values, err
}

func (r *lsmIndex) Postings(ctx context.Context, name, value string) (*roaring.Bitmap, error) {
	return r.bitmap(ctx, postingsKey(r.part, name, value))
}

func (r *lsmIndex) AllPostings(ctx context.Context) (*roaring.Bitmap, error) {
	return r.bitmap(ctx, allSeriesKey(r.part))
}

// PostingsForValues reads the postings of many values of one label in one
// ordered scan when they are many, point reads when they are few.
func (r *lsmIndex) PostingsForValues(ctx context.Context, name string, values []string) (*roaring.Bitmap, error) {
	out := roaring.New()
	err := r.eachPostings(ctx, name, values, func(_ string, bm *roaring.Bitmap) { out.Or(bm) })
	return out, err
}

// ValuesIntersecting implements index.ValuesIntersecter with the reads of
// PostingsForValues: one scan of the label's postings for a Grafana
// variable's hundreds of values, not a read each.
func (r *lsmIndex) ValuesIntersecting(ctx context.Context, name string, values []string, p *roaring.Bitmap) ([]string, error) {
	var out []string
	err := r.eachPostings(ctx, name, values, func(v string, bm *roaring.Bitmap) {
		if index.Intersects(bm, p) {
			out = append(out, v)
		}
	})
	return out, err
}

// eachPostings calls fn with the postings of each of values (sorted) of the
// label name that the partition has, in order: point reads for a few
// values, one ordered scan of the label's postings for many.
func (r *lsmIndex) eachPostings(ctx context.Context, name string, values []string, fn func(value string, bm *roaring.Bitmap)) error {
	if len(values) <= 8 {
		for _, v := range values {
			bm, err := r.Postings(ctx, name, v)
			if err != nil {
				return err
			}
			fn(v, bm)
		}
		return nil
	}
	want := make(map[string]struct{}, len(values))
	for _, v := range values {
		want[v] = struct{}{}
	}
	pre := postingsNamePrefix(r.part, name)
	return r.db.scan(ctx, pre, prefixEnd(pre), func(k, v []byte) error {
		value := k[len(pre):]
		if _, ok := want[string(value)]; !ok {
			return nil
		}
		bm, err := index.DecodePostings(v)
		if err != nil {
			return fmt.Errorf("postings %q of partition %d: %w", value, r.part, err)
		}
		fn(string(value), bm)
		return nil
	})
}

func (r *lsmIndex) bitmap(ctx context.Context, key []byte) (*roaring.Bitmap, error) {
	v, ok, err := r.db.lsm.Get(ctx, key)
	if err != nil || !ok {
		return roaring.New(), err
	}
	bm, err := index.DecodePostings(v)
	if err != nil {
		return nil, fmt.Errorf("postings key %q of partition %d: %w", key, r.part, err)
	}
	return bm, nil
}

func (r *lsmIndex) Series(ctx context.Context, ref uint32, builder *labels.ScratchBuilder) (labels.Labels, error) {
	v, ok, err := r.db.lsm.Get(ctx, forwardKey(r.part, ref))
	if err != nil {
		return labels.EmptyLabels(), err
	}
	if !ok {
		return labels.EmptyLabels(), fmt.Errorf("series %d of partition %d: %w", ref, r.part, index.ErrSeriesNotFound)
	}
	return index.DecodeLabels(v, builder)
}

var (
	_ index.SeriesReader        = (*lsmIndex)(nil)
	_ index.MultiPostingsReader = (*lsmIndex)(nil)
	_ index.ValuesIntersecter   = (*lsmIndex)(nil)
)
