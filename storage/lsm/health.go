package lsm

import (
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Health is what a writer knows of its object store's health.
type Health struct {
	// Failing is true while the last write or the last read of the
	// writer's own bookkeeping failed and nothing of that kind has
	// succeeded since: the writer is retrying.
	Failing bool
	// Since is when the failures began; zero when not Failing.
	Since time.Time
	// WritesSince is when writes (puts, checkpoint deletes) began to fail; zero while
	// they succeed. A store that takes writes but fails listings (GC, the
	// fence check) is Failing, yet the writer still persists.
	WritesSince time.Time
	// Op and Err are the last failure's operation and object, and its error.
	Op  string
	Err error
	// LastPersist is when a write last succeeded (the DB's open, before the
	// first).
	LastPersist time.Time
	// Fenced is true once a newer writer took over.
	Fenced bool
}

// FailingFor is how long the store has been failing at now; 0 when it is not.
func (h Health) FailingFor(now time.Time) time.Duration {
	if !h.Failing {
		return 0
	}
	return now.Sub(h.Since)
}

// WritesFailingFor is how long writes have been failing at now; 0 while
// they succeed.
func (h Health) WritesFailingFor(now time.Time) time.Duration {
	if h.WritesSince.IsZero() {
		return 0
	}
	return now.Sub(h.WritesSince)
}

// Writer states for shale_lsm_writer_state.
const (
	stateOK       = "ok"
	stateRetrying = "retrying"
	stateStuck    = "stuck"
	stateFenced   = "fenced"
)

// stuckAfter is how long failures last before the writer reports itself
// stuck and logs at ERROR.
const stuckAfter = 10 * time.Second

// healthLogInterval is the least time between two log lines about one
// outage.
const healthLogInterval = 10 * time.Second

// health tracks the outcome of a writer's object-store requests: it logs
// WARN at a failure, ERROR while failures last past stuckAfter, each at most
// once per healthLogInterval, and INFO once requests succeed again after a
// logged failure, so an outage or a store that drops one request in ten
// costs a few log lines, not one per request.
type health struct {
	clock  Clock
	logger *slog.Logger

	mu sync.Mutex
	// writeErr and readErr are the last failure of each kind of request,
	// nil once a request of that kind succeeds: a store that serves reads
	// but refuses writes is failing, and so is one that takes writes but
	// fails the listings the writer needs.
	writeErr, readErr error
	since             time.Time
	writesSince       time.Time
	op                string
	err               error
	lastPersist       time.Time
	lastLog           time.Time
	failures          int  // since the failures began
	sinceLog          int  // since the last log line
	warned            bool // a line was logged about these failures
	fenced            bool

	state     *prometheus.GaugeVec
	persisted prometheus.Gauge
}

func newHealth(clock Clock, logger *slog.Logger, m *metrics) *health {
	h := &health{clock: clock, logger: logger, lastPersist: clock.Now(), state: m.writerState, persisted: m.lastPersist}
	h.setStateLocked(stateOK)
	h.persisted.Set(float64(h.lastPersist.UnixNano()) / 1e9)
	return h
}

func (h *health) setStateLocked(s string) {
	for _, st := range []string{stateOK, stateRetrying, stateStuck, stateFenced} {
		v := 0.0
		if st == s {
			v = 1
		}
		h.state.WithLabelValues(st).Set(v)
	}
}

// succeeded records a successful request; write says whether it changed the
// store.
func (h *health) succeeded(write bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.clock.Now()
	if write {
		h.lastPersist = now
		h.persisted.Set(float64(now.UnixNano()) / 1e9)
		h.writeErr = nil
		h.writesSince = time.Time{}
	} else {
		h.readErr = nil
	}
	if h.since.IsZero() || h.writeErr != nil || h.readErr != nil {
		return
	}
	failing := now.Sub(h.since)
	if h.warned {
		h.logger.Info("lsm: object store requests succeed again", "failing_for", failing.Round(time.Millisecond),
			"failed_requests", h.failures)
	}
	h.since, h.op, h.err, h.failures, h.warned = time.Time{}, "", nil, 0, false
	if !h.fenced {
		h.setStateLocked(stateOK)
	}
}

// failed records a failed request that will be retried. A request that
// fails now and then (a 503 SlowDown, a reset) is retried at once and costs
// at most one WARN line per healthLogInterval, with the count since the
// last; failures that last past stuckAfter log ERROR once per interval.
func (h *health) failed(write bool, op string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.clock.Now()
	if write {
		h.writeErr = err
		if h.writesSince.IsZero() {
			h.writesSince = now
		}
	} else {
		h.readErr = err
	}
	h.op, h.err = op, err
	h.failures++
	h.sinceLog++
	if h.since.IsZero() {
		h.since = now
		if !h.fenced {
			h.setStateLocked(stateRetrying)
		}
	}
	failing := now.Sub(h.since)
	if failing >= stuckAfter && !h.fenced {
		h.setStateLocked(stateStuck)
	}
	if now.Sub(h.lastLog) < healthLogInterval {
		return
	}
	h.lastLog, h.warned = now, true
	if failing >= stuckAfter {
		h.logger.Error("lsm: object store still failing; writes cannot be made durable", "failing_for", failing.Round(time.Second),
			"failed_requests", h.sinceLog, "last_persist", h.lastPersist.Format(time.RFC3339), "op", op, "err", err)
	} else {
		h.logger.Warn("lsm: object store request failed; retrying until it succeeds", "failed_requests", h.sinceLog, "op", op, "err", err)
	}
	h.sinceLog = 0
}

func (h *health) setFenced() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.fenced = true
	h.setStateLocked(stateFenced)
}

func (h *health) get() Health {
	h.mu.Lock()
	defer h.mu.Unlock()
	return Health{
		Failing:     !h.since.IsZero(),
		Since:       h.since,
		WritesSince: h.writesSince,
		Op:          h.op,
		Err:         h.err,
		LastPersist: h.lastPersist,
		Fenced:      h.fenced,
	}
}

// Health reports how the writer's object-store requests fare.
func (db *DB) Health() Health { return db.s.health.get() }
