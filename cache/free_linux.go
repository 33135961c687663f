package cache

import "syscall"

// freeBytes returns the bytes an unprivileged writer may still write on the
// filesystem of dir.
func freeBytes(dir string) (int64, bool) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, false
	}
	return int64(st.Bavail) * st.Bsize, true
}
