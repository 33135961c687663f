package lsm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shaledb/shale/storage/objstore"
)

// A checkpoint is a named copy of one manifest, kept under
// <prefix>/checkpoints/<name>.manifest: the tables it references stay in
// the store until the checkpoint is deleted, whatever compactions drop, so
// the database as it was then can be read (ReaderOptions.Checkpoint) or
// copied out as a database of its own (CopyCheckpoint). It holds tables
// only: what the WAL held when it was taken is flushed first.

// ErrCheckpointExists is returned when a checkpoint of that name exists.
var ErrCheckpointExists = errors.New("checkpoint exists")

// ErrNoCheckpoint is returned when there is no checkpoint of the name
// asked for. It wraps objstore.ErrNotFound.
var ErrNoCheckpoint = fmt.Errorf("no such checkpoint: %w", objstore.ErrNotFound)

// ErrDestinationNotEmpty is returned by CopyCheckpoint when the destination
// already holds a database.
var ErrDestinationNotEmpty = errors.New("destination holds a database already")

// CheckpointInfo describes a checkpoint.
type CheckpointInfo struct {
	Name string
	// Created is when the checkpoint object was written.
	Created time.Time
	// Tables and Bytes are the tables it keeps and their size.
	Tables int
	Bytes  int64
}

// maxCheckpointName bounds a checkpoint's name.
const maxCheckpointName = 128

// ValidCheckpointName reports whether name can name a checkpoint: 1 to 128
// letters, digits, '.', '_' and '-', not starting with '.' or '-'.
func ValidCheckpointName(name string) error {
	if name == "" || len(name) > maxCheckpointName {
		return fmt.Errorf("checkpoint name %q: must be 1 to %d characters", name, maxCheckpointName)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' ||
			(c == '.' || c == '-') && i > 0
		if !ok {
			return fmt.Errorf("checkpoint name %q: only letters, digits, '.', '_' and '-' (not first) are allowed", name)
		}
	}
	return nil
}

func (p paths) checkpointDir() string { return p.root + "checkpoints/" }
func (p paths) checkpoint(name string) string {
	return p.checkpointDir() + name + ".manifest"
}

func (p paths) parseCheckpoint(name string) (string, bool) {
	s, ok := strings.CutPrefix(name, p.checkpointDir())
	if !ok {
		return "", false
	}
	s, ok = strings.CutSuffix(s, ".manifest")
	return s, ok && ValidCheckpointName(s) == nil
}

// Checkpoint flushes the memtables to tables and keeps the manifest that
// results under name. Writes acknowledged before the call are in it;
// writes made meanwhile may be. It fails with ErrCheckpointExists when the
// name is taken.
func (db *DB) Checkpoint(ctx context.Context, name string) (CheckpointInfo, error) {
	if err := ValidCheckpointName(name); err != nil {
		return CheckpointInfo{}, err
	}
	// Taken names are refused before the put, which takes its own bytes
	// found there as an earlier attempt of its own that landed.
	obj := db.s.paths.checkpoint(name)
	if _, err := db.s.attributes(ctx, obj); err == nil {
		return CheckpointInfo{}, fmt.Errorf("checkpoint %s: %w", name, ErrCheckpointExists)
	} else if !objstore.IsNotFound(err) {
		return CheckpointInfo{}, fmt.Errorf("checkpoint %s: %w", name, err)
	}
	if err := db.Flush(ctx); err != nil {
		return CheckpointInfo{}, fmt.Errorf("checkpoint %s: %w", name, err)
	}
	// The tables stay pinned against garbage collection until the
	// checkpoint object, which keeps them from then on, is written.
	db.mu.Lock()
	man := db.man.clone()
	ids := man.tableIDs()
	db.inflightMu.Lock()
	for id := range ids {
		db.pins[id]++
	}
	db.inflightMu.Unlock()
	db.mu.Unlock()
	defer func() {
		db.inflightMu.Lock()
		for id := range ids {
			if db.pins[id]--; db.pins[id] <= 0 {
				delete(db.pins, id)
			}
		}
		db.inflightMu.Unlock()
	}()
	data := appendManifest(nil, man)
	err := db.s.putIfAbsent(ctx, "checkpoint", obj, data, true)
	if objstore.IsPreconditionFailed(err) {
		return CheckpointInfo{}, fmt.Errorf("checkpoint %s: %w", name, ErrCheckpointExists)
	}
	if err != nil {
		return CheckpointInfo{}, fmt.Errorf("checkpoint %s: %w", name, err)
	}
	info := checkpointInfo(name, man)
	info.Created = db.clock.Now()
	db.logger.Info("lsm: checkpoint written", "name", name, "tables", info.Tables, "bytes", info.Bytes)
	return info, nil
}

func checkpointInfo(name string, m *manifest) CheckpointInfo {
	info := CheckpointInfo{Name: name}
	for _, t := range m.L0 {
		info.Tables++
		info.Bytes += t.Size
	}
	for _, r := range m.Runs {
		info.Tables += len(r.Tables)
		info.Bytes += r.size()
	}
	return info
}

// eachCheckpoint calls fn with every checkpoint under s, in listing order,
// read and decoded; one deleted since the listing is passed over. An error
// reading one stops the walk.
func (s *store) eachCheckpoint(ctx context.Context, fn func(name string, o objstore.Attributes, m *manifest)) error {
	objs, err := s.list(ctx, s.paths.checkpointDir(), "")
	if err != nil {
		return fmt.Errorf("list checkpoints: %w", err)
	}
	for _, o := range objs {
		name, ok := s.paths.parseCheckpoint(o.Name)
		if !ok {
			continue
		}
		m, err := s.readCheckpoint(ctx, name)
		if objstore.IsNotFound(err) {
			continue
		}
		if err != nil {
			return err
		}
		fn(name, o, m)
	}
	return nil
}

// checkpointTables adds the tables of every checkpoint under s to live. A
// checkpoint that cannot be read fails the call: garbage collection must
// not guess what it keeps.
func (s *store) checkpointTables(ctx context.Context, live map[string]bool) error {
	return s.eachCheckpoint(ctx, func(_ string, _ objstore.Attributes, m *manifest) {
		for id := range m.tableIDs() {
			live[id] = true
		}
	})
}

func (s *store) readCheckpoint(ctx context.Context, name string) (*manifest, error) {
	m, err := s.readManifestObject(ctx, "checkpoint", s.paths.checkpoint(name))
	if objstore.IsNotFound(err) {
		return nil, fmt.Errorf("checkpoint %s: %w", name, ErrNoCheckpoint)
	}
	return m, err
}

// standaloneStore is a store for the functions that work on a bucket
// without opening it: no cache, metrics nobody gathers.
func standaloneStore(b objstore.Bucket, prefix string, logger *slog.Logger) *store {
	m, _ := newMetrics(prometheus.NewRegistry())
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return newStore(b, prefix, nil, m, logger, 10*time.Millisecond, time.Second)
}

// ListCheckpoints returns the checkpoints under prefix in bucket, by name.
func ListCheckpoints(ctx context.Context, bucket objstore.Bucket, prefix string) ([]CheckpointInfo, error) {
	var out []CheckpointInfo
	err := standaloneStore(bucket, prefix, nil).eachCheckpoint(ctx, func(name string, o objstore.Attributes, m *manifest) {
		info := checkpointInfo(name, m)
		info.Created = o.LastModified
		out = append(out, info)
	})
	slices.SortFunc(out, func(a, b CheckpointInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, err
}

// DeleteCheckpoint deletes the checkpoint name; the writer's garbage
// collection then deletes the tables only it kept. It fails with an error
// wrapping objstore.ErrNotFound when there is no such checkpoint.
func DeleteCheckpoint(ctx context.Context, bucket objstore.Bucket, prefix, name string) error {
	if err := ValidCheckpointName(name); err != nil {
		return err
	}
	s := standaloneStore(bucket, prefix, nil)
	obj := s.paths.checkpoint(name)
	if _, err := s.attributes(ctx, obj); objstore.IsNotFound(err) {
		return fmt.Errorf("checkpoint %s: %w", name, ErrNoCheckpoint)
	} else if err != nil {
		return fmt.Errorf("checkpoint %s: %w", name, err)
	}
	if err := s.retry(ctx, "delete "+obj, true, func() error { return bucket.Delete(ctx, obj) }); err != nil {
		return fmt.Errorf("delete checkpoint %s: %w", name, err)
	}
	return nil
}

// CopyStats says what CopyCheckpoint copied.
type CopyStats struct {
	Tables int
	Bytes  int64
}

// copyParallel is how many tables CopyCheckpoint copies at once.
const copyParallel = 8

// CopyCheckpoint copies the checkpoint name under srcPrefix in src to a new
// database under dstPrefix in dst: its tables, then its manifest as the
// first manifest there, so a writer or reader opened on dst finds the
// database as it was at the checkpoint. The destination must hold no
// manifest (ErrDestinationNotEmpty). An interrupted copy left no manifest
// and is finished by running it again.
func CopyCheckpoint(ctx context.Context, src objstore.Bucket, srcPrefix, name string, dst objstore.Bucket, dstPrefix string, logger *slog.Logger) (CopyStats, error) {
	var st CopyStats
	if err := ValidCheckpointName(name); err != nil {
		return st, err
	}
	ss, ds := standaloneStore(src, srcPrefix, logger), standaloneStore(dst, dstPrefix, logger)
	m, err := ss.readCheckpoint(ctx, name)
	if err != nil {
		return st, err
	}
	existing, err := ds.list(ctx, ds.paths.manifestDir(), "")
	if err != nil {
		return st, fmt.Errorf("list the destination's manifests: %w", err)
	}
	if len(existing) > 0 {
		return st, fmt.Errorf("copy checkpoint %s: %w (%s)", name, ErrDestinationNotEmpty, existing[0].Name)
	}
	var tables []tableMeta
	tables = append(tables, m.L0...)
	for _, r := range m.Runs {
		tables = append(tables, r.Tables...)
	}
	var (
		mu    sync.Mutex
		first error
	)
	eachParallel(tables, copyParallel, func(t tableMeta) {
		err := copyObject(ctx, ss, ss.paths.sst(t.ID), ds, ds.paths.sst(t.ID), t.Size)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			if first == nil {
				first = err
			}
			return
		}
		st.Tables++
		st.Bytes += t.Size
	})
	if first != nil {
		return st, fmt.Errorf("copy checkpoint %s: %w", name, first)
	}
	if err := ds.putIfAbsent(ctx, "manifest", ds.paths.manifest(1), appendManifest(nil, m), true); err != nil {
		return st, fmt.Errorf("copy checkpoint %s: write the manifest: %w", name, err)
	}
	return st, nil
}

// copyObject copies one object of a known size, retrying the whole copy on
// transient errors.
func copyObject(ctx context.Context, ss *store, from string, ds *store, to string, size int64) error {
	return ds.retry(ctx, "copy "+from, true, func() error {
		rc, err := ss.bucket.Get(ctx, from)
		if err != nil {
			return err
		}
		defer rc.Close()
		_, err = ds.bucket.Put(ctx, to, rc, size, objstore.PutOptions{})
		return err
	})
}
