package importer

import (
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/tsdb/encoding"
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
	w := recordWalker{Decbuf: encoding.Decbuf{B: rec[1:]}}
	switch typ := record.Type(rec[0]); typ {
	case record.Series:
		for w.Len() > 0 && !w.broken() {
			w.Skip(8) // ref
			for range w.count() {
				w.Skip(w.count()) // name
				w.Skip(w.count()) // value
			}
		}
	case record.HistogramSamples, record.CustomBucketsHistogramSamples,
		record.FloatHistogramSamples, record.CustomBucketsFloatHistogramSamples:
		float := typ == record.FloatHistogramSamples || typ == record.CustomBucketsFloatHistogramSamples
		w.Skip(16) // base ref and time
		for w.Len() > 0 && !w.broken() {
			w.Varint64() // ref
			w.Varint64() // time
			w.histogram(float)
		}
	case record.HistogramSamplesV2, record.FloatHistogramSamplesV2:
		float := typ == record.FloatHistogramSamplesV2
		w.Varint64() // ref, time and start time of the first
		w.Varint64()
		w.Varint64()
		for first := true; w.Len() > 0 && !w.broken(); first = false {
			if !first {
				w.Varint64() // ref and time
				w.Varint64()
				if m := w.Byte(); m > 1 { // 0: no start time, 1: the previous one
					w.Varint64()
				}
			}
			w.histogram(float)
		}
	}
	return !w.broken()
}

// recordWalker reads a record as the upstream decoders do; a count beyond
// the bytes left marks it bad.
type recordWalker struct {
	encoding.Decbuf
	bad bool
}

func (w *recordWalker) broken() bool { return w.bad || w.Err() != nil }

// count reads a count and refuses it beyond the bytes left.
func (w *recordWalker) count() int {
	n := w.Uvarint64()
	if n > uint64(w.Len()) {
		w.bad, w.B = true, nil
		return 0
	}
	return int(n)
}

// histogram walks one encoded histogram, integer or float.
func (w *recordWalker) histogram(float bool) {
	w.Byte() // counter reset hint
	schema := w.Varint64()
	if float {
		w.Skip(32) // zero threshold, zero count, count, sum
	} else {
		w.Skip(8)     // zero threshold
		w.Uvarint64() // zero count
		w.Uvarint64() // count
		w.Skip(8)     // sum
	}
	for range 2 { // positive and negative spans
		for range w.count() {
			w.Varint64()  // offset
			w.Uvarint64() // length
		}
	}
	for range 2 { // positive and negative buckets
		n := w.count()
		if float {
			w.Skip(8 * n)
			continue
		}
		for range n {
			w.Varint64()
		}
	}
	if histogram.IsCustomBucketsSchema(int32(schema)) {
		w.Skip(8 * w.count())
	}
}
