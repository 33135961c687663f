package writeback

import (
	"fmt"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// recordRanges replaces sync_file_range with a recorder of its calls, as
// "wait|write off+n" or "write off+n" in chunks, and the file's size in
// chunks at the call, "@size".
func recordRanges(t *testing.T) *[]string {
	t.Helper()
	var calls []string
	real := syncFileRange
	syncFileRange = func(fd int, off, n int64, flags int) error {
		kind := "write"
		if flags&unix.SYNC_FILE_RANGE_WAIT_AFTER != 0 {
			kind = "wait|write"
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			t.Error(err)
		}
		calls = append(calls, fmt.Sprintf("%s %d+%d @%g", kind, off/Chunk, n/Chunk, float64(st.Size)/Chunk))
		return real(fd, off, n, flags)
	}
	t.Cleanup(func() { syncFileRange = real })
	return &calls
}

// TestRangesStartedInOrder: each whole chunk's writeback is started once,
// as soon as it is written (a large write is split), after waiting for the
// chunk before it; the last, partial one is left to the fsync;
// Progress.Wrote with bytes written by WriteAt does the same.
func TestRangesStartedInOrder(t *testing.T) {
	calls := recordRanges(t)
	f := newFile(t)
	w := NewWriter(f)
	if _, err := w.Write(make([]byte, 3*Chunk+Chunk/2)); err != nil {
		t.Fatal(err)
	}
	want := []string{"write 0+1 @1", "wait|write 0+1 @2", "write 1+1 @2", "wait|write 1+1 @3", "write 2+1 @3"}
	if !slices.Equal(*calls, want) {
		t.Fatalf("sync_file_range calls %q, want %q", *calls, want)
	}

	*calls = nil
	g := newFile(t)
	var p Progress
	if _, err := g.WriteAt(make([]byte, 2*Chunk+1), 0); err != nil {
		t.Fatal(err)
	}
	p.Wrote(g, 2*Chunk+1)
	p.Wrote(g, 2*Chunk+1) // nothing new
	if _, err := g.WriteAt(make([]byte, Chunk), 2*Chunk+1); err != nil {
		t.Fatal(err)
	}
	p.Wrote(g, 3*Chunk+1)
	const c2, c3 = 2 + 1.0/Chunk, 3 + 1.0/Chunk
	want = []string{"write 0+1 @" + fmt.Sprint(c2), "wait|write 0+1 @" + fmt.Sprint(c2), "write 1+1 @" + fmt.Sprint(c2),
		"wait|write 1+1 @" + fmt.Sprint(c3), "write 2+1 @" + fmt.Sprint(c3)}
	if !slices.Equal(*calls, want) {
		t.Fatalf("sync_file_range calls %q, want %q", *calls, want)
	}
	if p.Started() != 3*Chunk {
		t.Fatalf("started %d, want %d", p.Started(), 3*Chunk)
	}
}
