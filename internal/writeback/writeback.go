// Package writeback hands a file's bytes to the disk as they are written,
// a Chunk at a time, instead of leaving them all to one fsync or to the
// kernel's periodic writeback.
//
// Tens of MiB written at once and then fsynced (a table) or left for the
// kernel's flusher (the disk cache tier's segments) reach the disk in one
// burst, and a small fsync issued meanwhile waits for the burst: its writes
// queue behind it, and the flush of the disk's write cache that ends every
// fsync has the burst to write out first. A WAL object's put, 2 ms
// otherwise, then takes 30 to 500 ms, and every write waiting for that
// object or a later one waits with it.
//
// Started a Chunk at a time, with at most two on their way, the same bytes
// go out beside the small fsyncs instead of in front of them. Pebble and
// RocksDB do the same for their tables (bytes_per_sync).
package writeback

import (
	"io"
	"os"
)

// Chunk is how many bytes are written before their writeback is started.
// Files smaller than this (WAL objects, manifests) are left alone.
const Chunk = 1 << 20

// Progress is how far the writeback of one file, written front to back,
// has been started.
type Progress struct {
	started int64 // writeback started for [0, started)
	prev    int64 // start of the range started last
}

// Wrote notes that f holds its bytes up to end, written front to back, and
// starts the writeback of each whole Chunk not started yet, after waiting
// for the one started before it. Where the kernel cannot (another system,
// or a file system without sync_file_range), nothing happens: the fsync or
// the kernel writes the bytes later, as without it.
func (p *Progress) Wrote(f *os.File, end int64) {
	for end-p.started >= Chunk {
		next := p.started + Chunk
		startRange(f, p.prev, p.started, next)
		p.prev, p.started = p.started, next
	}
}

// Started returns how many bytes from the file's start have had their
// writeback started.
func (p *Progress) Started() int64 { return p.started }

// Writer writes to a new file front to back, starting the writeback of each
// Chunk once it is written (Progress.Wrote). Large writes are split into
// Chunks, so that the first are on their way while the rest are copied.
type Writer struct {
	f   *os.File
	off int64
	p   Progress
}

// NewWriter returns a Writer of f, which is empty and written only through it.
func NewWriter(f *os.File) *Writer { return &Writer{f: f} }

var _ io.Writer = (*Writer)(nil)

func (w *Writer) Write(b []byte) (int, error) {
	written := 0
	for len(b) > 0 {
		n := min(int64(len(b)), Chunk-(w.off-w.p.started))
		m, err := w.f.Write(b[:n])
		written += m
		w.off += int64(m)
		if err != nil {
			return written, err
		}
		b = b[n:]
		w.p.Wrote(w.f, w.off)
	}
	return written, nil
}
