package storage

import (
	"context"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"

	"github.com/shaledb/shale/storage/lsm"
)

// A cold Select reads a persisted partition's postings first and then the
// labels and sample blocks of the series they select: two round trips. A
// partition whose whole stored extent is small is cheaper to read in one:
// all of it, postings, labels and samples together, in the first round. The
// bound keeps what a query reads beyond what it needs to about what a ranged
// read transfers in the time of a round trip. Only queries that select by
// metric name alone do so: they take whole metrics, a large share of a small
// partition, where a further label matcher (an instance, a job) usually
// selects a few series, for which the partition's postings and then those
// few series' blocks cost a round trip more but a fraction of the bytes.
var (
	// wholePartitionBytes is the largest partition read whole (a variable
	// for tests).
	wholePartitionBytes int64 = 1 << 20
	// wholeQueryBytes bounds the partitions one Select reads whole, in
	// time order.
	wholeQueryBytes int64 = 8 << 20
)

// partRange is the key range of every key of partition part.
func partRange(part int64) lsm.KeyRange {
	lo := partPrefix(part)
	return lsm.KeyRange{Lower: lo, Upper: prefixEnd(lo)}
}

// wholePartitions reports, by the index of the partition in parts, which
// persisted partitions a cold Select should read whole in its first round
// (wholePartitionBytes, wholeQueryBytes), for a Select of ms; nil when none,
// and when a matcher of ms is on another label than the metric name. Sizing reads the
// tables' indexes only; a warm Select then finds the partition's blocks
// cached and reads nothing.
func (db *DB) wholePartitions(ctx context.Context, parts []partView, ms []*labels.Matcher) []bool {
	for _, m := range ms {
		if m.Name != model.MetricNameLabel {
			return nil
		}
	}
	var out []bool
	var total int64
	for i, pv := range parts {
		if pv.head != nil {
			continue
		}
		r := partRange(pv.start)
		n, err := db.lsm.RangeBytes(ctx, r.Lower, r.Upper)
		if err != nil || n == 0 || n > wholePartitionBytes || total+n > wholeQueryBytes {
			continue
		}
		total += n
		if out == nil {
			out = make([]bool, len(parts))
		}
		out[i] = true
	}
	return out
}

// labelPostingsBytes is the most stored bytes of one label's postings in a
// partition that a cold Select reads in its first round for a matcher other
// than an equality (a regular expression, a negation), which reads the
// postings of many of the label's values: without it they take a round of
// their own after the first.
var labelPostingsBytes int64 = 64 << 10

// smallLabelPostings returns the key range of every postings entry of label
// name in partition part, and whether its tables' blocks there come to at
// most labelPostingsBytes (sized from the tables' indexes, no data read).
func (db *DB) smallLabelPostings(ctx context.Context, part int64, name string) (lsm.KeyRange, bool) {
	lo := postingsNamePrefix(part, name)
	r := lsm.KeyRange{Lower: lo, Upper: prefixEnd(lo)}
	n, err := db.lsm.RangeBytes(ctx, r.Lower, r.Upper)
	return r, err == nil && n > 0 && n <= labelPostingsBytes
}
