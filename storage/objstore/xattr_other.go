//go:build !linux

package objstore

import "os"

func setETagXattr(*os.File, string) error   { return errXattrUnsupported }
func fileETagXattr(*os.File) (string, bool) { return "", false }
func pathETagXattr(string) (string, bool)   { return "", false }
