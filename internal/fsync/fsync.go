// Package fsync makes files durable (fsync(2)) without holding one of the
// Go scheduler's Ps while the disk works.
//
// A goroutine in a system call keeps its P until the runtime's monitor
// (sysmon) takes it back, which it checks for less often the longer it has
// had nothing to take: a millisecond or more. An fsync is mostly waiting
// for the disk, so on a machine with two Ps every fsync of a WAL object
// left half of it idle with requests waiting to run (an execution trace of
// durable ingest: a fifth of one P's time lost this way).
//
// On Linux, File hands the fsync to the kernel through native AIO
// (IOCB_CMD_FSYNC, run by a kernel worker) and waits for its completion
// on an eventfd read through the runtime's network poller, so the waiting
// goroutine is parked and its P runs other goroutines. It also looks for
// the completion after 0.2 ms, then twice as long each time up to 1 ms: with
// every P busy the poller is consulted only every 10 ms, and a timer runs at
// a P's next scheduling point. The fsync itself is
// the same call with the same guarantee. Where AIO cannot be used (another
// system, a kernel or sandbox that refuses it, a file without fsync
// support in AIO), File calls f.Sync.
package fsync

import (
	"os"
)

// File commits f's content and metadata to stable storage, as f.Sync.
func File(f *os.File) error {
	if a := shared(); a != nil {
		if done, err := a.sync(f); done {
			return err
		}
	}
	return f.Sync()
}

// Dir makes the entries of directory dir durable: it opens it, commits it
// as File and closes it.
func Dir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = File(d)
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// Async reports whether File waits without holding a P (AIO is in use).
func Async() bool { return shared() != nil }

// Completed returns how many fsyncs File and Dir have done through AIO
// since the process started.
func Completed() int64 { return completedAIO() }
