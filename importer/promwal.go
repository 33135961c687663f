package importer

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/klauspost/compress/snappy"
	"github.com/klauspost/compress/zstd"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/tsdb/record"
	"github.com/prometheus/prometheus/tsdb/tombstones"

	"github.com/shaledb/shale/corrupt"
)

// ErrCorrupt marks a Prometheus data directory whose files fail validation:
// a WAL fragment with a bad checksum, a block index or chunk that does not
// decode.
var ErrCorrupt = corrupt.New("importer: corrupt Prometheus data")

// The write-ahead log of a Prometheus head (docs/format/wal.md upstream): a
// folder of numbered segment files, each a run of 32 KiB pages. A record is
// cut into fragments that never cross a page; each fragment has a 7-byte
// header: a byte for its place in the record (whole, first, middle, last)
// and the record's compression, a big-endian 2-byte length and a CRC-32
// (Castagnoli) of the fragment's bytes. A zero byte where a header would
// start pads the rest of the page, as does a page tail too short for a
// header. A record never spans two segments.
const (
	walPageSize   = 32 << 10
	walHeaderSize = 7

	fragPadding = 0
	fragFull    = 1
	fragFirst   = 2
	fragMiddle  = 3
	fragLast    = 4
	fragKind    = 0x07
	fragSnappy  = 0x08
	fragZstd    = 0x10
)

var walCRC = crc32.MakeTable(crc32.Castagnoli)

// walSegmentRecords calls fn with each record of one segment, decompressed;
// fn must not keep the slice. A record cut short at the end of the segment
// (the write in progress when Prometheus stopped) is passed over when tail
// is true, and is corruption otherwise.
func walSegmentRecords(seg []byte, tail bool, fn func(rec []byte) error) error {
	var (
		rec, buf []byte
		open     bool // rec holds a first fragment and perhaps middles
		flags    byte // compression of the open record
		zdec     *zstd.Decoder
	)
	defer func() {
		if zdec != nil {
			zdec.Close()
		}
	}()
	emit := func(data []byte, flags byte) error {
		var err error
		switch {
		case flags&fragSnappy != 0:
			buf, err = snappy.Decode(buf[:cap(buf)], data)
		case flags&fragZstd != 0:
			if zdec == nil {
				if zdec, err = zstd.NewReader(nil); err != nil {
					return fmt.Errorf("zstd: %w", err)
				}
			}
			buf, err = zdec.DecodeAll(data, buf[:0])
		default:
			return fn(data)
		}
		if err != nil {
			return fmt.Errorf("decompress a WAL record: %v: %w", err, ErrCorrupt)
		}
		return fn(buf)
	}
	pos := 0
	for pos < len(seg) {
		pageEnd := min(len(seg), (pos/walPageSize+1)*walPageSize)
		if seg[pos]&fragKind == fragPadding || pageEnd-pos < walHeaderSize && pageEnd%walPageSize == 0 {
			if i := slices.IndexFunc(seg[pos:pageEnd], func(b byte) bool { return b != 0 }); i >= 0 {
				return fmt.Errorf("non-zero byte in page padding at offset %d: %w", pos+i, ErrCorrupt)
			}
			pos = pageEnd
			continue
		}
		if pos+walHeaderSize > len(seg) {
			break // a header cut short: the end of a torn write
		}
		hdr := seg[pos : pos+walHeaderSize]
		n := int(binary.BigEndian.Uint16(hdr[1:]))
		end := pos + walHeaderSize + n
		if end > pageEnd && pageEnd%walPageSize == 0 {
			return fmt.Errorf("WAL fragment at offset %d crosses a page: %w", pos, ErrCorrupt)
		}
		if end > len(seg) {
			break
		}
		data := seg[pos+walHeaderSize : end]
		if crc32.Checksum(data, walCRC) != binary.BigEndian.Uint32(hdr[3:]) {
			return fmt.Errorf("WAL fragment at offset %d: checksum mismatch: %w", pos, ErrCorrupt)
		}
		kind, f := hdr[0]&fragKind, hdr[0]&^fragKind
		if f&^(fragSnappy|fragZstd) != 0 || f == fragSnappy|fragZstd {
			return fmt.Errorf("WAL fragment at offset %d: unknown flags %#x: %w", pos, f, ErrCorrupt)
		}
		if open != (kind == fragMiddle || kind == fragLast) {
			return fmt.Errorf("WAL fragment at offset %d: kind %d out of place: %w", pos, kind, ErrCorrupt)
		}
		pos = end
		switch kind {
		case fragFull:
			if err := emit(data, f); err != nil {
				return err
			}
		case fragFirst:
			rec, open, flags = append(rec[:0], data...), true, f
		case fragMiddle:
			rec = append(rec, data...)
		case fragLast:
			open = false
			if err := emit(append(rec, data...), flags); err != nil {
				return err
			}
		default:
			return fmt.Errorf("WAL fragment at offset %d: unknown kind %d: %w", pos, kind, ErrCorrupt)
		}
	}
	if pos < len(seg) || open {
		if !tail {
			return fmt.Errorf("WAL record cut short at offset %d: %w", pos, ErrCorrupt)
		}
	}
	return nil
}

// walSegments lists the segment files of dir in order, from the one
// numbered from on. A missing folder has none.
func walSegments(dir string, from int) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	type seg struct {
		n    int
		path string
	}
	var segs []seg
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		if err != nil || e.IsDir() || n < from {
			continue
		}
		segs = append(segs, seg{n, filepath.Join(dir, e.Name())})
	}
	slices.SortFunc(segs, func(a, b seg) int { return a.n - b.n })
	paths := make([]string, len(segs))
	for i, s := range segs {
		paths[i] = s.path
	}
	return paths, nil
}

// lastCheckpoint returns the newest finished checkpoint folder of a WAL
// (checkpoint.NNNNNNNN: the segments up to NNNNNNNN, compacted) and its
// number; "" and -1 when there is none.
func lastCheckpoint(walDir string) (string, int, error) {
	entries, err := os.ReadDir(walDir)
	if err != nil {
		return "", -1, fmt.Errorf("list %s: %w", walDir, err)
	}
	path, last := "", -1
	for _, e := range entries {
		num, ok := strings.CutPrefix(e.Name(), "checkpoint.")
		if !ok || !e.IsDir() {
			continue
		}
		n, err := strconv.Atoi(num) // a .tmp suffix (unfinished) fails here
		if err != nil || n <= last {
			continue
		}
		path, last = filepath.Join(walDir, e.Name()), n
	}
	return path, last, nil
}

// headSeries is what the WAL holds of one series of the head.
type headSeries struct {
	labels  labels.Labels
	samples []Sample
}

// headReplay rebuilds the head of a Prometheus data directory from its WAL
// (the last checkpoint, then the segments after it) and its out-of-order
// WBL. The head's memory-mapped chunks are not read: every sample in them
// is in the WAL too, which Prometheus truncates only below the head.
// Samples older than minT are in blocks already and are left out, deleted
// ones (the WAL's tombstones) too. It returns the series in label order,
// each with its samples in time order.
func headReplay(dir string, minT int64, logger *slog.Logger) ([]headSeries, error) {
	walDir := filepath.Join(dir, "wal")
	cp, cpNum, err := lastCheckpoint(walDir)
	if err != nil {
		return nil, err
	}
	var files []string
	if cp != "" {
		if files, err = walSegments(cp, 0); err != nil {
			return nil, err
		}
	}
	live, err := walSegments(walDir, cpNum+1)
	if err != nil {
		return nil, err
	}
	files = append(files, live...)
	wbl, err := walSegments(filepath.Join(dir, "wbl"), 0)
	if err != nil {
		return nil, err
	}
	r := newHeadReader(minT)
	for i, f := range append(files, wbl...) {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("read WAL segment: %w", err)
		}
		// Only the newest segment of the WAL or of the WBL may end in a
		// torn write.
		tail := i == len(files)-1 || i == len(files)+len(wbl)-1
		if err := walSegmentRecords(b, tail, r.record); err != nil {
			return nil, fmt.Errorf("WAL segment %s: %w", f, err)
		}
	}
	if r.unknownRefs > 0 {
		logger.Warn("WAL samples of series it does not name, left out", "samples", r.unknownRefs)
	}
	return r.series(), nil
}

// headReader gathers the series and samples of WAL records.
type headReader struct {
	minT        int64
	dec         record.Decoder
	byRef       map[chunks.HeadSeriesRef]*headSeries
	deleted     map[chunks.HeadSeriesRef]tombstones.Intervals
	unknownRefs int

	refSeries []record.RefSeries
	floats    []record.RefSample
	hists     []record.RefHistogramSample
	fhists    []record.RefFloatHistogramSample
	stones    []tombstones.Stone
}

func newHeadReader(minT int64) *headReader {
	return &headReader{
		minT:    minT,
		dec:     record.NewDecoder(nil, slog.New(slog.DiscardHandler)),
		byRef:   map[chunks.HeadSeriesRef]*headSeries{},
		deleted: map[chunks.HeadSeriesRef]tombstones.Intervals{},
	}
}

// add appends one sample to the series ref names, if the head keeps it.
func (r *headReader) add(ref chunks.HeadSeriesRef, s Sample) {
	if s.T < r.minT {
		return
	}
	hs, ok := r.byRef[ref]
	if !ok {
		r.unknownRefs++
		return
	}
	hs.samples = append(hs.samples, s)
}

func (r *headReader) record(rec []byte) error {
	if !sane(rec) {
		return fmt.Errorf("WAL %s record with a count beyond its length: %w", r.dec.Type(rec), ErrCorrupt)
	}
	var err error
	switch typ := r.dec.Type(rec); typ {
	case record.Series:
		// A copy: the decoder's labels may share the record's bytes.
		if r.refSeries, err = r.dec.Series(slices.Clone(rec), r.refSeries[:0]); err != nil {
			break
		}
		for _, s := range r.refSeries {
			if _, ok := r.byRef[s.Ref]; !ok {
				r.byRef[s.Ref] = &headSeries{labels: s.Labels}
			}
		}
	case record.Samples, record.SamplesV2:
		if r.floats, err = r.dec.Samples(rec, r.floats[:0]); err != nil {
			break
		}
		for _, s := range r.floats {
			r.add(s.Ref, Sample{T: s.T, V: s.V})
		}
	case record.HistogramSamples, record.CustomBucketsHistogramSamples, record.HistogramSamplesV2:
		if r.hists, err = r.dec.HistogramSamples(rec, r.hists[:0]); err != nil {
			break
		}
		for _, s := range r.hists {
			r.add(s.Ref, Sample{T: s.T, H: s.H})
		}
	case record.FloatHistogramSamples, record.CustomBucketsFloatHistogramSamples, record.FloatHistogramSamplesV2:
		if r.fhists, err = r.dec.FloatHistogramSamples(rec, r.fhists[:0]); err != nil {
			break
		}
		for _, s := range r.fhists {
			r.add(s.Ref, Sample{T: s.T, FH: s.FH})
		}
	case record.Tombstones:
		if r.stones, err = r.dec.Tombstones(rec, r.stones[:0]); err != nil {
			break
		}
		for _, s := range r.stones {
			ref := chunks.HeadSeriesRef(s.Ref)
			for _, iv := range s.Intervals {
				r.deleted[ref] = r.deleted[ref].Add(iv)
			}
		}
	case record.MinValidTime:
		var t int64
		if t, err = r.dec.MinValidTime(rec); err == nil {
			r.minT = max(r.minT, t)
		}
	case record.Exemplars, record.Metadata, record.MmapMarkers:
		// Not samples.
	default:
		return fmt.Errorf("WAL record of unknown type %d: %w", typ, ErrCorrupt)
	}
	if err != nil {
		return fmt.Errorf("decode a WAL %s record: %v: %w", r.dec.Type(rec), err, ErrCorrupt)
	}
	return nil
}

// series merges the series the WAL named more than once, drops deleted and
// too old samples, and sorts series by labels and samples by time.
func (r *headReader) series() []headSeries {
	byLabels := map[string]*headSeries{}
	for ref, hs := range r.byRef {
		hs.samples = slices.DeleteFunc(hs.samples, func(s Sample) bool {
			return s.T < r.minT || inIntervals(r.deleted[ref], s.T)
		})
		if len(hs.samples) == 0 {
			continue
		}
		key := hs.labels.String()
		if prev, ok := byLabels[key]; ok {
			prev.samples = append(prev.samples, hs.samples...)
		} else {
			byLabels[key] = hs
		}
	}
	out := make([]headSeries, 0, len(byLabels))
	for _, hs := range byLabels {
		hs.samples = timeOrdered(hs.samples)
		out = append(out, *hs)
	}
	slices.SortFunc(out, func(a, b headSeries) int { return labels.Compare(a.labels, b.labels) })
	return out
}

// timeOrdered sorts samples by time and keeps the first of each timestamp;
// it does nothing to samples already strictly in order.
func timeOrdered(s []Sample) []Sample {
	inOrder := true
	for i := 1; i < len(s) && inOrder; i++ {
		inOrder = s[i-1].T < s[i].T
	}
	if inOrder {
		return s
	}
	slices.SortStableFunc(s, func(a, b Sample) int { return cmp.Compare(a.T, b.T) })
	return slices.CompactFunc(s, func(a, b Sample) bool { return a.T == b.T })
}

// inIntervals reports whether t falls in one of the deleted intervals.
func inIntervals(ivs tombstones.Intervals, t int64) bool {
	for _, iv := range ivs {
		if iv.InBounds(t) {
			return true
		}
	}
	return false
}
