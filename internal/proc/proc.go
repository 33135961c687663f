// Package proc ends the child processes that tests and the benchmark start:
// gracefully first, by force when that takes too long.
package proc

import (
	"os"
	"syscall"
	"time"
)

// Stop ends p unless done is closed already: it sends SIGTERM and then does
// as WaitOrKill. done must be closed once p's Wait has returned; Stop returns
// only after that.
func Stop(p *os.Process, done <-chan struct{}, grace time.Duration) {
	select {
	case <-done:
		return
	default:
	}
	_ = p.Signal(syscall.SIGTERM)
	WaitOrKill(p, done, grace)
}

// WaitOrKill waits up to grace for done to be closed, then kills p and waits
// for done. It reports whether p had to be killed.
func WaitOrKill(p *os.Process, done <-chan struct{}, grace time.Duration) (killed bool) {
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-done:
		return false
	case <-t.C:
		_ = p.Kill()
		<-done
		return true
	}
}
