//go:build linux

package objstore

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// etagXattr holds an object's ETag on its own inode, set on the temporary
// file before it is published, so it can never describe other content.
const etagXattr = "user.shale.etag"

// setETagXattr stores etag on f. errXattrUnsupported means the filesystem
// keeps no user extended attributes.
func setETagXattr(f *os.File, etag string) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.Fsetxattr(int(fd), etagXattr, []byte(etag), 0)
	}); err != nil {
		return err
	}
	if errors.Is(serr, unix.ENOTSUP) || errors.Is(serr, unix.EPERM) {
		return errXattrUnsupported
	}
	return serr
}

// fileETagXattr returns the ETag stored on f, if any.
func fileETagXattr(f *os.File) (string, bool) {
	rc, err := f.SyscallConn()
	if err != nil {
		return "", false
	}
	var buf [64]byte
	n, gerr := 0, error(nil)
	if err := rc.Control(func(fd uintptr) {
		n, gerr = unix.Fgetxattr(int(fd), etagXattr, buf[:])
	}); err != nil || gerr != nil {
		return "", false
	}
	return validETag(buf[:n])
}

// pathETagXattr returns the ETag stored on the file at path, if any.
func pathETagXattr(path string) (string, bool) {
	var buf [64]byte
	n, err := unix.Lgetxattr(path, etagXattr, buf[:])
	if err != nil {
		return "", false
	}
	return validETag(buf[:n])
}
