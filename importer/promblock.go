package importer

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/oklog/ulid/v2"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/tsdb/index"
	"github.com/prometheus/prometheus/tsdb/tombstones"
)

// A Prometheus block (docs/format/README.md upstream) is a folder named by a
// ULID holding meta.json (its time range [minTime, maxTime) and statistics),
// an index of series and their chunks, the chunk files and the tombstones
// of deleted samples. A block read here goes through the upstream format
// packages only (index, chunks, chunkenc, tombstones), not the tsdb
// package, which would bring its whole database along.

// blockMeta is what the importer needs of a block's meta.json.
type blockMeta struct {
	ULID    ulid.ULID `json:"ulid"`
	MinTime int64     `json:"minTime"`
	MaxTime int64     `json:"maxTime"` // exclusive
	Version int       `json:"version"`
	Stats   struct {
		NumSamples int64 `json:"numSamples"`
	} `json:"stats"`
	Compaction struct {
		Parents []struct {
			ULID ulid.ULID `json:"ulid"`
		} `json:"parents"`
	} `json:"compaction"`
}

// promBlock is an open block.
type promBlock struct {
	dir     string
	meta    blockMeta
	index   *index.Reader
	chunks  *chunks.Reader
	deleted tombstones.Reader
}

// openBlocks opens the blocks of a data directory, oldest first. A block
// that a compaction has replaced but that is still on disk (it names it
// among its parents) is passed over: its samples are in the new one.
// Folders whose name is not a ULID (unfinished blocks, wal, chunks_head) are
// not blocks.
func openBlocks(dir string) (blocks []*promBlock, err error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	defer func() {
		if err != nil {
			closeBlocks(blocks)
			blocks = nil
		}
	}()
	replaced := map[ulid.ULID]bool{}
	for _, e := range entries {
		if _, perr := ulid.ParseStrict(e.Name()); perr != nil || !e.IsDir() {
			continue
		}
		b, err := openBlock(filepath.Join(dir, e.Name()))
		if err != nil {
			return blocks, err
		}
		blocks = append(blocks, b)
		for _, p := range b.meta.Compaction.Parents {
			replaced[p.ULID] = true
		}
	}
	blocks = slices.DeleteFunc(blocks, func(b *promBlock) bool {
		if replaced[b.meta.ULID] {
			_ = b.close()
			return true
		}
		return false
	})
	slices.SortFunc(blocks, func(a, b *promBlock) int { return cmp.Compare(a.meta.MinTime, b.meta.MinTime) })
	return blocks, nil
}

func openBlock(dir string) (b *promBlock, err error) {
	raw, err := os.ReadFile(filepath.Join(dir, "meta.json"))
	if err != nil {
		return nil, fmt.Errorf("block %s: %w", dir, err)
	}
	b = &promBlock{dir: dir}
	if err := json.Unmarshal(raw, &b.meta); err != nil {
		return nil, fmt.Errorf("block %s: meta.json: %v: %w", dir, err, ErrCorrupt)
	}
	if b.meta.Version != 1 {
		return nil, fmt.Errorf("block %s: meta.json version %d, want 1", dir, b.meta.Version)
	}
	if b.meta.MinTime >= b.meta.MaxTime {
		return nil, fmt.Errorf("block %s: empty time range [%d, %d): %w", dir, b.meta.MinTime, b.meta.MaxTime, ErrCorrupt)
	}
	defer func() {
		if err != nil {
			_ = b.close()
		}
	}()
	if b.index, err = index.NewFileReader(filepath.Join(dir, "index"), index.DecodePostingsRaw); err != nil {
		return nil, fmt.Errorf("block %s: index: %w", dir, err)
	}
	if b.chunks, err = chunks.NewDirReader(filepath.Join(dir, "chunks"), chunkenc.NewPool()); err != nil {
		return nil, fmt.Errorf("block %s: chunks: %w", dir, err)
	}
	if b.deleted, _, err = tombstones.ReadTombstones(dir); err != nil {
		return nil, fmt.Errorf("block %s: tombstones: %w", dir, err)
	}
	return b, nil
}

func (b *promBlock) close() error {
	var errs []error
	if b.index != nil {
		errs = append(errs, b.index.Close())
	}
	if b.chunks != nil {
		errs = append(errs, b.chunks.Close())
	}
	if b.deleted != nil {
		errs = append(errs, b.deleted.Close())
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close block %s: %w", b.dir, err)
	}
	return nil
}

func closeBlocks(blocks []*promBlock) error {
	var errs []error
	for _, b := range blocks {
		errs = append(errs, b.close())
	}
	return errors.Join(errs...)
}

// blockCursor walks the series of one block that have chunks in the window
// [mint, maxt] (inclusive), in label order: the order of the index.
type blockCursor struct {
	b          *promBlock
	mint, maxt int64
	postings   index.Postings
	builder    labels.ScratchBuilder
	metas      []chunks.Meta
	it         chunkenc.Iterator

	ref    storage.SeriesRef
	lset   labels.Labels
	inWin  []chunks.Meta // the current series' chunks in the window
	peeked bool
	done   bool
}

func newBlockCursor(ctx context.Context, b *promBlock, mint, maxt int64) (*blockCursor, error) {
	name, value := index.AllPostingsKey()
	p, err := b.index.Postings(ctx, name, value)
	if err != nil {
		return nil, fmt.Errorf("block %s: all postings: %w", b.dir, err)
	}
	return &blockCursor{b: b, mint: mint, maxt: maxt, postings: p, builder: labels.NewScratchBuilder(0)}, nil
}

// peek returns the labels of the next series with chunks in the window;
// false at the end.
func (c *blockCursor) peek() (labels.Labels, bool, error) {
	for !c.peeked && !c.done {
		if !c.postings.Next() {
			if err := c.postings.Err(); err != nil {
				return labels.EmptyLabels(), false, fmt.Errorf("block %s: postings: %w", c.b.dir, err)
			}
			c.done = true
			break
		}
		c.ref = c.postings.At()
		if err := c.b.index.Series(c.ref, &c.builder, &c.metas); err != nil {
			return labels.EmptyLabels(), false, fmt.Errorf("block %s: series %d: %w", c.b.dir, c.ref, err)
		}
		c.inWin = c.inWin[:0]
		for _, m := range c.metas {
			if m.MinTime <= c.maxt && c.mint <= m.MaxTime {
				c.inWin = append(c.inWin, m)
			}
		}
		if len(c.inWin) > 0 {
			c.lset, c.peeked = c.builder.Labels(), true
		}
	}
	return c.lset, c.peeked, nil
}

// read appends the current series' samples in the window, less the deleted
// ones, to dst in time order, and moves on.
func (c *blockCursor) read(dst []Sample) ([]Sample, error) {
	c.peeked = false
	deleted, err := c.b.deleted.Get(c.ref)
	if err != nil {
		return dst, fmt.Errorf("block %s: tombstones of series %d: %w", c.b.dir, c.ref, err)
	}
	from := len(dst)
	for _, m := range c.inWin {
		chk, iterable, err := c.b.chunks.ChunkOrIterable(m)
		if err != nil {
			return dst, fmt.Errorf("block %s: series %s: chunk %d: %w", c.b.dir, c.lset, m.Ref, err)
		}
		if chk != nil {
			c.it = chk.Iterator(c.it)
		} else {
			c.it = iterable.Iterator(c.it)
		}
		for vt := c.it.Next(); vt != chunkenc.ValNone; vt = c.it.Next() {
			t := c.it.AtT()
			if t < c.mint || t > c.maxt || inIntervals(deleted, t) {
				continue
			}
			var s Sample
			switch vt {
			case chunkenc.ValFloat:
				s.T, s.V = c.it.At()
			case chunkenc.ValHistogram:
				s.T, s.H = c.it.AtHistogram(nil)
			case chunkenc.ValFloatHistogram:
				s.T, s.FH = c.it.AtFloatHistogram(nil)
			default:
				return dst, fmt.Errorf("block %s: series %s: unknown sample kind %v: %w", c.b.dir, c.lset, vt, ErrCorrupt)
			}
			dst = append(dst, s)
		}
		if err := c.it.Err(); err != nil {
			return dst, fmt.Errorf("block %s: series %s: chunk %d: %v: %w", c.b.dir, c.lset, m.Ref, err, ErrCorrupt)
		}
	}
	// Chunks of one series do not overlap in a block Prometheus wrote;
	// should they, time order is restored here.
	return append(dst[:from], timeOrdered(dst[from:])...), nil
}

// headCursor walks the replayed head's series in the window [mint, maxt].
type headCursor struct {
	series     []headSeries
	mint, maxt int64
	cur        []Sample // the samples of series[0] in the window
}

func (c *headCursor) peek() (labels.Labels, bool, error) {
	for len(c.series) > 0 {
		s := c.series[0].samples
		lo, _ := slices.BinarySearchFunc(s, c.mint, func(x Sample, t int64) int { return cmp.Compare(x.T, t) })
		hi, found := slices.BinarySearchFunc(s, c.maxt, func(x Sample, t int64) int { return cmp.Compare(x.T, t) })
		if found {
			hi++
		}
		if lo < hi {
			c.cur = s[lo:hi]
			return c.series[0].labels, true, nil
		}
		c.series = c.series[1:]
	}
	return labels.EmptyLabels(), false, nil
}

func (c *headCursor) read(dst []Sample) ([]Sample, error) {
	c.series = c.series[1:]
	return append(dst, c.cur...), nil
}

// seriesCursor is a source of series in label order, each read once.
type seriesCursor interface {
	peek() (labels.Labels, bool, error)
	read(dst []Sample) ([]Sample, error)
}
