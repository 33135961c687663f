//go:build !unix

package lsm

// processRuns cannot tell here: a lease is taken to be live until it ages.
func processRuns(int) bool { return true }
