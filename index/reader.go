// Package index is Shale's inverted series index for one time partition:
// series references, the forward index (ref -> labels), postings
// (label name=value -> roaring bitmap of refs), matcher evaluation with
// Prometheus semantics, the byte encodings the storage engine persists, and
// cardinality statistics.
//
// Series references are uint32, dense from 0 within a partition. The package
// knows nothing of keys, objects or time: the storage engine owns the key
// layout and reaches a persisted partition through a Reader it implements.
// MemIndex is the in-memory index of an open (head) partition.
package index

import (
	"context"
	"errors"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/prometheus/prometheus/model/labels"

	"github.com/shaledb/shale/corrupt"
)

// ErrCorrupt marks bytes that do not decode: a truncated or garbled label
// set or postings list. Callers test for it with errors.Is; it wraps
// corrupt.Err.
var ErrCorrupt = corrupt.New("index: corrupt data")

// ErrSeriesNotFound means a series reference is not in the index.
var ErrSeriesNotFound = errors.New("index: series not found")

// Reader is what matcher evaluation needs from one partition's index. It is
// implemented by MemIndex and by the storage engine's reader of persisted
// partitions.
//
// All methods are safe for concurrent use. Returned slices and bitmaps are
// owned by the Reader: callers must not modify them (clone first). A Reader
// may return a shared object, so modifying one can corrupt the index.
type Reader interface {
	// LabelNames returns every label name in the partition, sorted, without
	// duplicates. Names whose every value is empty do not exist.
	LabelNames(ctx context.Context) ([]string, error)

	// LabelValues returns the distinct non-empty values of the label name,
	// sorted. An unknown name gives an empty slice and no error.
	LabelValues(ctx context.Context, name string) ([]string, error)

	// Postings returns the refs of the series that carry name=value. An
	// unknown pair gives an empty bitmap, never nil, and no error.
	Postings(ctx context.Context, name, value string) (*roaring.Bitmap, error)

	// AllPostings returns the refs of every series in the partition.
	AllPostings(ctx context.Context) (*roaring.Bitmap, error)
}

// ValuesIntersecter is a Reader that finds, of values of the label name,
// those whose postings intersect p (in the order of values) without copying
// the postings. LabelValuesFor uses it when a reader offers it.
type ValuesIntersecter interface {
	ValuesIntersecting(ctx context.Context, name string, values []string, p *roaring.Bitmap) ([]string, error)
}

// NamesIntersecter is a Reader that finds, of the label names given, those
// that series in p carry (in the order of names) without copying postings.
// LabelNamesFor uses it when a reader offers it.
type NamesIntersecter interface {
	NamesIntersecting(ctx context.Context, names []string, p *roaring.Bitmap) ([]string, error)
}

// Intersects reports whether a and b share a ref. Roaring's own Intersects
// builds the intersection of run containers (an 8 KiB bitmap for each pair
// of containers), and postings of series created together are runs;
// AndCardinality counts it in place. A bitmap has one container per 65,536
// refs, so counting all of them costs little more than stopping early.
func Intersects(a, b *roaring.Bitmap) bool { return a.AndCardinality(b) > 0 }

// SeriesReader is a Reader with a forward index. Select uses it to filter a
// small candidate set instead of reading many postings lists, and
// LabelNamesFor and LabelValuesFor use it to read the labels of selected
// series. Every Reader in Shale implements it; it is apart so that tests and
// reduced readers can do without.
type SeriesReader interface {
	Reader
	// Series returns the labels of the series ref, built with builder (which
	// the caller may reuse between calls; the returned Labels stay valid
	// after it is reused). An unknown ref gives an error wrapping
	// ErrSeriesNotFound.
	Series(ctx context.Context, ref uint32, builder *labels.ScratchBuilder) (labels.Labels, error)
}

// MultiPostingsReader is implemented by readers that can fetch the postings
// of many values of one label name at once cheaper than one at a time (one
// batched read from the LSM, one lock acquisition in MemIndex).
type MultiPostingsReader interface {
	// PostingsForValues returns the union of the postings of name=v for
	// every v in values (in any order, unknown values skipped). The result is
	// owned by the caller, who may modify it.
	PostingsForValues(ctx context.Context, name string, values []string) (*roaring.Bitmap, error)
}

// LabelPostingsReader is implemented by readers that keep, per label name,
// the postings of every series carrying the label with any non-empty value.
// It turns `name!=""`, `name=~".+"` and `name=""` into one read.
type LabelPostingsReader interface {
	// LabelPostings returns the refs of the series that carry label name
	// with a non-empty value; an empty bitmap if none. Owned by the Reader.
	LabelPostings(ctx context.Context, name string) (*roaring.Bitmap, error)
}

// postingsForValues returns the union of the postings of name=v over values,
// owned by the caller.
func postingsForValues(ctx context.Context, r Reader, name string, values []string) (*roaring.Bitmap, error) {
	if mr, ok := r.(MultiPostingsReader); ok {
		bm, err := mr.PostingsForValues(ctx, name, values)
		return orEmpty(bm), err
	}
	if len(values) == 1 {
		bm, err := r.Postings(ctx, name, values[0])
		if err != nil {
			return nil, err
		}
		return orEmpty(bm).Clone(), nil
	}
	bms := make([]*roaring.Bitmap, 0, len(values))
	for i, v := range values {
		if i%checkContextEvery == 0 && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		bm, err := r.Postings(ctx, name, v)
		if err != nil {
			return nil, err
		}
		if bm != nil && !bm.IsEmpty() {
			bms = append(bms, bm)
		}
	}
	return roaring.FastOr(bms...), nil
}

// labelPostings returns the refs of the series that carry label name, owned
// by the Reader (do not modify). values, if not nil, are the label's values
// already read by the caller.
func labelPostings(ctx context.Context, r Reader, name string, values []string) (*roaring.Bitmap, error) {
	if lr, ok := r.(LabelPostingsReader); ok {
		bm, err := lr.LabelPostings(ctx, name)
		return orEmpty(bm), err
	}
	if values == nil {
		var err error
		if values, err = r.LabelValues(ctx, name); err != nil {
			return nil, err
		}
	}
	return postingsForValues(ctx, r, name, values)
}

// orEmpty turns a nil bitmap from a Reader that breaks the contract into
// an empty one.
func orEmpty(bm *roaring.Bitmap) *roaring.Bitmap {
	if bm == nil {
		return roaring.New()
	}
	return bm
}

const checkContextEvery = 128

// PostingsCombiner is implemented by readers whose postings are in memory
// (MemIndex). It combines a caller's bitmap with postings lists in place, so
// that Select never copies a large list only to intersect it with a small
// one.
//
// In all three methods, values == nil stands for every series that carries
// label name (whatever the value), and otherwise for the union of the
// postings of name=v over values.
type PostingsCombiner interface {
	// PostingsCardinality returns an upper bound of the number of series
	// in the set (exact for one value or nil), cheaply.
	PostingsCardinality(ctx context.Context, name string, values []string) (uint64, error)
	// AndPostings sets bm to bm ∩ set.
	AndPostings(ctx context.Context, bm *roaring.Bitmap, name string, values []string) error
	// AndNotPostings sets bm to bm \ set.
	AndNotPostings(ctx context.Context, bm *roaring.Bitmap, name string, values []string) error
}
