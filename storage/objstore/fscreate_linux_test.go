//go:build linux

package objstore

import (
	"errors"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// Without hard links, creates fall back to renameat2(RENAME_NOREPLACE) and
// keep their guarantees.
func TestFilesystemCreateWithoutHardLinks(t *testing.T) {
	hardLink = func(oldname, newname string) error {
		return &os.LinkError{Op: "link", Old: oldname, New: newname, Err: unix.EPERM}
	}
	t.Cleanup(func() { hardLink = os.Link })
	b := newFS(t)
	ctx := t.Context()
	if _, err := PutBytes(ctx, b, "d/once", []byte("first"), PutOptions{IfAbsent: true}); err != nil {
		t.Fatal(err)
	}
	_, err := PutBytes(ctx, b, "d/once", []byte("second"), PutOptions{IfAbsent: true})
	if !IsPreconditionFailed(err) {
		if errors.Is(err, unix.EPERM) {
			t.Skipf("no renameat2 here either: %v", err)
		}
		t.Fatalf("second create: %v", err)
	}
	if got, _ := ReadAll(ctx, b, "d/once"); string(got) != "first" {
		t.Fatalf("content %q", got)
	}
	if left := tempFiles(t, b.Dir()); len(left) > 0 {
		t.Fatalf("temporary files left: %q", left)
	}
	testConcurrentCreates(t, b)
}

func testConcurrentCreates(t *testing.T, b Bucket) {
	t.Helper()
	const writers = 16
	errs := make(chan error, writers)
	for i := range writers {
		go func() {
			_, err := PutBytes(t.Context(), b, "race", []byte{byte(i)}, PutOptions{IfAbsent: true})
			errs <- err
		}()
	}
	wins := 0
	for range writers {
		switch err := <-errs; {
		case err == nil:
			wins++
		case !IsPreconditionFailed(err):
			t.Fatal(err)
		}
	}
	if wins != 1 {
		t.Fatalf("%d creates won", wins)
	}
}
