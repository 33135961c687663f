package lsm

import (
	"context"

	"github.com/shaledb/shale/storage/objstore"
)

// CheckFenced looks for a manifest written by a newer writer. If it finds
// one, this writer becomes fenced (every later write fails with ErrFenced)
// and CheckFenced returns ErrFenced. It costs one LIST, plus one GET when a
// newer manifest exists, so an idle writer can learn it was replaced without
// waiting for its next write.
func (db *DB) CheckFenced(ctx context.Context) error {
	db.mu.Lock()
	err := db.err
	db.mu.Unlock()
	if err == ErrFenced {
		return ErrFenced
	}
	db.commitMu.Lock()
	manID := db.manID
	db.commitMu.Unlock()
	newest, err := db.s.newestManifestID(ctx, manID)
	if err != nil || newest == manID {
		return err
	}
	m, err := db.s.readManifest(ctx, newest)
	if objstore.IsNotFound(err) {
		return nil // collected meanwhile: an even newer one exists; the next check sees it
	}
	if err != nil {
		return err
	}
	if m.WriterEpoch > db.epoch {
		db.logger.Warn("lsm: manifest written by a newer writer; fenced", "manifest", newest, "epoch", m.WriterEpoch)
		db.fail(ErrFenced)
		return ErrFenced
	}
	return nil
}
