//go:build race

package remotewrite

const raceEnabled = true
