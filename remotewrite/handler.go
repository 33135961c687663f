package remotewrite

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/klauspost/compress/s2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/metadata"

	"github.com/shaledb/shale/internal/extralabel"
)

// Response headers of remote write 2.0.
const (
	HeaderSamplesWritten    = "X-Prometheus-Remote-Write-Samples-Written"
	HeaderHistogramsWritten = "X-Prometheus-Remote-Write-Histograms-Written"
	HeaderExemplarsWritten  = "X-Prometheus-Remote-Write-Exemplars-Written"
)

// Content types and message names of the two protocol versions.
const (
	ContentTypeV1 = "application/x-protobuf;proto=prometheus.WriteRequest"
	ContentTypeV2 = "application/x-protobuf;proto=io.prometheus.write.v2.Request"

	messageV1 = "prometheus.WriteRequest"
	messageV2 = "io.prometheus.write.v2.Request"
)

// Components are what a Handler is built from besides its Appendable and
// its settings.
type Components struct {
	// Logger receives request failures; nil means slog.Default().
	Logger *slog.Logger
	// Registerer receives the shale_remotewrite_* metrics; nil registers
	// nothing.
	Registerer prometheus.Registerer
	// Now is the clock for the accepted time window and for how often
	// failures are logged; nil means time.Now.
	Now func() time.Time
}

// Handler serves POST /api/v1/write. It is safe for concurrent use.
type Handler struct {
	app    Appendable
	opts   Options
	logger *slog.Logger
	now    func() time.Time
	m      *metrics
	sem    chan struct{}
	states sync.Pool
	// bytesMu guards bytesHeld, the bytes the requests let in hold
	// (max_inflight_bytes).
	bytesMu   sync.Mutex
	bytesHeld int64
	// failLog and rejectLog keep failures from logging a line per request
	// (an outage answers every request 503).
	failLog, rejectLog logLimiter
}

// logInterval is the least time between two log lines of one kind about
// failed requests; the line counts those not logged.
const logInterval = 10 * time.Second

// logLimiter lets one line through per logInterval and counts the rest.
type logLimiter struct {
	mu         sync.Mutex
	last       time.Time
	suppressed int
}

// allow reports whether a line may be logged at now, and how many were
// held back since the last one.
func (l *logLimiter) allow(now time.Time) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.last.IsZero() && now.Sub(l.last) < logInterval {
		l.suppressed++
		return false, 0
	}
	n := l.suppressed
	l.last, l.suppressed = now, 0
	return true, n
}

// NewHandler returns a Handler that appends to app.
func NewHandler(app Appendable, opts Options, comps Components) (*Handler, error) {
	if app == nil {
		return nil, errors.New("remotewrite: nil Appendable")
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	m, err := newMetrics(comps.Registerer)
	if err != nil {
		return nil, fmt.Errorf("remotewrite: register metrics: %w", err)
	}
	h := &Handler{app: app, opts: opts, logger: comps.Logger, now: comps.Now, m: m}
	if h.logger == nil {
		h.logger = slog.Default()
	}
	if h.now == nil {
		h.now = time.Now
	}
	if opts.MaxInflightRequests > 0 {
		h.sem = make(chan struct{}, opts.MaxInflightRequests)
	}
	h.states.New = func() any { return new(reqState) }
	return h, nil
}

// reqState holds everything one request needs; it is pooled so that the
// decode and append path reuses its buffers.
type reqState struct {
	body, raw  []byte
	dec        decoder
	sb, exsb   labels.ScratchBuilder
	ls, exls   labels.Labels
	lbls, exlb []labels.Label // 2.0 labels resolved from symbols
	// extra are the request's extra_label arguments (VictoriaMetrics'),
	// set on every series through extraLbls.
	extra, extraLbls []labels.Label
	symOK            []uint8 // per 2.0 symbol: unchecked, valid or invalid UTF-8
	h                histogram.Histogram
	fh               histogram.FloatHistogram
	slots            []seriesSlot // a batch of series (ingest)
	// Scratch of resolveBatch.
	rIdx   []int
	rLsets []labels.Labels
	rTs    []int64
	rRefs  []SeriesRef

	problems  []string
	nProblems int
}

const (
	maxPooledBody  = 8 << 20
	maxPooledRaw   = 32 << 20
	maxPooledElems = 1 << 20
)

func (h *Handler) putState(st *reqState) {
	if cap(st.body) > maxPooledBody {
		st.body = nil
	}
	if cap(st.raw) > maxPooledRaw {
		st.raw = nil
		st.forget()
	}
	st.dec.reset()
	st.dec.trim(maxPooledElems)
	clear(st.lbls)
	clear(st.exlb)
	st.extra = nil
	clear(st.extraLbls)
	st.symOK = st.symOK[:0]
	st.problems = st.problems[:0]
	st.nProblems = 0
	st.h = histogram.Histogram{}
	st.fh = histogram.FloatHistogram{}
	for i := range st.slots {
		sl := &st.slots[i]
		sl.meta, sl.ref, sl.reason, sl.err = metadata.Metadata{}, 0, "", nil
	}
	h.states.Put(st)
}

// forget drops the references into the decoded body that outlive a request,
// for when the buffer that holds it goes.
func (st *reqState) forget() {
	st.dec.forget()
	st.sb, st.exsb = labels.ScratchBuilder{}, labels.ScratchBuilder{}
	for i := range st.slots {
		st.slots[i].sb = labels.ScratchBuilder{}
	}
}

// result is the outcome of one request.
type result struct {
	code                           int
	msg                            string
	samples, histograms, exemplars int // written
	retryAfter                     bool
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	h.m.inflight.Inc()
	defer h.m.inflight.Dec()

	version, res := h.serve(r)
	if version == 2 {
		hd := w.Header()
		hd.Set(HeaderSamplesWritten, strconv.Itoa(res.samples))
		hd.Set(HeaderHistogramsWritten, strconv.Itoa(res.histograms))
		hd.Set(HeaderExemplarsWritten, strconv.Itoa(res.exemplars))
	}
	code := res.code
	switch {
	case code == http.StatusOK:
		// 204, as the remote-write 2.0 specification recommends and
		// Prometheus answers (1.0 senders take any 2xx).
		code = http.StatusNoContent
		w.WriteHeader(code)
	default:
		h.refuse(w, res)
	}
	h.count(versionLabel(version), code, start)
}

// refuse answers a refused request, remote write or OTLP: its status and
// message, Allow with a 405, Retry-After when trying again may succeed.
func (h *Handler) refuse(w http.ResponseWriter, res result) {
	if res.code == http.StatusMethodNotAllowed {
		w.Header().Set("Allow", http.MethodPost)
	}
	if res.retryAfter {
		w.Header().Set("Retry-After", strconv.Itoa(max(1, int(h.opts.RetryAfter/time.Second))))
	}
	http.Error(w, res.msg, res.code)
}

// count records a finished request of a protocol version ("1.0", "2.0",
// "otlp") in the request metrics.
func (h *Handler) count(version string, code int, start time.Time) {
	h.m.requests.WithLabelValues(version, codeLabel(code)).Inc()
	h.m.duration.WithLabelValues(version).Observe(time.Since(start).Seconds())
}

func fail(code int, format string, args ...any) result {
	return result{code: code, msg: fmt.Sprintf(format, args...)}
}

// enter takes one of the max_inflight_requests slots of a request, false
// when none is free (answer overloaded); leave gives it back.
func (h *Handler) enter() bool {
	if h.sem == nil {
		return true
	}
	select {
	case h.sem <- struct{}{}:
		return true
	default:
		return false
	}
}

func (h *Handler) leave() {
	if h.sem != nil {
		<-h.sem
	}
}

// overloaded is the answer to a request that found no free slot: 429, with
// Retry-After.
func (h *Handler) overloaded() result {
	res := fail(http.StatusTooManyRequests, "overloaded: more than max_inflight_requests=%d requests in flight", h.opts.MaxInflightRequests)
	res.retryAfter = true
	return res
}

// serve handles one request and reports the protocol version (0 when it is
// not known) and the outcome.
func (h *Handler) serve(r *http.Request) (version int, res result) {
	defer func() {
		if p := recover(); p != nil {
			h.logger.Error("remote write: panic while handling request", "panic", p, "stack", string(debug.Stack()))
			res = fail(http.StatusInternalServerError, "internal error")
		}
	}()
	if r.Method != http.MethodPost {
		return 0, fail(http.StatusMethodNotAllowed, "method %s not allowed, use POST", r.Method)
	}
	ct := r.Header.Get("Content-Type")
	version = parseContentType(ct)
	if version == 0 {
		return 0, fail(http.StatusUnsupportedMediaType,
			"unsupported Content-Type %q: want application/x-protobuf with proto=%s (remote write 1.0) or proto=%s (2.0)", ct, messageV1, messageV2)
	}
	if enc := r.Header.Get("Content-Encoding"); enc != "" && !strings.EqualFold(enc, "snappy") {
		return version, fail(http.StatusUnsupportedMediaType, "unsupported Content-Encoding %q: only snappy is supported", enc)
	}
	extra, err := extraLabels(r)
	if err != nil {
		return version, fail(http.StatusBadRequest, "%v", err)
	}
	var a admission
	defer h.release(&a)
	if refused, ok := h.admit(r, &a); !ok {
		return version, refused
	}
	st := a.st
	st.extra = extra

	n, err := s2.DecodedLen(st.body)
	if err != nil {
		return version, fail(http.StatusBadRequest, "snappy: %v", err)
	}
	if int64(n) > h.opts.MaxDecompressedBytes {
		return version, fail(http.StatusRequestEntityTooLarge, "decoded body of %d bytes exceeds max_decompressed_bytes=%d", n, h.opts.MaxDecompressedBytes)
	}
	// The body was counted as it arrived (readBody).
	if !h.reserve(&a, int64(n)) {
		return version, h.overloadedBytes()
	}
	if cap(st.raw) < n {
		st.forget() // strings of earlier requests point into the old buffer
		st.raw = make([]byte, n)
	}
	st.raw, err = s2.Decode(st.raw[:cap(st.raw)], st.body)
	if err != nil {
		return version, fail(http.StatusBadRequest, "snappy: %v", err)
	}

	st.dec.maxSeries = h.opts.MaxSeriesPerRequest
	msgName := messageV1
	if version == 2 {
		msgName = messageV2
	}
	if err = st.dec.decode(st.raw, version); err != nil {
		if errors.Is(err, errTooManySeries) {
			return version, fail(http.StatusRequestEntityTooLarge, "request has more than max_series_per_request=%d series", h.opts.MaxSeriesPerRequest)
		}
		return version, fail(http.StatusBadRequest, "decode %s: %v", msgName, err)
	}
	res = h.ingest(r, st, version, a.held.take())
	h.logOutcome(r, "remote write", version, res.code, res.msg, res.code >= 400)
	return version, res
}

// extraLabels returns the labels the request's extra_label arguments set
// on every series it carries (VictoriaMetrics' ingestion endpoints take
// them, and vmagent's remote-write URLs carry them).
func extraLabels(r *http.Request) ([]labels.Label, error) {
	if r.URL.RawQuery == "" {
		return nil, nil
	}
	return extralabel.Parse(r.URL.Query()[extralabel.Arg])
}

// logOutcome logs the end of a request that was let in, unless it went
// well: at debug level when the client went away (or the server is shutting
// down: nothing of the request was acknowledged, and the sender retries it),
// an error for a failure (5xx), a warning when rejected says samples were
// refused; the last two at most once a second each, with how many were
// left out since the line before.
func (h *Handler) logOutcome(r *http.Request, what string, version, code int, msg string, rejected bool) {
	var (
		level     slog.Level
		line, key string
		limit     *logLimiter
	)
	switch {
	case r.Context().Err() != nil:
		level, line = slog.LevelDebug, ": request canceled"
	case code >= 500:
		level, line, key, limit = slog.LevelError, ": request failed", "failed_since_last_line", &h.failLog
	case rejected:
		level, line, key, limit = slog.LevelWarn, ": request partially rejected", "rejected_since_last_line", &h.rejectLog
	default:
		return // went well: nothing to say, nothing allocated
	}
	attrs := make([]any, 0, 8)
	if version != 0 {
		attrs = append(attrs, "version", versionLabel(version))
	}
	attrs = append(attrs, "code", code, "err", msg)
	if limit != nil {
		ok, n := limit.allow(h.now())
		if !ok {
			return
		}
		attrs = append(attrs, key, n)
	}
	h.logger.Log(r.Context(), level, what+line, attrs...)
}

// admission is what a request let in holds: its Appender, opened before the
// body is read (holdAppender), its pooled state with the body in it, and an
// in-flight slot.
type admission struct {
	held  heldAppender
	st    *reqState
	slot  bool
	bytes int64 // counted against max_inflight_bytes
}

// admit opens r's Appender, reads its body into a pooled state and takes an
// in-flight slot, into a; it returns the answer to a request refused on the
// way and false. The slot is taken once the body is here: a sender slow to
// send it (or one that never does) holds none, and of max_inflight_bytes
// only what it sent. release gives back what a holds, whether or not the
// request was let in.
func (h *Handler) admit(r *http.Request, a *admission) (result, bool) {
	a.held = h.holdAppender(r)
	a.st = h.states.Get().(*reqState)
	var err error
	a.st.body, err = readBody(a.st.body[:0], r.Body, r.ContentLength, h.opts.MaxCompressedBytes, h.counter(a))
	if errors.Is(err, errInflightBytes) {
		return h.overloadedBytes(), false
	}
	if err != nil {
		return bodyError(err, h.opts.MaxCompressedBytes), false
	}
	if !h.enter() {
		return h.overloaded(), false
	}
	a.slot = true
	return result{}, true
}

// reserve counts n more bytes of a's request against max_inflight_bytes;
// it refuses them (answer overloadedBytes) when other requests hold some
// and all would not fit.
func (h *Handler) reserve(a *admission, n int64) bool {
	if h.opts.MaxInflightBytes <= 0 {
		return true
	}
	h.bytesMu.Lock()
	defer h.bytesMu.Unlock()
	if h.bytesHeld > a.bytes && h.bytesHeld+n > h.opts.MaxInflightBytes {
		return false
	}
	h.bytesHeld += n
	a.bytes += n
	h.m.inflightBytes.Set(float64(h.bytesHeld))
	return true
}

// counter returns the function through which readBody counts the bytes of
// a's request as they arrive (nil without max_inflight_bytes).
func (h *Handler) counter(a *admission) func(int64) bool {
	if h.opts.MaxInflightBytes <= 0 {
		return nil
	}
	return func(n int64) bool { return h.reserve(a, n) }
}

// errInflightBytes ends a readBody whose bytes reserve refused.
var errInflightBytes = errors.New("over max_inflight_bytes")

// overloadedBytes is the answer to a request refused by reserve: 429, with
// Retry-After.
func (h *Handler) overloadedBytes() result {
	res := fail(http.StatusTooManyRequests, "overloaded: the requests in flight hold more than max_inflight_bytes=%d bytes", h.opts.MaxInflightBytes)
	res.retryAfter = true
	return res
}

// release gives back what admit and reserve took, in the reverse order.
func (h *Handler) release(a *admission) {
	if a.bytes > 0 {
		h.bytesMu.Lock()
		h.bytesHeld -= a.bytes
		h.m.inflightBytes.Set(float64(h.bytesHeld))
		h.bytesMu.Unlock()
		a.bytes = 0
	}
	if a.slot {
		h.leave()
	}
	if a.st != nil {
		h.putState(a.st)
	}
	a.held.release()
}

// heldAppender is a request's Appender until ingest takes it.
type heldAppender struct{ app Appender }

// holdAppender opens the request's Appender before its body is read: with the
// WAL on, the storage then keeps the WAL object being filled for this request
// while it is read and decoded, rather than letting the object go without it
// (storage/lsm Options.WALMinInterval).
func (h *Handler) holdAppender(r *http.Request) heldAppender {
	return heldAppender{h.app.Appender(r.Context())}
}

// take hands the Appender over to ingest, which commits or rolls it back (a
// panic included).
func (p *heldAppender) take() Appender {
	app := p.app
	p.app = nil
	return app
}

// release rolls back an Appender ingest never took: the request was refused
// before anything was appended.
func (p *heldAppender) release() {
	if p.app != nil {
		_ = p.app.Rollback()
	}
}

// parseContentType returns the protocol version selected by a Content-Type
// header, or 0 when it is not supported.
func parseContentType(ct string) int {
	switch ct {
	case "", "application/x-protobuf", ContentTypeV1:
		return 1
	case ContentTypeV2:
		return 2
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil || mt != "application/x-protobuf" {
		return 0
	}
	switch params["proto"] {
	case "", messageV1:
		return 1
	case messageV2:
		return 2
	}
	return 0
}

var errBodyTooLarge = errors.New("body too large")

// bodyError is the answer to a body that could not be read whole.
func bodyError(err error, limit int64) result {
	if errors.Is(err, errBodyTooLarge) {
		return fail(http.StatusRequestEntityTooLarge, "request body exceeds max_compressed_bytes=%d", limit)
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return fail(http.StatusRequestEntityTooLarge, "request body: %v", err)
	}
	return fail(http.StatusBadRequest, "read request body: %v", err)
}

// maxBodyPrealloc bounds what readBody allocates on a Content-Length's word
// alone: more is allocated as the bytes arrive, so that a sender that
// announces max_compressed_bytes and sends nothing costs no more.
const maxBodyPrealloc = 1 << 20

// countChunk is how many bytes readBody reads between two calls of count.
const countChunk = 64 << 10

// readBody reads r into dst (reusing its capacity), failing with
// errBodyTooLarge once more than limit bytes arrive. count, when not nil,
// is told of the bytes as they arrive (every countChunk, and at the end);
// once it refuses them readBody fails with errInflightBytes.
func readBody(dst []byte, r io.Reader, contentLength, limit int64, count func(int64) bool) ([]byte, error) {
	if contentLength > limit {
		return dst, errBodyTooLarge
	}
	counted := 0
	flush := func() bool {
		if count == nil || len(dst) == counted {
			return true
		}
		ok := count(int64(len(dst) - counted))
		counted = len(dst)
		return ok
	}
	if contentLength > 0 && contentLength <= maxBodyPrealloc {
		if int64(cap(dst)) < contentLength {
			dst = make([]byte, 0, contentLength)
		}
		dst = dst[:contentLength]
		_, err := io.ReadFull(r, dst)
		if err == nil && !flush() {
			err = errInflightBytes
		}
		return dst, err
	}
	if cap(dst) == 0 {
		dst = make([]byte, 0, 64<<10)
	}
	for {
		if len(dst) == cap(dst) {
			dst = append(dst, 0)[:len(dst)]
		}
		n, err := r.Read(dst[len(dst):cap(dst)])
		dst = dst[:len(dst)+n]
		if int64(len(dst)) > limit {
			return dst, errBodyTooLarge
		}
		if (len(dst)-counted >= countChunk || err == io.EOF) && !flush() {
			return dst, errInflightBytes
		}
		if err == io.EOF {
			return dst, nil
		}
		if err != nil {
			return dst, err
		}
	}
}
