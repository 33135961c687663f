//go:build linux

package objstore

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
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
	b.unnamed = false // creates through a temporary name
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

// Creates if absent go through an unnamed file (O_TMPFILE) where the
// folder allows it, as it does here: the same guarantees as through a
// temporary name, and nothing left behind, not even by the probe.
func TestFilesystemCreateUnnamed(t *testing.T) {
	b := newFS(t)
	if !b.unnamed {
		t.Skip("this filesystem or kernel has no O_TMPFILE; creates use temporary names")
	}
	ctx := t.Context()
	if left := tempFiles(t, b.Dir()); len(left) > 0 {
		t.Fatalf("the probe left %q", left)
	}
	a, err := PutBytes(ctx, b, "d/e/once", []byte("first"), PutOptions{IfAbsent: true})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := b.Attributes(ctx, "d/e/once"); err != nil || got.ETag != a.ETag || got.Size != 5 {
		t.Fatalf("attributes %+v, %v; put said %+v", got, err, a)
	}
	if _, err := PutBytes(ctx, b, "d/e/once", []byte("second"), PutOptions{IfAbsent: true}); !IsPreconditionFailed(err) {
		t.Fatalf("second create: %v, want a failed precondition", err)
	}
	if got, _ := ReadAll(ctx, b, "d/e/once"); string(got) != "first" {
		t.Fatalf("content %q", got)
	}
	if _, err := PutBytes(ctx, b, "d", []byte("x"), PutOptions{IfAbsent: true}); err == nil || !strings.Contains(err.Error(), "taken by a directory") {
		t.Fatalf("create over a directory: %v", err)
	}
	// A body shorter than announced stores nothing.
	if _, err := b.Put(ctx, "d/short", strings.NewReader("abc"), 4, PutOptions{IfAbsent: true}); err == nil {
		t.Fatal("short body stored")
	}
	if _, err := b.Attributes(ctx, "d/short"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("short body: %v, want not found", err)
	}
	if fi, err := os.Stat(filepath.Join(b.Dir(), "d", "e", "once")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode: %v %v", fi, err)
	}
	testConcurrentCreates(t, b)
	if left := tempFiles(t, b.Dir()); len(left) > 0 {
		t.Fatalf("temporary files left: %q", left)
	}
}

// A directory below the root that refuses O_TMPFILE (another filesystem
// mounted there) takes the temporary name instead, the body unread until
// then.
func TestFilesystemCreateUnnamedRefusedBelowRoot(t *testing.T) {
	b := newFS(t)
	if !b.unnamed {
		t.Skip("this filesystem or kernel has no O_TMPFILE; creates use temporary names")
	}
	saved := openUnnamed
	openUnnamed = func(string) (*os.File, error) { return nil, errUnnamedUnsupported }
	t.Cleanup(func() { openUnnamed = saved })
	ctx := t.Context()
	body := strings.NewReader("first") // not a bytes.Reader: read once
	if _, err := b.Put(ctx, "m/once", body, 5, PutOptions{IfAbsent: true}); err != nil {
		t.Fatal(err)
	}
	if got, _ := ReadAll(ctx, b, "m/once"); string(got) != "first" {
		t.Fatalf("content %q", got)
	}
	if _, err := PutBytes(ctx, b, "m/once", []byte("second"), PutOptions{IfAbsent: true}); !IsPreconditionFailed(err) {
		t.Fatalf("second create: %v, want a failed precondition", err)
	}
	if left := tempFiles(t, b.Dir()); len(left) > 0 {
		t.Fatalf("temporary files left: %q", left)
	}
}
