package e2e

import (
	"net"
	"os/exec"
	"strconv"
	"testing"
	"time"
)

func TestFreePortIsListenable(t *testing.T) {
	port := FreePort(t)
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
}

func TestEventually(t *testing.T) {
	n := 0
	Eventually(t, 5*time.Second, func() bool { n++; return n == 3 }, "three calls")
	if n != 3 {
		t.Fatalf("cond called %d times", n)
	}
}

func TestRequireBinary(t *testing.T) {
	if p := RequireBinary(t, "sh", "apt-get install dash"); p == "" {
		t.Fatal("sh not found")
	}
	t.Setenv(RequireEnv, "")
	ok := t.Run("missing", func(t *testing.T) {
		RequireBinary(t, "shale-no-such-binary", "apt-get install nothing")
		t.Fatal("not skipped")
	})
	if !ok {
		t.Fatal("missing binary did not skip")
	}
}

func TestStartProcessStops(t *testing.T) {
	sleep := RequireBinary(t, "sleep", "apt-get install coreutils")
	p := StartProcess(t, exec.Command(sleep, "60"))
	if done, _ := p.Exited(); done {
		t.Fatal("exited at once")
	}
	start := time.Now()
	p.Stop()
	if done, err := p.Exited(); !done || err == nil {
		t.Fatalf("after Stop: exited %v, err %v", done, err)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatal("Stop waited for the kill timeout")
	}
	p.Stop() // idempotent
}
