package fsync

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestFileAndDir: File and Dir succeed on a file and a folder.
func TestFileAndDir(t *testing.T) {
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "a"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString("durable"); err != nil {
		t.Fatal(err)
	}
	if err := File(f); err != nil {
		t.Fatalf("File: %v", err)
	}
	if err := Dir(dir); err != nil {
		t.Fatalf("Dir: %v", err)
	}
	if err := Dir(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Dir of a missing folder: %v, want not exist", err)
	}
}

// TestFileErrorsAsSync: a file File cannot sync fails as f.Sync fails.
func TestFileErrorsAsSync(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	want := w.Sync()
	if want == nil {
		t.Fatal("fsync of a pipe succeeded; the test needs a file without fsync")
	}
	if err := File(w); err == nil || err.Error() != want.Error() {
		t.Fatalf("File of a pipe: %v, want %v", err, want)
	}
	f, err := os.Create(filepath.Join(t.TempDir(), "closed"))
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := File(f); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("File of a closed file: %v, want %v", err, os.ErrClosed)
	}
}
