package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// faultKind is what the fault proxy did with one request.
type faultKind int

const (
	faultNone     faultKind = iota // forwarded and answered
	faultSlowDown                  // answered 503 SlowDown without forwarding
	faultReset                     // connection reset without forwarding
	faultDrop                      // forwarded (the store applied it), then the connection reset instead of the answer
	faultTruncate                  // a GET's answer cut off: its headers and half its body, then a connection reset
	faultCorrupt                   // a GET's answer with one bit of its body flipped, its length and headers unchanged
	faultStall                     // a GET's answer stalls: its headers and half its body, then nothing until the client gives up
	faultRefused                   // outage: connection reset without forwarding
	faultHung                      // outage: held until the outage ended or the client gave up, never forwarded
	numFaultKinds
)

var faultNames = [numFaultKinds]string{"forwarded", "slowdown", "reset", "drop", "truncate", "corrupt", "stall", "outage-refused", "outage-hung"}

// lastMixed is the last kind of fault a mix weighs.
const lastMixed = faultStall

// faultMix weighs the kinds of fault a request may get, faultSlowDown to
// lastMixed in order (any scale).
type faultMix [lastMixed - faultSlowDown + 1]float64

// onlyGET reports whether kind is done to GET answers only (those with a
// body worth cutting or flipping); another request drawn for it is
// forwarded untouched.
func (k faultKind) onlyGET() bool {
	return k == faultTruncate || k == faultCorrupt || k == faultStall
}

func (k faultKind) String() string { return faultNames[k] }

// s3Op is the kind of S3 request, as billed.
type s3Op int

const (
	opGET    s3Op = iota // GetObject (ranged or not)
	opHEAD               // HeadObject, billed as a GET
	opPUT                // PutObject, UploadPart, CreateBucket
	opPOST               // multipart create and complete, DeleteObjects; billed as a PUT
	opLIST               // ListObjectsV2, ListMultipartUploads, ListBuckets
	opDELETE             // DeleteObject, AbortMultipartUpload; free
	opOther
	numOps
)

var opNames = [numOps]string{"GET", "HEAD", "PUT", "POST", "LIST", "DELETE", "other"}

func (o s3Op) String() string { return opNames[o] }

// classifyS3 derives the S3 operation of a path-style request
// (/bucket/key?query) from its method, path and query.
func classifyS3(method, path string, query url.Values) s3Op {
	rest := strings.TrimPrefix(path, "/")
	_, key, _ := strings.Cut(rest, "/")
	switch method {
	case http.MethodGet:
		if key == "" || query.Has("list-type") || query.Has("uploads") {
			return opLIST
		}
		return opGET
	case http.MethodHead:
		return opHEAD
	case http.MethodPut:
		return opPUT
	case http.MethodPost:
		return opPOST
	case http.MethodDelete:
		return opDELETE
	}
	return opOther
}

// outageMode is how the store behaves while it is away.
type outageMode int

const (
	outageOff    outageMode = iota
	outageRefuse            // every request is answered by a connection reset
	outageHang              // every request is held without an answer
)

func parseOutageMode(s string) (outageMode, error) {
	switch s {
	case "refuse":
		return outageRefuse, nil
	case "hang":
		return outageHang, nil
	}
	return outageOff, fmt.Errorf("outage mode %q: want refuse or hang", s)
}

func (m outageMode) String() string {
	switch m {
	case outageRefuse:
		return "refuse"
	case outageHang:
		return "hang"
	}
	return "off"
}

// faultConfig says what the fault proxy injects.
type faultConfig struct {
	// Latency is added to every forwarded or faulted request (not to those
	// of an outage).
	Latency time.Duration
	// Rate is the fraction of requests that get a fault, 0..1.
	Rate float64
	// Mix weighs the kinds of fault.
	Mix  faultMix
	Seed uint64
}

// defaultFaultConfig is 50 ms of latency and 10 % of requests faulted,
// evenly split among 503 SlowDown, reset and lost answer.
func defaultFaultConfig() faultConfig {
	return faultConfig{Latency: 50 * time.Millisecond, Rate: 0.10, Mix: faultMix{1, 1, 1}, Seed: 1}
}

// parseFaultMix parses "slowdown=1,reset=1,drop=1" (missing kinds weigh 0).
func parseFaultMix(s string) (faultMix, error) {
	var mix faultMix
	for part := range strings.SplitSeq(s, ",") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		name, val, ok := strings.Cut(part, "=")
		w, err := strconv.ParseFloat(val, 64)
		if !ok || err != nil || w < 0 {
			return mix, fmt.Errorf("fault mix %q: want kind=weight with a weight of at least 0", part)
		}
		i := slices.Index(faultNames[faultSlowDown:lastMixed+1], strings.TrimSpace(name))
		if i < 0 {
			return mix, fmt.Errorf("fault mix: unknown kind %q (%s)", name, strings.Join(faultNames[faultSlowDown:lastMixed+1], ", "))
		}
		mix[i] = w
	}
	var total float64
	for _, w := range mix {
		total += w
	}
	if total <= 0 {
		return mix, fmt.Errorf("fault mix %q: no kind has a positive weight", s)
	}
	return mix, nil
}

// pickFault maps two uniform draws in [0, 1) to a fault: u decides whether
// the request gets one (u < rate), v which kind by the weights of mix.
func pickFault(rate float64, mix faultMix, u, v float64) faultKind {
	if u >= rate {
		return faultNone
	}
	var total float64
	for _, w := range mix {
		total += w
	}
	x, last := v*total, 0
	for i, w := range mix {
		if w <= 0 {
			continue
		}
		if x < w {
			return faultSlowDown + faultKind(i)
		}
		x, last = x-w, i
	}
	return faultSlowDown + faultKind(last) // v*total rounded up to total
}

// proxyCounts is what the fault proxy saw, by hour since it started.
type proxyCounts struct {
	// Ops[h][op] counts the requests that arrived in hour h, faulted ones
	// included (a store bills what it answers; the proxy cannot know which
	// of the faulted ones a real store would have billed).
	Ops [][numOps]int64
	// Faults counts the requests by what was done with them.
	Faults [numFaultKinds]int64
}

// totalOps sums the requests of every hour by operation.
func (c proxyCounts) totalOps() [numOps]int64 {
	var t [numOps]int64
	for _, h := range c.Ops {
		for op, n := range h {
			t[op] += n
		}
	}
	return t
}

// faultProxy is an HTTP reverse proxy in front of an S3 server that adds
// latency, injects 503 SlowDown answers, connection resets and lost answers
// at a configurable rate, and can take the store away (an outage). It
// forwards the Host header as received, so SigV4 signatures stay valid.
//
// It is an http.Handler for an HTTP/1.1 server (resets need Hijack). Its
// methods are safe for concurrent use.
type faultProxy struct {
	target    *url.URL
	transport *http.Transport
	now       func() time.Time
	start     time.Time

	mu        sync.Mutex
	cfg       faultConfig
	rng       *rand.Rand
	outage    outageMode
	outageEnd chan struct{} // closed when the current outage ends
	counts    proxyCounts

	closed    chan struct{}
	closeOnce sync.Once
	// holding, if set, is called when a request starts being held by a
	// hanging outage (tests wait for it).
	holding func()

	// trace holds the forwarded requests since startTrace, while tracing.
	tracing bool
	trace   []proxyEvent
}

// proxyEvent is one request the proxy forwarded and answered, as a trace
// records it.
type proxyEvent struct {
	Start  time.Time // when the request reached the proxy
	Sent   time.Time // when it was forwarded (after the added latency)
	End    time.Time // when the answer's body was sent
	Op     s3Op
	Path   string
	Range  string // the Range header, if any
	Status int
	Bytes  int64 // bytes of the answer's body
}

// startTrace starts recording the requests the proxy forwards (dropping
// what an earlier trace recorded).
func (p *faultProxy) startTrace() {
	p.mu.Lock()
	p.tracing, p.trace = true, nil
	p.mu.Unlock()
}

// takeTrace returns the requests recorded since startTrace, in the order
// they ended, and stops recording.
func (p *faultProxy) takeTrace() []proxyEvent {
	p.mu.Lock()
	defer p.mu.Unlock()
	tr := p.trace
	p.tracing, p.trace = false, nil
	return tr
}

// record adds ev to the trace while tracing.
func (p *faultProxy) record(ev proxyEvent) {
	p.mu.Lock()
	if p.tracing {
		p.trace = append(p.trace, ev)
	}
	p.mu.Unlock()
}

// newFaultProxy returns a proxy to the server at target (http://host:port).
// now is the clock of the hourly counts (time.Now when nil).
func newFaultProxy(target string, cfg faultConfig, now func() time.Time) (*faultProxy, error) {
	u, err := url.Parse(target)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("fault proxy target %q: want http://host:port", target)
	}
	if now == nil {
		now = time.Now
	}
	return &faultProxy{
		target: u,
		transport: &http.Transport{
			Proxy:               nil,
			DisableCompression:  true, // pass bodies through untouched
			MaxIdleConnsPerHost: 256,
			DialContext:         (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
		},
		now:    now,
		start:  now(),
		cfg:    cfg,
		rng:    rand.New(rand.NewPCG(cfg.Seed, 0x5eed)),
		closed: make(chan struct{}),
	}, nil
}

// setFaults replaces the fault settings (latency, rate, mix).
func (p *faultProxy) setFaults(cfg faultConfig) {
	p.mu.Lock()
	p.cfg = cfg
	p.mu.Unlock()
}

// startOutage takes the store away until endOutage.
func (p *faultProxy) startOutage(m outageMode) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.outage != outageOff {
		return
	}
	p.outage = m
	p.outageEnd = make(chan struct{})
}

// endOutage brings the store back; requests held by a hanging outage get a
// connection reset.
func (p *faultProxy) endOutage() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.outage == outageOff {
		return
	}
	p.outage = outageOff
	close(p.outageEnd)
}

// snapshot returns a copy of the counts.
func (p *faultProxy) snapshot() proxyCounts {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.counts
	c.Ops = append([][numOps]int64(nil), p.counts.Ops...)
	return c
}

// close releases held requests and idle upstream connections.
func (p *faultProxy) close() {
	p.closeOnce.Do(func() { close(p.closed) })
	p.transport.CloseIdleConnections()
}

// decide counts the request and returns what to do with it, the latency to
// add, the channel that ends a hanging outage and a uniform draw in [0, 1)
// that places a corruption.
func (p *faultProxy) decide(op s3Op) (faultKind, time.Duration, chan struct{}, float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	h := max(0, int(p.now().Sub(p.start)/time.Hour))
	for len(p.counts.Ops) <= h {
		p.counts.Ops = append(p.counts.Ops, [numOps]int64{})
	}
	p.counts.Ops[h][op]++
	k := faultNone
	switch p.outage {
	case outageRefuse:
		k = faultRefused
	case outageHang:
		k = faultHung
	default:
		k = pickFault(p.cfg.Rate, p.cfg.Mix, p.rng.Float64(), p.rng.Float64())
		if k.onlyGET() && op != opGET {
			k = faultNone
		}
	}
	p.counts.Faults[k]++
	if k == faultRefused || k == faultHung {
		return k, 0, p.outageEnd, 0
	}
	return k, p.cfg.Latency, nil, p.rng.Float64()
}

// recount moves one request counted as from to to: a GET drawn for a
// truncation or corruption whose answer had no body to spoil is forwarded.
func (p *faultProxy) recount(from, to faultKind) {
	p.mu.Lock()
	p.counts.Faults[from]--
	p.counts.Faults[to]++
	p.mu.Unlock()
}

func (p *faultProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	t0 := time.Now()
	op := classifyS3(r.Method, r.URL.Path, r.URL.Query())
	kind, latency, outageEnd, draw := p.decide(op)
	ctx := r.Context()
	switch kind {
	case faultRefused:
		resetConn(w)
		return
	case faultHung:
		if p.holding != nil {
			p.holding()
		}
		select {
		case <-outageEnd:
		case <-ctx.Done():
		case <-p.closed:
		}
		resetConn(w)
		return
	}
	if latency > 0 {
		t := time.NewTimer(latency)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		case <-p.closed:
			t.Stop()
			resetConn(w)
			return
		}
	}
	switch kind {
	case faultSlowDown:
		_, _ = io.Copy(io.Discard, r.Body) // keep the connection usable
		writeSlowDown(w, r)
		return
	case faultReset:
		resetConn(w)
		return
	}
	sent := time.Now()
	resp, err := p.forward(ctx, r)
	if err != nil {
		// The store itself failed; a gateway error is what a client sees.
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	if kind == faultDrop {
		// The store applied the request; the client never learns it.
		_, _ = io.Copy(io.Discard, resp.Body)
		resetConn(w)
		return
	}
	if kind.onlyGET() && (resp.StatusCode/100 != 2 || resp.ContentLength < 2) {
		p.recount(kind, faultNone)
		kind = faultNone
	}
	h := w.Header()
	for k, vs := range resp.Header {
		if !hopByHop(k) {
			h[k] = vs
		}
	}
	switch kind {
	case faultTruncate:
		// The client was promised the whole body and gets half of it.
		w.WriteHeader(resp.StatusCode)
		_, _ = io.CopyN(w, resp.Body, resp.ContentLength/2)
		if f, ok := w.(http.Flusher); ok {
			f.Flush() // Hijack drops what the response still buffers
		}
		resetConn(w)
		return
	case faultStall:
		// The answer starts and then nothing comes, the connection open:
		// a client without a read deadline waits for ever.
		w.WriteHeader(resp.StatusCode)
		_, _ = io.CopyN(w, resp.Body, resp.ContentLength/2)
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
		select {
		case <-ctx.Done():
		case <-p.closed:
		}
		resetConn(w)
		return
	case faultCorrupt:
		body, err := io.ReadAll(resp.Body)
		if err != nil || int64(len(body)) != resp.ContentLength {
			resetConn(w)
			return
		}
		bit := int(draw * float64(8*len(body)))
		body[bit/8] ^= 1 << (bit % 8)
		w.WriteHeader(resp.StatusCode)
		_, _ = w.Write(body)
		return
	}
	w.WriteHeader(resp.StatusCode)
	n, _ := io.Copy(w, resp.Body)
	p.record(proxyEvent{Start: t0, Sent: sent, End: time.Now(), Op: op, Path: r.URL.Path,
		Range: r.Header.Get("Range"), Status: resp.StatusCode, Bytes: n})
}

// forward sends r to the target with its Host header and body unchanged.
func (p *faultProxy) forward(ctx context.Context, r *http.Request) (*http.Response, error) {
	out := r.Clone(ctx)
	out.RequestURI = ""
	out.URL.Scheme = p.target.Scheme
	out.URL.Host = p.target.Host
	out.Host = r.Host // part of the SigV4 signature
	if r.ContentLength == 0 {
		out.Body = nil
	}
	for k := range out.Header {
		if hopByHop(k) {
			out.Header.Del(k)
		}
	}
	// The proxy has already read the headers; the store need not ask for
	// the body again.
	out.Header.Del("Expect")
	return p.transport.RoundTrip(out)
}

func hopByHop(k string) bool {
	switch http.CanonicalHeaderKey(k) {
	case "Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization",
		"Te", "Trailer", "Transfer-Encoding", "Upgrade":
		return true
	}
	return false
}

// slowDownBody is the error document AWS S3 sends with a 503 SlowDown.
const slowDownBody = `<?xml version="1.0" encoding="UTF-8"?>
<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message><Resource>%s</Resource><RequestId>%s</RequestId><HostId>%s</HostId></Error>`

func writeSlowDown(w http.ResponseWriter, r *http.Request) {
	id := strconv.FormatInt(time.Now().UnixNano(), 16)
	var res strings.Builder
	_ = xmlEscape(&res, r.URL.Path)
	body := fmt.Sprintf(slowDownBody, res.String(), id, "tsdb-bench-fault-proxy")
	h := w.Header()
	h.Set("Content-Type", "application/xml")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("x-amz-request-id", id)
	w.WriteHeader(http.StatusServiceUnavailable)
	if r.Method != http.MethodHead {
		_, _ = io.WriteString(w, body)
	}
}

func xmlEscape(w io.Writer, s string) error {
	r := strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;", "'", "&apos;")
	_, err := r.WriteString(w, s)
	return err
}

// resetConn takes the connection from the server and closes it with a TCP
// RST (linger 0), as a store that drops the connection does.
func resetConn(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic(http.ErrAbortHandler) // HTTP/2: the server aborts the stream
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		return
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}

// serveProxy serves p on a fresh 127.0.0.1 port and returns its base URL
// and a function that stops it.
func serveProxy(p *faultProxy) (string, func(), error) {
	l, err := listenLoopback()
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: p, ReadHeaderTimeout: time.Minute}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(l) }()
	return "http://" + l.Addr().String(), func() {
		p.close()
		_ = srv.Close()
		<-done
	}, nil
}
