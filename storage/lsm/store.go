package lsm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/shaledb/shale/cache"
	"github.com/shaledb/shale/storage/lsm/sst"
	"github.com/shaledb/shale/storage/objstore"
)

// store is the gateway between the LSM and its bucket: it owns object names,
// counts requests and bytes, retries transient errors and keeps opened table
// handles.
type store struct {
	bucket  objstore.Bucket
	paths   paths
	cache   cache.Cache
	metrics *metrics
	logger  *slog.Logger
	backoff time.Duration

	mu     sync.Mutex
	tables map[string]*sst.Table
}

func newStore(b objstore.Bucket, prefix string, c cache.Cache, m *metrics, l *slog.Logger, backoff time.Duration) *store {
	return &store{bucket: b, paths: newPaths(prefix), cache: c, metrics: m, logger: l, backoff: backoff, tables: map[string]*sst.Table{}}
}

func (s *store) count(op string, err error) {
	s.metrics.requests.WithLabelValues(op).Inc()
	if err != nil && !objstore.IsNotFound(err) {
		s.metrics.requestErrors.WithLabelValues(op).Inc()
	}
}

// retry runs op until it succeeds, fails with an error that is not
// transient, or ctx ends.
func (s *store) retry(ctx context.Context, what string, op func() error) error {
	pause := s.backoff
	for attempt := 1; ; attempt++ {
		err := op()
		if err == nil || !objstore.IsTransient(err) {
			return err
		}
		s.logger.Debug("lsm: retrying object store operation", "op", what, "attempt", attempt, "err", err)
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%s: %w (last error: %w)", what, ctx.Err(), err)
		case <-t.C:
		}
		if pause < 100*s.backoff {
			pause *= 2
		}
	}
}

func (s *store) get(ctx context.Context, name string) ([]byte, error) {
	var data []byte
	err := s.retry(ctx, "get "+name, func() error {
		var err error
		data, err = objstore.ReadAll(ctx, s.bucket, name)
		s.count("get", err)
		return err
	})
	s.metrics.bytesRead.Add(float64(len(data)))
	return data, err
}

// putIfAbsent writes data under name unless an object exists. A transient
// failure is retried; when the retry finds the object already there with
// the same bytes, the earlier attempt landed and the put succeeded.
// ErrPreconditionFailed means another writer holds the name.
func (s *store) putIfAbsent(ctx context.Context, kind, name string, data []byte) error {
	attempted := false
	return s.retry(ctx, "put "+name, func() error {
		_, err := objstore.PutBytes(ctx, s.bucket, name, data, objstore.PutOptions{IfAbsent: true})
		s.count("put", err)
		if err == nil {
			s.metrics.bytesWritten.WithLabelValues(kind).Add(float64(len(data)))
			return nil
		}
		if objstore.IsTransient(err) {
			attempted = true
			return err
		}
		if objstore.IsPreconditionFailed(err) && attempted {
			existing, gerr := objstore.ReadAll(ctx, s.bucket, name)
			s.count("get", gerr)
			if gerr != nil {
				return gerr
			}
			if bytes.Equal(existing, data) {
				return nil
			}
		}
		return err
	})
}

// put writes data under name, replacing any object there.
func (s *store) put(ctx context.Context, kind, name string, data []byte) error {
	return s.retry(ctx, "put "+name, func() error {
		_, err := objstore.PutBytes(ctx, s.bucket, name, data, objstore.PutOptions{})
		s.count("put", err)
		if err == nil {
			s.metrics.bytesWritten.WithLabelValues(kind).Add(float64(len(data)))
		}
		return err
	})
}

// list returns the names of all objects under dir that sort after startAfter.
func (s *store) list(ctx context.Context, dir, startAfter string) ([]objstore.Attributes, error) {
	var out []objstore.Attributes
	err := s.retry(ctx, "list "+dir, func() error {
		out = out[:0]
		after := startAfter
		for {
			page, err := s.bucket.List(ctx, dir, after, 0)
			s.count("list", err)
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

func (s *store) delete(ctx context.Context, name string) error {
	return s.retry(ctx, "delete "+name, func() error {
		err := s.bucket.Delete(ctx, name)
		s.count("delete", err)
		return err
	})
}

// latestManifest returns the newest manifest and its id; id 0 and an empty
// manifest when none exists yet.
func (s *store) latestManifest(ctx context.Context) (uint64, *manifest, error) {
	objs, err := s.list(ctx, s.paths.manifestDir(), "")
	if err != nil {
		return 0, nil, fmt.Errorf("list manifests: %w", err)
	}
	for i := len(objs) - 1; i >= 0; i-- {
		id, ok := s.paths.parseManifest(objs[i].Name)
		if !ok {
			continue
		}
		m, err := s.readManifest(ctx, id)
		if objstore.IsNotFound(err) {
			// Collected between list and get: a newer one exists.
			return s.latestManifest(ctx)
		}
		return id, m, err
	}
	return 0, &manifest{}, nil
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
	name := s.paths.manifest(id)
	data, err := s.get(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("read manifest %s: %w", name, err)
	}
	m, err := decodeManifest(data)
	if err != nil {
		return nil, fmt.Errorf("manifest %s: %w", name, err)
	}
	return m, nil
}

// readWAL reads and decodes one WAL object.
func (s *store) readWAL(ctx context.Context, id uint64) ([]entry, error) {
	name := s.paths.wal(id)
	data, err := s.get(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("read wal %s: %w", name, err)
	}
	ents, err := decodeWAL(data, nil)
	if err != nil {
		return nil, fmt.Errorf("wal %s: %w", name, err)
	}
	return ents, nil
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
	return s.putIfAbsent(ctx, "sst", s.paths.sst(id), data)
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
// cold read pays one round of meta reads instead of one per table. Errors
// are left for the table call that needs the handle.
func (s *store) openAll(ctx context.Context, ts []*tableMeta) {
	var missing []*tableMeta
	s.mu.Lock()
	for _, t := range ts {
		if s.tables[t.ID] == nil {
			missing = append(missing, t)
		}
	}
	s.mu.Unlock()
	if len(missing) < 2 {
		return
	}
	const parallel = 16
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for _, t := range missing {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			_, _ = s.table(ctx, t)
		}()
	}
	wg.Wait()
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

func (r *readable) ReadAt(ctx context.Context, off, length int64) ([]byte, error) {
	var data []byte
	err := r.s.retry(ctx, "read "+r.name, func() error {
		var err error
		data, err = objstore.ReadRange(ctx, r.s.bucket, r.name, off, length)
		r.s.count("get_range", err)
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
