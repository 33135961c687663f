package storage

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/prometheus/promql/promqltest"
	promstorage "github.com/prometheus/prometheus/storage"

	"github.com/shaledb/shale/internal/promqlsuite"
	"github.com/shaledb/shale/storage/objstore"
)

// flushingStorage flushes the head after every commit and closes its
// partitions, so queries read what the LSM holds rather than the head.
type flushingStorage struct{ *DB }

func (s flushingStorage) AppenderV2(ctx context.Context) promstorage.AppenderV2 {
	return flushingAppender{AppenderV2: s.DB.AppenderV2(ctx), db: s.DB}
}

type flushingAppender struct {
	promstorage.AppenderV2
	db *DB
}

func (a flushingAppender) Commit() error {
	if err := a.AppenderV2.Commit(); err != nil {
		return err
	}
	return a.db.flushHead(context.Background(), closeAll)
}

// TestPromQLUpstream runs Prometheus' own PromQL test files against this
// storage: with the data in the head, and with it written out to the LSM.
func TestPromQLUpstream(t *testing.T) {
	if testing.Short() {
		t.Skip("long: runs every upstream PromQL test file")
	}
	engine := promqltest.NewTestEngine(t, false, 0, promqltest.DefaultMaxSamplesPerQuery)
	newDB := func(tb testing.TB) *DB {
		opts := DefaultOptions()
		// The test files load whole histories at once, hours apart, into
		// series in any order: accept them all.
		opts.OutOfOrderWindow = 1000 * 24 * time.Hour
		opts.Retention = 0
		db := openTestDB(tb, objstore.NewMemoryBucket(), opts)
		tb.Cleanup(func() { _ = db.Close() })
		return db
	}
	for _, mode := range []string{"head", "flushed"} {
		t.Run("data="+mode, func(t *testing.T) {
			promqlsuite.Run(t, func(t *testing.T, script string) {
				promqltest.RunTestWithStorage(t, script, engine, func(tb testing.TB) promstorage.Storage {
					if mode == "head" {
						return newDB(tb)
					}
					return flushingStorage{newDB(tb)}
				})
			})
		})
	}
}
