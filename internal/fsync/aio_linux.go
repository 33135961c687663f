//go:build linux

package fsync

import (
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The kernel's AIO interface (include/uapi/linux/aio_abi.h).
const (
	iocbCmdFsync  = 2
	iocbFlagResfd = 1 << 0
	// ringEvents is how many fsyncs may be in flight at once; past it
	// io_submit refuses (EAGAIN) and File calls f.Sync.
	ringEvents = 256
)

// iocb is struct iocb. aio_key and aio_rw_flags swap places on big-endian
// systems; both are 0 here, so one layout serves all.
type iocb struct {
	data   uint64 // aio_data
	_      uint32 // aio_key
	_      int32  // aio_rw_flags
	opcode uint16 // aio_lio_opcode
	_      int16  // aio_reqprio
	fildes uint32 // aio_fildes
	_      uint64 // aio_buf
	_      uint64 // aio_nbytes
	_      int64  // aio_offset
	_      uint64 // aio_reserved2
	flags  uint32 // aio_flags
	resfd  uint32 // aio_resfd
}

// ioEvent is struct io_event.
type ioEvent struct {
	data uint64
	obj  uint64
	res  int64
	res2 int64
}

// kernel is the AIO system calls an aio makes; tests replace them.
type kernel struct {
	// setup makes an AIO context.
	setup func() (uintptr, error)
	// submit queues cb on the context.
	submit func(ctx uintptr, cb *iocb) error
	// getevents takes completed events into events, at least one if block
	// is set, else only those already there.
	getevents func(ctx uintptr, events []ioEvent, block bool) (int, error)
}

var linuxKernel = kernel{
	setup: func() (uintptr, error) {
		var ctx uintptr
		if _, _, e := unix.Syscall(unix.SYS_IO_SETUP, ringEvents, uintptr(unsafe.Pointer(&ctx)), 0); e != 0 {
			return 0, os.NewSyscallError("io_setup", e)
		}
		return ctx, nil
	},
	submit: func(ctx uintptr, cb *iocb) error {
		cbs := [1]*iocb{cb}
		_, _, e := unix.Syscall(unix.SYS_IO_SUBMIT, ctx, 1, uintptr(unsafe.Pointer(&cbs[0])))
		if e != 0 {
			return e
		}
		return nil
	},
	getevents: func(ctx uintptr, events []ioEvent, block bool) (int, error) {
		minNr := 0
		var ts *unix.Timespec // nil: wait for minNr
		if block {
			minNr = 1
		} else {
			ts = &unix.Timespec{}
		}
		n, _, e := unix.Syscall6(unix.SYS_IO_GETEVENTS, ctx, uintptr(minNr), uintptr(len(events)),
			uintptr(unsafe.Pointer(&events[0])), uintptr(unsafe.Pointer(ts)), 0)
		if e != 0 {
			return 0, e
		}
		return int(n), nil
	},
}

// aio is one AIO context whose completions are counted on an eventfd. No
// goroutine of its own reads them: one waiting File at a time does (the
// reaper), hands every completion to its waiter, and when its own is in
// passes the reading on to another waiter.
type aio struct {
	ctx uintptr
	k   kernel
	// efd counts completions; read through the network poller, so a
	// reaper waiting on it is parked.
	efd    *os.File
	efdRaw int

	mu      sync.Mutex
	next    uint64             // the next request's id (the iocb's data)
	waiting map[uint64]*waiter // by id, submitted and not completed
	reaping bool               // a waiter is reading completions
	events  []ioEvent          // the reaper's buffer

	// refused is set once the kernel refused AIO altogether (ENOSYS, EPERM
	// from a sandbox): File calls f.Sync from then on.
	refused atomic.Bool
	// completed counts fsyncs done through AIO.
	completed atomic.Int64
}

// waiter is one File waiting for its fsync.
type waiter struct {
	// wake is signalled when the fsync completed, or when the reaper left
	// and this waiter may take over.
	wake chan struct{}
	done bool  // under aio.mu
	res  int64 // the fsync's result, a negated errno or 0
}

var (
	sharedOnce sync.Once
	sharedAIO  *aio
	sharedErr  error // why sharedAIO is nil
)

// shared returns the process's AIO context, set up at first use, or nil
// where AIO cannot be used.
func shared() *aio {
	sharedOnce.Do(func() {
		sharedAIO, sharedErr = newAIO(linuxKernel)
	})
	if sharedAIO == nil || sharedAIO.refused.Load() {
		return nil
	}
	return sharedAIO
}

// completedAIO returns how many fsyncs the process's AIO context has done.
func completedAIO() int64 {
	shared() // set up, or found refused
	if sharedAIO == nil {
		return 0
	}
	return sharedAIO.completed.Load()
}

// newAIO sets up an AIO context and its eventfd. The process keeps them
// until it exits, as the runtime keeps its epoll descriptor.
func newAIO(k kernel) (*aio, error) {
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("eventfd", err)
	}
	ctx, err := k.setup()
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	return &aio{
		ctx:     ctx,
		k:       k,
		efd:     os.NewFile(uintptr(fd), "fsync-completions"), // non-blocking: polled
		efdRaw:  fd,
		waiting: make(map[uint64]*waiter),
		events:  make([]ioEvent, 64),
	}, nil
}

// sync fsyncs f through AIO and waits for it, returning its error; done is
// false when AIO did not take the fsync (nothing was done: the caller calls
// f.Sync).
func (a *aio) sync(f *os.File) (done bool, err error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return false, nil
	}
	w := &waiter{wake: make(chan struct{}, 1)}
	a.mu.Lock()
	id := a.next
	a.next++
	a.waiting[id] = w
	a.mu.Unlock()
	var serr error
	cerr := rc.Control(func(fd uintptr) {
		// The kernel takes its own reference to the file: f may be
		// closed before the fsync completes, as with any system call.
		serr = a.k.submit(a.ctx, &iocb{data: id, opcode: iocbCmdFsync, fildes: uint32(fd), flags: iocbFlagResfd, resfd: uint32(a.efdRaw)})
	})
	if cerr != nil || serr != nil {
		a.mu.Lock()
		delete(a.waiting, id)
		a.handOverLocked() // a reader that left may have chosen this one
		a.mu.Unlock()
		if errors.Is(serr, syscall.ENOSYS) || errors.Is(serr, syscall.EPERM) {
			a.refused.Store(true)
		}
		// EAGAIN (ring full), EINVAL (a file without fsync, a kernel
		// before 4.18): this one goes through f.Sync.
		return false, nil
	}
	a.await(w)
	a.completed.Add(1)
	if w.res < 0 {
		return true, &os.PathError{Op: "sync", Path: f.Name(), Err: syscall.Errno(-w.res)}
	}
	return true, nil
}

// await returns once w's fsync completed, reading completions itself while
// no other waiter does.
func (a *aio) await(w *waiter) {
	for {
		a.mu.Lock()
		if w.done {
			a.mu.Unlock()
			return
		}
		if a.reaping {
			a.mu.Unlock()
			<-w.wake
			continue
		}
		a.reaping = true
		a.mu.Unlock()
		a.reap(w)
		a.mu.Lock()
		a.reaping = false
		a.handOverLocked()
		a.mu.Unlock()
	}
}

// handOverLocked wakes the oldest waiter to read the completions, when no
// waiter reads them. Callers hold a.mu.
func (a *aio) handOverLocked() {
	if a.reaping {
		return
	}
	var (
		oldest *waiter
		oldID  uint64
	)
	for id, w := range a.waiting {
		if oldest == nil || id < oldID {
			oldest, oldID = w, id
		}
	}
	if oldest != nil {
		signal(oldest.wake)
	}
}

// The reaper looks for completions again after firstLook, then after twice
// as long each time, up to maxLook, even if the eventfd has not been seen
// to count one (reap).
const (
	firstLook = 200 * time.Microsecond
	maxLook   = time.Millisecond
)

// reap hands out completions until w's is among them.
//
// Between looks it is parked on the eventfd, which the runtime's network
// poller watches; but a poller with every P busy is consulted only by the
// runtime's monitor, up to 10 ms later, while a read deadline is a timer
// that a P runs at its next scheduling point. Under load, WAL puts took
// 6-8 ms at the median for 0.6 ms of disk work. So each read ends at the
// next look at the latest, and the completions already there are taken.
func (a *aio) reap(w *waiter) {
	var count [8]byte
	block := false
	look := firstLook
	for {
		n, err := a.k.getevents(a.ctx, a.events, block)
		if err != nil && !errors.Is(err, syscall.EINTR) {
			// Nothing else can be done for the fsyncs in flight: wait
			// for them holding the P, as f.Sync would.
			block = true
			continue
		}
		if n > 0 && a.complete(a.events[:n], w) {
			return
		}
		if n > 0 || block {
			continue
		}
		// Parked until the next completion is counted, or the next look.
		if err := a.efd.SetReadDeadline(time.Now().Add(look)); err != nil {
			block = true
			continue
		}
		look = min(2*look, maxLook)
		if _, err := a.efd.Read(count[:]); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			block = true
		}
	}
}

// complete hands each event to its waiter and reports whether w's was one.
func (a *aio) complete(events []ioEvent, w *waiter) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, ev := range events {
		o, ok := a.waiting[ev.data]
		if !ok {
			continue
		}
		delete(a.waiting, ev.data)
		o.res, o.done = ev.res, true
		signal(o.wake)
	}
	return w.done
}

// signal wakes the waiter of ch, or leaves it a wake-up it has yet to take.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
