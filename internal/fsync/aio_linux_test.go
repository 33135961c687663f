package fsync

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// TestAIOManyAtOnce: fsyncs from many goroutines at once all complete
// through AIO, whichever of them reads the completions.
func TestAIOManyAtOnce(t *testing.T) {
	a := shared()
	if a == nil {
		t.Skipf("this kernel refuses AIO (%v): File calls f.Sync", sharedErr)
	}
	before := a.completed.Load()
	const goroutines, each = 32, 20
	dir := t.TempDir()
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Go(func() {
			f, err := os.Create(filepath.Join(dir, fmt.Sprint(g)))
			if err != nil {
				errs <- err
				return
			}
			defer f.Close()
			for i := range each {
				if _, err := fmt.Fprintf(f, "%d\n", i); err != nil {
					errs <- err
					return
				}
				if err := File(f); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	// A waiter left without a reader (a hand-over bug) would wait for
	// ever: fail with the goroutines' stacks instead of at the test
	// binary's timeout.
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		stacks := make([]byte, 1<<20)
		stacks = stacks[:runtime.Stack(stacks, true)]
		t.Fatalf("fsyncs still waiting after a minute, %d of %d completed; goroutines:\n%s",
			a.completed.Load()-before, goroutines*each, stacks)
	}
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := a.completed.Load() - before; got != goroutines*each {
		t.Errorf("%d fsyncs completed through AIO, want %d", got, goroutines*each)
	}
}

// fakeKernel stands in for the AIO system calls: submissions are recorded,
// and the test completes them in the order it chooses.
type fakeKernel struct {
	submitErr error
	submitted chan iocb
	polled    chan struct{} // a waiter looked for completions
	// hold makes the submission of these ids wait for an error to return.
	hold map[uint64]chan error

	mu    sync.Mutex
	ready []ioEvent
}

func newFake(t *testing.T, submitErr error) (*aio, *fakeKernel) {
	t.Helper()
	fk := &fakeKernel{submitErr: submitErr, submitted: make(chan iocb, 16), polled: make(chan struct{}, 1), hold: map[uint64]chan error{}}
	a, err := newAIO(kernel{
		setup: func() (uintptr, error) { return 1, nil },
		submit: func(_ uintptr, cb *iocb) error {
			if fk.submitErr != nil {
				return fk.submitErr
			}
			fk.submitted <- *cb
			if ch, ok := fk.hold[cb.data]; ok {
				return <-ch
			}
			return nil
		},
		getevents: func(_ uintptr, events []ioEvent, block bool) (int, error) {
			if block {
				return 0, errors.New("the fake never blocks")
			}
			select {
			case fk.polled <- struct{}{}:
			default:
			}
			fk.mu.Lock()
			defer fk.mu.Unlock()
			n := copy(events, fk.ready)
			fk.ready = fk.ready[n:]
			return n, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.efd.Close() })
	return a, fk
}

// complete finishes the fsync cb with res, as the kernel does: the event,
// then a count on the eventfd.
func (fk *fakeKernel) complete(t *testing.T, a *aio, cb iocb, res int64) {
	t.Helper()
	fk.mu.Lock()
	fk.ready = append(fk.ready, ioEvent{data: cb.data, res: res})
	fk.mu.Unlock()
	var b [8]byte
	binary.NativeEndian.PutUint64(b[:], 1)
	if _, err := a.efd.Write(b[:]); err != nil {
		t.Fatal(err)
	}
}

// completeUncounted finishes the fsync cb with res without counting it on
// the eventfd: the event is there, and the network poller has not said so.
func (fk *fakeKernel) completeUncounted(cb iocb, res int64) {
	fk.mu.Lock()
	fk.ready = append(fk.ready, ioEvent{data: cb.data, res: res})
	fk.mu.Unlock()
}

// syncResult is what one sync returned.
type syncResult struct {
	err error
	ok  bool
}

// startSync runs a.sync(f) and returns its submission and its result.
func startSync(t *testing.T, a *aio, fk *fakeKernel, f *os.File) (iocb, chan syncResult) {
	t.Helper()
	res := make(chan syncResult, 1)
	go func() {
		ok, err := a.sync(f)
		res <- syncResult{err, ok}
	}()
	select {
	case cb := <-fk.submitted:
		return cb, res
	case r := <-res:
		t.Fatalf("sync returned %v before submitting", r)
	}
	panic("unreachable")
}

// result waits for a sync to return, failing if it does not within a
// minute (a waiter nobody wakes).
func result(t *testing.T, what string, ch chan syncResult) syncResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(time.Minute):
		t.Fatalf("%s: sync did not return", what)
	}
	panic("unreachable")
}

// pending reports whether a sync has not returned.
func pending(ch chan syncResult) bool {
	select {
	case r := <-ch:
		ch <- r
		return false
	default:
		return true
	}
}

func tempFile(t *testing.T) *os.File {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// TestAIOSubmitsFsync: the iocb is an fsync of the file's descriptor that
// counts its completion on the eventfd; the result comes back to File.
func TestAIOSubmitsFsync(t *testing.T) {
	a, fk := newFake(t, nil)
	f := tempFile(t)
	cb, res := startSync(t, a, fk, f)
	if cb.opcode != iocbCmdFsync || cb.fildes != uint32(f.Fd()) || cb.flags != iocbFlagResfd || cb.resfd != uint32(a.efdRaw) {
		t.Fatalf("submitted %+v, want an fsync of fd %d counted on eventfd %d", cb, f.Fd(), a.efdRaw)
	}
	fk.complete(t, a, cb, 0)
	if r := result(t, "fsync", res); r.err != nil || !r.ok {
		t.Fatalf("sync: %v, %v; want nil, true", r.err, r.ok)
	}
	if got := a.completed.Load(); got != 1 {
		t.Fatalf("completed %d, want 1", got)
	}
}

// TestAIOCompletionError: an fsync the kernel fails returns its errno.
func TestAIOCompletionError(t *testing.T) {
	a, fk := newFake(t, nil)
	f := tempFile(t)
	cb, res := startSync(t, a, fk, f)
	fk.complete(t, a, cb, -int64(syscall.EIO))
	r := result(t, "fsync", res)
	var pe *os.PathError
	if !r.ok || !errors.As(r.err, &pe) || pe.Op != "sync" || pe.Path != f.Name() || !errors.Is(r.err, syscall.EIO) {
		t.Fatalf("sync: %v, %v; want sync %s: EIO", r.err, r.ok, f.Name())
	}
}

// TestAIOLooksWithoutTheEventfd: the reader takes a completion that the
// eventfd has not announced at its next look, as it does under load, when
// the network poller is consulted only every 10 ms.
func TestAIOLooksWithoutTheEventfd(t *testing.T) {
	a, fk := newFake(t, nil)
	f := tempFile(t)
	cbA, resA := startSync(t, a, fk, f)
	<-fk.polled
	cbB, resB := startSync(t, a, fk, f)
	fk.completeUncounted(cbB, 0)
	if r := result(t, "B", resB); r.err != nil || !r.ok {
		t.Fatalf("B: %v, %v", r.err, r.ok)
	}
	fk.completeUncounted(cbA, -int64(syscall.EIO))
	if r := result(t, "A", resA); !errors.Is(r.err, syscall.EIO) {
		t.Fatalf("A: %v, want EIO", r.err)
	}
}

// TestAIOReaderHandsOver: the waiter reading completions leaves once its
// own fsync is in, and another still waiting takes over; completions of
// other waiters wake them.
func TestAIOReaderHandsOver(t *testing.T) {
	a, fk := newFake(t, nil)
	f := tempFile(t)
	cbA, resA := startSync(t, a, fk, f)
	<-fk.polled // A reads: only the reader looks for completions
	cbB, resB := startSync(t, a, fk, f)
	cbC, resC := startSync(t, a, fk, f)

	// C's completion, read by A, wakes C only.
	fk.complete(t, a, cbC, 0)
	if r := result(t, "C", resC); r.err != nil || !r.ok {
		t.Fatalf("C: %v, %v", r.err, r.ok)
	}
	if !pending(resA) || !pending(resB) {
		t.Fatal("A or B returned before its fsync completed")
	}
	// A's own: A returns, and B must go on reading for itself.
	fk.complete(t, a, cbA, 0)
	if r := result(t, "A", resA); r.err != nil || !r.ok {
		t.Fatalf("A: %v, %v", r.err, r.ok)
	}
	if !pending(resB) {
		t.Fatal("B returned before its fsync completed")
	}
	fk.complete(t, a, cbB, -int64(syscall.ENOSPC))
	if r := result(t, "B", resB); !errors.Is(r.err, syscall.ENOSPC) {
		t.Fatalf("B: %v, want ENOSPC", r.err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.waiting) != 0 || a.reaping {
		t.Fatalf("%d waiting, reaping %v after all returned", len(a.waiting), a.reaping)
	}
}

// TestAIOFailedSubmitHandsOver: a waiter whose submission fails after the
// reader chose it to read on passes that on, so the others are not left
// waiting with nobody reading.
func TestAIOFailedSubmitHandsOver(t *testing.T) {
	for i := range 5 {
		a, fk := newFake(t, nil)
		base := uint64(3 * i)
		a.next = base
		f := tempFile(t)
		cbA, resA := startSync(t, a, fk, f)
		<-fk.polled // A reads
		failX := make(chan error)
		fk.hold[base+1] = failX
		_, resX := startSync(t, a, fk, f) // X registered, its submission held
		cbY, resY := startSync(t, a, fk, f)
		// A's fsync completes: A leaves and wakes the oldest waiter, X.
		fk.complete(t, a, cbA, 0)
		if r := result(t, "A", resA); r.err != nil || !r.ok {
			t.Fatalf("A: %v, %v", r.err, r.ok)
		}
		failX <- syscall.EAGAIN
		if r := result(t, "X", resX); r.ok || r.err != nil {
			t.Fatalf("X: %v, %v; want nil, false", r.err, r.ok)
		}
		fk.complete(t, a, cbY, 0)
		if r := result(t, "Y", resY); r.err != nil || !r.ok {
			t.Fatalf("Y: %v, %v", r.err, r.ok)
		}
	}
}

// TestAIOSubmitRefused: a kernel or sandbox that refuses AIO turns it off;
// a full ring or a file without AIO fsync leaves it on for the next call.
// Either way the caller does the fsync itself.
func TestAIOSubmitRefused(t *testing.T) {
	f := tempFile(t)
	for _, c := range []struct {
		err     error
		refused bool
	}{
		{syscall.EPERM, true},
		{syscall.ENOSYS, true},
		{syscall.EAGAIN, false},
		{syscall.EINVAL, false},
	} {
		a, _ := newFake(t, c.err)
		if ok, err := a.sync(f); ok || err != nil {
			t.Errorf("%v: sync returned %v, %v; want nil, false", c.err, err, ok)
		}
		if got := a.refused.Load(); got != c.refused {
			t.Errorf("%v: refused %v, want %v", c.err, got, c.refused)
		}
		if len(a.waiting) != 0 {
			t.Errorf("%v: %d left waiting", c.err, len(a.waiting))
		}
	}
}

// TestABISizes: the structs match the kernel's (64 and 32 bytes).
func TestABISizes(t *testing.T) {
	if n := unsafe.Sizeof(iocb{}); n != 64 {
		t.Errorf("iocb is %d bytes, want 64", n)
	}
	if n := unsafe.Sizeof(ioEvent{}); n != 32 {
		t.Errorf("ioEvent is %d bytes, want 32", n)
	}
}
