//go:build race

// Package race tells tests whether the binary has the race detector, for the
// few that are too slow under it or that watch only a third-party client
// there.
package race

// Enabled is true when the binary is built with -race.
const Enabled = true
