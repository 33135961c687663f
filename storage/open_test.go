package storage

import (
	"context"

	"github.com/shaledb/shale/cache"
	"github.com/shaledb/shale/storage/lsm"
	"github.com/shaledb/shale/storage/objstore"
)

// openOn opens the writer's LSM on b under prefix as the server does, then
// the engine on it.
func openOn(ctx context.Context, b objstore.Bucket, prefix string, opts Options, lopts lsm.Options, c cache.Cache, comps Components) (*DB, error) {
	w, err := lsm.Open(ctx, b, prefix, LSMOptions(opts, lopts), LSMComponents(lsm.Components{Cache: c, Logger: comps.Logger, Registerer: comps.Registerer}))
	if err != nil {
		return nil, err
	}
	db, err := Open(ctx, w, opts, comps)
	if err != nil {
		_ = w.Close()
		return nil, err
	}
	return db, nil
}

// openReadOnlyOn is openOn for a read-only replica.
func openReadOnlyOn(ctx context.Context, b objstore.Bucket, prefix string, opts Options, ropts lsm.ReaderOptions, c cache.Cache, comps Components) (*DB, error) {
	r, err := lsm.OpenReader(ctx, b, prefix, ropts, LSMComponents(lsm.Components{Cache: c, Logger: comps.Logger, Registerer: comps.Registerer}))
	if err != nil {
		return nil, err
	}
	db, err := OpenReadOnly(ctx, r, opts, comps)
	if err != nil {
		_ = r.Close()
		return nil, err
	}
	return db, nil
}
