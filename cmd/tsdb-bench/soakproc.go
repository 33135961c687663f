package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/shaledb/shale/internal/proc"
)

// procExit is how one Shale process of the soak ended.
type procExit struct {
	Gen     int // which start of the writer (1 = the first)
	Pid     int
	Started time.Time
	At      time.Time
	// Cause is what the harness did: "SIGKILL", "SIGTERM", or "" when the
	// process exited on its own (an unplanned exit).
	Cause  string
	Code   int    // exit code; -1 when a signal ended it
	Signal string // the signal that ended it, if any
	// LastError is the last error line of the process's log.
	LastError string
}

// status describes the exit as "exit 3" or "signal killed".
func (e procExit) status() string {
	if e.Signal != "" {
		return "signal " + e.Signal
	}
	return fmt.Sprintf("exit %d", e.Code)
}

// shaleProc runs the Shale writer of the soak: one process at a time, on
// the same port and bucket across restarts, its output appended to one log.
// Exits the harness did not cause are sent on unplanned. Safe for
// concurrent use.
type shaleProc struct {
	bin     string
	args    []string
	base    string // http://127.0.0.1:port
	logPath string
	// unplanned receives every exit the harness did not cause.
	unplanned chan procExit

	mu      sync.Mutex
	gen     int
	cmd     *exec.Cmd
	cause   string
	started time.Time
	logOff  int64
	done    chan struct{} // closed when the current process has exited
	last    procExit      // the exit of the process done belongs to
}

func newShaleProc(bin string, args []string, base, logPath string) *shaleProc {
	return &shaleProc{bin: bin, args: args, base: base, logPath: logPath, unplanned: make(chan procExit, 64)}
}

// running reports whether a process is running and its generation.
func (p *shaleProc) running() (bool, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == nil {
		return false, p.gen
	}
	select {
	case <-p.done:
		return false, p.gen
	default:
		return true, p.gen
	}
}

// pid is the running process's id, 0 when none runs.
func (p *shaleProc) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	select {
	case <-p.done:
		return 0
	default:
		return p.cmd.Process.Pid
	}
}

// start starts a new process without waiting for it to be ready. It fails
// if one is still running: two writers on one bucket fence each other.
func (p *shaleProc) start() (time.Time, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done != nil {
		select {
		case <-p.done:
		default:
			return time.Time{}, errors.New("a writer is still running")
		}
	}
	lf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return time.Time{}, err
	}
	defer lf.Close() // the child holds its own descriptor
	p.gen++
	now := time.Now()
	fmt.Fprintf(lf, "=== tsdb-bench soak: start %d at %s\n", p.gen, now.Format(time.RFC3339Nano))
	if fi, err := lf.Stat(); err == nil {
		p.logOff = fi.Size()
	}
	cmd := exec.Command(p.bin, p.args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		return time.Time{}, fmt.Errorf("start %s: %w", p.bin, err)
	}
	p.cmd, p.cause, p.started = cmd, "", now
	done := make(chan struct{})
	p.done = done
	gen, logOff := p.gen, p.logOff
	go func() {
		err := cmd.Wait()
		ex := procExit{Gen: gen, Pid: cmd.Process.Pid, Started: now, At: time.Now(), Code: cmd.ProcessState.ExitCode()}
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				ex.Signal = ws.Signal().String()
			}
		}
		ex.LastError = lastErrorLine(p.logPath, logOff)
		p.mu.Lock()
		ex.Cause = p.cause
		p.last = ex
		p.mu.Unlock()
		close(done)
		if ex.Cause == "" {
			select {
			case p.unplanned <- ex:
			default: // the harness stopped listening
			}
		}
	}()
	return now, nil
}

// signal sends sig to the running process, marks the exit as caused by the
// harness, and waits up to wait for it to end; then it sends SIGKILL and
// waits. It returns the exit, how long the process took to end after sig,
// and whether SIGKILL was needed. ok is false when no process was running.
func (p *shaleProc) signal(sig syscall.Signal, cause string, wait time.Duration) (ex procExit, took time.Duration, forced, ok bool) {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	if done == nil {
		p.mu.Unlock()
		return procExit{}, 0, false, false
	}
	select {
	case <-done:
		p.mu.Unlock()
		return procExit{}, 0, false, false
	default:
	}
	p.cause = cause
	p.mu.Unlock()
	t0 := time.Now()
	_ = cmd.Process.Signal(sig)
	forced = proc.WaitOrKill(cmd.Process, done, wait)
	took = time.Since(t0)
	p.mu.Lock()
	ex = p.last
	p.mu.Unlock()
	return ex, took, forced, true
}

// waitReady polls /-/ready until it answers 200, the process exits, ctx
// ends or timeout passes.
func (p *shaleProc) waitReady(ctx context.Context, timeout time.Duration) error {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	client := &http.Client{Timeout: 2 * time.Second}
	defer client.CloseIdleConnections()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if code := getStatus(ctx, client, p.base+"/-/ready"); code == http.StatusOK {
			return nil
		}
		select {
		case <-done:
			return errors.New("the writer exited before it was ready")
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return fmt.Errorf("the writer was not ready after %s", timeout)
		case <-tick.C:
		}
	}
}

// getStatus GETs url and returns the status code, or -1 when no answer came.
func getStatus(ctx context.Context, client *http.Client, url string) int {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return -1
	}
	resp, err := client.Do(req)
	if err != nil {
		return -1
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	return resp.StatusCode
}

// lastErrorLine returns the last line at level error in the log from byte
// off on, shortened to 300 bytes.
func lastErrorLine(path string, off int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return ""
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var last string
	for sc.Scan() {
		if l := sc.Text(); strings.Contains(strings.ToLower(l), "level=error") {
			last = l
		}
	}
	if len(last) > 300 {
		last = last[:300] + "…"
	}
	return last
}
