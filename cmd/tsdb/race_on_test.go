//go:build race

package main

// raceEnabled is true when the test binary has the race detector.
const raceEnabled = true
