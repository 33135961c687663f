package writeback

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// TestWriterWritesEveryByte writes bodies of sizes around the chunk's in one
// write and in many uneven ones: the file holds exactly the body, and each
// Write reports all of its bytes written.
func TestWriterWritesEveryByte(t *testing.T) {
	sizes := []int{0, 1, Chunk - 1, Chunk, Chunk + 1, 3*Chunk + 12345}
	for _, size := range sizes {
		body := make([]byte, size)
		_, _ = rand.NewChaCha8([32]byte{byte(size)}).Read(body)
		for _, piece := range []int{size, 7919, Chunk / 3} {
			f := newFile(t)
			w := NewWriter(f)
			for rest := body; len(rest) > 0; {
				n := min(max(piece, 1), len(rest))
				m, err := w.Write(rest[:n])
				if err != nil || m != n {
					t.Fatalf("size %d, pieces of %d: Write = %d, %v; want %d, nil", size, piece, m, err, n)
				}
				rest = rest[n:]
			}
			got, err := os.ReadFile(f.Name())
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, body) {
				t.Fatalf("size %d, pieces of %d: the file holds %d bytes, not the %d written", size, piece, len(got), size)
			}
			if want := int64(size) / Chunk * Chunk; w.p.Started() != want {
				t.Fatalf("size %d, pieces of %d: writeback started for %d bytes, want %d (every whole chunk)", size, piece, w.p.Started(), want)
			}
		}
	}
}

// TestWriterReturnsWriteError: a write that fails says how much it wrote.
func TestWriterReturnsWriteError(t *testing.T) {
	f := newFile(t)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	n, err := NewWriter(f).Write(make([]byte, 2*Chunk))
	if !errors.Is(err, os.ErrClosed) || n != 0 {
		t.Fatalf("Write to a closed file = %d, %v; want 0, os.ErrClosed", n, err)
	}
}

func newFile(t *testing.T) *os.File {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}
