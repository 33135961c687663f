// Package e2e holds helpers for tests that run real programs (Prometheus,
// promtool, an S3-compatible server) next to Shale: finding a binary, picking
// a free loopback port, waiting for a condition and running a process that is
// always stopped when the test ends.
package e2e

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/shaledb/shale/internal/proc"
)

// RequireEnv is the environment variable that turns a missing binary from a
// skip into a failure (for CI machines that must run the end-to-end tests).
const RequireEnv = "SHALE_REQUIRE_E2E"

// RequireBinary returns the path of the program name, looked up in PATH and
// then in /usr/bin and /usr/local/bin. When it is missing the test is skipped
// with installHint (e.g. "apt-get install prometheus"), or fails when
// SHALE_REQUIRE_E2E=1.
func RequireBinary(t testing.TB, name, installHint string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, dir := range []string{"/usr/bin", "/usr/local/bin"} {
		p := dir + "/" + name
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	msg := fmt.Sprintf("%s not found; install it with `%s`", name, installHint)
	if os.Getenv(RequireEnv) == "1" {
		t.Fatalf("%s (%s=1)", msg, RequireEnv)
	}
	t.Skip(msg)
	return ""
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("find a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// PollInterval is the wait between two checks of Eventually.
const PollInterval = 20 * time.Millisecond

// Eventually calls cond until it returns true, waiting PollInterval between
// calls, and fails the test with what (formatted with args) if timeout passes
// first.
func Eventually(t testing.TB, timeout time.Duration, cond func() bool, what string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, fmt.Sprintf(what, args...))
		}
		time.Sleep(PollInterval)
	}
}

// WaitHTTP waits until url answers a GET with a 2xx status.
func WaitHTTP(t testing.TB, timeout time.Duration, url string) {
	t.Helper()
	client := &http.Client{Timeout: time.Second}
	defer client.CloseIdleConnections()
	Eventually(t, timeout, func() bool {
		resp, err := client.Get(url)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode/100 == 2
	}, "%s to answer 2xx", url)
}

// Process is a program started by StartProcess.
type Process struct {
	Cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
	err  error // of Wait, set before done is closed
}

// StartProcess starts cmd with its stdout and stderr collected, and registers
// a cleanup that stops it (SIGTERM, then SIGKILL after 10 s) and waits for
// it. The output is logged when the test fails.
func StartProcess(t testing.TB, cmd *exec.Cmd) *Process {
	t.Helper()
	p := &Process{Cmd: cmd, out: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stdout = p.out
	cmd.Stderr = p.out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", cmd.Path, err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.Stop()
		if t.Failed() {
			t.Logf("output of %s:\n%s", cmd.Path, p.Output())
		}
	})
	return p
}

// Stop asks the process to end, kills it if it has not after 10 s, and
// waits for it. It is safe to call more than once.
func (p *Process) Stop() { proc.Stop(p.Cmd.Process, p.done, 10*time.Second) }

// Exited reports whether the process has ended, and its Wait error.
func (p *Process) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Output returns what the process wrote so far.
func (p *Process) Output() string { return p.out.String() }

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(b)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
