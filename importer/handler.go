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
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"
	promstorage "github.com/prometheus/prometheus/storage"

	"github.com/shaledb/shale/internal/promreg"
)

// ImportPath is where Handler is served: VictoriaMetrics' path for its
// JSON-line format.
const ImportPath = "/api/v1/import"

// Handler serves POST /api/v1/import: VictoriaMetrics' JSON-line format
// (what its /api/v1/export writes), gzip accepted (Content-Encoding: gzip).
// It appends through app one batch of lines at a time and answers once
// every batch is committed (with the storage's WAL on, durable): 204. A
// malformed line stops the request with 400 naming the line; the lines
// before it are stored, and sending the whole body again is safe (a series
// keeps one value per timestamp). Samples the storage refuses for good
// (older than the retention, invalid labels) get 400 naming them while the
// rest is stored; a storage that cannot take samples now gets 503 with
// Retry-After. A series whose labels the check refuses is refused the same
// way, and not stored.
type Handler struct {
	app    Appendable
	check  LabelCheck
	logger *slog.Logger
	m      handlerMetrics
}

// LabelCheck checks a series' labels before any of its samples is
// appended: the server passes remote write's, so that this endpoint keeps
// the same limits. It returns the reason a refusal is counted by and the
// error, or "" and nil.
type LabelCheck func(labels.Labels) (reason string, err error)

type handlerMetrics struct {
	requests *prometheus.CounterVec
	samples  prometheus.Counter
	refused  *prometheus.CounterVec
}

// NewHandler returns the handler, registering its metrics on reg. check
// may be nil: then only the storage checks labels.
func NewHandler(app Appendable, check LabelCheck, logger *slog.Logger, reg prometheus.Registerer) (*Handler, error) {
	set := promreg.NewSet(reg)
	h := &Handler{app: app, check: check, logger: logger, m: handlerMetrics{
		requests: set.CounterVec("shale_import_requests_total", "Requests to /api/v1/import, by status code.", "code"),
		samples:  set.Counter("shale_import_samples_total", "Samples stored through /api/v1/import."),
		refused:  set.CounterVec("shale_import_refused_samples_total", "Samples /api/v1/import refused for good, by reason.", "reason"),
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
	body := io.Reader(r.Body)
	switch enc := strings.ToLower(r.Header.Get("Content-Encoding")); enc {
	case "", "identity":
	case "gzip":
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			return http.StatusBadRequest, "gzip: " + err.Error()
		}
		defer zr.Close()
		body = zr
	default:
		return http.StatusUnsupportedMediaType, fmt.Sprintf("unsupported Content-Encoding %q (gzip or none)", enc)
	}
	vr, err := NewVMReader(body)
	if err != nil {
		return http.StatusBadRequest, err.Error()
	}
	var refused Refused
	stored := 0
	for {
		b, rerr := vr.Next(handlerBatchSamples)
		if len(b) > 0 {
			ref, n, err := h.commit(r, b)
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
