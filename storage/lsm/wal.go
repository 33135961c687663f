package lsm

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/shaledb/shale/storage/objstore"
)

// The WAL pipeline. Writes fill the current WAL object (walCur); every
// WALFlushInterval it is sealed and written, while the next one fills. Up
// to WALMaxInFlight objects are written at once, and a sealed object is
// started only while every object more than WALMaxInFlight ids before it is
// stored (a window over the ids). An object is acknowledged (its writes
// return) once it and every object before it are stored, so acknowledged
// writes are always a prefix of the log. See "WAL objects in flight" in
// docs/format/lsm.md for what an opening writer does with the objects a
// crashed or fenced writer left in flight.

// walInFlightLimit bounds Options.WALMaxInFlight. An opening writer claims
// this many WAL ids past the newest it finds, so that no object an earlier
// writer still has in flight can land among its own.
const walInFlightLimit = 16

// walBuf is one WAL object being filled, then written.
type walBuf struct {
	id   uint64
	data []byte
	n    int // records
	done chan struct{}
	err  error
	// landed: stored, acknowledged once every earlier object is too.
	landed   bool
	finished bool // done is closed
}

// newWALBuf starts a WAL object of this writer with room for sizeHint bytes
// (the size of the previous one), so steady writing does not regrow it: in
// the buffer of a stored object if one is free and that large. Callers hold
// db.mu, or own db alone (Open).
func (db *DB) newWALBuf(sizeHint int) *walBuf {
	size := max(sizeHint, 4096)
	var data []byte
	if n := len(db.walFree); n > 0 {
		data = db.walFree[n-1]
		db.walFree[n-1] = nil
		db.walFree = db.walFree[:n-1]
		db.walFreeBytes -= cap(data)
		if cap(data) < size {
			data = nil // too small to be worth keeping
		}
	}
	if data == nil {
		data = make([]byte, 0, size)
	}
	return &walBuf{data: appendWALHeader(data[:0], db.epoch), done: make(chan struct{})}
}

// walFreeMax and walFreeMaxBytes bound the stored WAL objects' buffers that
// wait for reuse: one for each object that may be in flight and the one
// being filled, and no more bytes than a burst of large objects is worth
// keeping once it has passed.
const (
	walFreeMax      = walInFlightLimit + 1
	walFreeMaxBytes = 32 << 20
)

// recycleLocked gives the buffer of b, which is stored and acknowledged, to
// the next WAL objects. The put that stored it has returned, and nothing
// else reads an object's bytes: its waiters read done and err. Callers hold
// db.mu.
func (b *walBuf) recycleLocked(db *DB) {
	if len(db.walFree) < walFreeMax && db.walFreeBytes+cap(b.data) <= walFreeMaxBytes {
		db.walFree = append(db.walFree, b.data[:0])
		db.walFreeBytes += cap(b.data)
	}
	b.data = nil
}

// finishLocked acknowledges the object's writes (err nil) or fails them, once.
// Callers hold db.mu.
func (b *walBuf) finishLocked(err error) {
	if b.finished {
		return
	}
	b.finished = true
	b.err = err
	close(b.done)
}

// wait returns once the object is stored and acknowledged, nil, or its
// writes failed, with that error; or with ctx's error if ctx ends first.
func (b *walBuf) wait(ctx context.Context) error {
	return awaitDone(ctx, b.done, &b.err)
}

// awaitDone returns *err once done is closed (err is set before the close),
// or ctx's error if ctx ends first.
func awaitDone(ctx context.Context, done <-chan struct{}, err *error) error {
	select {
	case <-done:
		return *err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// walFilter is the replay rule: reading WAL objects in id order, an object
// whose writer epoch is lower than that of an object before it is void. A
// newer writer's empty objects (plugs) fill the ids that a crashed or
// fenced writer had in flight when it stopped, and everything that writer
// stored after such an id was never acknowledged (acknowledgement is in id
// order), so it is skipped by every replay and every reader alike.
type walFilter struct{ epoch uint64 }

// admit reports whether an object of epoch, next in id order, is replayed.
func (f *walFilter) admit(epoch uint64) bool {
	if epoch < f.epoch {
		return false
	}
	f.epoch = epoch
	return true
}

// walLoop seals the WAL object being filled every flush interval and starts
// the writes the window allows.
func (db *DB) walLoop() {
	t := time.NewTicker(db.opts.WALFlushInterval)
	defer t.Stop()
	// early fires when a WAL object may go before its interval but the
	// previous one was sealed less than WALMinInterval ago. (Since Go 1.23
	// Stop and Reset leave no stale tick in the channel.)
	early := time.NewTimer(time.Hour)
	early.Stop()
	defer early.Stop()
	for {
		tick := false
		select {
		case <-db.ctx.Done():
			return
		case <-t.C:
			tick = true
		case <-db.walKick:
		case <-early.C:
		}
		db.mu.Lock()
		if tick {
			db.walDue = true
		}
		db.pumpWALLocked()
		// With no room to start it, the object goes when a write lands.
		wait, ok := db.earlyWaitLocked()
		ok = ok && wait > 0 && db.walRoomLocked()
		db.mu.Unlock()
		if ok {
			early.Reset(wait)
		} else {
			early.Stop()
		}
	}
}

// fullOrInterval is the reason a WAL object of size bytes sealed by a write
// was sealed: it reached max, or its interval had passed.
func fullOrInterval(size, max int) sealReason {
	if size >= max {
		return sealFull
	}
	return sealInterval
}

// earlySeals reports whether WAL objects may go before their interval
// (Options.WALMinInterval).
func (db *DB) earlySeals() bool {
	return db.opts.WALMinInterval > 0 && db.opts.WALMinInterval < db.opts.WALFlushInterval
}

// earlyWaitLocked reports whether the WAL object being filled may go before
// its interval (it holds something and no announced write is on its way),
// and how long until WALMinInterval has passed since the previous object was
// sealed: 0 means now.
func (db *DB) earlyWaitLocked() (time.Duration, bool) {
	if !db.earlySeals() || db.walWriters.Load() > 0 || db.walCur == nil || db.walCur.n == 0 {
		return 0, false
	}
	return max(db.opts.WALMinInterval-time.Since(db.walSealedAt), 0), true
}

// sealEarlyLocked lets the WAL object being filled go now if it may go
// early, or has walLoop wait for the moment it may.
func (db *DB) sealEarlyLocked() {
	wait, ok := db.earlyWaitLocked()
	if !ok {
		return
	}
	if wait == 0 && db.walRoomLocked() {
		db.sealWALLocked(sealEarly)
	}
	kick(db.walKick)
}

// pumpWALLocked starts writing sealed WAL objects, oldest first, while
// fewer than WALMaxInFlight are unacknowledged, sealing the one being filled
// when its interval is due. Only walLoop and the writes it starts call it
// (their goroutines hold db.wg, so starting more is safe during Close).
func (db *DB) pumpWALLocked() {
	if db.err != nil || db.ctx.Err() != nil {
		return
	}
	for len(db.walFlight) < db.opts.WALMaxInFlight {
		if len(db.walQueue) == 0 {
			why := sealInterval
			if !db.walDue {
				if wait, ok := db.earlyWaitLocked(); !ok || wait > 0 {
					return
				}
				why = sealEarly
			}
			if db.walCur.n == 0 {
				return
			}
			db.sealWALLocked(why)
		}
		b := db.walQueue[0]
		db.walQueue[0] = nil
		db.walQueue = db.walQueue[1:]
		db.walFlight = append(db.walFlight, b)
		db.wg.Add(1)
		go db.putWAL(b)
	}
}

// walRoomLocked reports whether a WAL object sealed now would start at once.
func (db *DB) walRoomLocked() bool {
	return len(db.walQueue) == 0 && len(db.walFlight) < db.opts.WALMaxInFlight
}

// putWAL writes b, then acknowledges every object stored in order.
func (db *DB) putWAL(b *walBuf) {
	defer db.wg.Done()
	if err := db.writeWAL(b); err != nil {
		if db.ctx.Err() != nil {
			err = ErrClosed // closing: the pending writes are released below
		}
		// Later objects may land, but none is acknowledged past this one.
		db.fail(err)
		return
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	b.landed = true
	acked := false
	for len(db.walFlight) > 0 && db.walFlight[0].landed {
		f := db.walFlight[0]
		db.walFlight[0] = nil
		db.walFlight = db.walFlight[1:]
		db.walBytes -= int64(len(f.data))
		f.finishLocked(nil)
		f.recycleLocked(db)
		acked = true
	}
	if acked {
		db.notifyLocked()
	}
	db.pumpWALLocked()
}

func (db *DB) writeWAL(buf *walBuf) error {
	start := time.Now()
	obj := finishWAL(buf.data)
	err := db.s.putIfAbsent(db.ctx, "wal", db.s.paths.wal(buf.id), obj, true)
	db.m.walFlush.Observe(time.Since(start).Seconds())
	if err == nil {
		return nil
	}
	if objstore.IsPreconditionFailed(err) {
		db.logger.Warn("lsm: wal object taken by a newer writer; fenced", "wal", buf.id)
		return ErrFenced
	}
	return fmt.Errorf("lsm: write wal %d: %w", buf.id, err)
}

// awaitWAL waits until b, and so every WAL object before it, is stored.
func (db *DB) awaitWAL(b *walBuf) error {
	if b == nil {
		return nil
	}
	select {
	case <-b.done:
		return b.err
	case <-db.ctx.Done():
		return fmt.Errorf("lsm: wait for wal %d: %w", b.id, db.ctx.Err())
	}
}

// releaseWALLocked fails every write still waiting for a WAL object.
func (db *DB) releaseWALLocked(err error) {
	for _, b := range db.walQueue {
		b.finishLocked(err)
	}
	for _, b := range db.walFlight {
		b.finishLocked(err)
	}
	db.walQueue, db.walFlight, db.walBytes = nil, nil, 0
	if db.walCur != nil {
		db.walCur.finishLocked(err)
		db.walCur = db.newWALBuf(0)
	}
}

// claimedWALs returns the WAL ids in (after, fence), after at or past the
// manifest's positions when the writer opened: claimWAL left an object
// under each (an earlier writer's, or a plug), so a replay reads them all
// rather than a listing's. A store may list an object late, and one a
// listing left out was skipped, with the acknowledged writes it held.
func claimedWALs(after, fence uint64) []uint64 {
	if fence <= after+1 {
		return nil
	}
	ids := make([]uint64, 0, fence-after-1)
	for id := after + 1; id < fence; id++ {
		ids = append(ids, id)
	}
	return ids
}

// claimWAL takes every WAL id after the manifest's positions up to the
// returned one, exclusive, which is this writer's first WAL object: an id
// with no object gets an empty object of this writer's epoch (a plug),
// create-if-absent. Plugs fill the ids an earlier writer had in flight, so
// that it can neither store them later nor acknowledge anything after them
// (it is fenced), and they reach walInFlightLimit ids past the lowest plug,
// beyond which no earlier writer can start an object: its window cannot
// pass an id it does not hold.
func (db *DB) claimWAL(ctx context.Context) (uint64, error) {
	keep := db.man.walKeepAfter()
	ids, err := db.s.walIDs(ctx, keep)
	if err != nil {
		return 0, fmt.Errorf("lsm open: %w", err)
	}
	taken := make(map[uint64]bool, len(ids))
	top := max(db.man.ReplayAfter, db.man.LogAfter)
	for _, id := range ids {
		taken[id] = true
		top = max(top, id)
	}
	plug := finishWAL(appendWALHeader(nil, db.epoch))
	hi := top + walInFlightLimit
	var lowest uint64 // lowest id plugged by this writer; 0: none yet
	for round := 0; round < 64; round++ {
		var want []uint64
		for id := keep + 1; id <= hi; id++ {
			if !taken[id] {
				want = append(want, id)
			}
		}
		mine, err := db.plugWAL(ctx, want, plug)
		if err != nil {
			return 0, err
		}
		for _, id := range want {
			taken[id] = true
		}
		for _, id := range mine {
			if lowest == 0 || id < lowest {
				lowest = id
			}
		}
		switch {
		case lowest == 0:
			hi += walInFlightLimit // every id was taken meanwhile
		case lowest+walInFlightLimit-1 > hi:
			hi = lowest + walInFlightLimit - 1
		default:
			return hi + 1, nil
		}
	}
	return 0, fmt.Errorf("lsm open: could not claim the wal: another writer keeps writing")
}

// plugWAL writes plug under each of ids, create-if-absent, in parallel, and
// returns the ids it wrote (the others were taken).
func (db *DB) plugWAL(ctx context.Context, ids []uint64, plug []byte) ([]uint64, error) {
	var (
		mu       sync.Mutex
		mine     []uint64
		firstErr error
	)
	eachParallel(ids, walInFlightLimit, func(id uint64) {
		// A plug carries its writer's epoch: a lost answer is told apart
		// from another writer's plug by reading it back.
		err := db.s.putIfAbsent(ctx, "wal", db.s.paths.wal(id), plug, true)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err == nil:
			mine = append(mine, id)
		case objstore.IsPreconditionFailed(err):
		case firstErr == nil:
			firstErr = fmt.Errorf("lsm open: write wal plug %d: %w", id, err)
		}
	})
	return mine, firstErr
}
