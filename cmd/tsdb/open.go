package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/shaledb/shale/cache"
	"github.com/shaledb/shale/storage"
	"github.com/shaledb/shale/storage/lsm"
	"github.com/shaledb/shale/storage/objstore"
)

// openWriter opens the LSM on bucket under prefix as the writer (fencing
// any other), then the time-series engine on it.
func openWriter(ctx context.Context, bucket objstore.Bucket, prefix string, sopts storage.Options, lopts lsm.Options, c cache.Cache, comps storage.Components) (*storage.DB, error) {
	w, err := lsm.Open(ctx, bucket, prefix, storage.LSMOptions(sopts, lopts), lsmComponents(c, comps))
	if err != nil {
		return nil, fmt.Errorf("open LSM: %w", err)
	}
	db, err := storage.Open(ctx, w, sopts, comps)
	if err != nil {
		_ = w.Close()
		return nil, err
	}
	return db, nil
}

// openReader opens a read-only LSM reader on bucket under prefix, then the
// time-series engine on it.
func openReader(ctx context.Context, bucket objstore.Bucket, prefix string, sopts storage.Options, ropts lsm.ReaderOptions, c cache.Cache, comps storage.Components) (*storage.DB, error) {
	r, err := lsm.OpenReader(ctx, bucket, prefix, ropts, lsmComponents(c, comps))
	if err != nil {
		return nil, fmt.Errorf("open LSM reader: %w", err)
	}
	db, err := storage.OpenReadOnly(ctx, r, sopts, comps)
	if err != nil {
		_ = r.Close()
		return nil, err
	}
	return db, nil
}

func lsmComponents(c cache.Cache, comps storage.Components) lsm.Components {
	return storage.LSMComponents(lsm.Components{Cache: c, Logger: comps.Logger, Registerer: comps.Registerer})
}

// tempFileAge is how old a temporary file of the local folder must be for
// the writer to remove it at startup: a put that a crash interrupted left it,
// and no put runs for this long.
const tempFileAge = time.Hour

// removeTempFiles removes the temporary files that puts interrupted by a
// crash left in the local folder (the writer owns the folder, so no other
// process is writing them). A failure is logged: the files only take space.
func removeTempFiles(ctx context.Context, b *objstore.FilesystemBucket, logger *slog.Logger) {
	start := time.Now()
	n, err := b.RemoveTempFiles(ctx, tempFileAge)
	if err != nil {
		logger.Warn("cannot remove the temporary files of interrupted puts", "removed", n, "err", err)
		return
	}
	if n > 0 {
		logger.Info("removed the temporary files of interrupted puts", "removed", n, "older_than", tempFileAge, "duration", time.Since(start))
	}
}
