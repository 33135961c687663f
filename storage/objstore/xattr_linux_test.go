//go:build linux

package objstore

import (
	"testing"

	"golang.org/x/sys/unix"
)

func setXattrForTest(t *testing.T, path, value string) {
	t.Helper()
	if err := unix.Setxattr(path, etagXattr, []byte(value), 0); err != nil {
		t.Skipf("no extended attributes here: %v", err)
	}
}

// Where the filesystem keeps extended attributes, listings carry the ETag.
func TestFilesystemListETag(t *testing.T) {
	b := newFS(t)
	a, _ := PutBytes(t.Context(), b, "d/k", []byte("v"), PutOptions{})
	if b.noXattr.Load() {
		t.Skip("no extended attributes here")
	}
	page, err := b.List(t.Context(), "", "", 0)
	if err != nil || len(page.Objects) != 1 || page.Objects[0].ETag != a.ETag {
		t.Fatalf("list = %+v, %v; want ETag %s", page.Objects, err, a.ETag)
	}
}
