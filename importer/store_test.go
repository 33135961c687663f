package importer_test

import (
	"context"
	"log/slog"
	"os"
	"testing"

	"github.com/shaledb/shale/importer"
	"github.com/shaledb/shale/storage"
	"github.com/shaledb/shale/storage/lsm"
	"github.com/shaledb/shale/storage/objstore"
)

// store is Shale's storage opened as the import opens it alone.
type store struct {
	db   *storage.DB
	stop func()
}

func openStore(t testing.TB, dir string, opts storage.Options) *store {
	t.Helper()
	ctx := context.Background()
	b, err := objstore.NewFilesystemBucket(dir)
	if err != nil {
		t.Fatal(err)
	}
	lopts := lsm.DefaultOptions()
	lopts.WALFlushInterval = 10e6 // 10ms, as the server's default on a folder
	comps := storage.Components{Logger: slog.New(slog.DiscardHandler)}
	w, err := lsm.Open(ctx, b, "", storage.LSMOptions(opts, lopts), storage.LSMComponents(lsm.Components{Logger: comps.Logger}))
	if err != nil {
		t.Fatal(err)
	}
	db, err := storage.Open(ctx, w, opts, comps)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = db.Run(runCtx) }()
	s := &store{db: db}
	s.stop = func() {
		cancel()
		<-done
		if err := db.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		b.Close()
	}
	return s
}

func testStorageOptions() storage.Options {
	o := storage.DefaultOptions()
	o.Retention = 0
	return o
}

func hasWAL(dir string) bool {
	_, err := os.Stat(dir + "/wal")
	return err == nil
}

// appendable is the adapter cmd/tsdb uses.
type appendable struct{ db *storage.DB }

func (a appendable) Appender(ctx context.Context) importer.Appender { return a.db.IngestAppender(ctx) }
