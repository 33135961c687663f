package importer

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"
	promstorage "github.com/prometheus/prometheus/storage"

	"github.com/shaledb/shale/internal/extralabel"
	"github.com/shaledb/shale/internal/promreg"
)

// ImportPath is where Handler is served: VictoriaMetrics' path for its
// JSON-line format.
const ImportPath = "/api/v1/import"

// Handler serves POST /api/v1/import: VictoriaMetrics' JSON-line format
// (what its /api/v1/export writes), gzip accepted (Content-Encoding: gzip).
// It appends through app at most handlerBatchSamples samples a
// transaction (a line with more, one series' whole history, is cut) and
// answers once every batch is committed (with the storage's WAL on,
// durable): 204. A malformed line stops the request with 400 naming the
// line; the lines before it are stored, and sending the whole body again is
// safe (a series keeps one value per timestamp). Samples the storage
// refuses for good (older than the retention, invalid labels) get 400
// naming them while the rest is stored; a storage that cannot take samples
// now gets 503 with Retry-After. A series whose labels the check refuses is
// refused the same way, and not stored.
//
// At most HandlerOptions.MaxConcurrent imports run at once, each holding
// up to a line (MaxVMLineBytes) and its decoded samples; more wait for a
// turn, up to QueueWait, then get 503 with Retry-After, as
// VictoriaMetrics answers inserts beyond -maxConcurrentInserts.
type Handler struct {
	app       Appendable
	check     LabelCheck
	slots     chan struct{}
	queueWait time.Duration
	logger    *slog.Logger
	m         handlerMetrics
}

// HandlerOptions are the import endpoint's settings.
type HandlerOptions struct {
	// Check, when set, checks each series' labels before its samples are
	// appended; otherwise only the storage checks them.
	Check LabelCheck
	// MaxConcurrent is how many imports run at once. 0 picks
	// DefaultMaxConcurrentImports.
	MaxConcurrent int
	// QueueWait is how long an import waits for a turn before it is
	// answered 503. 0 picks a minute.
	QueueWait time.Duration
}

// DefaultMaxConcurrentImports is twice the CPUs the process may use, as
// VictoriaMetrics bounds its inserts: an import is CPU-bound once its body
// arrives, so more at once only hold more memory.
func DefaultMaxConcurrentImports() int { return 2 * runtime.GOMAXPROCS(0) }

// LabelCheck checks a series' labels before any of its samples is
// appended: the server passes remote write's, so that this endpoint keeps
// the same limits. It returns the reason a refusal is counted by and the
// error, or "" and nil.
type LabelCheck func(labels.Labels) (reason string, err error)

type handlerMetrics struct {
	requests *prometheus.CounterVec
	samples  prometheus.Counter
	refused  *prometheus.CounterVec
	running  prometheus.Gauge
	waiting  prometheus.Gauge
}

// NewHandler returns the handler, registering its metrics on reg.
func NewHandler(app Appendable, opts HandlerOptions, logger *slog.Logger, reg prometheus.Registerer) (*Handler, error) {
	if opts.MaxConcurrent < 0 || opts.QueueWait < 0 {
		return nil, fmt.Errorf("import: negative limit (max concurrent %d, queue wait %v)", opts.MaxConcurrent, opts.QueueWait)
	}
	if opts.MaxConcurrent == 0 {
		opts.MaxConcurrent = DefaultMaxConcurrentImports()
	}
	if opts.QueueWait == 0 {
		opts.QueueWait = time.Minute
	}
	set := promreg.NewSet(reg)
	h := &Handler{app: app, check: opts.Check, slots: make(chan struct{}, opts.MaxConcurrent), queueWait: opts.QueueWait,
		logger: logger, m: handlerMetrics{
			requests: set.CounterVec("shale_import_requests_total", "Requests to /api/v1/import, by status code.", "code"),
			samples:  set.Counter("shale_import_samples_total", "Samples stored through /api/v1/import."),
			refused:  set.CounterVec("shale_import_refused_samples_total", "Samples /api/v1/import refused for good, by reason.", "reason"),
			running:  set.Gauge("shale_import_running_requests", "Requests to /api/v1/import being read and stored (at most --import.max-concurrent)."),
			waiting:  set.Gauge("shale_import_waiting_requests", "Requests to /api/v1/import waiting for a turn (--import.max-concurrent)."),
		}}
	if err := set.Err(); err != nil {
		return nil, err
	}
	return h, nil
}

// handlerBatchSamples is how many samples the handler commits at a time.
const handlerBatchSamples = 16 << 10

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	code, msg := h.serve(w, r)
	h.m.requests.WithLabelValues(strconv.Itoa(code)).Inc()
	if code == http.StatusNoContent {
		w.WriteHeader(code)
		return
	}
	if code == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	if code == http.StatusMethodNotAllowed {
		w.Header().Set("Allow", http.MethodPost)
	}
	http.Error(w, msg, code)
}

func (h *Handler) serve(w http.ResponseWriter, r *http.Request) (int, string) {
	if r.Method != http.MethodPost {
		return http.StatusMethodNotAllowed, "use POST"
	}
	enc := strings.ToLower(r.Header.Get("Content-Encoding"))
	if enc != "" && enc != "identity" && enc != "gzip" {
		return http.StatusUnsupportedMediaType, fmt.Sprintf("unsupported Content-Encoding %q (gzip or none)", enc)
	}
	extra, err := extralabel.Parse(r.URL.Query()[extralabel.Arg])
	if err != nil {
		return http.StatusBadRequest, err.Error()
	}
	// The turn is taken before the body is read: what an import holds
	// (a line, its samples, a transaction) is held from then on.
	if msg := h.wait(r.Context()); msg != "" {
		return http.StatusServiceUnavailable, msg
	}
	h.m.running.Inc()
	defer func() {
		h.m.running.Dec()
		<-h.slots
	}()
	body := io.Reader(r.Body)
	if enc == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			return http.StatusBadRequest, "gzip: " + err.Error()
		}
		defer zr.Close()
		body = zr
	}
	vr, err := NewVMReader(body)
	if err != nil {
		return http.StatusBadRequest, err.Error()
	}
	var refused Refused
	stored := 0
	for {
		b, rerr := vr.Next(handlerBatchSamples)
		if len(extra) > 0 {
			b.setLabels(extra)
		}
		for part := range b.split(handlerBatchSamples) {
			ref, n, err := h.commit(r, part)
			refused.add(ref)
			stored += n
			if err != nil {
				if retryable(err) {
					return http.StatusServiceUnavailable, fmt.Sprintf("storage unavailable; retry (samples of earlier lines are stored): %v", err)
				}
				h.logger.Error("import: commit failed", "err", err)
				return http.StatusInternalServerError, fmt.Sprintf("storage error (samples of earlier lines may be stored): %v", err)
			}
		}
		if errors.Is(rerr, io.EOF) {
			break
		}
		if rerr != nil {
			var mbe *http.MaxBytesError
			if errors.As(rerr, &mbe) {
				return http.StatusRequestEntityTooLarge, rerr.Error()
			}
			return http.StatusBadRequest, fmt.Sprintf("%v (the %d lines before it are stored: %d samples; sending the whole body again is safe)", rerr, vr.Line()-1, stored)
		}
	}
	h.m.samples.Add(float64(stored))
	if refused.Total() > 0 {
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(refused.Reasons)) {
			h.m.refused.WithLabelValues(k).Add(float64(refused.Reasons[k]))
			parts = append(parts, fmt.Sprintf("%d %s", refused.Reasons[k], k))
		}
		return http.StatusBadRequest, fmt.Sprintf("%d samples refused (%s); the other %d are stored; the first: %s", refused.Total(), strings.Join(parts, ", "), stored, refused.First)
	}
	return http.StatusNoContent, ""
}

// wait takes a turn to run, waiting up to the queue wait; it returns why
// not when it cannot.
func (h *Handler) wait(ctx context.Context) string {
	select {
	case h.slots <- struct{}{}:
		return ""
	default:
	}
	h.m.waiting.Inc()
	defer h.m.waiting.Dec()
	t := time.NewTimer(h.queueWait)
	defer t.Stop()
	select {
	case h.slots <- struct{}{}:
		return ""
	case <-t.C:
		return fmt.Sprintf("too many imports at once: %d running, this one waited %v for a turn (--import.max-concurrent); retry", cap(h.slots), h.queueWait)
	case <-ctx.Done():
		return fmt.Sprintf("gave up waiting for a turn among %d running imports: %v", cap(h.slots), context.Cause(ctx))
	}
}

// commit appends b in one transaction, retrying none of it: the sender
// retries. It returns what it refused and how many samples it stored.
func (h *Handler) commit(r *http.Request, b Batch) (Refused, int, error) {
	start := time.Now()
	var refused Refused
	// Not the request's context: a body that fails to arrive ends it (the
	// server cancels it on a read error), and the lines read before are
	// still committed, as the answer says. The storage bounds the wait.
	app := h.app.Appender(context.WithoutCancel(r.Context()))
	n := 0
	for _, ser := range b {
		if h.check != nil {
			if reason, err := h.check(ser.Labels); err != nil {
				refused.AddN(false, reason, len(ser.Samples))
				if refused.First == "" {
					refused.First = fmt.Sprintf("series %s: %v", truncate(ser.Labels.String(), 256), err)
				}
				continue
			}
		}
		var ref promstorage.SeriesRef
		for _, smp := range ser.Samples {
			rf, err := app.Append(ref, ser.Labels, 0, smp.T, smp.V)
			if err != nil {
				if reason, bad := refusal(err); bad {
					refused.Add(false, reason)
					if refused.First == "" {
						refused.First = err.Error()
					}
					continue
				}
				_ = app.Rollback()
				return refused, 0, fmt.Errorf("append to %s: %w", ser.Labels, err)
			}
			ref = rf
			n++
		}
	}
	if err := app.Commit(); err != nil {
		return refused, 0, err
	}
	h.logger.Debug("import: batch committed", "samples", n, "duration", time.Since(start))
	return refused, n, nil
}

// truncate cuts s to at most n bytes, marking the cut, at a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}
