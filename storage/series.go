package storage

import (
	"errors"
	"math"
	"sort"
	"unsafe"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"

	"github.com/shaledb/shale/gorilla"
)

// memSeries is one series of one head partition: the samples it received
// since the head last wrote them to the LSM. The head holds one per active
// series, so it is laid out in 128 bytes (a size class of the allocator),
// its appender inside and its lock in the partition: what few series have
// (blocks sealed at a change of sample kind, out-of-order samples) is behind
// x. Methods named ...Locked need the series' lock (lock, unlock).
type memSeries struct {
	// lastFloat says that lastV is the newest value written at maxT, a
	// float, to tell a resent duplicate from a conflicting one.
	lastFloat bool
	// retired is set, under the series' lock, when the partition lets the
	// series go (headPart.retireIdle): it holds nothing, and an appender
	// holding it asks the partition for the series again.
	retired bool
	ref     uint32
	// part holds the series; its index has the series' labels under ref.
	part *headPart

	// x holds sealed blocks and out-of-order samples since the last cut;
	// nil when there are none.
	x *seriesExtra
	// flushing is what the last cut took, visible to queries until the LSM
	// holds it.
	flushing *cutData
	lastV    float64
	// app holds in-order samples since the last cut. A cut empties it; its
	// MaxTime is the newest in-order sample time ever appended
	// (math.MinInt64 before the first).
	app gorilla.Appender
}

var _ [128 - unsafe.Sizeof(memSeries{})]struct{}

func (s *memSeries) lock()   { s.part.seriesMu[s.ref%seriesLocks].Lock() }
func (s *memSeries) unlock() { s.part.seriesMu[s.ref%seriesLocks].Unlock() }

// maxT returns the newest in-order sample time ever appended.
func (s *memSeries) maxT() int64 { return s.app.MaxTime() }

// seriesExtra is the part of a series few series need.
type seriesExtra struct {
	// sealed are finished blocks (a block is sealed when the sample kind
	// changes).
	sealed [][]byte
	// ooo holds out-of-order and rewritten samples, sorted by time, one per
	// timestamp (the later write wins).
	ooo []sample
}

// extraLocked returns s.x, creating it if need be.
func (s *memSeries) extraLocked() *seriesExtra {
	if s.x == nil {
		s.x = &seriesExtra{}
	}
	return s.x
}

// sealedLocked returns the sealed blocks since the last cut.
func (s *memSeries) sealedLocked() [][]byte {
	if s.x == nil {
		return nil
	}
	return s.x.sealed
}

// oooLocked returns the out-of-order samples since the last cut.
func (s *memSeries) oooLocked() []sample {
	if s.x == nil {
		return nil
	}
	return s.x.ooo
}

// sample is a float or histogram sample held in memory.
type sample struct {
	t  int64
	v  float64
	h  *histogram.Histogram
	fh *histogram.FloatHistogram
}

// cutData is a series' samples taken by a head flush. It is immutable.
type cutData struct {
	// prev is an earlier cut whose write failed; it is written with this one.
	prev *cutData
	// sealed are the cut's in-order samples as blocks, oldest first.
	sealed [][]byte
	ooo    []sample
}

func newMemSeries(ref uint32, p *headPart) *memSeries {
	s := &memSeries{ref: ref, part: p}
	s.app.Reset(math.MinInt64)
	return s
}

// labelSet returns the series' labels, built in b.
func (s *memSeries) labelSet(b *labels.ScratchBuilder) labels.Labels {
	return s.part.labelsOf(s.ref, b)
}

// lset returns the series' labels.
func (s *memSeries) lset() labels.Labels {
	var b labels.ScratchBuilder
	return s.labelSet(&b)
}

// is reports whether the series' labels are lset.
func (s *memSeries) is(lset labels.Labels) bool {
	return s.part.idx.Equal(s.ref, lset)
}

var errKindChange = gorilla.ErrKindChange

// appendLocked adds a sample; the caller holds the series' lock and has
// checked that the sample may be accepted.
func (s *memSeries) appendLocked(smp sample) error {
	if smp.t > s.maxT() {
		if err := s.appendInOrderLocked(smp); err != nil {
			return err
		}
		s.lastV, s.lastFloat = smp.v, smp.h == nil && smp.fh == nil
		return nil
	}
	if smp.t == s.maxT() {
		s.lastV, s.lastFloat = smp.v, smp.h == nil && smp.fh == nil
	}
	s.insertOOOLocked(smp)
	return nil
}

func (s *memSeries) appendInOrderLocked(smp sample) error {
	err := appendTo(&s.app, smp)
	if errors.Is(err, errKindChange) {
		x := s.extraLocked()
		x.sealed = append(x.sealed, s.app.AppendBlock(nil))
		s.app.Reset(s.maxT())
		err = appendTo(&s.app, smp)
	}
	return err
}

func appendTo(app *gorilla.Appender, smp sample) error {
	switch {
	case smp.fh != nil:
		return app.AppendFloatHistogram(smp.t, smp.fh)
	case smp.h != nil:
		return app.AppendHistogram(smp.t, smp.h)
	default:
		return app.Append(smp.t, smp.v)
	}
}

func (s *memSeries) insertOOOLocked(smp sample) {
	x := s.extraLocked()
	i := sort.Search(len(x.ooo), func(i int) bool { return x.ooo[i].t >= smp.t })
	if i < len(x.ooo) && x.ooo[i].t == smp.t {
		x.ooo[i] = smp
		return
	}
	x.ooo = append(x.ooo, sample{})
	copy(x.ooo[i+1:], x.ooo[i:])
	x.ooo[i] = smp
}

// dirtyLocked reports whether the series holds samples not yet cut.
func (s *memSeries) dirtyLocked() bool {
	return s.app.Count() > 0 || len(s.sealedLocked()) > 0 || len(s.oooLocked()) > 0
}

// blocksLocked counts the blocks the series holds in memory: the open
// appender's samples (one block), blocks sealed at a change of sample kind,
// out-of-order samples (one block), and the same of cuts not yet in the
// LSM.
func (s *memSeries) blocksLocked() int {
	n := len(s.sealedLocked())
	if s.app.Count() > 0 {
		n++
	}
	if len(s.oooLocked()) > 0 {
		n++
	}
	for c := s.flushing; c != nil; c = c.prev {
		n += len(c.sealed)
		if len(c.ooo) > 0 {
			n++
		}
	}
	return n
}

// cutLocked takes the samples held since the last cut and leaves the series
// empty, ready for new appends. The result stays visible as s.flushing.
//
// The open appender's samples become a block here. Queries may hold clones
// of the appender, which share its encoded memory, so it starts over without
// that memory rather than overwrite it.
func (s *memSeries) cutLocked() *cutData {
	c := &cutData{prev: s.flushing, sealed: s.sealedLocked(), ooo: s.oooLocked()}
	s.x = nil
	if s.app.Count() > 0 {
		c.sealed = append(c.sealed, s.app.AppendBlock(nil))
	}
	s.app.Reset(s.maxT())
	s.flushing = c
	return c
}

// snapshotLocked returns blocks of everything the series holds in memory,
// oldest writes first, for a query.
func (s *memSeries) snapshotLocked(dst [][]byte) ([][]byte, error) {
	var err error
	if s.flushing != nil {
		if dst, err = s.flushing.appendBlocks(dst); err != nil {
			return nil, err
		}
	}
	dst = append(dst, s.sealedLocked()...)
	if s.app.Count() > 0 {
		dst = append(dst, s.app.AppendBlock(nil))
	}
	return appendOOOBlocks(dst, s.oooLocked())
}

// appendBlocks appends the cut's blocks, oldest writes first.
func (c *cutData) appendBlocks(dst [][]byte) ([][]byte, error) {
	if c.prev != nil {
		var err error
		if dst, err = c.prev.appendBlocks(dst); err != nil {
			return nil, err
		}
	}
	dst = append(dst, c.sealed...)
	return appendOOOBlocks(dst, c.ooo)
}

// appendOOOBlocks appends blocks of the out-of-order samples ooo.
func appendOOOBlocks(dst [][]byte, ooo []sample) ([][]byte, error) {
	if len(ooo) == 0 {
		return dst, nil
	}
	blks, err := encodeSamples(nil, ooo)
	if err != nil {
		return nil, err
	}
	return append(dst, blks...), nil
}

// block merges the cut into one block.
func (c *cutData) block() ([]byte, error) {
	blks, err := c.appendBlocks(nil)
	if err != nil || len(blks) == 0 {
		return nil, err
	}
	if len(blks) == 1 {
		return blks[0], nil
	}
	return gorilla.MergeAll(nil, blks...)
}

// encodeSamples encodes time-sorted samples into blocks, one per run of one
// sample kind.
func encodeSamples(dst [][]byte, smps []sample) ([][]byte, error) {
	app := gorilla.NewAppender()
	for _, smp := range smps {
		err := appendTo(app, smp)
		if errors.Is(err, errKindChange) {
			dst = append(dst, app.AppendBlock(nil))
			app = gorilla.NewAppender()
			err = appendTo(app, smp)
		}
		if err != nil {
			return nil, err
		}
	}
	if app.Count() > 0 {
		dst = append(dst, app.AppendBlock(nil))
	}
	return dst, nil
}

// isDuplicate reports whether smp repeats the newest in-order sample exactly.
func (s *memSeries) isDuplicateLocked(smp sample) bool {
	if smp.t != s.maxT() || !s.lastFloat || smp.h != nil || smp.fh != nil {
		return false
	}
	return math.Float64bits(smp.v) == math.Float64bits(s.lastV) ||
		(value.IsStaleNaN(smp.v) && value.IsStaleNaN(s.lastV))
}
