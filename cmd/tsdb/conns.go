package main

import (
	"io"
	"net"
	"net/http"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/net/netutil"
)

// maxConnections is the most connections the server holds at once
// (--web.max-connections). 0 picks half the process' open-file limit, so
// that a flood of connections cannot take the descriptors the local
// object store, the WAL and the disk cache open files with: past it, new
// connections wait in the kernel's queue and the connections already
// open (a sender's keep-alive ones) go on being served. Below 0: no limit.
func maxConnections(flag int) (limit int, soft, hard uint64) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err == nil {
		soft, hard = uint64(rl.Cur), uint64(rl.Max) // int64 on the BSDs
	}
	switch {
	case flag > 0:
		return flag, soft, hard
	case flag < 0 || soft == 0 || soft >= 1<<40:
		return 0, soft, hard
	}
	return max(int(soft/2), 1), soft, hard
}

// limitListener bounds ln to n connections at once (none for n <= 0).
func limitListener(ln net.Listener, n int) net.Listener {
	if n <= 0 {
		return ln
	}
	return netutil.LimitListener(ln, n)
}

// connTracker registers the gauges of the server's connections and
// returns the http.Server.ConnState hook that keeps the count.
func connTracker(reg prometheus.Registerer, limit int) func(net.Conn, http.ConnState) {
	open := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "shale_http_connections_open",
		Help: "HTTP connections the server holds open.",
	})
	lim := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "shale_http_connections_limit",
		Help: "Most HTTP connections held at once (--web.max-connections); 0: no limit.",
	})
	lim.Set(float64(limit))
	reg.MustRegister(open, lim)
	return func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			open.Inc()
		case http.StateClosed, http.StateHijacked:
			open.Dec()
		}
	}
}

// withStreamingDeadline lets the bodies for which streaming says so
// (imports of history, which may take hours) take as long as they keep
// sending: http.Server.ReadTimeout (d, --web.read-timeout) bounds the
// whole of every other request's reading, theirs only the wait for each
// read.
func withStreamingDeadline(next http.Handler, d time.Duration, streaming func(*http.Request) bool) http.Handler {
	if d <= 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil && r.Body != http.NoBody && streaming(r) {
			rc := http.NewResponseController(w)
			if err := rc.SetReadDeadline(time.Now().Add(d)); err == nil {
				r.Body = &rollingBody{ReadCloser: r.Body, rc: rc, d: d}
			}
		}
		next.ServeHTTP(w, r)
	})
}

// rollingBody moves the read deadline on by d with every read that
// brings bytes.
type rollingBody struct {
	io.ReadCloser
	rc *http.ResponseController
	d  time.Duration
}

func (b *rollingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 && err == nil {
		// Not at the end: there the server clears the deadline itself to
		// watch the connection, and no deadline may come back.
		_ = b.rc.SetReadDeadline(time.Now().Add(b.d))
	}
	return n, err
}
