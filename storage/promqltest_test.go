package storage

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/promql/promqltest"
	promstorage "github.com/prometheus/prometheus/storage"

	"github.com/shaledb/shale/storage/objstore"
)

// skippedPromQLFiles are upstream test files this storage does not pass, and why.
var skippedPromQLFiles = map[string]string{
	"start_timestamps.test": "Shale does not store per-sample start (created) timestamps; AtST is always 0",
}

// upstreamPromQLTestFiles returns the paths of the PromQL test files of the
// Prometheus module this build uses.
func upstreamPromQLTestFiles(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/prometheus/prometheus").Output()
	if err != nil {
		t.Fatalf("locate the prometheus module: %v", err)
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), "promql", "promqltest", "testdata")
	files, err := filepath.Glob(filepath.Join(dir, "*.test"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no PromQL test files in %s (%v)", dir, err)
	}
	return files
}

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
	files := upstreamPromQLTestFiles(t)
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
			for _, fn := range files {
				name := filepath.Base(fn)
				t.Run(name, func(t *testing.T) {
					if why, ok := skippedPromQLFiles[name]; ok {
						t.Skip(why)
					}
					content, err := os.ReadFile(fn)
					if err != nil {
						t.Fatal(err)
					}
					promqltest.RunTestWithStorage(t, string(content), engine, func(tb testing.TB) promstorage.Storage {
						if mode == "head" {
							return newDB(tb)
						}
						return flushingStorage{newDB(tb)}
					})
				})
			}
		})
	}
}
