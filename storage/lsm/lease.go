package lsm

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"
)

// Reader leases let a writer that closes cleanly know whether anyone may
// still read older manifests. Each Reader keeps an empty object
// readers/<id> and rewrites it every readerLeaseInterval; a lease not
// rewritten for readerLeaseTTL is stale. With no live lease, Close deletes
// garbage at once instead of leaving it for the grace period (tables
// replaced by compactions, WAL objects already in tables), so a stopped
// writer's prefix holds only what its last manifest needs.
const (
	readerLeaseInterval = 30 * time.Second
	readerLeaseTTL      = 3 * readerLeaseInterval
)

func newLeaseID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// renewLease rewrites the reader's lease when it is due. The caller holds
// refreshMu.
func (r *Reader) renewLease(ctx context.Context) error {
	now := r.clock.Now()
	if !r.leaseAt.IsZero() && now.Sub(r.leaseAt) < readerLeaseInterval {
		return nil
	}
	if err := r.s.put(ctx, "lease", r.s.paths.lease(r.leaseID), nil); err != nil {
		return fmt.Errorf("lsm reader: write lease: %w", err)
	}
	r.leaseAt = now
	return nil
}

// dropLease deletes the reader's lease (best effort, on Close).
func (r *Reader) dropLease() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.s.delete(ctx, r.s.paths.lease(r.leaseID)); err != nil {
		r.logger.Warn("lsm reader: could not delete its lease; it goes stale", "err", err)
	}
}

// liveReaders counts the leases rewritten within readerLeaseTTL.
func (db *DB) liveReaders(ctx context.Context) (int, error) {
	objs, err := db.s.list(ctx, db.s.paths.readersDir(), "")
	if err != nil {
		return 0, err
	}
	cutoff := db.clock.Now().Add(-readerLeaseTTL)
	n := 0
	for _, o := range objs {
		if o.LastModified.After(cutoff) {
			n++
		}
	}
	return n, nil
}

// collectAtClose deletes every object the latest manifest does not need
// when no reader holds a live lease. The DB's own iterators must be closed.
func (db *DB) collectAtClose(ctx context.Context) {
	n, err := db.liveReaders(ctx)
	if err != nil {
		db.logger.Warn("lsm: could not list reader leases; garbage left for the grace period", "err", err)
		return
	}
	if n > 0 {
		db.logger.Info("lsm: readers hold leases; garbage left for the grace period", "readers", n)
		return
	}
	if _, err := db.collectGarbage(ctx, 0, 0); err != nil {
		db.logger.Warn("lsm: garbage collection at close failed", "err", err)
	}
}
