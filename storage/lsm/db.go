// Package lsm is a log-structured merge key-value engine whose durable
// state lives only in an object store: a memtable, an optional WAL of
// objects written every flush interval with group commit, L0 tables flushed
// from memtables, size-tiered compaction into sorted runs, a manifest of
// numbered create-if-absent objects with writer-epoch fencing, garbage
// collection after a grace period, and read-only readers that follow the
// manifest. Object names and formats are described in docs/format/lsm.md.
package lsm

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shaledb/shale/storage/lsm/sst"
	"github.com/shaledb/shale/storage/objstore"
)

// ErrFenced is returned by every write of a DB after a newer writer opened
// the same prefix.
var ErrFenced = errors.New("lsm: writer fenced by a newer writer")

// ErrClosed is returned by calls on a closed DB or Reader.
var ErrClosed = errors.New("lsm: closed")

// DB is the single writer of one bucket prefix. Its methods are safe for
// concurrent use.
type DB struct {
	opts   Options
	comp   Components
	s      *store
	logger *slog.Logger
	m      *metrics
	merge  MergeOperator
	// readMerge is Components.ReadMerge, or merge.
	readMerge MergeOperator
	clock     Clock
	epoch     uint64

	ctx    context.Context // cancelled when the DB stops for good
	cancel context.CancelFunc
	wg     sync.WaitGroup

	viewp      atomic.Pointer[view]
	visibleSeq atomic.Uint64

	mu        sync.Mutex
	mem       *memtable
	imms      []*memtable // newest first
	lastSeq   uint64
	walCur    *walBuf
	walQueue  []*walBuf // sealed, not started, in id order
	walFlight []*walBuf // started and not acknowledged, in id order
	walDue    bool      // the flush interval passed since walCur was started
	// walWriters counts writes announced with ExpectLog and not yet
	// appended (an atomic: ExpectLog counts without taking mu, the others
	// change and read it under mu); walSealedAt is when the last WAL object
	// was sealed (Options.WALMinInterval).
	walWriters  atomic.Int64
	walSealedAt time.Time
	walBytes    int64 // bytes of sealed WAL objects not yet acknowledged
	// walFree holds the buffers of stored WAL objects for the next ones
	// (newWALBuf): steady ingest fills an object of 100-200 KB every few
	// milliseconds, and allocating each anew was a third of the writer's
	// allocated bytes, so the collector ran that much more often.
	walFree      [][]byte
	walFreeBytes int // the capacity of walFree's buffers
	nextWALID    uint64
	lastWALID    uint64  // id of the newest sealed WAL object
	walLast      *walBuf // newest sealed WAL object, written or not
	err          error   // sticky: ErrFenced, ErrClosed or a permanent failure
	changed      chan struct{}
	fenced       chan struct{} // closed once err is ErrFenced

	walKick   chan struct{}
	flushKick chan struct{}
	compKick  chan struct{}
	runsKick  chan struct{}

	commitMu sync.Mutex // serialises manifest commits
	manID    uint64
	man      *manifest // latest committed; guarded by commitMu and mu for writes
	l0Depth  int       // l0Depth(man.L0), under mu

	inflightMu sync.Mutex
	inflight   map[string]bool // tables being written, protected from GC
	pins       map[string]int  // tables of checkpoints being written, the same

	// What GC needs to keep objects for readers on older manifests: when
	// each table left the manifest and when the replay position moved.
	// Guarded by inflightMu.
	openedAt    time.Time
	openReplay  uint64
	droppedAt   map[string]time.Time
	replayMoves []replayMove

	// One compaction at a time in each lane: laneL0 drains L0 (with the
	// newest small runs), laneRuns merges large runs beside it. busyRuns
	// names the runs a compaction in flight merges, so that the other lane
	// plans around them (guarded by planMu).
	laneMu   [2]sync.Mutex
	planMu   sync.Mutex
	busyRuns map[uint64]bool
	// compacting counts compactions being planned or running;
	// compactionsDone counts those committed (Status).
	compacting      atomic.Int32
	compactionsDone atomic.Uint64

	// logFence is this writer's first WAL id (claimWAL): log records of
	// earlier writers sit in WAL ids below it (ReplayLog).
	logFence uint64
	// replayedLog holds the log records of the WAL objects the open's
	// replay read, from its first on, for ReplayLog to take rather than
	// read the objects again (keptLog); nil once taken or truncated.
	replayedLog []keptWAL
}

// Open opens the writer of prefix in bucket, fencing any previous writer:
// it writes the next manifest version with a higher epoch and claims the
// WAL ids past the last one (claimWAL), then replays the WAL past the
// manifest's replay position. Object names are prefix + "/" + ... (no leading segment
// when prefix is empty).
func Open(ctx context.Context, bucket objstore.Bucket, prefix string, opts Options, comp Components) (*DB, error) {
	comp, m, err := comp.prepare(&opts)
	if err != nil {
		return nil, err
	}
	db := &DB{
		opts:      opts,
		comp:      comp,
		s:         newStore(bucket, prefix, comp.Cache, m, comp.Logger, opts.RetryBackoff, cmp.Or(opts.MaxRetryBackoff, time.Second)),
		logger:    comp.Logger.With("lsm", prefix),
		m:         m,
		merge:     comp.Merge,
		readMerge: comp.readMerge(),
		clock:     comp.Clock,
		changed:   make(chan struct{}),
		fenced:    make(chan struct{}),
		walKick:   make(chan struct{}, 1),
		flushKick: make(chan struct{}, 1),
		compKick:  make(chan struct{}, 1),
		runsKick:  make(chan struct{}, 1),
		busyRuns:  map[uint64]bool{},
		inflight:  map[string]bool{},
		pins:      map[string]int{},
		droppedAt: map[string]time.Time{},
	}
	db.s.health = newHealth(db.clock, db.logger, m)
	if err := db.checkLiveWriter(ctx); err != nil {
		return nil, err
	}
	if err := db.checkConditionalPuts(ctx); err != nil {
		return nil, err
	}
	if err := db.bumpEpoch(ctx); err != nil {
		return nil, err
	}
	fence, err := db.claimWAL(ctx)
	if err != nil {
		return nil, err
	}
	db.logFence = fence
	db.openedAt = db.clock.Now()
	db.openReplay = db.man.walKeepAfter()
	db.mem = newMemtable(db.clock.Now())
	db.lastSeq = db.man.LastSeq
	if err := db.replayWAL(ctx, fence); err != nil {
		return nil, err
	}
	db.nextWALID = fence
	db.lastWALID = fence - 1
	db.walCur = db.newWALBuf(0)
	db.visibleSeq.Store(db.lastSeq)
	db.publishLocked()
	db.logger.Info("lsm: writer opened", "epoch", db.epoch, "manifest", db.manID, "wal_fence", fence,
		"l0", len(db.man.L0), "runs", len(db.man.Runs), "replayed_imms", len(db.imms))

	if err := db.renewWriterLease(ctx); err != nil {
		return nil, fmt.Errorf("lsm open: write the writer lease: %w", err)
	}
	db.ctx, db.cancel = context.WithCancel(context.Background())
	db.goLoop(func() {
		db.every(writerLeaseInterval, nil, slog.LevelWarn, "lsm: could not renew the writer lease", db.renewWriterLease)
	})
	if len(db.imms) > 0 {
		kick(db.flushKick)
	}
	if opts.WALEnabled {
		db.goLoop(db.walLoop)
	}
	db.goLoop(db.flushLoop)
	if opts.CompactionInterval > 0 {
		for lane, ch := range [...]chan struct{}{laneL0: db.compKick, laneRuns: db.runsKick} {
			db.goLoop(func() {
				db.every(opts.CompactionInterval, ch, slog.LevelError, "lsm: compaction failed; will retry", func(ctx context.Context) error {
					return db.compactLane(ctx, compactionLane(lane))
				})
			})
		}
	}
	if opts.GCInterval > 0 {
		db.goLoop(func() {
			db.every(opts.GCInterval, nil, slog.LevelWarn, "lsm: garbage collection failed; will retry", func(ctx context.Context) error {
				_, err := db.CollectGarbage(ctx)
				return err
			})
		})
	}
	return db, nil
}

func (db *DB) goLoop(f func()) {
	db.wg.Add(1)
	go func() {
		defer db.wg.Done()
		f()
	}()
}

// every runs work each interval, and at once on a kick (nil: none), until
// the DB stops. When work fails the DB is fenced it fails the DB and stops;
// any other failure is logged as msg at level and tried again at the next
// tick or kick.
func (db *DB) every(interval time.Duration, kick <-chan struct{}, level slog.Level, msg string, work func(context.Context) error) {
	repeat(db.ctx, interval, kick, work, func(err error) bool {
		if errors.Is(err, ErrFenced) {
			db.fail(err)
			return false
		}
		db.logger.Log(db.ctx, level, msg, "err", err)
		return true
	})
}

// repeat runs work each interval, and at once on a kick (nil: none), until
// ctx ends. A failure (other than ctx's end) goes to failed, which returns
// whether to go on.
func repeat(ctx context.Context, interval time.Duration, kick <-chan struct{}, work func(context.Context) error, failed func(error) bool) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-kick:
		}
		if err := work(ctx); err != nil && ctx.Err() == nil && !failed(err) {
			return
		}
	}
}

func kick(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// bumpEpoch writes the next manifest version with the next writer epoch.
func (db *DB) bumpEpoch(ctx context.Context) error {
	var lastErr error
	for attempt := 0; attempt < 8; attempt++ {
		id, m, err := db.s.latestManifest(ctx)
		if err != nil {
			return fmt.Errorf("lsm open: %w", err)
		}
		next := m.clone()
		next.WriterEpoch = m.WriterEpoch + 1
		if !db.opts.KeepLog {
			next.LogAfter = max(next.LogAfter, next.ReplayAfter)
		}
		err = db.s.putIfAbsent(ctx, "manifest", db.s.paths.manifest(id+1), appendManifest(nil, next), true)
		if err == nil {
			db.manID, db.man, db.epoch = id+1, next, next.WriterEpoch
			return nil
		}
		if !objstore.IsPreconditionFailed(err) {
			return fmt.Errorf("lsm open: write manifest %d: %w", id+1, err)
		}
		lastErr = err
		db.logger.Info("lsm: manifest changed while opening, retrying", "manifest", id+1)
	}
	return fmt.Errorf("lsm open: another process keeps writing manifests of this prefix: %w", lastErr)
}

// replayWAL loads WAL objects (ReplayAfter, fence) into memtables, but for
// those void by the replay rule (walFilter).
func (db *DB) replayWAL(ctx context.Context, fence uint64) error {
	ids := claimedWALs(db.man.ReplayAfter, fence)
	var filter walFilter
	keep := db.opts.KeepLog
	var kept int64
	err := db.s.readWALs(ctx, ids, func(id, epoch uint64, ents []entry) error {
		if epoch > db.epoch {
			return fmt.Errorf("wal %d is of writer epoch %d, after this writer's %d: %w", id, epoch, db.epoch, ErrFenced)
		}
		if keep {
			// Every object, void or not and with log records or none,
			// so that the kept ids run on without a gap.
			k, size := keepLog(id, epoch, ents)
			if kept += size; kept > keptLogBytes {
				keep = false
			} else {
				db.replayedLog = append(db.replayedLog, k)
			}
		}
		if !filter.admit(epoch) {
			db.logger.Info("lsm: wal object after one its writer never stored is void", "wal", id, "epoch", epoch)
			return nil
		}
		for i := range ents {
			if ents[i].kind == kindLog {
				continue
			}
			db.mem.add(ents[i])
			db.lastSeq = max(db.lastSeq, ents[i].seq)
		}
		if db.mem.size.Load() >= db.opts.MemtableBytes {
			db.lastWALID = id
			db.freezeLocked()
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("lsm open: replay: %w", err)
	}
	if !db.mem.empty() {
		// The replayed writes are durable in the WAL already; flushing them
		// early lets the replay position move past the claimed ids.
		db.lastWALID = fence - 1
		db.freezeLocked()
	}
	return nil
}

// publishLocked installs a new view for readers. Callers hold mu (or are
// the only goroutine, during Open).
func (db *DB) publishLocked() {
	imms := append([]*memtable(nil), db.imms...)
	db.viewp.Store(&view{mem: db.mem, imms: imms, man: db.man})
	var b int64 = db.mem.size.Load()
	for _, m := range imms {
		b += m.size.Load()
	}
	db.m.memtableBytes.Set(float64(b))
	db.m.l0Tables.Set(float64(len(db.man.L0)))
	db.l0Depth = l0Depth(db.man.L0)
	db.m.l0Depth.Set(float64(db.l0Depth))
	db.m.sortedRuns.Set(float64(len(db.man.Runs)))
}

// notifyLocked wakes writers waiting for back-pressure to ease.
func (db *DB) notifyLocked() {
	close(db.changed)
	db.changed = make(chan struct{})
}

// freezeLocked turns the mutable memtable into an immutable one queued for
// flushing. With the WAL on, the WAL object being filled is sealed too, so
// that the frozen memtable's writes all sit in WAL ids <= its walID and no
// newer write does.
func (db *DB) freezeLocked() {
	if db.mem.empty() {
		return
	}
	if db.opts.WALEnabled && db.walCur != nil {
		db.sealWALLocked(sealMemtable)
		kick(db.walKick)
		db.mem.wal = db.walLast
	}
	db.mem.walID = db.lastWALID
	db.imms = append([]*memtable{db.mem}, db.imms...)
	db.mem = newMemtable(db.clock.Now())
	if db.ctx != nil {
		db.publishLocked()
	}
	kick(db.flushKick)
}

func (db *DB) sealWALLocked(why sealReason) {
	if db.walCur.n == 0 {
		return
	}
	db.m.walSealed[why].Inc()
	db.walCur.id = db.nextWALID
	db.nextWALID++
	db.lastWALID = db.walCur.id
	db.walLast = db.walCur
	db.walQueue = append(db.walQueue, db.walCur)
	db.walBytes += int64(len(db.walCur.data))
	db.walDue = false
	db.walSealedAt = time.Now()
	db.walCur = db.newWALBuf(min(len(db.walCur.data)+len(db.walCur.data)/8, db.opts.WALMaxBytes+64<<10))
}

func (db *DB) unflushedLocked() int64 {
	b := db.mem.size.Load()
	for _, m := range db.imms {
		b += m.size.Load()
	}
	return b
}

func (db *DB) stalledLocked() bool {
	// WAL objects waiting to be written hold copies of recent writes: a slow
	// store must slow writers rather than grow memory.
	if db.unflushedLocked() > db.opts.MaxUnflushedBytes || db.walBytes > db.opts.MaxUnflushedBytes {
		return true
	}
	// Reads consult the L0 tables that hold a key's range: writes stall on
	// that depth, not on the count, which tables of disjoint ranges (one
	// memtable split by Components.FlushSplit, or keys written in order)
	// raise without costing a read more. The count has a bound too: every
	// table is in the manifest each commit writes.
	return db.opts.CompactionInterval > 0 &&
		(db.l0Depth >= db.opts.L0StallTables || len(db.man.L0) >= l0MaxTablesFactor*db.opts.L0StallTables)
}

// l0MaxTablesFactor times L0StallTables stalls writes whatever L0's depth.
const l0MaxTablesFactor = 4

// l0Depth returns the most tables of ts whose key ranges hold one key.
func l0Depth(ts []tableMeta) int {
	if len(ts) < 2 {
		return len(ts)
	}
	type edge struct {
		key []byte
		end bool
	}
	edges := make([]edge, 0, 2*len(ts))
	for i := range ts {
		edges = append(edges, edge{ts[i].SmallestKey, false}, edge{ts[i].LargestKey, true})
	}
	// Ranges are closed: at one key, starts count before ends.
	slices.SortFunc(edges, func(a, b edge) int {
		if c := bytes.Compare(a.key, b.key); c != 0 {
			return c
		}
		switch {
		case a.end == b.end:
			return 0
		case a.end:
			return 1
		}
		return -1
	})
	depth, most := 0, 0
	for _, e := range edges {
		if e.end {
			depth--
		} else {
			depth++
			most = max(most, depth)
		}
	}
	return most
}

// Put sets key to value with the DB's default write options.
func (db *DB) Put(ctx context.Context, key, value []byte) error {
	var b Batch
	b.Put(key, value)
	return db.Write(ctx, &b, db.DefaultWriteOptions())
}

// Delete removes key.
func (db *DB) Delete(ctx context.Context, key []byte) error {
	var b Batch
	b.Delete(key)
	return db.Write(ctx, &b, db.DefaultWriteOptions())
}

// Merge adds a merge operand to key.
func (db *DB) Merge(ctx context.Context, key, operand []byte) error {
	var b Batch
	b.Merge(key, operand)
	return db.Write(ctx, &b, db.DefaultWriteOptions())
}

// DeleteRange removes every key in [start, end). It costs one tombstone;
// tables entirely inside the range are dropped from the manifest when the
// tombstone reaches L0, others are filtered on read and rewritten by
// compaction.
func (db *DB) DeleteRange(ctx context.Context, start, end []byte) error {
	var b Batch
	b.DeleteRange(start, end)
	return db.Write(ctx, &b, db.DefaultWriteOptions())
}

// Fenced returns a channel closed once the DB learns that a newer writer
// fenced it (every write fails with ErrFenced from then on).
func (db *DB) Fenced() <-chan struct{} { return db.fenced }

// Options returns the settings the DB was opened with.
func (db *DB) Options() Options { return db.opts }

// DefaultWriteOptions awaits durability when the WAL is on.
func (db *DB) DefaultWriteOptions() WriteOptions {
	return WriteOptions{AwaitDurable: db.opts.WALEnabled}
}

// Write applies b atomically. It blocks while unflushed memtables exceed
// Options.MaxUnflushedBytes or L0 is at Options.L0StallTables. With
// opts.AwaitDurable it returns once b is durable; on error (ctx, ErrFenced,
// an object store failure) b may or may not become durable.
func (db *DB) Write(ctx context.Context, b *Batch, opts WriteOptions) error {
	if b.Len() == 0 {
		return nil
	}
	if err := b.validate(db.merge != nil); err != nil {
		return err
	}
	if err := db.lockWhenWritable(ctx, db.stalledLocked); err != nil {
		return err
	}
	seq := db.lastSeq
	mem := db.mem
	wal := db.opts.WALEnabled && !opts.SkipWAL
	buf := db.walCur
	for i := range b.ops {
		seq++
		e := b.entry(i, seq)
		mem.add(e)
		if wal {
			buf.data = appendWALRecord(buf.data, &e)
			buf.n++
		}
	}
	db.lastSeq = seq
	mem.maxSeq = max(mem.maxSeq, seq)
	db.visibleSeq.Store(seq)
	if mem.size.Load() >= db.opts.MemtableBytes {
		db.freezeLocked()
	} else if wal && (len(buf.data) >= db.opts.WALMaxBytes || db.walDue && db.walRoomLocked()) {
		// Full, or its interval passed while the WAL was idle: written now.
		db.sealWALLocked(fullOrInterval(len(buf.data), db.opts.WALMaxBytes))
		kick(db.walKick)
	}
	db.mu.Unlock()
	if !opts.AwaitDurable {
		return nil
	}
	if wal {
		return buf.wait(ctx)
	}
	return mem.waitFlushed(ctx)
}

// lockWhenWritable takes mu once the DB can take a write: no sticky error
// and stalled false (back-pressure). It returns with mu held, or with an
// error and mu released.
func (db *DB) lockWhenWritable(ctx context.Context, stalled func() bool) error {
	db.mu.Lock()
	counted := false
	for {
		if db.err != nil {
			err := db.err
			db.mu.Unlock()
			return err
		}
		if !stalled() {
			return nil
		}
		if !counted {
			counted = true
			db.m.writeStalls.Inc()
		}
		ch := db.changed
		db.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		db.mu.Lock()
	}
}

// fail makes err sticky: every later write returns it and waiters are
// released.
func (db *DB) fail(err error) {
	db.mu.Lock()
	defer db.mu.Unlock()
	// Several writers' goroutines may fail on one cause: only the error
	// that stops the writer is logged, once.
	first := db.err == nil || db.err == ErrClosed && err == ErrFenced
	if first {
		db.err = err
	}
	if db.err == ErrFenced {
		select {
		case <-db.fenced:
		default:
			close(db.fenced)
			db.logger.Warn("lsm: writer fenced; writes stop", "epoch", db.epoch)
		}
		db.s.health.setFenced()
	} else if first && err != ErrClosed {
		db.logger.Error("lsm: writer stopped", "err", err)
	}
	db.releaseWALLocked(db.err)
	for _, m := range db.imms {
		m.markFlushed(db.err)
	}
	db.mem.markFlushed(db.err)
	db.notifyLocked()
}

// flushLoop writes immutable memtables to L0, oldest first.
func (db *DB) flushLoop() {
	var tick <-chan time.Time
	if db.opts.MemtableMaxAge > 0 {
		t := time.NewTicker(max(db.opts.MemtableMaxAge/4, time.Millisecond))
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-db.ctx.Done():
			return
		case <-db.flushKick:
		case <-tick:
			db.mu.Lock()
			if !db.mem.empty() && db.clock.Now().Sub(db.mem.created) >= db.opts.MemtableMaxAge {
				db.freezeLocked()
			}
			db.mu.Unlock()
		}
		if err := db.flushImms(); err != nil {
			db.fail(err)
			return
		}
	}
}

func (db *DB) flushImms() error {
	for {
		db.mu.Lock()
		if db.err != nil && db.err != ErrClosed {
			err := db.err
			db.mu.Unlock()
			return err
		}
		if len(db.imms) == 0 {
			db.mu.Unlock()
			return nil
		}
		m := db.imms[len(db.imms)-1]
		db.mu.Unlock()
		if err := db.flushMemtable(m); err != nil {
			// Sticky before the memtable's waiters wake, so that no
			// write after a failed Flush (ErrFenced) is accepted.
			db.fail(err)
			m.markFlushed(err)
			return err
		}
		m.markFlushed(nil)
	}
}

// flushMemtable writes m as L0 tables (one, or one a region with
// Components.FlushSplit) and commits them.
func (db *DB) flushMemtable(m *memtable) error {
	// The tables stay protected from GC until the manifest names them.
	var ids []string
	defer func() {
		for _, id := range ids {
			db.protect(id, false)
		}
	}()
	metas, err := db.writeL0(m, func() string {
		id := newTableID(db.clock.Now())
		db.protect(id, true)
		ids = append(ids, id)
		return id
	})
	if err != nil {
		return err
	}
	// The replay position moves past the memtable's WAL objects only once
	// they are all stored: an id below it never holds a gap.
	if err := db.awaitWAL(m.wal); err != nil {
		return err
	}
	err = db.commit(func(next *manifest) error {
		// One memtable's tables have disjoint key ranges: their order
		// among themselves does not matter to reads.
		next.L0 = append(slices.Clip(metas), next.L0...)
		next.Tombs = append(next.Tombs, m.rangeTombs()...)
		next.LastSeq = max(next.LastSeq, m.maxSeq)
		next.ReplayAfter = max(next.ReplayAfter, m.walID)
		return nil
	}, func() {
		for i := len(db.imms) - 1; i >= 0; i-- {
			if db.imms[i] == m {
				db.imms = append(db.imms[:i:i], db.imms[i+1:]...)
				break
			}
		}
	})
	if err != nil {
		return err
	}
	db.m.flushes.Inc()
	db.logger.Debug("lsm: memtable flushed", "entries", m.count.Load(), "tables", len(metas), "wal", m.walID)
	kick(db.compKick)
	return nil
}

// writeL0 writes the entries of m as L0 tables named by newID and returns
// their metas in key order, none when no entry survives. Entries a range
// tombstone of the same memtable deletes are left out: the tombstone enters
// the manifest with the tables, so no view could see them (keys written and
// range-deleted between two flushes cost no table bytes).
//
// With Components.FlushSplit a new table starts where it says a region of
// the key space ends: data written together in different parts of the key
// space (a new partition's series entries, an old one's sample blocks)
// lands in tables whose ranges do not overlap, so L0's depth stays low and
// compaction moves the tables no other one overlaps instead of rewriting
// them.
func (db *DB) writeL0(m *memtable, newID func() string) ([]tableMeta, error) {
	if m.count.Load() == 0 {
		return nil, nil
	}
	tombs := m.rangeTombs()
	covered := func(e *entry) bool {
		for i := range tombs {
			if tombs[i].covers(e.key, e.seq) {
				return true
			}
		}
		return false
	}
	// A table is about its memtable's key and value bytes (less when its
	// blocks compress): one allocation of that size instead of a buffer
	// doubling past it, with two copies alive at each growth.
	remaining := m.size.Load() - m.count.Load()*nodeOverhead
	var (
		out  []tableMeta
		buf  bytes.Buffer
		w    *sst.Writer
		last []byte
	)
	finish := func() error {
		info, err := w.Finish()
		w = nil
		if err != nil {
			return fmt.Errorf("lsm: build l0 table: %w", err)
		}
		if info.NumEntries == 0 {
			return nil
		}
		id := newID()
		if err := db.s.putTable(db.ctx, id, buf.Bytes()); err != nil {
			return fmt.Errorf("lsm: write l0 table: %w", err)
		}
		remaining -= info.Size
		out = append(out, tableMetaFromInfo(id, info))
		return nil
	}
	split := db.comp.FlushSplit
	it := memIter{m: m}
	for ok := it.seekGE(nil); ok; ok = it.next() {
		e := it.entry()
		if covered(&e) {
			continue
		}
		if w != nil && split != nil && !bytes.Equal(last, e.key) && split(last, e.key) {
			if err := finish(); err != nil {
				return nil, err
			}
		}
		if w == nil {
			buf.Reset()
			buf.Grow(int(max(remaining, 0) + 1<<20))
			w = sst.NewWriter(&buf, db.opts.Table)
			w.SetInterval(db.comp.OperandInterval)
		}
		if err := w.Add(sst.Entry{Key: e.key, Seq: e.seq, Kind: sst.Kind(e.kind), Value: e.value}); err != nil {
			return nil, fmt.Errorf("lsm: build l0 table: %w", err)
		}
		last = append(last[:0], e.key...)
	}
	if w != nil {
		if err := finish(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (db *DB) protect(id string, on bool) {
	db.inflightMu.Lock()
	defer db.inflightMu.Unlock()
	if on {
		db.inflight[id] = true
	} else {
		delete(db.inflight, id)
	}
}

// commit writes the next manifest version: edit changes a copy of the
// current one, then installed runs under mu once the new version is durable.
func (db *DB) commit(edit func(next *manifest) error, installed func()) error {
	db.commitMu.Lock()
	defer db.commitMu.Unlock()
	next := db.man.clone()
	if err := edit(next); err != nil {
		return err
	}
	next.WriterEpoch = db.epoch
	if !db.opts.KeepLog {
		next.LogAfter = max(next.LogAfter, next.ReplayAfter)
	}
	dropCoveredTables(next)
	id := db.manID + 1
	err := db.s.putIfAbsent(db.ctx, "manifest", db.s.paths.manifest(id), appendManifest(nil, next), true)
	if err != nil {
		if objstore.IsPreconditionFailed(err) {
			m, rerr := db.s.readManifest(db.ctx, id)
			if rerr == nil && m.WriterEpoch > db.epoch {
				db.logger.Warn("lsm: manifest written by a newer writer; fenced", "manifest", id, "epoch", m.WriterEpoch)
				db.fail(ErrFenced)
				return ErrFenced
			}
			return fmt.Errorf("lsm: manifest %d written by someone else (epoch check: %v): %w", id, rerr, err)
		}
		return fmt.Errorf("lsm: write manifest %d: %w", id, err)
	}
	now := db.clock.Now()
	prev := db.man
	db.inflightMu.Lock()
	live := next.tableIDs()
	for dropped := range prev.tableIDs() {
		if !live[dropped] {
			db.droppedAt[dropped] = now
		}
	}
	if next.walKeepAfter() != prev.walKeepAfter() {
		db.replayMoves = append(db.replayMoves, replayMove{at: now, replayAfter: next.walKeepAfter()})
	}
	db.inflightMu.Unlock()
	db.mu.Lock()
	db.manID, db.man = id, next
	if installed != nil {
		installed()
	}
	db.publishLocked()
	db.notifyLocked()
	db.mu.Unlock()
	// Handles of tables the manifest dropped hold their index and filter in
	// memory; a read still on an older view reopens them if it must.
	db.s.forgetTables(live)
	return nil
}

// replayMove records when the last WAL id a manifest no longer needs
// (manifest.walKeepAfter) moved.
type replayMove struct {
	at          time.Time
	replayAfter uint64
}

// dropCoveredTables removes tables whose every entry a range tombstone
// deletes, and tombstones that no longer cover any table entry.
func dropCoveredTables(m *manifest) {
	if len(m.Tombs) == 0 {
		return
	}
	coveredBy := func(t *tableMeta) bool {
		for i := range m.Tombs {
			rt := &m.Tombs[i]
			if t.MaxSeq < rt.seq && bytes.Compare(t.SmallestKey, rt.start) >= 0 && bytes.Compare(t.LargestKey, rt.end) < 0 {
				return true
			}
		}
		return false
	}
	filter := func(ts []tableMeta) []tableMeta {
		out := ts[:0:0]
		for i := range ts {
			if !coveredBy(&ts[i]) {
				out = append(out, ts[i])
			}
		}
		return out
	}
	m.L0 = filter(m.L0)
	runs := m.Runs[:0:0]
	for _, r := range m.Runs {
		r.Tables = filter(r.Tables)
		if len(r.Tables) > 0 {
			runs = append(runs, r)
		}
	}
	m.Runs = runs
	tombs := m.Tombs[:0:0]
	for _, rt := range m.Tombs {
		if tombNeeded(m, &rt) {
			tombs = append(tombs, rt)
		}
	}
	m.Tombs = tombs
}

// tombNeeded reports whether some table may hold an entry rt deletes.
func tombNeeded(m *manifest, rt *rangeTomb) bool { return tombReachesOther(m, rt, nil) }

// Flush makes every write so far durable in L0 tables (and so in the
// manifest), whatever the WAL setting.
func (db *DB) Flush(ctx context.Context) error {
	db.mu.Lock()
	if db.err != nil {
		err := db.err
		db.mu.Unlock()
		return err
	}
	db.freezeLocked()
	var newest *memtable
	if len(db.imms) > 0 {
		newest = db.imms[0]
	}
	db.mu.Unlock()
	if newest == nil {
		return nil
	}
	return newest.waitFlushed(ctx)
}

// FlushWAL writes the pending WAL object now and waits for it. Without a
// WAL it does nothing.
func (db *DB) FlushWAL(ctx context.Context) error {
	if !db.opts.WALEnabled {
		return nil
	}
	db.mu.Lock()
	if db.err != nil {
		err := db.err
		db.mu.Unlock()
		return err
	}
	db.sealWALLocked(sealSync)
	buf := db.walLast
	db.mu.Unlock()
	if buf == nil {
		return nil
	}
	kick(db.walKick)
	return buf.wait(ctx)
}

func (db *DB) snapshot() (*view, uint64) {
	seq := db.visibleSeq.Load()
	return db.viewp.Load(), seq
}

// Get returns the value of key and whether it exists. The value is the
// caller's.
func (db *DB) Get(ctx context.Context, key []byte) ([]byte, bool, error) {
	if err := db.readable(); err != nil {
		return nil, false, err
	}
	for attempt := 0; ; attempt++ {
		v, snap := db.snapshot()
		val, ok, err := get(ctx, db.s, v, snap, key, db.readMerge)
		// A table collected under a view taken just before a compaction
		// commit: the newer view no longer needs it.
		if err == nil || !isNotFound(err) || attempt == 2 {
			return val, ok, err
		}
	}
}

// NewIterator returns an iterator over the keys in [lower, upper) (nil:
// unbounded) of a snapshot taken now.
func (db *DB) NewIterator(ctx context.Context, lower, upper []byte) (*Iterator, error) {
	if err := db.readable(); err != nil {
		return nil, err
	}
	v, snap := db.snapshot()
	r := resolver{merge: db.readMerge, tombs: v.tombs(snap)}
	return newIterator(ctx, newInternalIter(ctx, db.s, v, snap, lower, upper, true), lower, upper, r), nil
}

func (db *DB) readable() error {
	db.mu.Lock()
	defer db.mu.Unlock()
	if db.err == ErrClosed {
		return ErrClosed
	}
	return nil
}

// Close flushes every write to L0 (retrying object store failures for up to
// Options.CloseTimeout), stops background work and releases the DB. When no
// Reader holds a live lease it then deletes every object the last manifest
// does not need, without waiting for the grace period; the DB's iterators
// must be closed before. A fenced DB closes without flushing.
func (db *DB) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), db.opts.CloseTimeout)
	defer cancel()
	return db.CloseContext(ctx)
}

// CloseContext is Close with the flush bounded by ctx instead of
// Options.CloseTimeout: when ctx ends first, the writes not yet in L0 are
// left to the WAL (with it on; lost with it off), Close returns an error
// saying so, and the DB is closed all the same.
func (db *DB) CloseContext(ctx context.Context) error {
	db.mu.Lock()
	if db.err == ErrClosed {
		db.mu.Unlock()
		return nil
	}
	failed := db.err
	db.mu.Unlock()
	var ferr error
	if failed == nil {
		stop := context.AfterFunc(ctx, db.cancel)
		ferr = db.Flush(context.Background())
		stop()
		if ferr == nil {
			// Background work stops first, so that no compaction is
			// midway: its output would be left behind unreferenced.
			db.cancel()
			db.wg.Wait()
			db.collectAtClose(ctx)
			db.dropWriterLease(ctx)
		} else {
			unflushed := db.unflushedBytes()
			if db.opts.WALEnabled {
				db.logger.Error("lsm: close could not write the memtables out; writes acknowledged as durable are in the WAL and come back at the next open",
					"unflushed_bytes", unflushed, "err", ferr)
			} else {
				db.logger.Error("lsm: close could not write the memtables out; with the WAL off their writes are lost",
					"unflushed_bytes", unflushed, "err", ferr)
			}
		}
	} else if failed != ErrFenced {
		ferr = failed
	}
	db.stop()
	return ferr
}

// stop ends background work without flushing and marks the DB closed.
func (db *DB) stop() {
	db.cancel()
	db.wg.Wait()
	db.mu.Lock()
	db.err = ErrClosed
	db.releaseWALLocked(ErrClosed)
	for _, m := range db.imms {
		m.markFlushed(ErrClosed)
	}
	db.mem.markFlushed(ErrClosed)
	db.notifyLocked()
	db.mu.Unlock()
}

func (db *DB) unflushedBytes() int64 {
	db.mu.Lock()
	defer db.mu.Unlock()
	return db.unflushedLocked()
}
