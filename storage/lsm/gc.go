package lsm

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// gcParallel is how many deletes garbage collection has in flight.
const gcParallel = 16

// CollectGarbage deletes objects that the latest manifest no longer needs
// and that are older than Options.GCGracePeriod: tables neither a manifest
// nor a checkpoint references, WAL objects at or below both the replay
// position and the log position (TruncateLog), and manifests older than the
// newest Options.ManifestsToKeep. It returns how many objects it deleted.
func (db *DB) CollectGarbage(ctx context.Context) (int, error) {
	return db.collectGarbage(ctx, db.opts.GCGracePeriod, min(db.opts.GCGracePeriod, db.opts.WALGCGracePeriod))
}

// collectGarbage deletes tables and manifests unneeded for longer than grace
// and WAL objects unneeded for longer than walGrace.
func (db *DB) collectGarbage(ctx context.Context, grace, walGrace time.Duration) (int, error) {
	s := db.s
	// Decide from the manifest in the store, not the one in memory: if a
	// newer writer took over, its tables must not be mistaken for garbage.
	id, man, err := s.latestManifest(ctx)
	if err != nil {
		return 0, fmt.Errorf("lsm gc: %w", err)
	}
	if man.WriterEpoch > db.epoch {
		return 0, ErrFenced
	}
	now := db.clock.Now()
	cutoff, walCutoff := now.Add(-grace), now.Add(-walGrace)
	var deletedN atomic.Int64
	// delAll deletes names, gcParallel at a time: on S3 each delete is a
	// round trip, and a writer leaves about ten WAL objects a second.
	delAll := func(names []string) error {
		var (
			errMu sync.Mutex
			first error
		)
		eachParallel(names, gcParallel, func(name string) {
			if err := s.delete(ctx, name); err != nil {
				errMu.Lock()
				if first == nil {
					first = fmt.Errorf("lsm gc: delete %s: %w", name, err)
				}
				errMu.Unlock()
				return
			}
			deletedN.Add(1)
			db.m.gcDeleted.Inc()
		})
		return first
	}
	del := func(name string) error { return delAll([]string{name}) }
	deletedCount := func() int { return int(deletedN.Load()) }
	objs, err := s.list(ctx, s.paths.sstDir(), "")
	if err != nil {
		return deletedCount(), fmt.Errorf("lsm gc: list tables: %w", err)
	}
	// A listed table existed before the listing. Its writer protected it
	// before creating it and unprotects it only after committing it, so
	// taking the protected set after the listing and the committed manifest
	// after that misses no table still in use.
	live := map[string]bool{}
	db.inflightMu.Lock()
	for id := range db.inflight {
		live[id] = true
	}
	db.inflightMu.Unlock()
	db.mu.Lock()
	mine := db.man
	db.mu.Unlock()
	for _, m := range []*manifest{man, mine} {
		for _, t := range m.L0 {
			live[t.ID] = true
		}
		for _, r := range m.Runs {
			for _, t := range r.Tables {
				live[t.ID] = true
			}
		}
	}
	// Checkpoints keep their tables. One being written pinned its tables,
	// from the manifest in memory, before its object existed, and unpins
	// them once it does: a checkpoint made from a manifest older than mine
	// is pinned still or listed below, and one made from a newer manifest
	// holds only tables mine has or the protected set had.
	db.inflightMu.Lock()
	for id := range db.pins {
		live[id] = true
	}
	db.inflightMu.Unlock()
	if err := s.checkpointTables(ctx, live); err != nil {
		return 0, fmt.Errorf("lsm gc: %w", err)
	}
	// A reader may hold any manifest of the last grace period: a table is
	// garbage once it left the manifest more than a grace period ago. Tables
	// this process never saw leave (orphans of failed writes, tables dropped
	// by an earlier writer) wait a grace period after open.
	db.inflightMu.Lock()
	settled := db.openedAt.Before(cutoff)
	// Called with inflightMu released: commits record drops concurrently.
	droppedBefore := func(id string) bool {
		db.inflightMu.Lock()
		at, ok := db.droppedAt[id]
		db.inflightMu.Unlock()
		if ok {
			return at.Before(cutoff)
		}
		return settled
	}
	// WAL objects a reader of a manifest within the WAL grace period may
	// replay stay too: only ids at or below the position in force at the
	// WAL cutoff go. (A reader that finds one gone reloads the manifest,
	// so that grace can be short.)
	walSettled := db.openedAt.Before(walCutoff)
	replayCut := uint64(0)
	if walSettled {
		replayCut = db.openReplay
	}
	keep := db.replayMoves[:0]
	for _, mv := range db.replayMoves {
		if mv.at.Before(walCutoff) {
			replayCut = max(replayCut, mv.replayAfter)
		} else {
			keep = append(keep, mv)
		}
	}
	if walSettled && len(keep) < len(db.replayMoves) {
		db.openReplay = replayCut
	}
	db.replayMoves = keep
	db.inflightMu.Unlock()
	replayCut = min(replayCut, man.walKeepAfter())

	var names, tids []string
	for _, o := range objs {
		tid, ok := s.paths.parseSST(o.Name)
		if !ok || live[tid] || !o.LastModified.Before(cutoff) || !droppedBefore(tid) {
			continue
		}
		names, tids = append(names, o.Name), append(tids, tid)
	}
	if err := delAll(names); err != nil {
		return deletedCount(), err
	}
	db.inflightMu.Lock()
	for _, tid := range tids {
		delete(db.droppedAt, tid)
	}
	db.inflightMu.Unlock()
	listed := make(map[string]bool, len(objs))
	for _, o := range objs {
		if tid, ok := s.paths.parseSST(o.Name); ok {
			listed[tid] = true
		}
	}
	db.inflightMu.Lock()
	for id, at := range db.droppedAt {
		if !listed[id] && at.Before(cutoff) {
			delete(db.droppedAt, id) // gone already
		}
	}
	db.inflightMu.Unlock()
	s.forgetTables(live)

	objs, err = s.list(ctx, s.paths.walDir(), "")
	if err != nil {
		return deletedCount(), fmt.Errorf("lsm gc: list wal: %w", err)
	}
	names = names[:0]
	for _, o := range objs {
		wid, ok := s.paths.parseWAL(o.Name)
		if !ok || wid > replayCut || !o.LastModified.Before(walCutoff) {
			continue
		}
		names = append(names, o.Name)
	}
	if err := delAll(names); err != nil {
		return deletedCount(), err
	}

	objs, err = s.list(ctx, s.paths.manifestDir(), "")
	if err != nil {
		return deletedCount(), fmt.Errorf("lsm gc: list manifests: %w", err)
	}
	for _, o := range objs {
		mid, ok := s.paths.parseManifest(o.Name)
		if !ok || mid+uint64(db.opts.ManifestsToKeep) >= id || !o.LastModified.Before(cutoff) {
			continue
		}
		if err := del(o.Name); err != nil {
			return deletedCount(), err
		}
	}
	// Leases of readers that stopped without deleting them.
	objs, err = s.list(ctx, s.paths.readersDir(), "")
	if err != nil {
		return deletedCount(), fmt.Errorf("lsm gc: list reader leases: %w", err)
	}
	for _, o := range objs {
		if now.Sub(o.LastModified) > 10*readerLeaseTTL {
			age, err := db.readerLeaseAge(ctx, now, o)
			if err != nil {
				return deletedCount(), fmt.Errorf("lsm gc: read reader lease: %w", err)
			}
			if age <= 10*readerLeaseTTL {
				continue
			}
			if err := del(o.Name); err != nil {
				return deletedCount(), err
			}
		}
	}
	if deleted := deletedCount(); deleted > 0 {
		db.logger.Info("lsm: garbage collected", "objects", deleted)
	}
	return deletedCount(), nil
}
