package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/prometheus/prompb"

	"github.com/shaledb/shale/internal/e2e"
	"github.com/shaledb/shale/storage/objstore/objstoretest"
)

// tcpProxy forwards connections to a backend until it is cut, which closes
// its listener and every connection: to its clients the store is gone, as
// when an S3 endpoint goes down. restore listens on the same port again.
type tcpProxy struct {
	t       *testing.T
	addr    string
	backend string

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]bool
	wg    sync.WaitGroup
}

func newTCPProxy(t *testing.T, backend string) *tcpProxy {
	p := &tcpProxy{t: t, addr: fmt.Sprintf("127.0.0.1:%d", e2e.FreePort(t)), backend: backend, conns: map[net.Conn]bool{}}
	p.restore()
	t.Cleanup(func() {
		p.cut()
		p.wg.Wait()
	})
	return p
}

func (p *tcpProxy) restore() {
	p.t.Helper()
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		p.t.Fatalf("proxy listen: %v", err)
	}
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			b, err := net.Dial("tcp", p.backend)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns[c], p.conns[b] = true, true
			p.mu.Unlock()
			p.wg.Add(2)
			pipe := func(dst, src net.Conn) {
				defer p.wg.Done()
				_, _ = io.Copy(dst, src)
				dst.Close()
				src.Close()
			}
			go pipe(b, c)
			go pipe(c, b)
		}
	}()
}

func (p *tcpProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

// TestObjectStoreOutage runs the server on a real S3-compatible server
// behind a proxy, and takes the store away: remote writes get 503 with
// Retry-After within the write timeout, /-/ready says why it is not ready
// while queries are still served, and once the store is back the writer
// carries on by itself. A SIGTERM during an outage ends the process within
// its shutdown timeout, and every acknowledged sample is there after a
// restart.
func TestObjectStoreOutage(t *testing.T) {
	skipEndToEnd(t)
	t.Parallel()
	endpoint, err := url.Parse(objstoretest.Server(t).Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	proxy := newTCPProxy(t, endpoint.Host)
	cfgPath := s3ConfigFile(t, "http://"+proxy.addr, "outage")
	const writeTimeout = 2 * time.Second
	const shutdownTimeout = 6 * time.Second
	args := []string{"--objstore.config-file=" + cfgPath, "--storage.write-timeout=" + writeTimeout.String(),
		"--web.shutdown-timeout=" + shutdownTimeout.String()}
	s := startShale(t, args...)

	base := time.Now().Add(-10 * time.Minute).Truncate(time.Second).UnixMilli()
	series := func(b int) []prompb.TimeSeries {
		ts := loadSeries(20)
		for i := range ts {
			ts[i].Samples[0] = prompb.Sample{Timestamp: base + int64(b)*1000, Value: float64(b)}
		}
		return ts
	}
	acked := map[int]bool{}
	write := func(b int) (int, http.Header, time.Duration) {
		t.Helper()
		start := time.Now()
		code, hdr, _, err := remoteWriteHeaders(s.url, series(b))
		if err != nil {
			t.Fatalf("batch %d: %v", b, err)
		}
		if code/100 == 2 {
			acked[b] = true
		}
		return code, hdr, time.Since(start)
	}
	status := func(path string) (int, string) {
		t.Helper()
		return sendGet(t, s.url+path)
	}

	b := 0
	for ; b < 5; b++ {
		if code, _, _ := write(b); code/100 != 2 {
			t.Fatalf("batch %d before the outage: status %d", b, code)
		}
	}

	proxy.cut()
	for i := 0; i < 4; i++ {
		code, hdr, took := write(b)
		b++
		if code != http.StatusServiceUnavailable {
			t.Fatalf("write %d during the outage: status %d, want 503", i, code)
		}
		if hdr.Get("Retry-After") == "" {
			t.Fatalf("503 without Retry-After")
		}
		if took > writeTimeout+time.Second {
			t.Fatalf("write %d during the outage answered after %v, past the write timeout of %v", i, took, writeTimeout)
		}
	}
	code, body := status("/-/ready")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "object store") {
		t.Fatalf("/-/ready during the outage: %d %q", code, body)
	}
	if code, _ := status("/-/healthy"); code != http.StatusOK {
		t.Fatalf("/-/healthy during the outage: %d", code)
	}
	if code, body := status("/api/v1/query?query=count(e2e_load)"); code != http.StatusOK {
		t.Fatalf("query during the outage: %d %s", code, body)
	}

	proxy.restore()
	back := time.Now()
	e2e.Eventually(t, 15*time.Second, func() bool {
		code, _, _ := write(b)
		b++
		return code/100 == 2
	}, "a remote write to succeed after the store came back")
	e2e.Eventually(t, 15*time.Second, func() bool {
		code, _ := status("/-/ready")
		return code == http.StatusOK
	}, "ready after the store came back")
	t.Logf("writer recovered %v after the store came back", time.Since(back).Round(time.Millisecond))
	for i := 0; i < 3; i++ {
		if code, _, _ := write(b); code/100 != 2 {
			t.Fatalf("write after recovery: %d", code)
		}
		b++
	}

	// SIGTERM while the store is gone: bounded by the shutdown timeout.
	proxy.cut()
	if code, _, _ := write(b); code != http.StatusServiceUnavailable {
		t.Fatalf("write in the second outage: %d", code)
	}
	b++
	start := time.Now()
	if err := s.proc.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	e2e.Eventually(t, shutdownTimeout+10*time.Second, func() bool {
		exited, _ := s.proc.Exited()
		return exited
	}, "the server to exit after SIGTERM during an outage")
	if took := time.Since(start); took > shutdownTimeout+2*time.Second {
		t.Fatalf("shutdown during an outage took %v, past --web.shutdown-timeout=%v", took, shutdownTimeout)
	}
	if _, err := s.proc.Exited(); err == nil {
		t.Fatalf("a shutdown that could not flush exited 0")
	}
	if out := s.proc.Output(); !strings.Contains(out, "in the write-ahead log") {
		t.Fatalf("the shutdown log does not say where the unflushed samples are:\n%s", out)
	}

	proxy.restore()
	s = startShale(t, args...)
	defer s.stop(t)
	for bb := range acked {
		var res []vectorSample
		queryResult(t, s.url, "/api/v1/query", url.Values{
			"query": {"count(e2e_load == " + fmt.Sprint(bb) + ")"},
			"time":  {fmt.Sprintf("%.3f", float64(base+int64(bb)*1000)/1000)},
		}, &res)
		if len(res) != 1 || res[0].Value[1] != "20" {
			t.Fatalf("acknowledged batch %d after the restart: %v", bb, res)
		}
	}
}
