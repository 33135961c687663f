package gorilla

import (
	"fmt"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
)

// maxHistChunkSamples is where a histogram run cuts its chunkenc chunk.
// chunkenc counts samples in 16 bits.
const maxHistChunkSamples = 1024

// histRun builds a run of histogram samples of one kind as chunkenc chunks.
type histRun struct {
	kind   byte // partHistogram or partFloatHistogram
	chunk  chunkenc.Chunk
	app    chunkenc.Appender
	sealed []part
	h      histogram.Histogram // scratch: chunkenc may rewrite the spans of what it is given
	fh     histogram.FloatHistogram
}

func (r *histRun) appendHistogram(t int64, h *histogram.Histogram) error {
	if err := h.Validate(); err != nil {
		return fmt.Errorf("gorilla: invalid histogram at %d: %w", t, err)
	}
	h.CopyTo(&r.h)
	return r.append(t, &r.h, nil)
}

func (r *histRun) appendFloatHistogram(t int64, fh *histogram.FloatHistogram) error {
	if err := fh.Validate(); err != nil {
		return fmt.Errorf("gorilla: invalid float histogram at %d: %w", t, err)
	}
	fh.CopyTo(&r.fh)
	return r.append(t, nil, &r.fh)
}

func (r *histRun) append(t int64, h *histogram.Histogram, fh *histogram.FloatHistogram) error {
	var prev chunkenc.Appender
	if r.chunk == nil || r.chunk.NumSamples() >= maxHistChunkSamples {
		prev = r.app
		r.seal()
		if h != nil {
			r.kind, r.chunk = partHistogram, chunkenc.NewHistogramChunk()
		} else {
			r.kind, r.chunk = partFloatHistogram, chunkenc.NewFloatHistogramChunk()
		}
		app, err := r.chunk.Appender()
		if err != nil {
			return fmt.Errorf("gorilla: new histogram chunk: %w", err)
		}
		r.app = app
	}
	var (
		c       chunkenc.Chunk
		recoded bool
		app     chunkenc.Appender
		err     error
	)
	if h != nil {
		c, recoded, app, err = r.app.AppendHistogram(prev, 0, t, h, false)
	} else {
		c, recoded, app, err = r.app.AppendFloatHistogram(prev, 0, t, fh, false)
	}
	if err != nil {
		return fmt.Errorf("gorilla: append histogram at %d: %w", t, err)
	}
	if c != nil {
		if !recoded {
			r.seal()
		}
		r.chunk = c
	}
	r.app = app
	return nil
}

// seal moves the open chunk, if any, to the sealed parts.
func (r *histRun) seal() {
	if r.chunk == nil || r.chunk.NumSamples() == 0 {
		return
	}
	r.sealed = append(r.sealed, part{kind: r.kind, data: append([]byte(nil), r.chunk.Bytes()...)})
	r.chunk = nil
}

// appendParts appends the run's chunks, the open one included, to ps. The
// data of the open chunk aliases it.
func (r *histRun) appendParts(ps []part) []part {
	ps = append(ps, r.sealed...)
	if r.chunk != nil && r.chunk.NumSamples() > 0 {
		ps = append(ps, part{kind: r.kind, data: r.chunk.Bytes()})
	}
	return ps
}

func (r *histRun) size() int {
	n := 0
	for _, p := range r.sealed {
		n += cap(p.data)
	}
	if r.chunk != nil {
		n += cap(r.chunk.Bytes())
	}
	// Appender state and scratch: spans and buckets.
	n += 256 + 16*(len(r.h.PositiveBuckets)+len(r.h.NegativeBuckets)+len(r.fh.PositiveBuckets)+len(r.fh.NegativeBuckets))
	return n
}
