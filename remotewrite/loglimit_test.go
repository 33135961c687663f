package remotewrite

import (
	"testing"
	"time"
)

// TestLogLimiter: one line per interval, and the next line counts those
// held back.
func TestLogLimiter(t *testing.T) {
	var l logLimiter
	t0 := time.Unix(100, 0)
	if ok, n := l.allow(t0); !ok || n != 0 {
		t.Fatalf("first line: %v %d", ok, n)
	}
	for i := 1; i <= 5; i++ {
		if ok, _ := l.allow(t0.Add(time.Duration(i) * time.Second)); ok {
			t.Fatalf("line %d within the interval let through", i)
		}
	}
	if ok, n := l.allow(t0.Add(logInterval)); !ok || n != 5 {
		t.Fatalf("line after the interval: %v, %d held back; want true, 5", ok, n)
	}
}
