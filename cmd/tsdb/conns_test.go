package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/prompb"

	"github.com/shaledb/shale/internal/e2e"
)

func TestMaxConnectionsFlag(t *testing.T) {
	lim, soft, _ := maxConnections(0)
	if soft > 0 && soft < 1<<40 && lim != int(soft/2) {
		t.Errorf("auto limit %d with an open-file limit of %d, want half", lim, soft)
	}
	if lim, _, _ := maxConnections(7); lim != 7 {
		t.Errorf("--web.max-connections=7 gave %d", lim)
	}
	if lim, _, _ := maxConnections(-1); lim != 0 {
		t.Errorf("--web.max-connections=-1 gave %d, want no limit", lim)
	}
}

// flood opens n connections to addr that send nothing and closes them at
// the end of the test.
func flood(t *testing.T, addr string, n int) []net.Conn {
	t.Helper()
	conns := make([]net.Conn, 0, n)
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("dial %d: %v", len(conns), err)
		}
		conns = append(conns, c)
	}
	return conns
}

// rawConn is a connection to addr, closed when the test ends, on which a
// test writes requests as they go over the wire.
type rawConn struct {
	net.Conn
	r *bufio.Reader
}

func dialRaw(t *testing.T, addr string) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{Conn: c, r: bufio.NewReader(c)}
}

// roundTrip writes req and reads the answer, waiting at most 30 s.
func (c *rawConn) roundTrip(req string) (*http.Response, error) {
	if _, err := io.WriteString(c, req); err != nil {
		return nil, err
	}
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	return http.ReadResponse(c.r, nil)
}

// A flood of idle connections to a server whose open-file limit is low
// must not take the descriptors its object store needs: a sender whose
// connection was open before goes on writing, durably, and reading.
func TestConnectionFloodLeavesStorageItsFiles(t *testing.T) {
	skipEndToEnd(t)
	port := e2e.FreePort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cmd := exec.Command("sh", "-c", `ulimit -n 256 && exec "$0" "$@"`, tsdbBinary,
		"--web.listen-address="+addr, "--storage.path="+t.TempDir(), "--storage.write-timeout=5s")
	s := &shale{url: "http://" + addr, proc: e2e.StartProcess(t, cmd)}
	waitReady(t, s.proc, "tsdb", addr)
	if !strings.Contains(s.proc.Output(), "max_connections=128") {
		t.Fatalf("want max_connections=128 (half of 256 open files) in the log:\n%s", s.proc.Output())
	}
	http.DefaultClient.CloseIdleConnections()

	// The sender's connection, open before the flood.
	sender := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1}}
	defer sender.CloseIdleConnections()
	write := func(v float64) int {
		t.Helper()
		raw, err := (&prompb.WriteRequest{Timeseries: []prompb.TimeSeries{{
			Labels:  []prompb.Label{{Name: "__name__", Value: "flood_test"}},
			Samples: []prompb.Sample{{Value: v, Timestamp: time.Now().UnixMilli()}},
		}}}).Marshal()
		if err != nil {
			t.Fatal(err)
		}
		req, err := snappyWriteRequest(s.url+"/api/v1/write", raw)
		if err != nil {
			t.Fatal(err)
		}
		code, body := sendWith(t, sender, req)
		if code != http.StatusNoContent {
			t.Errorf("remote write: %d %s", code, body)
		}
		return code
	}
	write(1)

	flood(t, addr, 300)
	for v := 2.0; v <= 4; v++ {
		write(v)
	}
	resp, err := sender.Get(s.url + "/api/v1/query?query=count_over_time(flood_test[1h])")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `"4"`) {
		t.Errorf("query over the sender's connection: %d %s", resp.StatusCode, body)
	}
	if strings.Contains(s.proc.Output(), "too many open files") {
		t.Errorf("the server ran out of files:\n%s", s.proc.Output())
	}
}

// A server at its connection limit serves the connections it holds and
// takes a new one once another closes.
func TestConnectionLimit(t *testing.T) {
	skipEndToEnd(t)
	s := startShale(t, "--storage.path="+t.TempDir(), "--web.max-connections=2")
	http.DefaultClient.CloseIdleConnections()
	addr := strings.TrimPrefix(s.url, "http://")

	held := make([]*rawConn, 2)
	for i := range held {
		held[i] = dialRaw(t, addr)
		// A request answered shows the server took the connection.
		resp, err := held[i].roundTrip("GET /-/healthy HTTP/1.1\r\nHost: x\r\n\r\n")
		if err != nil {
			t.Fatalf("held connection %d: %v", i, err)
		}
		resp.Body.Close()
	}
	fresh := func(timeout time.Duration) error {
		c := &http.Client{Timeout: timeout, Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := c.Get(s.url + "/-/healthy")
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	if err := fresh(500 * time.Millisecond); err == nil {
		t.Fatal("a third connection was served while two were held")
	}
	held[0].Close()
	if err := fresh(30 * time.Second); err != nil {
		t.Fatalf("no connection taken after one closed: %v", err)
	}
}

// --web.read-timeout closes idle connections and cuts a body that does
// not arrive, but neither a long query nor an import that keeps sending.
func TestReadTimeout(t *testing.T) {
	skipEndToEnd(t)
	s := startShale(t, "--storage.path="+t.TempDir(), "--web.read-timeout=1s", "--query.max-subquery-steps=100000000")
	addr := strings.TrimPrefix(s.url, "http://")
	noKeepAlive := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

	t.Run("idle connection", func(t *testing.T) {
		c := dialRaw(t, addr)
		resp, err := c.roundTrip("GET /-/healthy HTTP/1.1\r\nHost: x\r\n\r\n")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		if _, err := c.r.ReadByte(); err != io.EOF {
			t.Fatalf("idle connection: want it closed by the server (EOF), got %v", err)
		}
	})
	t.Run("slow body", func(t *testing.T) {
		resp, err := dialRaw(t, addr).roundTrip("POST /api/v1/write HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\nContent-Encoding: snappy\r\nContent-Length: 1000\r\n\r\nabc")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode < 400 {
				t.Fatalf("a body that never arrived was answered %d", resp.StatusCode)
			}
		} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatal("the server neither answered nor closed a body that never arrived")
		}
	})
	t.Run("long query", func(t *testing.T) {
		start := time.Now()
		req, _ := http.NewRequest(http.MethodPost, s.url+"/api/v1/query", strings.NewReader(url.Values{"query": {"count_over_time(vector(1)[50d:1s])"}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if code, body := sendWith(t, noKeepAlive, req); code != http.StatusOK || !strings.Contains(body, `"value":[`) {
			t.Fatalf("query of %s: %d %s", time.Since(start), code, body)
		}
		t.Logf("query took %s", time.Since(start))
	})
	t.Run("import that keeps sending", func(t *testing.T) {
		pr, pw := io.Pipe()
		go func() {
			tick := time.NewTicker(300 * time.Millisecond)
			defer tick.Stop()
			now := time.Now().UnixMilli()
			for i := range 8 {
				<-tick.C
				fmt.Fprintf(pw, `{"metric":{"__name__":"slow_import"},"values":[%d],"timestamps":[%d]}`+"\n", i, now+int64(i))
			}
			pw.Close()
		}()
		req, _ := http.NewRequest(http.MethodPost, s.url+"/api/v1/import", pr)
		if code, body := sendWith(t, noKeepAlive, req); code != http.StatusNoContent {
			t.Fatalf("import over 2.4 s with a read timeout of 1 s: %d %s", code, body)
		}
		var out []struct {
			Value [2]any `json:"value"`
		}
		queryResult(t, s.url, "/api/v1/query", url.Values{"query": {"count_over_time(slow_import[1h])"}}, &out)
		if len(out) != 1 || out[0].Value[1] != "8" {
			t.Fatalf("imported: %+v", out)
		}
	})
	t.Run("import that stops", func(t *testing.T) {
		line := fmt.Sprintf(`{"metric":{"__name__":"stalled_import"},"values":[1],"timestamps":[%d]}`+"\n", time.Now().UnixMilli())
		resp, err := dialRaw(t, addr).roundTrip("POST /api/v1/import HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n" + line)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "i/o timeout") {
			t.Fatalf("an import that stopped sending: %d %s", resp.StatusCode, body)
		}
		var out []struct {
			Value [2]any `json:"value"`
		}
		queryResult(t, s.url, "/api/v1/query", url.Values{"query": {"stalled_import"}}, &out)
		if len(out) != 1 {
			t.Fatalf("the line before the stop: %+v", out)
		}
	})
}
