package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/shaledb/shale/internal/e2e"
	"github.com/shaledb/shale/storage/objstore"
)

// A put that a crash interrupted leaves a temporary file in the local
// folder; the writer removes such files at startup once they are an hour
// old, and leaves younger ones (a put of another process may be running).
func TestWriterRemovesStaleTempFiles(t *testing.T) {
	skipEndToEnd(t)
	dir := t.TempDir()
	stale := filepath.Join(dir, "wal", objstore.TempFilePrefix+"crashed")
	young := filepath.Join(dir, objstore.TempFilePrefix+"running")
	if err := os.MkdirAll(filepath.Dir(stale), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{stale, young} {
		if err := os.WriteFile(p, []byte("half an object"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(stale, old, old); err != nil {
		t.Fatal(err)
	}

	s := startShale(t, "--storage.path="+dir)
	defer s.stop(t)
	e2e.Eventually(t, 30*time.Second, func() bool {
		_, err := os.Stat(stale)
		return os.IsNotExist(err)
	}, "the stale temporary file %s to be removed", stale)
	if _, err := os.Stat(young); err != nil {
		t.Fatalf("the young temporary file: %v", err)
	}
}
