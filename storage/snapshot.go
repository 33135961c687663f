package storage

import (
	"context"
	"fmt"

	"github.com/shaledb/shale/storage/lsm"
)

// Snapshot keeps the database as it is now under name, as an LSM
// checkpoint (lsm.DB.Checkpoint): withHead first writes the head's samples
// out (as Flush does), so that every sample acknowledged before the call is
// in it; without, it holds what the head had written out already. The
// checkpoint's objects stay in the store until it is deleted
// (lsm.DeleteCheckpoint); lsm.CopyCheckpoint makes a database of it
// elsewhere. While the store has been failing for longer than
// Options.WriteTimeout it fails at once with ErrUnavailable.
func (db *DB) Snapshot(ctx context.Context, name string, withHead bool) (lsm.CheckpointInfo, error) {
	if db.w == nil {
		return lsm.CheckpointInfo{}, ErrReadOnly
	}
	if db.isClosed() {
		return lsm.CheckpointInfo{}, ErrClosed
	}
	// A bad name is refused before the head is written out for nothing.
	if err := lsm.ValidCheckpointName(name); err != nil {
		return lsm.CheckpointInfo{}, err
	}
	// A store failing for longer than the write timeout would keep the
	// caller waiting until it comes back (ErrUnavailable: retry later).
	if err := db.checkWritable(); err != nil {
		return lsm.CheckpointInfo{}, fmt.Errorf("snapshot %s: %w", name, err)
	}
	if withHead {
		if err := db.Flush(ctx); err != nil {
			return lsm.CheckpointInfo{}, fmt.Errorf("snapshot %s: write the head out: %w", name, err)
		}
	}
	return db.w.Checkpoint(ctx, name)
}
