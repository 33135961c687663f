package storage

import (
	"context"
	"fmt"
	"sort"

	"github.com/shaledb/shale/storage/lsm"
)

// PartitionStatus describes one time partition, for display.
type PartitionStatus struct {
	// Start and End bound the partition's time range [Start, End) in ms.
	Start, End int64
	// Head is true while the partition is open in memory (on a reader:
	// followed from the writer's head log); Closed once all its data is
	// in the LSM for good.
	Head, Closed bool
	// Series counts the series of a partition in memory; -1 otherwise.
	Series int
}

// Partitions lists the partitions in time order: those in the registry and
// those open in the head.
func (db *DB) Partitions(ctx context.Context) ([]PartitionStatus, error) {
	byStart := map[int64]*PartitionStatus{}
	db.head.mu.RLock()
	for start, p := range db.head.parts {
		p.mu.RLock()
		n := len(p.series)
		p.mu.RUnlock()
		byStart[start] = &PartitionStatus{Start: p.start, End: p.end, Head: true, Closed: p.closed.Load(), Series: n}
	}
	db.head.mu.RUnlock()
	err := db.scan(ctx, []byte{keyRegistry}, []byte{keyRegistry + 1}, func(k, v []byte) error {
		part := getPart(k[1:])
		m, err := decodePartitionMeta(v)
		if err != nil {
			return err
		}
		if ps := byStart[part]; ps != nil {
			ps.Closed = ps.Closed || m.closed
			return nil
		}
		byStart[part] = &PartitionStatus{Start: part, End: part + db.partMs, Closed: m.closed, Series: -1}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list partitions: %w", err)
	}
	out := make([]PartitionStatus, 0, len(byStart))
	for _, ps := range byStart {
		out = append(out, *ps)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Start < out[j].Start })
	return out, nil
}

// LSMStatus returns a snapshot of the LSM under the DB, the writer's or
// the reader's.
func (db *DB) LSMStatus() lsm.Status {
	if db.w != nil {
		return db.w.Status()
	}
	return db.r.Status()
}

// WALEnabled reports whether remote writes are acknowledged only once in
// the WAL.
func (db *DB) WALEnabled() bool { return db.opts.WAL }
