//go:build race

package promql

const raceEnabled = true
