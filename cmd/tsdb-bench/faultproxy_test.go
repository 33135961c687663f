package main

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shaledb/shale/storage/objstore"

	"github.com/shaledb/shale/internal/versitygw"
)

// recordingBackend is an S3 stand-in that records what reached it.
type recordingBackend struct {
	mu     sync.Mutex
	hits   int
	bodies map[string][]byte // PUT bodies by path
	hosts  []string
}

func (b *recordingBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	b.mu.Lock()
	b.hits++
	b.hosts = append(b.hosts, r.Host)
	if r.Method == http.MethodPut {
		if b.bodies == nil {
			b.bodies = map[string][]byte{}
		}
		b.bodies[r.URL.Path] = body
	}
	b.mu.Unlock()
	w.Header().Set("ETag", `"abc"`)
	_, _ = io.WriteString(w, "answer to "+r.Method+" "+r.URL.RequestURI())
}

func (b *recordingBackend) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.hits
}

// newTestProxy serves a fault proxy with cfg in front of backend and
// returns it and its base URL; both stop when t ends.
func newTestProxy(t *testing.T, backend http.Handler, cfg faultConfig, now func() time.Time) (*faultProxy, string) {
	t.Helper()
	srv := httptest.NewServer(backend)
	t.Cleanup(srv.Close)
	p, err := newFaultProxy(srv.URL, cfg, now)
	if err != nil {
		t.Fatal(err)
	}
	u, stop, err := serveProxy(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return p, u
}

// freshClient makes one connection per request, so that a reset is never
// retried by the transport on another connection.
func freshClient(t *testing.T) *http.Client {
	t.Helper()
	tr := &http.Transport{DisableKeepAlives: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

func do(t *testing.T, c *http.Client, method, u string, body []byte) (*http.Response, []byte, error) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, u, rd)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, b, err
}

// isConnError reports whether err is what a client sees when the
// connection is reset under it.
func isConnError(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

func TestFaultProxyForwardsWithLatency(t *testing.T) {
	be := &recordingBackend{}
	cfg := faultConfig{Latency: 40 * time.Millisecond, Mix: faultMix{1, 1, 1}}
	_, base := newTestProxy(t, be, cfg, nil)
	c := freshClient(t)
	t0 := time.Now()
	resp, body, err := do(t, c, http.MethodPut, base+"/bucket/some/key?x-id=PutObject", []byte("payload"))
	took := time.Since(t0)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || string(body) != "answer to PUT /bucket/some/key?x-id=PutObject" || resp.Header.Get("ETag") != `"abc"` {
		t.Fatalf("answer %d %q %v, want the backend's", resp.StatusCode, body, resp.Header)
	}
	if took < cfg.Latency {
		t.Errorf("request took %s, want at least the added %s", took, cfg.Latency)
	}
	be.mu.Lock()
	defer be.mu.Unlock()
	if got := string(be.bodies["/bucket/some/key"]); got != "payload" {
		t.Errorf("backend got body %q", got)
	}
	// The Host header is part of a SigV4 signature: it must reach the
	// store as the client sent it.
	if want := strings.TrimPrefix(base, "http://"); be.hosts[0] != want {
		t.Errorf("backend saw Host %q, want the proxy's %q", be.hosts[0], want)
	}
}

// faultedRequest sends one request through a proxy that gives every request
// the fault kind (slowdown, reset or drop), checks that the proxy counted it,
// and returns the backend and what the client got.
func faultedRequest(t *testing.T, kind faultKind, method, path string, body []byte) (*recordingBackend, *http.Response, []byte, error) {
	t.Helper()
	var mix faultMix
	mix[kind-faultSlowDown] = 1
	be := &recordingBackend{}
	p, base := newTestProxy(t, be, faultConfig{Rate: 1, Mix: mix}, nil)
	resp, b, err := do(t, freshClient(t), method, base+path, body)
	if c := p.snapshot(); c.Faults[kind] != 1 {
		t.Errorf("faults %v, want one %s", c.Faults, faultNames[kind])
	}
	return be, resp, b, err
}

func TestFaultProxySlowDown(t *testing.T) {
	be, resp, body, err := faultedRequest(t, faultSlowDown, http.MethodPut, "/bucket/k", []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Content-Type") != "application/xml" {
		t.Fatalf("status %d, Content-Type %q; want 503 application/xml", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var e struct {
		XMLName   xml.Name `xml:"Error"`
		Code      string
		Message   string
		Resource  string
		RequestId string //nolint:revive // S3's element name
	}
	if err := xml.Unmarshal(body, &e); err != nil {
		t.Fatalf("503 body is not XML: %v\n%s", err, body)
	}
	if e.Code != "SlowDown" || e.Message != "Please reduce your request rate." || e.Resource != "/bucket/k" || e.RequestId == "" {
		t.Errorf("error document %+v", e)
	}
	if n := be.count(); n != 0 {
		t.Errorf("backend saw %d requests, want 0", n)
	}
}

func TestFaultProxyReset(t *testing.T) {
	be, _, _, err := faultedRequest(t, faultReset, http.MethodGet, "/bucket/k", nil)
	if err == nil || !isConnError(err) {
		t.Fatalf("error %v, want a connection error", err)
	}
	if n := be.count(); n != 0 {
		t.Errorf("backend saw %d requests, want 0", n)
	}
}

func TestFaultProxyDropAfterApplying(t *testing.T) {
	be, _, _, err := faultedRequest(t, faultDrop, http.MethodPut, "/bucket/manifest/7", []byte("manifest seven"))
	if err == nil || !isConnError(err) {
		t.Fatalf("error %v, want a connection error", err)
	}
	be.mu.Lock()
	got := string(be.bodies["/bucket/manifest/7"])
	be.mu.Unlock()
	if got != "manifest seven" {
		t.Errorf("backend holds %q: the lost answer's write was not applied", got)
	}
}

// A truncated GET ends in a connection error after half the body the
// headers promised; anything but a GET with a body is forwarded untouched
// and counted so.
func TestFaultProxyTruncate(t *testing.T) {
	be := &recordingBackend{}
	p, base := newTestProxy(t, be, faultConfig{Rate: 1, Mix: faultMix{faultTruncate - faultSlowDown: 1}}, nil)
	c := freshClient(t)
	resp, body, err := do(t, c, http.MethodGet, base+"/bucket/some/key", nil)
	if err == nil || !isConnError(err) {
		t.Fatalf("error %v, want a connection error", err)
	}
	want := "answer to GET /bucket/some/key"
	if resp.ContentLength != int64(len(want)) || string(body) != want[:len(want)/2] {
		t.Errorf("got %q of a promised %d bytes, want %q", body, resp.ContentLength, want[:len(want)/2])
	}
	if _, body, err := do(t, c, http.MethodPut, base+"/bucket/k", []byte("x")); err != nil || string(body) != "answer to PUT /bucket/k" {
		t.Errorf("PUT: %q, %v; want it forwarded", body, err)
	}
	if got := p.snapshot().Faults; got[faultTruncate] != 1 || got[faultNone] != 1 {
		t.Errorf("faults %v, want one truncated and one forwarded", got)
	}
}

// A stalled GET sends its headers and half its body, then nothing, the
// connection open until the client gives up.
func TestFaultProxyStall(t *testing.T) {
	be := &recordingBackend{}
	p, base := newTestProxy(t, be, faultConfig{Rate: 1, Mix: faultMix{faultStall - faultSlowDown: 1}}, nil)
	req, err := http.NewRequest(http.MethodGet, base+"/bucket/some/key", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := freshClient(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	want := "answer to GET /bucket/some/key"
	got := make([]byte, len(want)/2)
	if _, err := io.ReadFull(resp.Body, got); err != nil || string(got) != want[:len(want)/2] {
		t.Fatalf("first half %q, %v; want %q", got, err, want[:len(want)/2])
	}
	// Nothing more comes: a read waits until the client closes the body.
	read := make(chan error, 1)
	go func() {
		_, err := resp.Body.Read(make([]byte, 1))
		read <- err
	}()
	select {
	case err := <-read:
		t.Fatalf("read after the first half returned %v, want it to wait", err)
	case <-time.After(100 * time.Millisecond):
	}
	resp.Body.Close()
	if err := <-read; err == nil {
		t.Fatal("read of a closed stalled body returned no error")
	}
	if got := p.snapshot().Faults; got[faultStall] != 1 {
		t.Errorf("faults %v, want one stalled", got)
	}
}

// A corrupted GET has its length and headers but one bit of its body
// flipped.
func TestFaultProxyCorrupt(t *testing.T) {
	be := &recordingBackend{}
	p, base := newTestProxy(t, be, faultConfig{Rate: 1, Mix: faultMix{faultCorrupt - faultSlowDown: 1}}, nil)
	resp, body, err := do(t, freshClient(t), http.MethodGet, base+"/bucket/some/key", nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []byte("answer to GET /bucket/some/key")
	if resp.StatusCode != 200 || len(body) != len(want) || resp.Header.Get("ETag") != `"abc"` {
		t.Fatalf("answer %d %q %v", resp.StatusCode, body, resp.Header)
	}
	var bits int
	for i := range body {
		for x := body[i] ^ want[i]; x != 0; x &= x - 1 {
			bits++
		}
	}
	if bits != 1 {
		t.Errorf("body %q differs from %q in %d bits, want 1", body, want, bits)
	}
	if got := p.snapshot().Faults; got[faultCorrupt] != 1 {
		t.Errorf("faults %v, want one corrupted", got)
	}
}

func TestFaultProxyOutageRefuses(t *testing.T) {
	be := &recordingBackend{}
	p, base := newTestProxy(t, be, faultConfig{Mix: faultMix{1, 1, 1}}, nil)
	c := &http.Client{} // pooled connections, as a real client has
	defer c.CloseIdleConnections()
	if _, _, err := do(t, c, http.MethodGet, base+"/bucket/a", nil); err != nil {
		t.Fatal(err)
	}
	p.startOutage(outageRefuse)
	for i := range 3 {
		if _, _, err := do(t, c, http.MethodPut, base+"/bucket/b", []byte("x")); err == nil || !isConnError(err) {
			t.Fatalf("request %d during the outage: error %v, want a connection error", i, err)
		}
	}
	if n := be.count(); n != 1 {
		t.Errorf("backend saw %d requests, want only the one before the outage", n)
	}
	p.endOutage()
	resp, _, err := do(t, c, http.MethodGet, base+"/bucket/a", nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("after the outage: %v, %v", resp, err)
	}
	if c := p.snapshot(); c.Faults[faultRefused] != 3 || c.Faults[faultNone] != 2 {
		t.Errorf("faults %v, want 3 refused and 2 forwarded", c.Faults)
	}
}

func TestFaultProxyOutageHangs(t *testing.T) {
	be := &recordingBackend{}
	p, base := newTestProxy(t, be, faultConfig{Mix: faultMix{1, 1, 1}}, nil)
	held := make(chan struct{}, 1)
	p.holding = func() { held <- struct{}{} }
	p.startOutage(outageHang)
	errc := make(chan error, 1)
	c := freshClient(t)
	go func() {
		_, _, err := do(t, c, http.MethodGet, base+"/bucket/a", nil)
		errc <- err
	}()
	<-held
	select {
	case err := <-errc:
		t.Fatalf("a request during a hanging outage returned (%v)", err)
	default:
	}
	p.endOutage()
	if err := <-errc; err == nil || !isConnError(err) {
		t.Fatalf("held request: error %v, want a connection error once the store is back", err)
	}
	if n := be.count(); n != 0 {
		t.Errorf("backend saw %d requests, want 0", n)
	}
	resp, _, err := do(t, c, http.MethodGet, base+"/bucket/a", nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("after the outage: %v, %v", resp, err)
	}
	// A request held when the harness stops must not keep the proxy's
	// server from closing (goleak checks the rest).
	p.startOutage(outageHang)
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/bucket/a", nil)
		if resp, err := c.Do(req); err == nil {
			resp.Body.Close()
		}
		errc <- nil
	}()
	<-held
	cancel()
	<-errc
}

func TestFaultProxyCountsByOperationAndHour(t *testing.T) {
	be := &recordingBackend{}
	var mu sync.Mutex
	now := time.Unix(1_790_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	p, base := newTestProxy(t, be, faultConfig{Mix: faultMix{1, 1, 1}}, clock)
	c := freshClient(t)
	reqs := []struct{ method, path string }{
		{"GET", "/bucket/wal/000001"},
		{"GET", "/bucket/wal/000001"},
		{"GET", "/bucket?list-type=2&prefix=wal%2F"},
		{"HEAD", "/bucket/manifest/1"},
		{"PUT", "/bucket/wal/000002"},
		{"POST", "/bucket/sst/1?uploads"},
		{"DELETE", "/bucket/wal/000001"},
	}
	for _, r := range reqs {
		var body []byte
		if r.method == "PUT" {
			body = []byte("x")
		}
		if _, _, err := do(t, c, r.method, base+r.path, body); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	now = now.Add(2*time.Hour + time.Minute)
	mu.Unlock()
	if _, _, err := do(t, c, "PUT", base+"/bucket/wal/000003", []byte("y")); err != nil {
		t.Fatal(err)
	}
	got := p.snapshot()
	if len(got.Ops) != 3 {
		t.Fatalf("%d hours counted, want 3", len(got.Ops))
	}
	want0 := [numOps]int64{opGET: 2, opLIST: 1, opHEAD: 1, opPUT: 1, opPOST: 1, opDELETE: 1}
	if got.Ops[0] != want0 || got.Ops[1] != ([numOps]int64{}) || got.Ops[2] != ([numOps]int64{opPUT: 1}) {
		t.Errorf("counts by hour %v, want %v, none, one PUT", got.Ops, want0)
	}
	if tot := got.totalOps(); tot[opPUT] != 2 || tot[opGET] != 2 {
		t.Errorf("totals %v", tot)
	}
	if got.Faults[faultNone] != int64(len(reqs)+1) {
		t.Errorf("faults %v, want every request forwarded", got.Faults)
	}
}

func TestClassifyS3(t *testing.T) {
	f := func(method, target string, want s3Op) {
		t.Helper()
		u, err := url.Parse(target)
		if err != nil {
			t.Fatal(err)
		}
		if got := classifyS3(method, u.Path, u.Query()); got != want {
			t.Errorf("%s %s: %s, want %s", method, target, got, want)
		}
	}
	f("GET", "/b/k", opGET)
	f("GET", "/b/dir/k?partNumber=1", opGET)
	f("GET", "/b?list-type=2&prefix=x", opLIST)
	f("GET", "/b/", opLIST)
	f("GET", "/b?uploads", opLIST)
	f("GET", "/", opLIST) // ListBuckets
	f("HEAD", "/b/k", opHEAD)
	f("PUT", "/b/k", opPUT)
	f("PUT", "/b/k?partNumber=2&uploadId=u", opPUT)
	f("POST", "/b/k?uploadId=u", opPOST)
	f("DELETE", "/b/k", opDELETE)
	f("PATCH", "/b/k", opOther)
}

func TestPickFault(t *testing.T) {
	mix := faultMix{1, 2, 1}
	f := func(rate, u, v float64, want faultKind) {
		t.Helper()
		if got := pickFault(rate, mix, u, v); got != want {
			t.Errorf("pickFault(%g, %v, %g, %g) = %s, want %s", rate, mix, u, v, got, want)
		}
	}
	f(0.1, 0.1, 0, faultNone)
	f(0.1, 0.5, 0, faultNone)
	f(0, 0, 0, faultNone)
	f(0.1, 0.09, 0.0, faultSlowDown)
	f(0.1, 0.09, 0.24, faultSlowDown)
	f(0.1, 0.09, 0.25, faultReset)
	f(0.1, 0.09, 0.74, faultReset)
	f(0.1, 0.09, 0.75, faultDrop)
	f(1, 0.99, 0.99, faultDrop)
	// A kind of weight 0 is never drawn, not even by a draw rounded up to
	// the total.
	mix = faultMix{0, 0, 0, 1, 3}
	f(1, 0, 0, faultTruncate)
	f(1, 0, 0.249, faultTruncate)
	f(1, 0, 0.25, faultCorrupt)
	f(1, 0, 1, faultCorrupt)
	mix = faultMix{1, 0, 0, 0, 0}
	f(1, 0, 1, faultSlowDown)
}

func TestParseFaultMix(t *testing.T) {
	if m, err := parseFaultMix("slowdown=1,reset=1,drop=1"); err != nil || m != (faultMix{1, 1, 1}) {
		t.Errorf("default mix: %v, %v", m, err)
	}
	if m, err := parseFaultMix("drop=2"); err != nil || m != (faultMix{0, 0, 2}) {
		t.Errorf("drop only: %v, %v", m, err)
	}
	if m, err := parseFaultMix("truncate=1, corrupt=3,stall=2"); err != nil || m != (faultMix{0, 0, 0, 1, 3, 2}) {
		t.Errorf("truncate and corrupt: %v, %v", m, err)
	}
	for _, bad := range []string{"", "slowdown=0", "boom=1", "reset=-1", "reset"} {
		if _, err := parseFaultMix(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// TestFaultProxyWithS3 puts the proxy between Shale's S3 client and a real
// versitygw: signatures survive the proxy, every operation is counted, and
// a 503 SlowDown or a reset is a transient error to the client.
func TestFaultProxyWithS3(t *testing.T) {
	bin, _ := filepath.Abs("../../.tools/versitygw")
	if _, err := os.Stat(bin); err != nil {
		if os.Getenv("SHALE_REQUIRE_E2E") == "1" {
			t.Fatalf("versitygw: %v (make tools)", err)
		}
		t.Skip("versitygw not installed (make tools)")
	}
	if testing.Short() {
		t.Skip("starts versitygw")
	}
	ctx := t.Context()
	srv, err := versitygw.Start(ctx, bin, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	if err := srv.MakeBucket(ctx, "soak-test"); err != nil {
		t.Fatal(err)
	}
	p, err := newFaultProxy(srv.Endpoint, faultConfig{Mix: faultMix{1, 0, 0}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	base, stop, err := serveProxy(p)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	b, err := objstore.NewS3Bucket(ctx, srv.S3Config("soak-test", base))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := objstore.PutBytes(ctx, b, "wal/1", []byte("one"), objstore.PutOptions{}); err != nil {
		t.Fatalf("put through the proxy: %v", err)
	}
	if got, err := objstore.ReadAll(ctx, b, "wal/1"); err != nil || string(got) != "one" {
		t.Fatalf("get through the proxy: %q, %v", got, err)
	}
	if _, err := b.List(ctx, "wal/", "", 10); err != nil {
		t.Fatal(err)
	}
	if err := b.Delete(ctx, "wal/1"); err != nil {
		t.Fatal(err)
	}
	tot := p.snapshot().totalOps()
	if tot[opPUT] != 1 || tot[opGET] != 1 || tot[opLIST] != 1 || tot[opDELETE] != 1 {
		t.Errorf("counted %v, want one PUT, GET, LIST and DELETE", tot)
	}
	for _, mix := range []faultMix{{1, 0, 0}, {0, 1, 0}} {
		p.setFaults(faultConfig{Rate: 1, Mix: mix})
		_, err := objstore.ReadAll(ctx, b, "wal/1")
		if !objstore.IsTransient(err) {
			t.Errorf("mix %v: error %v, want a transient one", mix, err)
		}
	}
	p.setFaults(faultConfig{Rate: 1, Mix: faultMix{0, 0, 1}})
	_, err = objstore.PutBytes(ctx, b, "wal/2", []byte("two"), objstore.PutOptions{})
	p.setFaults(faultConfig{Mix: faultMix{1, 0, 0}})
	got, rerr := objstore.ReadAll(ctx, b, "wal/2")
	if err == nil || rerr != nil || string(got) != "two" {
		t.Errorf("lost answer: put error %v, then read %q, %v; want an error and the object stored", err, got, rerr)
	}
}
