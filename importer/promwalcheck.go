package importer

import (
	"encoding/binary"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/tsdb/record"
)

// The upstream record decoders size their slices (labels, spans, buckets)
// by the counts a record holds before reading the elements, so a damaged
// count would ask for gigabytes. sane walks a series or histogram record
// without building anything and refuses a count larger than the bytes left
// (every element takes at least one byte); other records need no check.
func sane(rec []byte) bool {
	if len(rec) == 0 {
		return false
	}
	w := recordWalker{b: rec[1:]}
	switch typ := record.Type(rec[0]); typ {
	case record.Series:
		for len(w.b) > 0 && !w.bad {
			w.skip(8) // ref
			for range w.count() {
				w.skip(w.count()) // name
				w.skip(w.count()) // value
			}
		}
	case record.HistogramSamples, record.CustomBucketsHistogramSamples,
		record.FloatHistogramSamples, record.CustomBucketsFloatHistogramSamples:
		float := typ == record.FloatHistogramSamples || typ == record.CustomBucketsFloatHistogramSamples
		w.skip(16) // base ref and time
		for len(w.b) > 0 && !w.bad {
			w.varint() // ref
			w.varint() // time
			w.histogram(float)
		}
	case record.HistogramSamplesV2, record.FloatHistogramSamplesV2:
		float := typ == record.FloatHistogramSamplesV2
		w.varint() // ref, time and start time of the first
		w.varint()
		w.varint()
		for first := true; len(w.b) > 0 && !w.bad; first = false {
			if !first {
				w.varint() // ref and time
				w.varint()
				if m := w.byte(); m > 1 { // 0: no start time, 1: the previous one
					w.varint()
				}
			}
			w.histogram(float)
		}
	}
	return !w.bad
}

type recordWalker struct {
	b   []byte
	bad bool
}

func (w *recordWalker) skip(n int) {
	if n < 0 || n > len(w.b) {
		w.bad, w.b = true, nil
		return
	}
	w.b = w.b[n:]
}

func (w *recordWalker) byte() byte {
	if len(w.b) == 0 {
		w.bad = true
		return 0
	}
	c := w.b[0]
	w.b = w.b[1:]
	return c
}

func (w *recordWalker) varint() int64 {
	v, n := binary.Varint(w.b)
	if n <= 0 {
		w.bad, w.b = true, nil
		return 0
	}
	w.b = w.b[n:]
	return v
}

func (w *recordWalker) uvarint() {
	_, n := binary.Uvarint(w.b)
	if n <= 0 {
		w.bad, w.b = true, nil
		return
	}
	w.b = w.b[n:]
}

// count reads a count and refuses it beyond the bytes left.
func (w *recordWalker) count() int {
	v, n := binary.Uvarint(w.b)
	if n <= 0 || v > uint64(len(w.b)-n) {
		w.bad, w.b = true, nil
		return 0
	}
	w.b = w.b[n:]
	return int(v)
}

// histogram walks one encoded histogram, integer or float.
func (w *recordWalker) histogram(float bool) {
	w.byte() // counter reset hint
	schema := w.varint()
	if float {
		w.skip(32) // zero threshold, zero count, count, sum
	} else {
		w.skip(8)   // zero threshold
		w.uvarint() // zero count
		w.uvarint() // count
		w.skip(8)   // sum
	}
	for range 2 { // positive and negative spans
		for range w.count() {
			w.varint()  // offset
			w.uvarint() // length
		}
	}
	for range 2 { // positive and negative buckets
		n := w.count()
		if float {
			w.skip(8 * n)
			continue
		}
		for range n {
			w.varint()
		}
	}
	if histogram.IsCustomBucketsSchema(int32(schema)) {
		w.skip(8 * w.count())
	}
}
