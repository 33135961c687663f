//go:build linux

package objstore

import (
	"errors"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// Without renameat2(RENAME_NOREPLACE) (a filesystem that refuses the flag),
// creates fall back to link(2) and keep their guarantees.
func TestFilesystemCreateWithoutRenameNoReplace(t *testing.T) {
	saved := renameNoReplace
	renameNoReplace = func(oldname, newname string) error {
		return &os.LinkError{Op: "renameat2", Old: oldname, New: newname, Err: unix.EINVAL}
	}
	t.Cleanup(func() { renameNoReplace = saved })
	b := newFS(t)
	ctx := t.Context()
	if _, err := PutBytes(ctx, b, "d/once", []byte("first"), PutOptions{IfAbsent: true}); err != nil {
		t.Fatal(err)
	}
	_, err := PutBytes(ctx, b, "d/once", []byte("second"), PutOptions{IfAbsent: true})
	if !IsPreconditionFailed(err) {
		if errors.Is(err, unix.EPERM) {
			t.Skipf("no hard links here either: %v", err)
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
