package sst

// Block intervals, after Pebble's block property collectors (which
// CockroachDB uses to skip blocks outside a time range): a Writer given an
// IntervalFunc records, for each data block made only of merge operands it
// maps, the union of their intervals in the block's index entry. An
// iterator given an interval (Iter.SetInterval) then skips the blocks whose
// operands all lie outside it without reading them, as a value filter
// would drop each operand after reading it. The time-series engine maps a
// sample key's operand to the time range of its samples, so that a query of
// the last minutes of a partition reads the blocks of the one head flush
// that wrote them rather than those of every flush.

// Interval is the closed interval [Lo, Hi].
type Interval struct{ Lo, Hi int64 }

// Overlaps reports whether the intervals share a point.
func (i Interval) Overlaps(o Interval) bool { return i.Lo <= o.Hi && o.Lo <= i.Hi }

// IntervalFunc maps a merge operand of key to the interval its value covers,
// or reports false when it does not map it. It must be a pure function of
// its arguments (tables written at different times must agree) and must not
// keep key or value.
type IntervalFunc func(key, value []byte) (Interval, bool)

// blockInterval is what a data block's entries say about intervals.
type blockInterval struct {
	Interval
	state uint8
}

const (
	intervalEmpty   uint8 = iota // no entry yet
	intervalBounded              // every entry a mapped merge operand, within Interval
	intervalNone                 // some entry is not
)

// add takes an entry into the block's interval.
func (b *blockInterval) add(f IntervalFunc, e *Entry) {
	if b.state == intervalNone {
		return
	}
	if f == nil || e.Kind != KindMerge {
		b.state = intervalNone
		return
	}
	iv, ok := f(e.Key, e.Value)
	switch {
	case !ok || iv.Lo > iv.Hi:
		b.state = intervalNone
	case b.state == intervalEmpty:
		b.Interval, b.state = iv, intervalBounded
	default:
		b.Lo, b.Hi = min(b.Lo, iv.Lo), max(b.Hi, iv.Hi)
	}
}

// skips reports whether block i holds only merge operands outside iv.
func (ix *index) skips(i int, iv *Interval) bool {
	if iv == nil || ix.ivs == nil {
		return false
	}
	b := &ix.ivs[i]
	return b.state == intervalBounded && !b.Overlaps(*iv)
}
