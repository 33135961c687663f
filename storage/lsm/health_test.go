package lsm

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// logRecorder keeps the level and message of every record logged.
type logRecorder struct {
	mu   sync.Mutex
	recs []string
}

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	if r.Level < slog.LevelInfo {
		return nil
	}
	l.mu.Lock()
	l.recs = append(l.recs, r.Level.String()+" "+r.Message)
	l.mu.Unlock()
	return nil
}
func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logRecorder) WithGroup(string) slog.Handler      { return l }

func (l *logRecorder) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.recs
	l.recs = nil
	return out
}

// TestHealthLogsOncePerInterval: failures cost one WARN per interval however
// many there are, ERROR once they last past stuckAfter, and one INFO when
// requests succeed again; the state gauge follows.
func TestHealthLogsOncePerInterval(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1000, 0)}
	rec := &logRecorder{}
	m, _ := newMetrics(nil) // a nil registry registers nothing and cannot fail
	h := newHealth(clock, slog.New(rec), m)
	state := func(s string) float64 { return testutil.ToFloat64(m.writerState.WithLabelValues(s)) }
	expect := func(what string, want ...string) {
		t.Helper()
		got := rec.take()
		if len(got) != len(want) {
			t.Fatalf("%s: logged %q, want %q", what, got, want)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("%s: logged %q, want %q", what, got, want)
			}
		}
	}
	boom := errors.New("503 SlowDown")

	// A blip: one failure, retried and served at once.
	h.failed(true, "put a", boom)
	h.succeeded(true)
	expect("a blip", "WARN lsm: object store request failed; retrying until it succeeds",
		"INFO lsm: object store requests succeed again")
	// Blips within the interval are not logged again.
	for range 50 {
		clock.Advance(100 * time.Millisecond)
		h.failed(true, "put b", boom)
		h.succeeded(true)
	}
	expect("blips within the interval")
	if state(stateOK) != 1 {
		t.Fatal("state is not ok after the blips")
	}

	// An outage: WARN, then ERROR once per interval after stuckAfter.
	clock.Advance(healthLogInterval)
	for range 30 * 10 {
		h.failed(true, "put c", boom)
		clock.Advance(100 * time.Millisecond)
	}
	expect("a 30 s outage", "WARN lsm: object store request failed; retrying until it succeeds",
		"ERROR lsm: object store still failing; writes cannot be made durable",
		"ERROR lsm: object store still failing; writes cannot be made durable")
	if state(stateStuck) != 1 || state(stateOK) != 0 {
		t.Fatal("state is not stuck during the outage")
	}
	if hh := h.get(); !hh.Failing || hh.FailingFor(clock.Now()) < 29*time.Second || !errors.Is(hh.Err, boom) {
		t.Fatalf("health during the outage: %+v", hh)
	}
	if hh := h.get(); hh.WritesFailingFor(clock.Now()) < 29*time.Second {
		t.Fatalf("writes failing for %v during the outage", hh.WritesFailingFor(clock.Now()))
	}
	// A read that succeeds does not end a failure of writes.
	h.succeeded(false)
	if !h.get().Failing {
		t.Fatal("a successful read ended a failure of writes")
	}
	h.succeeded(true)
	expect("recovery", "INFO lsm: object store requests succeed again")
	if state(stateOK) != 1 || h.get().Failing {
		t.Fatal("not ok after recovery")
	}
	// A store that takes writes but fails the writer's listings is failing,
	// yet writes are not.
	h.failed(false, "list wal/", boom)
	if hh := h.get(); !hh.Failing || hh.WritesFailingFor(clock.Now()) != 0 {
		t.Fatalf("a failed read: %+v", hh)
	}
	h.succeeded(false)
	rec.take()
	h.setFenced()
	h.failed(true, "put d", boom)
	if state(stateFenced) != 1 || !h.get().Fenced {
		t.Fatal("fenced state lost")
	}
}
