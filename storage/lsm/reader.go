package lsm

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/shaledb/shale/storage/objstore"
)

// Reader serves reads of a prefix without fencing its writer. It follows
// new manifests by polling (ReaderOptions.PollInterval) or Refresh, and with
// ReplayWAL also reads the WAL objects past the manifest's replay position.
// Its methods are safe for concurrent use.
type Reader struct {
	opts   ReaderOptions
	s      *store
	merge  MergeOperator
	clock  Clock
	logger *slog.Logger

	refreshMu sync.Mutex // one refresh at a time
	wals      map[uint64][]entry
	lastWAL   uint64
	walFilter walFilter
	leaseID   string
	leaseAt   time.Time // when the lease was last written

	mu     sync.Mutex
	v      *view
	snap   uint64
	manID  uint64
	closed bool
	// refreshedAt is when a refresh last succeeded, seenWAL the newest
	// WAL object read then (Status).
	refreshedAt time.Time
	seenWAL     uint64

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// OpenReader opens a read-only view of prefix in bucket.
func OpenReader(ctx context.Context, bucket objstore.Bucket, prefix string, opts ReaderOptions, comp Components) (*Reader, error) {
	comp, m, err := comp.prepare(&opts)
	if err != nil {
		return nil, err
	}
	r := &Reader{
		opts:    opts,
		s:       newStore(bucket, prefix, comp.Cache, m, comp.Logger, opts.RetryBackoff, 100*opts.RetryBackoff),
		merge:   comp.readMerge(),
		clock:   comp.Clock,
		logger:  comp.Logger.With("lsm_reader", prefix),
		wals:    map[uint64][]entry{},
		v:       &view{man: &manifest{}},
		leaseID: newLeaseID(),
	}
	if opts.Checkpoint != "" {
		m, err := r.s.readCheckpoint(ctx, opts.Checkpoint)
		if err != nil {
			return nil, fmt.Errorf("lsm reader: %w", err)
		}
		r.v, r.snap, r.refreshedAt = &view{man: m}, m.LastSeq, r.clock.Now()
		return r, nil
	}
	if err := r.Refresh(ctx); err != nil {
		return nil, err
	}
	if opts.PollInterval > 0 {
		pctx, cancel := context.WithCancel(context.Background())
		r.cancel = cancel
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			repeat(pctx, opts.PollInterval, nil, r.Refresh, func(err error) bool {
				r.logger.Warn("lsm reader: refresh failed", "err", err)
				return true
			})
		}()
	}
	return r, nil
}

// Refresh loads the newest manifest and, with ReplayWAL, the WAL objects
// written since the last refresh. A reader of a checkpoint has nothing to
// load.
func (r *Reader) Refresh(ctx context.Context) error {
	if r.opts.Checkpoint != "" {
		return nil // a checkpoint does not change
	}
	r.refreshMu.Lock()
	defer r.refreshMu.Unlock()
	// The lease is written before the first manifest is read, so a writer
	// closing after that read sees it.
	if err := r.renewLease(ctx); err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		err := r.refresh(ctx)
		// A WAL object collected under us: a newer manifest covers it.
		if err == nil || !isNotFound(err) || attempt == 3 {
			return err
		}
	}
}

func (r *Reader) refresh(ctx context.Context) error {
	r.mu.Lock()
	cur, curID := r.v, r.manID
	r.mu.Unlock()

	man, manID := cur.man, curID
	newest, err := r.s.newestManifestID(ctx, curID)
	if err != nil {
		return fmt.Errorf("lsm reader refresh: %w", err)
	}
	if newest > curID {
		m, err := r.s.readManifest(ctx, newest)
		if isNotFound(err) {
			// Collected already: an even newer one exists.
			if newest, err = r.s.newestManifestID(ctx, newest); err == nil {
				m, err = r.s.readManifest(ctx, newest)
			}
		}
		if err != nil {
			return fmt.Errorf("lsm reader refresh: %w", err)
		}
		man, manID = m, newest
	}

	mem := cur.mem
	snap := man.LastSeq
	if r.opts.ReplayWAL {
		rebuild := mem == nil || man.ReplayAfter != cur.man.ReplayAfter
		// Objects past the replay position hold writes not in tables yet;
		// objects past the log position hold log records (ReadLog).
		keep := man.walKeepAfter()
		for id := range r.wals {
			if id <= keep {
				delete(r.wals, id)
			}
		}
		after := max(r.lastWAL, keep)
		ids, err := r.s.walIDs(ctx, after)
		if err != nil {
			return fmt.Errorf("lsm reader refresh: %w", err)
		}
		ids = consecutive(ids, after)
		var fresh []uint64
		err = r.s.readWALs(ctx, ids, func(id, epoch uint64, ents []entry) error {
			if !r.walFilter.admit(epoch) {
				return nil // void: see walFilter
			}
			r.wals[id] = ents
			fresh = append(fresh, id)
			return nil
		})
		if err != nil {
			return fmt.Errorf("lsm reader refresh: %w", err)
		}
		if len(ids) > 0 {
			r.lastWAL = max(r.lastWAL, ids[len(ids)-1])
		}
		if rebuild {
			mem = newMemtable(r.clock.Now())
			for id := man.ReplayAfter + 1; id <= r.lastWAL; id++ {
				addWrites(mem, r.wals[id])
			}
		} else {
			for _, id := range fresh {
				if id > man.ReplayAfter {
					addWrites(mem, r.wals[id])
				}
			}
		}
		snap = max(snap, mem.maxSeq)
	}
	r.mu.Lock()
	r.v = &view{mem: mem, man: man}
	r.manID = manID
	r.refreshedAt, r.seenWAL = r.clock.Now(), r.lastWAL
	r.snap = max(snap, r.snap)
	r.mu.Unlock()
	if manID != curID {
		live := man.tableIDs()
		r.s.forgetTables(live)
	}
	return nil
}

// consecutive returns the leading ids that follow after one by one: the
// writer stores several WAL objects at once, so a later one may be there
// before an earlier one, and a reader reads past neither.
func consecutive(ids []uint64, after uint64) []uint64 {
	n := 0
	for n < len(ids) && ids[n] == after+1+uint64(n) {
		n++
	}
	return ids[:n]
}

// addWrites adds the writes among a WAL object's records to mem.
func addWrites(mem *memtable, ents []entry) {
	for _, e := range ents {
		if e.kind != kindLog {
			mem.add(e)
		}
	}
}

func (r *Reader) snapshot() (*view, uint64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, 0, ErrClosed
	}
	return r.v, r.snap, nil
}

// Get returns the value of key and whether it exists. When a table has been
// collected under it, the reader refreshes its manifest and retries.
func (r *Reader) Get(ctx context.Context, key []byte) ([]byte, bool, error) {
	for attempt := 0; ; attempt++ {
		v, snap, err := r.snapshot()
		if err != nil {
			return nil, false, err
		}
		val, ok, err := get(ctx, r.s, v, snap, key, r.merge)
		if err == nil || !isNotFound(err) || attempt == 3 {
			return val, ok, err
		}
		if err := r.Refresh(ctx); err != nil {
			return nil, false, err
		}
	}
}

// NewIterator returns an iterator over [lower, upper) of the reader's
// current snapshot. Tables collected while it runs make it fail with an
// error wrapping objstore.ErrNotFound; open a new one after Refresh.
func (r *Reader) NewIterator(ctx context.Context, lower, upper []byte) (*Iterator, error) {
	v, snap, err := r.snapshot()
	if err != nil {
		return nil, err
	}
	res := resolver{merge: r.merge, tombs: v.tombs(snap)}
	return newIterator(ctx, newInternalIter(ctx, r.s, v, snap, lower, upper, true), lower, upper, res), nil
}

// Close stops polling.
func (r *Reader) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	r.mu.Unlock()
	if r.cancel != nil {
		r.cancel()
		r.wg.Wait()
	}
	if r.opts.Checkpoint == "" {
		r.dropLease() // a reader of a checkpoint wrote none
	}
	return nil
}
