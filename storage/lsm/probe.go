package lsm

import (
	"context"
	"errors"
	"fmt"

	"github.com/shaledb/shale/storage/objstore"
)

// ErrNoConditionalWrites is returned by Open when the object store replaced
// an object on a create-if-absent put (If-None-Match: *).
var ErrNoConditionalWrites = errors.New("lsm: the object store does not honour create-if-absent puts (If-None-Match: *)")

// checkConditionalPuts makes sure the store honours create-if-absent puts,
// on which fencing and crash recovery rest: a plug must never replace an
// earlier writer's WAL object, nor one writer's manifest version another's.
// A store that ignores the condition (older S3-compatible servers) would
// let both writers of a race win, and a plug replace acknowledged writes,
// without a word. It puts a probe object twice, create-if-absent, wants the
// second put refused, and deletes the object.
func (db *DB) checkConditionalPuts(ctx context.Context) error {
	name := db.s.paths.probe(newTableID(db.clock.Now()))
	if err := db.s.putIfAbsent(ctx, "probe", name, []byte("first"), true); err != nil {
		return fmt.Errorf("lsm open: create-if-absent probe: %w", err)
	}
	err := db.s.putIfAbsent(ctx, "probe", name, []byte("second"), false)
	if derr := db.s.delete(ctx, name); derr != nil {
		db.logger.Warn("lsm: could not delete the create-if-absent probe; it holds a few bytes", "object", name, "err", derr)
	}
	switch {
	case objstore.IsPreconditionFailed(err):
		return nil
	case err == nil:
		return fmt.Errorf("lsm open: %w: a second create-if-absent put of %s replaced the first. "+
			"Shale needs them for fencing and crash recovery: use a store that supports them "+
			"(AWS S3, versitygw, MinIO and Ceph RGW releases since 2024, ...)", ErrNoConditionalWrites, name)
	}
	return fmt.Errorf("lsm open: create-if-absent probe: %w", err)
}
