package lsm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/shaledb/shale/cache"
	"github.com/shaledb/shale/corrupt"
	"github.com/shaledb/shale/storage/lsm/sst"
	"github.com/shaledb/shale/storage/objstore"
)

// store is the gateway between the LSM and its bucket: it owns object names,
// is the one owner of retries of object-store requests, and keeps opened
// table handles.
//
// A writer's store (persistent) retries every failure of its requests but
// the final ones (not found, precondition failed, invalid range) with capped
// backoff until the request succeeds or the caller's context ends: an object
// store's bad minutes (timeouts, 503 SlowDown, a revoked permission, an
// outage) delay the writer but never stop it, and health reports them. A
// reader's store, and reads of table blocks (which serve queries), retry
// transient failures a few times and then return the error.
type store struct {
	bucket     objstore.Bucket
	paths      paths
	cache      cache.Cache
	metrics    *metrics
	logger     *slog.Logger
	backoff    time.Duration
	maxBackoff time.Duration
	// health is set on a writer's store, which retries until success.
	health *health

	mu     sync.Mutex
	tables map[string]*sst.Table
}

// fetchRetryFor bounds the retries of a read that serves a query or a
// reader's poll: a store that keeps failing transiently (an outage) fails
// the query with its error after this long rather than at the query
// timeout, while a store that drops one request in two still serves it.
const fetchRetryFor = 10 * time.Second

func newStore(b objstore.Bucket, prefix string, c cache.Cache, m *metrics, l *slog.Logger, backoff, maxBackoff time.Duration) *store {
	if l == nil {
		l = slog.New(slog.DiscardHandler)
	}
	return &store{bucket: b, paths: newPaths(prefix), cache: c, metrics: m, logger: l, backoff: backoff,
		maxBackoff: max(maxBackoff, backoff), tables: map[string]*sst.Table{}}
}

// isFinal reports whether err is an answer rather than a failure: retrying
// cannot change it.
func isFinal(err error) bool {
	return objstore.IsNotFound(err) || objstore.IsPreconditionFailed(err) || errors.Is(err, objstore.ErrInvalidRange)
}

// retry runs op until it succeeds or returns a final error, with backoff
// doubling from s.backoff up to s.maxBackoff. On a writer's store any other
// error is retried until ctx ends, and write says whether op changes the
// store (for health); otherwise transient errors are retried at most
// fetchAttempts times.
func (s *store) retry(ctx context.Context, what string, write bool, op func() error) error {
	return s.retryWith(ctx, what, s.health != nil, write, op)
}

// retryFetch is retry with the bounded policy of reads that serve queries,
// whatever the store.
func (s *store) retryFetch(ctx context.Context, what string, op func() error) error {
	return s.retryWith(ctx, what, false, false, op)
}

func (s *store) retryWith(ctx context.Context, what string, persistent, write bool, op func() error) error {
	pause := s.backoff
	start := time.Now()
	for attempt := 1; ; attempt++ {
		err := op()
		if err == nil || isFinal(err) {
			if persistent {
				s.health.succeeded(write)
			}
			return err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%s: %w (last error: %w)", what, ctx.Err(), err)
		}
		if persistent {
			s.health.failed(write, what, err)
		} else if !objstore.IsTransient(err) || time.Since(start) >= fetchRetryFor {
			return err
		}
		s.logger.Debug("lsm: retrying object store request", "op", what, "attempt", attempt, "err", err)
		// Half the pause plus up to half again at random: writers that
		// failed together do not retry together.
		wait := pause/2 + rand.N(pause/2+1)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%s: %w (last error: %w)", what, ctx.Err(), err)
		case <-t.C:
		}
		pause = min(pause*2, s.maxBackoff)
	}
}

// corruptRereads is how many times a whole object whose bytes fail their
// checksum is read again before the corruption is reported, as for ranges
// of a table: one answer spoiled on the way must not keep a restarted
// writer from replaying its WAL.
const corruptRereads = sst.CorruptRereads

// getChecked reads name whole and returns what decode makes of its bytes,
// reading it again, up to corruptRereads times, while decode finds them
// corrupt (an error wrapping corrupt.Err).
func getChecked[T any](ctx context.Context, s *store, name string, decode func([]byte) (T, error)) (T, error) {
	for attempt := 0; ; attempt++ {
		data, err := s.get(ctx, name)
		if err != nil {
			var zero T
			return zero, err
		}
		v, err := decode(data)
		if err == nil || !errors.Is(err, corrupt.Err) || attempt == corruptRereads {
			return v, err
		}
		s.corruptRead(name, err)
	}
}

// corruptRead counts and logs a read of name whose bytes failed their
// checksum and is made again.
func (s *store) corruptRead(name string, err error) {
	s.metrics.corruptReads.Inc()
	s.logger.Warn("lsm: object store answer failed its checksum; reading it again", "object", name, "err", err)
}

func (s *store) get(ctx context.Context, name string) ([]byte, error) {
	var data []byte
	err := s.retry(ctx, "get "+name, false, func() error {
		var err error
		data, err = objstore.ReadAll(ctx, s.bucket, name)
		return err
	})
	s.metrics.bytesRead.Add(float64(len(data)))
	return data, err
}

// putIfAbsent writes data under name unless an object exists.
// ErrPreconditionFailed means another writer holds the name.
//
// With checkOutcome, a precondition failure is first checked by reading the
// object back: an earlier attempt whose answer was lost (a timeout, a reset
// connection, a retry below this layer) may have landed, and the same bytes
// there mean that it did and the put succeeded. Only data no other writer
// can produce may be checked so (a manifest carries its writer's epoch, a
// table its unique name, a WAL object its writer's sequence numbers; an
// empty WAL fence is the same for every writer).
func (s *store) putIfAbsent(ctx context.Context, kind, name string, data []byte, checkOutcome bool) error {
	var landed bool
	err := s.retry(ctx, "put "+name, true, func() error {
		_, err := objstore.PutBytes(ctx, s.bucket, name, data, objstore.PutOptions{IfAbsent: true})
		if err == nil {
			s.metrics.bytesWritten.WithLabelValues(kind).Add(float64(len(data)))
			return nil
		}
		if !objstore.IsPreconditionFailed(err) || !checkOutcome {
			return err
		}
		// Different bytes are another writer's, unless the answer was
		// spoiled on the way: those are read again first.
		for attempt := 0; ; attempt++ {
			existing, gerr := objstore.ReadAll(ctx, s.bucket, name)
			if gerr != nil {
				if objstore.IsNotFound(gerr) {
					// Deleted between the put and the read: not ours to take.
					return err
				}
				return fmt.Errorf("check the outcome of a conditional put: %w", gerr)
			}
			if bytes.Equal(existing, data) {
				landed = true
				return nil
			}
			if attempt == corruptRereads || len(existing) != len(data) {
				return err
			}
		}
	})
	if landed {
		s.metrics.putsLanded.Inc()
		s.logger.Info("lsm: a conditional put whose answer was lost had landed", "object", name)
	}
	return err
}

// put writes data under name, replacing any object there.
func (s *store) put(ctx context.Context, kind, name string, data []byte) error {
	return s.retry(ctx, "put "+name, true, func() error {
		_, err := objstore.PutBytes(ctx, s.bucket, name, data, objstore.PutOptions{})
		if err == nil {
			s.metrics.bytesWritten.WithLabelValues(kind).Add(float64(len(data)))
		}
		return err
	})
}

// attributes returns the attributes of the object name.
func (s *store) attributes(ctx context.Context, name string) (objstore.Attributes, error) {
	var attrs objstore.Attributes
	err := s.retry(ctx, "head "+name, false, func() error {
		var err error
		attrs, err = s.bucket.Attributes(ctx, name)
		return err
	})
	return attrs, err
}

// list returns the names of all objects under dir that sort after startAfter.
func (s *store) list(ctx context.Context, dir, startAfter string) ([]objstore.Attributes, error) {
	var out []objstore.Attributes
	err := s.retry(ctx, "list "+dir, false, func() error {
		out = out[:0]
		after := startAfter
		for {
			page, err := s.bucket.List(ctx, dir, after, 0)
			if err != nil {
				return err
			}
			out = append(out, page.Objects...)
			if !page.More || len(page.Objects) == 0 {
				return nil
			}
			after = page.Objects[len(page.Objects)-1].Name
		}
	})
	return out, err
}

// delete deletes name. Unlike the writer's other requests it is not retried
// until it succeeds: every delete is garbage collection or best effort (a
// lease, the open's probe), and a store that refuses deletes (a policy
// without them, a bucket under object lock) must not keep a writer from
// opening, writing or closing. Transient failures are retried as a query's
// reads are; what still fails is the caller's to log, and garbage collection
// tries again at its next run.
func (s *store) delete(ctx context.Context, name string) error {
	err := s.retryFetch(ctx, "delete "+name, func() error { return s.bucket.Delete(ctx, name) })
	if objstore.IsNotFound(err) {
		return nil
	}
	return err
}

// latestManifest returns the newest manifest and its id; id 0 and an empty
// manifest when none exists yet.
func (s *store) latestManifest(ctx context.Context) (uint64, *manifest, error) {
	objs, err := s.list(ctx, s.paths.manifestDir(), "")
	if err != nil {
		return 0, nil, fmt.Errorf("list manifests: %w", err)
	}
	var id uint64
	for i := len(objs) - 1; i >= 0; i-- {
		if n, ok := s.paths.parseManifest(objs[i].Name); ok {
			id = n
			break
		}
	}
	// Versions are written one after another, each create-if-absent under
	// the next id: asking for the next ones catches up with a store that
	// lists new objects late, where a writer's open took the listed one for
	// the newest and lost every race to write the next.
	for {
		_, err := s.attributes(ctx, s.paths.manifest(id+1))
		if objstore.IsNotFound(err) {
			break
		}
		if err != nil {
			return 0, nil, fmt.Errorf("manifest %d: %w", id+1, err)
		}
		id++
	}
	if id == 0 {
		return 0, &manifest{}, nil
	}
	m, err := s.readManifest(ctx, id)
	if objstore.IsNotFound(err) {
		// Collected between list and get: a newer one exists.
		return s.latestManifest(ctx)
	}
	return id, m, err
}

// manifestsAfter lists the ids of manifests newer than id.
func (s *store) newestManifestID(ctx context.Context, after uint64) (uint64, error) {
	objs, err := s.list(ctx, s.paths.manifestDir(), s.paths.manifest(after))
	if err != nil {
		return 0, fmt.Errorf("list manifests: %w", err)
	}
	newest := after
	for _, o := range objs {
		if id, ok := s.paths.parseManifest(o.Name); ok && id > newest {
			newest = id
		}
	}
	return newest, nil
}

func (s *store) readManifest(ctx context.Context, id uint64) (*manifest, error) {
	return s.readManifestObject(ctx, "manifest", s.paths.manifest(id))
}

// readManifestObject reads and decodes the manifest stored as name (a
// manifest version or a checkpoint: what, in errors).
func (s *store) readManifestObject(ctx context.Context, what, name string) (*manifest, error) {
	m, err := getChecked(ctx, s, name, decodeManifest)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", what, name, err)
	}
	return m, nil
}

// readWAL reads and decodes one WAL object: its writer's epoch and its
// records.
func (s *store) readWAL(ctx context.Context, id uint64) (uint64, []entry, error) {
	name := s.paths.wal(id)
	type wal struct {
		epoch uint64
		ents  []entry
	}
	w, err := getChecked(ctx, s, name, func(data []byte) (w wal, err error) {
		w.epoch, w.ents, err = decodeWAL(data, nil)
		return w, err
	})
	if err != nil {
		return 0, nil, fmt.Errorf("wal %s: %w", name, err)
	}
	return w.epoch, w.ents, nil
}

// walIDs lists the ids of WAL objects with id > after, ascending.
func (s *store) walIDs(ctx context.Context, after uint64) ([]uint64, error) {
	start := ""
	if after > 0 {
		start = s.paths.wal(after)
	}
	objs, err := s.list(ctx, s.paths.walDir(), start)
	if err != nil {
		return nil, fmt.Errorf("list wal: %w", err)
	}
	ids := make([]uint64, 0, len(objs))
	for _, o := range objs {
		if id, ok := s.paths.parseWAL(o.Name); ok && id > after {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// putTable uploads one table under a fresh name.
func (s *store) putTable(ctx context.Context, id string, data []byte) error {
	return s.putIfAbsent(ctx, "sst", s.paths.sst(id), data, true)
}

// table returns the opened handle of a table, opening it on first use.
func (s *store) table(ctx context.Context, t *tableMeta) (*sst.Table, error) {
	s.mu.Lock()
	h := s.tables[t.ID]
	s.mu.Unlock()
	if h != nil {
		return h, nil
	}
	name := s.paths.sst(t.ID)
	r := &readable{s: s, name: name, size: t.Size}
	h, err := sst.OpenHint(ctx, r, name, s.cache, t.MetaSize)
	if err != nil {
		return nil, fmt.Errorf("open table %s: %w", name, err)
	}
	s.mu.Lock()
	if existing := s.tables[t.ID]; existing != nil {
		h = existing
	} else {
		s.tables[t.ID] = h
	}
	s.mu.Unlock()
	return h, nil
}

// openAll opens, in parallel, the tables of ts not opened yet, so that a
// read that consults several of them waits for one round of object reads.
// When one is missing, so are the L0 tables of l0 not opened yet: a flush
// writes one table a region of the key space (Components.FlushSplit), and a
// read that goes from one region to the next (the registry, then postings,
// then series) would otherwise open each region's tables a round after the
// last.
func (s *store) openAll(ctx context.Context, ts []*tableMeta, l0 []tableMeta) {
	var missing []*tableMeta
	s.mu.Lock()
	for _, t := range ts {
		if s.tables[t.ID] == nil {
			missing = append(missing, t)
		}
	}
	if len(missing) > 0 && len(l0) > 0 {
		seen := make(map[string]bool, len(missing))
		for _, t := range missing {
			seen[t.ID] = true
		}
		for i := range l0 {
			if t := &l0[i]; s.tables[t.ID] == nil && !seen[t.ID] {
				missing = append(missing, t)
			}
		}
	}
	s.mu.Unlock()
	if len(missing) < 2 {
		return
	}
	// Opening reads one small object range per table: the tables of a
	// partition left in L0 by many flushes (24 and more when compaction is
	// behind) are opened in one round.
	const parallel = 64
	eachParallel(missing, parallel, func(t *tableMeta) { _, _ = s.table(ctx, t) })
}

// forgetTables drops the handles of tables not in keep.
func (s *store) forgetTables(keep map[string]bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, h := range s.tables {
		if !keep[id] {
			delete(s.tables, id)
			// Its blocks are read again only by a read still on an older
			// view, which reloads them.
			h.DropCached()
		}
	}
}

// readable serves a table's bytes by ranged reads of its object.
type readable struct {
	s    *store
	name string
	size int64
}

func (r *readable) Size() int64 { return r.size }

// Reread is told by the table that bytes this read failed their checksum
// (sst.RereadObserver).
func (r *readable) Reread(err error) { r.s.corruptRead(r.name, err) }

func (r *readable) ReadAt(ctx context.Context, off, length int64) ([]byte, error) {
	var data []byte
	err := r.s.retryFetch(ctx, "read "+r.name, func() error {
		var err error
		data, err = objstore.ReadRange(ctx, r.s.bucket, r.name, off, length)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read %s [%d,+%d): %w", r.name, off, length, err)
	}
	r.s.metrics.bytesRead.Add(float64(len(data)))
	if int64(len(data)) != length {
		return nil, fmt.Errorf("read %s [%d,+%d): got %d bytes: %w", r.name, off, length, len(data), sst.ErrCorrupt)
	}
	return data, nil
}

func tableMetaFromInfo(id string, info sst.Info) tableMeta {
	return tableMeta{
		ID:          id,
		Size:        info.Size,
		NumEntries:  info.NumEntries,
		SmallestKey: info.SmallestKey,
		LargestKey:  info.LargestKey,
		MinSeq:      info.MinSeq,
		MaxSeq:      info.MaxSeq,
		MetaSize:    info.MetaSize(),
	}
}

// isNotFound reports whether err says an object vanished (collected).
func isNotFound(err error) bool { return errors.Is(err, objstore.ErrNotFound) }

// A replay reads WAL objects ahead of the one it applies: on S3 each is a
// round trip, and a writer restarted after a crash replays up to a head
// flush interval of them (thousands), and the head's log again. How many
// it reads at once follows the largest object met so far: as many as
// walReadAheadBytes hold, at least walReadAheadMin and at most
// walReadAheadMax. Objects are small under a light load (a few KiB: in a
// fault soak at 50 ms a request, a restart that replayed 2,282 of them twice
// took 46 s reading 8 at once and 11 s reading 64) and up to WALMaxBytes
// under a heavy one, where the window stays at 8 and a replay holds no more
// than it did with a fixed 8.
const (
	walReadAheadMin   = 8
	walReadAheadMax   = 64
	walReadAheadBytes = 64 << 20
)

// walReadWindow is how many WAL objects a replay reads ahead of the one it
// applies, once the largest it has applied held largest bytes of entries.
func walReadWindow(largest int) int {
	if largest <= 0 {
		return walReadAheadMin
	}
	return min(max(walReadAheadBytes/largest, walReadAheadMin), walReadAheadMax)
}

// readWALs reads the WAL objects ids, several at once (walReadWindow), and
// calls fn with each one's writer epoch and entries in the order of ids. It
// stops at the first error, of a read or of fn.
func (s *store) readWALs(ctx context.Context, ids []uint64, fn func(id, epoch uint64, ents []entry) error) error {
	if len(ids) == 0 {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel() // reads still running stop
		wg.Wait()
	}()
	type result struct {
		epoch uint64
		ents  []entry
		err   error
		done  chan struct{}
	}
	results := make([]result, len(ids))
	launched := 0
	launch := func(upTo int) {
		for ; launched < min(upTo, len(ids)); launched++ {
			r, id := &results[launched], ids[launched]
			r.done = make(chan struct{})
			wg.Go(func() {
				r.epoch, r.ents, r.err = s.readWAL(ctx, id)
				close(r.done)
			})
		}
	}
	largest := 0
	for i, id := range ids {
		launch(i + 1 + walReadWindow(largest))
		r := &results[i]
		select {
		case <-r.done:
		case <-ctx.Done():
			return ctx.Err()
		}
		if r.err != nil {
			return r.err
		}
		size := 0
		for j := range r.ents {
			size += len(r.ents[j].key) + len(r.ents[j].value)
		}
		largest = max(largest, size)
		if err := fn(id, r.epoch, r.ents); err != nil {
			return err
		}
		r.ents = nil
	}
	return nil
}
