package sst

import (
	"bytes"
	"errors"
	"fmt"
	"io"
)

// Writer builds one table, writing data blocks to its io.Writer as they fill
// and the filter, index and footer on Finish. Entries must be added in table
// order. A Writer is not safe for concurrent use.
type Writer struct {
	w    io.Writer
	opts WriterOptions

	off      int64 // bytes written to w
	block    blockBuilder
	index    indexBuilder
	encBuf   []byte
	sepBuf   []byte
	hashes   []uint64
	pending  bool   // the last block written awaits its index entry
	pendH    handle // ... at this extent
	interval IntervalFunc
	blockIv  blockInterval // of the block being filled
	pendIv   blockInterval // of the pending block
	skip     int           // data blocks still to store without trying to compress
	backoff  int           // the last skip length

	n        uint64
	lastKey  []byte
	lastSeq  uint64
	smallest []byte
	minSeq   uint64
	maxSeq   uint64

	err      error // sticky
	finished bool
}

// NewWriter returns a Writer that writes a table to w. Invalid options make
// every Add and Finish fail with the validation error.
func NewWriter(w io.Writer, opts WriterOptions) *Writer {
	wr := &Writer{w: w, opts: opts.withDefaults()}
	wr.err = opts.Validate()
	wr.block.restartInterval = wr.opts.RestartInterval
	return wr
}

// SetInterval makes the Writer record in the index the interval of each
// data block whose entries are all merge operands that f maps (see
// IntervalFunc), for iterators to skip blocks outside theirs
// (Iter.SetInterval). Call it before the first Add.
func (w *Writer) SetInterval(f IntervalFunc) { w.interval = f }

// errFinished is returned by calls on a finished Writer.
var errFinished = errors.New("sst: writer already finished")

// Add appends an entry. Entries must come in table order: Key ascending,
// then Seq strictly descending within a key. Add copies what it keeps, so e
// may be reused once Add returns.
func (w *Writer) Add(e Entry) error {
	if w.err != nil {
		return w.err
	}
	if w.finished {
		return errFinished
	}
	if !e.Kind.valid() {
		return fmt.Errorf("sst: add %q: invalid kind %d", e.Key, e.Kind)
	}
	newKey := true
	if w.n > 0 {
		switch c := bytes.Compare(e.Key, w.lastKey); {
		case c < 0:
			return fmt.Errorf("sst: add %q after %q: keys out of order", e.Key, w.lastKey)
		case c == 0:
			if e.Seq >= w.lastSeq {
				return fmt.Errorf("sst: add %q seq %d after seq %d: sequence numbers of a key must decrease", e.Key, e.Seq, w.lastSeq)
			}
			newKey = false
		}
	}
	if w.pending {
		w.sepBuf = separator(w.sepBuf, w.lastKey, e.Key)
		w.index.add(w.sepBuf, w.pendH, w.pendIv)
		w.pending = false
	}
	if newKey && w.opts.BloomBitsPerKey > 0 {
		w.hashes = append(w.hashes, bloomHash(e.Key))
	}
	if w.n == 0 {
		w.smallest = append([]byte(nil), e.Key...)
		w.minSeq, w.maxSeq = e.Seq, e.Seq
	}
	w.minSeq = min(w.minSeq, e.Seq)
	w.maxSeq = max(w.maxSeq, e.Seq)
	w.block.add(&e)
	w.blockIv.add(w.interval, &e)
	w.lastKey = append(w.lastKey[:0], e.Key...)
	w.lastSeq = e.Seq
	w.n++
	if w.block.size() >= w.opts.BlockSize {
		return w.flushBlock()
	}
	return nil
}

// Runs of incompressible blocks (Gorilla sample blocks) make compression
// attempts pure cost: after a data block fails to compress the writer stores
// the next 1, 2, 4, then 8 blocks without trying, and tries every block again
// once one compresses.
const maxCompressionSkip = 8

func (w *Writer) flushBlock() error {
	c := w.opts.Compression
	if w.skip > 0 {
		w.skip--
		c = CompressionNone
	}
	h, compressed, err := w.writeBlock(w.block.finish(), c)
	if err != nil {
		return err
	}
	if c != CompressionNone {
		if compressed {
			w.backoff = 0
		} else {
			w.backoff = min(max(2*w.backoff, 1), maxCompressionSkip)
			w.skip = w.backoff
		}
	}
	w.block.reset()
	w.pending, w.pendH, w.pendIv = true, h, w.blockIv
	w.blockIv = blockInterval{}
	return nil
}

func (w *Writer) writeBlock(content []byte, c Compression) (handle, bool, error) {
	var compressed bool
	w.encBuf, compressed = appendBlock(w.encBuf[:0], content, c)
	if err := w.write(w.encBuf); err != nil {
		return handle{}, false, err
	}
	return handle{w.off - int64(len(w.encBuf)), int64(len(w.encBuf))}, compressed, nil
}

func (w *Writer) write(p []byte) error {
	n, err := w.w.Write(p)
	w.off += int64(n)
	if err == nil && n != len(p) {
		err = io.ErrShortWrite
	}
	if err != nil {
		w.err = fmt.Errorf("sst: write at offset %d: %w", w.off, err)
	}
	return w.err
}

// EstimatedSize is the table's size if finished now, roughly: bytes written
// so far plus the pending block, index and filter. The LSM uses it to split
// output tables.
func (w *Writer) EstimatedSize() int64 {
	filter := int64(0)
	if w.opts.BloomBitsPerKey > 0 {
		filter = int64(len(w.hashes)*w.opts.BloomBitsPerKey/8) + 2 + blockTrailerLen
	}
	pending := int64(0)
	if !w.block.empty() {
		pending = int64(w.block.size()) + blockTrailerLen
	}
	return w.off + pending + filter + int64(len(w.index.buf)+len(w.lastKey)+len(w.smallest)) + 16 + footerLen
}

// Finish writes the filter, index and footer and returns the table's Info.
// The Writer cannot be used afterwards.
func (w *Writer) Finish() (Info, error) {
	if w.err != nil {
		return Info{}, w.err
	}
	if w.finished {
		return Info{}, errFinished
	}
	w.finished = true
	if !w.block.empty() {
		if err := w.flushBlock(); err != nil {
			return Info{}, err
		}
	}
	if w.pending {
		w.index.add(w.lastKey, w.pendH, w.pendIv)
		w.pending = false
	}
	dataSize := w.off
	f := footer{numEntries: w.n, minSeq: w.minSeq, maxSeq: w.maxSeq}
	f.filter = handle{off: w.off}
	if w.opts.BloomBitsPerKey > 0 {
		content := appendFilter(nil, w.hashes, w.opts.BloomBitsPerKey)
		h, _, err := w.writeBlock(content, CompressionNone)
		if err != nil {
			return Info{}, err
		}
		f.filter = h
	}
	var largest []byte
	if w.n > 0 {
		largest = w.lastKey
	}
	h, _, err := w.writeBlock(w.index.content(w.smallest, largest), w.opts.Compression)
	if err != nil {
		return Info{}, err
	}
	f.index = h
	if err := w.write(f.append(w.encBuf[:0])); err != nil {
		return Info{}, err
	}
	info := Info{
		Size:          w.off,
		NumEntries:    w.n,
		SmallestKey:   w.smallest,
		LargestKey:    append([]byte(nil), largest...),
		MinSeq:        w.minSeq,
		MaxSeq:        w.maxSeq,
		NumDataBlocks: w.index.n,
		DataSize:      dataSize,
		IndexSize:     f.index.len,
		FilterSize:    f.filter.len,
	}
	if w.n == 0 {
		info.SmallestKey, info.LargestKey = nil, nil
	}
	return info, nil
}
