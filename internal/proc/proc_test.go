package proc

import (
	"bufio"
	"errors"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// start runs script in sh, waits for its first line on stdout, and returns
// the command and a channel closed once Wait returned with its error in
// *werr.
func start(t *testing.T, script string) (*exec.Cmd, chan struct{}, *error) {
	t.Helper()
	cmd := exec.Command("sh", "-c", script)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if _, err := bufio.NewReader(out).ReadString('\n'); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("%s: no first line: %v", script, err)
	}
	done := make(chan struct{})
	werr := new(error)
	go func() {
		*werr = cmd.Wait()
		close(done)
	}()
	return cmd, done, werr
}

func signalled(err error) (syscall.Signal, bool) {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return 0, false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() {
		return 0, false
	}
	return ws.Signal(), true
}

func TestStopTerminates(t *testing.T) {
	cmd, done, werr := start(t, "echo ready; exec sleep 60")
	Stop(cmd.Process, done, time.Minute)
	if sig, ok := signalled(*werr); !ok || sig != syscall.SIGTERM {
		t.Fatalf("exit %v, want the end by SIGTERM", *werr)
	}
	Stop(cmd.Process, done, time.Minute) // a second call returns at once
}

func TestStopKillsAfterGrace(t *testing.T) {
	cmd, done, werr := start(t, `trap "" TERM; echo ready; exec sleep 60`)
	Stop(cmd.Process, done, 100*time.Millisecond)
	if sig, ok := signalled(*werr); !ok || sig != syscall.SIGKILL {
		t.Fatalf("exit %v, want the end by SIGKILL", *werr)
	}
}

func TestWaitOrKill(t *testing.T) {
	cmd, done, _ := start(t, "echo ready; exit 0")
	if WaitOrKill(cmd.Process, done, time.Minute) {
		t.Error("a process that ended by itself was killed")
	}
	cmd, done, _ = start(t, "echo ready; exec sleep 60")
	if !WaitOrKill(cmd.Process, done, 100*time.Millisecond) {
		t.Error("a process still running after the grace period was not killed")
	}
}
