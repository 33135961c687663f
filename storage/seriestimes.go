package storage

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/shaledb/shale/corrupt"
)

// The series-times table of a partition: the newest sample time of each
// series, so that a reloaded partition (after a restart, or reopened for
// late samples) still knows which series ended before a query's range and
// skips them without reading their sample blocks. One key per chunk of
// timesChunk refs, written by every head flush for the chunks whose series
// it cut, in the same LSM batch as their blocks or before them:
//
//	'P' part 'T' chunk(4) -> version(1)=1  (newest - part + 1)(uvarint) per ref of the chunk, in ref order
//
// 0 stands for a series without samples. A time recorded is never older
// than a sample of the series' block: it is the head's newest time for the
// series when the batch was built, which covers every sample cut so far.

// timesChunk is the number of refs of one series-times key.
const timesChunk = 1024

// seriesTimesVersion is the layout of a series-times value.
const seriesTimesVersion = 1

// appendSeriesTimes appends to dst the series-times value of refs
// [chunk*timesChunk, ...) of p: as many as p has, at most timesChunk.
func (p *headPart) appendSeriesTimes(dst []byte, chunk uint32) []byte {
	p.mu.RLock()
	defer p.mu.RUnlock()
	lo := int(chunk) * timesChunk
	hi := min(len(p.series), lo+timesChunk)
	dst = append(dst, seriesTimesVersion)
	for ref, s := range p.series[lo:hi] {
		var t int64
		if s == nil {
			t = p.retiredNewestLocked(uint32(lo + ref))
		} else {
			s.lock()
			t = p.newestLocked(s)
			s.unlock()
		}
		var d uint64
		if t != math.MinInt64 {
			d = uint64(t-p.start) + 1
		}
		dst = binary.AppendUvarint(dst, d)
	}
	return dst
}

// decodeSeriesTimes appends to dst the entries of a series-times value: each
// the newest time minus the partition's start plus one, 0 for none. An
// entry must be below limit (the partition's length plus one).
func decodeSeriesTimes(dst []uint32, b []byte, limit uint64) ([]uint32, error) {
	if len(b) == 0 || b[0] != seriesTimesVersion {
		return dst, fmt.Errorf("series times: empty or unknown version: %w", corrupt.Err)
	}
	b = b[1:]
	for n := 0; len(b) > 0; n++ {
		if n == timesChunk {
			return dst, fmt.Errorf("series times: more than %d entries: %w", timesChunk, corrupt.Err)
		}
		d, m := binary.Uvarint(b)
		if m <= 0 || d >= limit || d > math.MaxUint32 {
			return dst, fmt.Errorf("series times: bad entry %d: %w", n, corrupt.Err)
		}
		dst = append(dst, uint32(d))
		b = b[m:]
	}
	return dst, nil
}

// loadSeriesTimesLocked sets p.stored from the partition's series-times
// keys, for the series p holds. The caller holds p.mu and has not
// published p yet.
func (db *DB) loadSeriesTimesLocked(ctx context.Context, p *headPart) error {
	n := len(p.series)
	if n == 0 {
		return nil
	}
	stored := make([]uint32, n)
	limit := uint64(db.partMs) + 1
	var buf []uint32
	lo := timesKey(p.start, 0)
	hi := timesKey(p.start, uint32((n+timesChunk-1)/timesChunk))
	err := db.scan(ctx, lo, hi, func(k, v []byte) error {
		if len(k) != 14 {
			return fmt.Errorf("series times key %x: want 14 bytes: %w", k, corrupt.Err)
		}
		chunk := binary.BigEndian.Uint32(k[10:])
		var err error
		if buf, err = decodeSeriesTimes(buf[:0], v, limit); err != nil {
			return fmt.Errorf("partition %d chunk %d: %w", p.start, chunk, err)
		}
		base := int(chunk) * timesChunk
		for i, d := range buf {
			if base+i < n {
				stored[base+i] = d
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("load series times: %w", err)
	}
	p.stored = stored
	return nil
}

// endedSeries tells which selected series of a written-out partition ended
// before a range: it reads the partition's series-times keys of the chunks
// of the selected refs, in the same round as their labels.
type endedSeries struct {
	part   int64
	refs   []uint32 // the partition's selected refs, ascending
	chunks []uint32 // the distinct chunks of refs, ascending
	times  [][]uint32
	// mem, if set, is the newest time of each ref's samples held in
	// memory (math.MinInt64 for none): a reader's followed partition.
	mem []int64
}

// newEndedSeries returns the endedSeries of refs (sorted, distinct) of the
// written-out partition part.
func newEndedSeries(part int64, refs []uint32) *endedSeries {
	e := &endedSeries{part: part, refs: refs}
	for _, ref := range refs {
		if c := ref / timesChunk; len(e.chunks) == 0 || e.chunks[len(e.chunks)-1] != c {
			e.chunks = append(e.chunks, c)
		}
	}
	e.times = make([][]uint32, len(e.chunks))
	return e
}

// reads returns the reads of the series-times keys of e's chunks; an entry
// must be below limit (the partition's length plus one).
func (e *endedSeries) reads(limit uint64) []rangeRead {
	return rangeReads(e.part, subTimes, e.chunks, timesFreeGap, timesReadChunk, false, func() func(int, []byte) error {
		return func(i int, v []byte) error {
			t, err := decodeSeriesTimes(nil, v, limit)
			if err != nil {
				return fmt.Errorf("partition %d chunk %d: %w", e.part, e.chunks[i], err)
			}
			e.times[i] = t
			return nil
		}
	})
}

// The series-times keys of a range read: neighbours a few chunks apart are
// read in one scan (a key is a few KiB), at most timesReadChunk at a time.
const (
	timesFreeGap   = 4
	timesReadChunk = 64
)

// each calls fn with the index in refs of every selected series whose newest
// sample is known and older than mint. A series whose chunk has no key (a
// partition written without them) or whose entry is 0 is kept, as is one
// with samples from mint on in memory.
func (e *endedSeries) each(mint int64, fn func(j int)) {
	c := 0
	for j, ref := range e.refs {
		for e.chunks[c] != ref/timesChunk {
			c++
		}
		if e.mem != nil && e.mem[j] >= mint {
			continue
		}
		t := e.times[c]
		if i := int(ref % timesChunk); i < len(t) && t[i] != 0 && e.part+int64(t[i])-1 < mint {
			fn(j)
		}
	}
}
