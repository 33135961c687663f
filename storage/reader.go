package storage

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/shaledb/shale/index"
)

// ErrReadOnly is returned by writes to a DB opened for reading only.
var ErrReadOnly = errors.New("storage: read-only replica: writes go to the writer")

// followed holds, in a read-only DB, the index of each partition the writer
// still has open: built from the forward index, which the writer extends as
// series appear, and brought up to date on every query.
type followed struct {
	mu    sync.Mutex
	parts map[int64]*headPart
}

// followOpenPartition returns the index of a partition the writer has open,
// with every series the LSM holds so far.
func (db *DB) followOpenPartition(ctx context.Context, part int64) (*headPart, error) {
	db.follow.mu.Lock()
	defer db.follow.mu.Unlock()
	if db.follow.parts == nil {
		db.follow.parts = map[int64]*headPart{}
	}
	p := db.follow.parts[part]
	if p == nil {
		p = newHeadPart(part, part+db.partMs)
		db.follow.parts[part] = p
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p, db.loadForwardLocked(ctx, p)
}

// loadForwardLocked adds to p the series of the LSM's forward index that it
// does not have yet. The caller holds p.mu.
func (db *DB) loadForwardLocked(ctx context.Context, p *headPart) error {
	builder := labels.NewScratchBuilder(16)
	lo := forwardKey(p.start, uint32(len(p.series)))
	hi := prefixEnd(partSub(p.start, subForward, 0))
	return db.kv.Scan(ctx, lo, hi, func(k, v []byte) error {
		ref, err := parseRef(k)
		if err != nil {
			return err
		}
		if int(ref) != len(p.series) {
			return fmt.Errorf("partition %d: forward index has ref %d where %d was expected", p.start, ref, len(p.series))
		}
		lset, err := index.DecodeLabels(v, &builder)
		if err != nil {
			return fmt.Errorf("partition %d series %d: %w", p.start, ref, err)
		}
		_, err = p.createLocked(lset.Hash(), lset, nil)
		return err
	})
}
