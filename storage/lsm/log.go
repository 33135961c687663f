package lsm

import (
	"context"
	"errors"
	"fmt"
)

// The log: records of the caller's own that the WAL makes durable like any
// write, but that never enter a memtable or table. A caller that keeps an
// in-memory state (a time-series head) logs each change, replays the log
// after a restart, and truncates it once it has written that state out with
// ordinary writes. Log records cost one WAL append and nothing in
// compaction; WAL objects holding them stay until TruncateLog passes them
// (Options.KeepLog).

// ErrNoWAL is returned by Log when the WAL is off.
var ErrNoWAL = errors.New("lsm: the log needs the WAL")

// LogPos is where a log record sits: its WAL object and its index among
// that object's records.
type LogPos struct {
	WAL   uint64
	Index int
}

// Less reports whether p comes before q.
func (p LogPos) Less(q LogPos) bool {
	return p.WAL < q.WAL || p.WAL == q.WAL && p.Index < q.Index
}

// Log appends rec to the WAL as a log record and returns once it is durable.
// Records are durable in call order: a record that Log returned for is
// preceded in the WAL by every record logged before it. It blocks while WAL
// objects waiting to be written exceed Options.MaxUnflushedBytes.
func (db *DB) Log(ctx context.Context, rec []byte) error {
	if err := db.WaitLogRoom(ctx); err != nil {
		return err
	}
	wait, err := db.AppendLog(rec)
	if err != nil {
		return err
	}
	return wait.Wait(ctx)
}

// WaitLogRoom blocks while WAL objects waiting to be written exceed
// Options.MaxUnflushedBytes (a slow or failing store), until ctx ends; it
// returns the DB's error once it has one (ErrFenced, ErrClosed).
func (db *DB) WaitLogRoom(ctx context.Context) error {
	if !db.opts.WALEnabled {
		return ErrNoWAL
	}
	if err := db.lockWhenWritable(ctx, db.walFullLocked); err != nil {
		return err
	}
	db.mu.Unlock()
	return nil
}

func (db *DB) walFullLocked() bool { return db.walBytes > db.opts.MaxUnflushedBytes }

// LogWait is a log record on its way to the object store.
type LogWait struct{ buf *walBuf }

// Wait returns once the record is durable, with the error that kept it
// from becoming durable, or with ctx's error (the record may still become
// durable later).
func (w LogWait) Wait(ctx context.Context) error { return w.buf.wait(ctx) }

// AppendLog appends rec to the WAL object being filled, in order after
// every record appended before, without waiting for back-pressure
// (WaitLogRoom) or durability (the LogWait). It is cheap and never blocks
// on the object store, so a caller may hold its own lock across it: a
// LogMark taken after it returns is at or after the record.
func (db *DB) AppendLog(rec []byte) (LogWait, error) {
	return db.appendLog(rec, false)
}

// ExpectLog announces a log record on its way: a commit that will call
// AppendExpectedLog, or CancelLog, soon. While any announced record has not
// been appended, the WAL object being filled waits for the others; once none
// is on its way it may go before its interval (Options.WALMinInterval).
//
// It takes no lock: every remote-write request calls it on arrival. An
// announcement that comes as the object is being sealed early only puts its
// record in the next object.
func (db *DB) ExpectLog() {
	db.walWriters.Add(1)
}

// CancelLog withdraws an ExpectLog whose record will not come.
func (db *DB) CancelLog() {
	db.mu.Lock()
	defer db.mu.Unlock()
	db.walWriters.Add(-1)
	db.sealEarlyLocked()
}

// AppendExpectedLog is AppendLog for a record announced with ExpectLog: it
// withdraws the announcement, in the same step, whether or not it succeeds.
func (db *DB) AppendExpectedLog(rec []byte) (LogWait, error) {
	return db.appendLog(rec, true)
}

func (db *DB) appendLog(rec []byte, expected bool) (LogWait, error) {
	db.mu.Lock()
	defer db.mu.Unlock()
	if expected {
		db.walWriters.Add(-1)
	}
	if !db.opts.WALEnabled {
		return LogWait{}, ErrNoWAL
	}
	if db.err != nil {
		return LogWait{}, db.err
	}
	buf := db.walCur
	buf.data = appendWALRecord(buf.data, &entry{kind: kindLog, value: rec})
	buf.n++
	if len(buf.data) >= db.opts.WALMaxBytes || db.walDue && db.walRoomLocked() {
		// Full, or its interval passed while the WAL was idle: written now.
		db.sealWALLocked(fullOrInterval(len(buf.data), db.opts.WALMaxBytes))
		kick(db.walKick)
	} else {
		db.sealEarlyLocked()
	}
	return LogWait{buf: buf}, nil
}

// LogMark seals the WAL object being filled and returns its id: every record
// logged before the call is in a WAL object with an id <= the mark, every
// record logged after it in one with a larger id. Pass it to TruncateLog once
// the state those records built is written out.
func (db *DB) LogMark() uint64 {
	db.mu.Lock()
	defer db.mu.Unlock()
	if db.opts.WALEnabled && db.walCur != nil && db.walCur.n > 0 {
		db.sealWALLocked(sealSync)
		kick(db.walKick)
	}
	return db.lastWALID
}

// TruncateLog makes every write so far durable, then records in a new
// manifest that the log records at or before mark (LogMark) are no longer
// needed: ReplayLog and readers skip them and garbage collection may delete
// their WAL objects once their writes are in tables too.
func (db *DB) TruncateLog(ctx context.Context, mark uint64) error {
	if !db.opts.WALEnabled {
		return nil
	}
	db.mu.Lock()
	db.replayedLog = nil // ReplayLog was not called, or is not wanted
	db.mu.Unlock()
	if err := db.FlushWAL(ctx); err != nil {
		return err
	}
	db.mu.Lock()
	cur := db.man.LogAfter
	db.mu.Unlock()
	if mark <= cur {
		return nil
	}
	return db.commit(func(next *manifest) error {
		next.LogAfter = max(next.LogAfter, mark)
		return nil
	}, nil)
}

// keptLogBytes bounds the WAL objects whose log records the open's replay
// keeps for ReplayLog: the objects past it are read again. The replay
// position trails the WAL by up to Options.MemtableMaxAge, so the objects
// it replays may hold minutes of samples.
var keptLogBytes int64 = 64 << 20

// keptWAL is a WAL object the open's replay read: its id, its writer's
// epoch and its log records.
type keptWAL struct {
	id, epoch uint64
	ents      []entry
}

// keepLog returns the log records of a WAL object the open's replay read,
// and the bytes that keeping them holds (the object's records all: the
// kept ones share its buffer).
func keepLog(id, epoch uint64, ents []entry) (keptWAL, int64) {
	k := keptWAL{id: id, epoch: epoch}
	var size int64
	for _, e := range ents {
		size += int64(len(e.key) + len(e.value))
		if e.kind == kindLog {
			k.ents = append(k.ents, e)
		}
	}
	return k, size
}

// ReplayLog calls fn with each log record that earlier writers of the prefix
// left and did not truncate, in the order they were logged. Call it after
// Open, before TruncateLog; rec is valid only during the call. The objects
// the open's replay read are not read again, up to keptLogBytes of them.
func (db *DB) ReplayLog(ctx context.Context, fn func(rec []byte) error) error {
	db.mu.Lock()
	after, fence := db.man.LogAfter, db.logFence
	kept := db.replayedLog
	db.replayedLog = nil
	db.mu.Unlock()
	ids := claimedWALs(after, fence)
	// The kept objects have consecutive ids; the log's ids before and
	// after them are read (all of them when none was kept).
	var before, beyond []uint64
	for _, id := range ids {
		switch {
		case len(kept) == 0 || id < kept[0].id:
			before = append(before, id)
		case id > kept[len(kept)-1].id:
			beyond = append(beyond, id)
		}
	}
	var (
		fnErr  error
		filter walFilter
	)
	emit := func(_, epoch uint64, ents []entry) error {
		if !filter.admit(epoch) {
			return nil
		}
		for i := range ents {
			if ents[i].kind != kindLog {
				continue
			}
			if fnErr = fn(ents[i].value); fnErr != nil {
				return fnErr
			}
		}
		return nil
	}
	err := db.s.readWALs(ctx, before, emit)
	for _, k := range kept {
		if err != nil {
			break
		}
		if k.id > after && k.id < fence {
			err = emit(k.id, k.epoch, k.ents)
		}
	}
	if err == nil {
		err = db.s.readWALs(ctx, beyond, emit)
	}
	if err != nil && fnErr == nil {
		return fmt.Errorf("lsm: replay log: %w", err)
	}
	return err
}

// ReadLog calls fn with each log record the reader has loaded (with
// ReaderOptions.ReplayWAL) at or after from that the writer has not
// truncated, in log order, and returns the WAL id the log is truncated at
// (records in WAL ids <= it are gone). A caller that applied records before
// the truncation point must drop what they built. fn runs without the
// reader's locks held, so it may read through the reader; rec must not be
// modified.
func (r *Reader) ReadLog(from LogPos, fn func(pos LogPos, rec []byte) error) (uint64, error) {
	type logRec struct {
		pos LogPos
		rec []byte
	}
	var recs []logRec
	r.refreshMu.Lock()
	r.mu.Lock()
	man := r.v.man
	closed := r.closed
	r.mu.Unlock()
	if closed {
		r.refreshMu.Unlock()
		return 0, ErrClosed
	}
	start := max(from.WAL, man.LogAfter+1)
	for id := start; id <= r.lastWAL; id++ {
		ents, ok := r.wals[id]
		if !ok {
			continue
		}
		idx := 0
		for i := range ents {
			if ents[i].kind != kindLog {
				continue
			}
			pos := LogPos{WAL: id, Index: idx}
			idx++
			if !pos.Less(from) {
				// WAL objects are immutable once loaded: the records
				// stay valid after the lock is released.
				recs = append(recs, logRec{pos, ents[i].value})
			}
		}
	}
	r.refreshMu.Unlock()
	for _, lr := range recs {
		if err := fn(lr.pos, lr.rec); err != nil {
			return man.LogAfter, err
		}
	}
	return man.LogAfter, nil
}
