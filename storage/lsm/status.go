package lsm

import "time"

// Status is a snapshot of an LSM's shape and state, for display (the
// server's storage status page). Its slices belong to the caller.
type Status struct {
	// Manifest is the id of the manifest reads see; WriterEpoch the epoch
	// of the writer that wrote it; LastSeq its largest sequence number.
	Manifest    uint64
	WriterEpoch uint64
	LastSeq     uint64
	// L0 are the L0 tables, newest first; Runs the sorted runs, newest
	// first.
	L0   []TableStatus
	Runs []RunStatus
	// RangeTombstones counts the manifest's range tombstones.
	RangeTombstones int
	// MemtableBytes and MemtableEntries are of the mutable memtable and
	// the immutable ones waiting to be flushed (Immutable of them). A
	// reader counts the writes it replayed from the WAL.
	MemtableBytes   int64
	MemtableEntries int64
	Immutable       int
	// ReplayAfter is the last WAL object whose writes are all in tables;
	// LastWAL the newest WAL object sealed (writer) or read (reader).
	ReplayAfter, LastWAL uint64
	// PendingWALObjects and PendingWALBytes are sealed WAL objects not yet
	// written to the object store (writer only).
	PendingWALObjects int
	PendingWALBytes   int64
	// ExpectedLogRecords counts log records announced with ExpectLog and
	// not yet appended or withdrawn (writer only).
	ExpectedLogRecords int
	// Compacting is true while a compaction is planned or runs (in either
	// lane);
	// Compactions counts those committed since the DB opened (writer only).
	Compacting  bool
	Compactions uint64
	// RefreshedAt is when a reader last saw the writer's newest manifest
	// and WAL (reader only; zero before the first refresh).
	RefreshedAt time.Time
}

// TableStatus describes one table of the manifest.
type TableStatus struct {
	ID                      string
	Bytes                   int64
	Entries                 uint64
	SmallestKey, LargestKey []byte
}

// RunStatus describes one sorted run.
type RunStatus struct {
	ID     uint64
	Tables []TableStatus
	Bytes  int64
}

func manifestStatus(st *Status, man *manifest) {
	st.WriterEpoch, st.LastSeq, st.ReplayAfter = man.WriterEpoch, man.LastSeq, man.ReplayAfter
	st.RangeTombstones = len(man.Tombs)
	tables := func(ts []tableMeta) []TableStatus {
		out := make([]TableStatus, len(ts))
		for i, t := range ts {
			out[i] = TableStatus{ID: t.ID, Bytes: t.Size, Entries: t.NumEntries, SmallestKey: append([]byte(nil), t.SmallestKey...), LargestKey: append([]byte(nil), t.LargestKey...)}
		}
		return out
	}
	st.L0 = tables(man.L0)
	for i := range man.Runs {
		r := &man.Runs[i]
		st.Runs = append(st.Runs, RunStatus{ID: r.ID, Tables: tables(r.Tables), Bytes: r.size()})
	}
}

// Status returns a snapshot of the writer's LSM. Safe for concurrent use.
func (db *DB) Status() Status {
	db.mu.Lock()
	st := Status{
		Manifest:           db.manID,
		LastWAL:            db.lastWALID,
		PendingWALObjects:  len(db.walQueue) + len(db.walFlight),
		ExpectedLogRecords: int(db.walWriters.Load()),
		PendingWALBytes:    db.walBytes,
		Immutable:          len(db.imms),
	}
	man := db.man
	for _, m := range append([]*memtable{db.mem}, db.imms...) {
		if m != nil {
			st.MemtableBytes += m.size.Load()
			st.MemtableEntries += m.count.Load()
		}
	}
	db.mu.Unlock()
	if man != nil {
		manifestStatus(&st, man)
	}
	st.Compacting = db.compacting.Load() > 0
	st.Compactions = db.compactionsDone.Load()
	return st
}

// Status returns a snapshot of the reader's view. Safe for concurrent use.
func (r *Reader) Status() Status {
	r.mu.Lock()
	v, manID, at, lastWAL := r.v, r.manID, r.refreshedAt, r.seenWAL
	r.mu.Unlock()
	st := Status{Manifest: manID, RefreshedAt: at, LastWAL: lastWAL}
	if v.mem != nil {
		st.MemtableBytes, st.MemtableEntries = v.mem.size.Load(), v.mem.count.Load()
	}
	manifestStatus(&st, v.man)
	return st
}
