package storage

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/shaledb/shale/cache"
	"github.com/shaledb/shale/storage/lsm"
	"github.com/shaledb/shale/storage/objstore"
)

// Open opens the time-series engine for writing on bucket under prefix. It
// fences any other writer of the same bucket and prefix, and recovers the
// head. Call Run to start background flushes and retention.
func Open(ctx context.Context, bucket objstore.Bucket, prefix string, opts Options, lsmOpts lsm.Options, blockCache cache.Cache, comps Components) (*DB, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	lsmOpts.WALEnabled = opts.WAL
	// With the WAL on, the head logs each commit (DB.Log) and truncates the
	// log after each head flush.
	lsmOpts.KeepLog = opts.WAL
	store, err := lsm.Open(ctx, bucket, prefix, lsmOpts, lsm.Components{
		Cache:      blockCache,
		Logger:     comps.Logger,
		Registerer: comps.Registerer,
		Merge:      mergeValues,
		ReadMerge:  readMergeValues,
	})
	if err != nil {
		return nil, fmt.Errorf("open LSM: %w", err)
	}
	w := &lsmWriter{db: store, wal: opts.WAL, fenced: make(chan struct{})}
	db, err := open(ctx, w, opts, comps, false)
	if err != nil {
		_ = store.Close()
		return nil, err
	}
	return db, nil
}

// OpenReadOnly opens the time-series engine on bucket under prefix for
// queries only, without fencing the writer. It follows the writer's
// manifests and serves what the writer has flushed to the LSM.
func OpenReadOnly(ctx context.Context, bucket objstore.Bucket, prefix string, opts Options, readerOpts lsm.ReaderOptions, blockCache cache.Cache, comps Components) (*DB, error) {
	r, err := lsm.OpenReader(ctx, bucket, prefix, readerOpts, lsm.Components{
		Cache:      blockCache,
		Logger:     comps.Logger,
		Registerer: comps.Registerer,
		Merge:      mergeValues,
		ReadMerge:  readMergeValues,
	})
	if err != nil {
		return nil, fmt.Errorf("open LSM reader: %w", err)
	}
	db, err := open(ctx, &lsmReader{r: r}, opts, comps, true)
	if err != nil {
		_ = r.Close()
		return nil, err
	}
	return db, nil
}

// lsmWriter is the kv of a writer DB.
type lsmWriter struct {
	db  *lsm.DB
	wal bool

	fenceOnce sync.Once
	fenced    chan struct{} // closed once the LSM reports ErrFenced
}

// check notes a fencing error and returns err unchanged.
func (w *lsmWriter) check(err error) error {
	if errors.Is(err, lsm.ErrFenced) {
		w.fenceOnce.Do(func() { close(w.fenced) })
	}
	return err
}

func toLSMBatch(b *kvBatch) *lsm.Batch {
	n := 0
	for _, op := range b.ops {
		n += len(op.key) + len(op.value)
	}
	lb := lsm.NewBatch(len(b.ops), n)
	for _, op := range b.ops {
		switch op.op {
		case opPut:
			lb.Put(op.key, op.value)
		case opMerge:
			lb.Merge(op.key, op.value)
		case opDelete:
			lb.Delete(op.key)
		case opDeleteRange:
			lb.DeleteRange(op.key, op.value)
		}
	}
	return lb
}

func (w *lsmWriter) Write(ctx context.Context, b *kvBatch, durable bool) error {
	return w.check(w.db.Write(ctx, toLSMBatch(b), lsm.WriteOptions{AwaitDurable: durable}))
}

func (w *lsmWriter) WriteUnlogged(ctx context.Context, b *kvBatch) error {
	return w.check(w.db.Write(ctx, toLSMBatch(b), lsm.WriteOptions{SkipWAL: true}))
}

func (w *lsmWriter) Flush(ctx context.Context) error { return w.check(w.db.Flush(ctx)) }

func (w *lsmWriter) Sync(ctx context.Context) error {
	if w.wal {
		return w.check(w.db.FlushWAL(ctx))
	}
	return w.check(w.db.Flush(ctx))
}

func (w *lsmWriter) Get(ctx context.Context, key []byte) ([]byte, bool, error) {
	return w.db.Get(ctx, key)
}

func (w *lsmWriter) Scan(ctx context.Context, lower, upper []byte, fn func(k, v []byte) error) error {
	return w.ScanFiltered(ctx, lower, upper, nil, fn)
}

func (w *lsmWriter) ScanFiltered(ctx context.Context, lower, upper []byte, want func([]byte) bool, fn func(k, v []byte) error) error {
	it, err := w.db.NewIterator(ctx, lower, upper)
	if err != nil {
		return err
	}
	it.SetFilter(want)
	return scan(it, fn)
}

func (w *lsmWriter) Close(ctx context.Context) error { return w.db.CloseContext(ctx) }

func (w *lsmWriter) Log(ctx context.Context, rec []byte) error { return w.check(w.db.Log(ctx, rec)) }
func (w *lsmWriter) LogMark() uint64                           { return w.db.LogMark() }
func (w *lsmWriter) WaitLogRoom(ctx context.Context) error     { return w.check(w.db.WaitLogRoom(ctx)) }
func (w *lsmWriter) Health() lsm.Health                        { return w.db.Health() }

func (w *lsmWriter) AppendLog(rec []byte) (lsm.LogWait, error) {
	lw, err := w.db.AppendLog(rec)
	return lw, w.check(err)
}

func (w *lsmWriter) TruncateLog(ctx context.Context, mark uint64) error {
	return w.check(w.db.TruncateLog(ctx, mark))
}

func (w *lsmWriter) ReplayLog(ctx context.Context, fn func(rec []byte) error) error {
	return w.db.ReplayLog(ctx, fn)
}

func (w *lsmWriter) ReadLog(lsm.LogPos, func(lsm.LogPos, []byte) error) (uint64, error) {
	return 0, errors.New("storage: the writer reads its log only at open (ReplayLog)")
}

func scan(it *lsm.Iterator, fn func(k, v []byte) error) error {
	for ok := it.First(); ok; ok = it.Next() {
		if err := fn(it.Key(), it.Value()); err != nil {
			_ = it.Close()
			return err
		}
	}
	err := it.Err()
	if cerr := it.Close(); err == nil {
		err = cerr
	}
	return err
}

// lsmReader is the kv of a read-only DB.
type lsmReader struct {
	r *lsm.Reader
}

func (r *lsmReader) Write(context.Context, *kvBatch, bool) error { return ErrReadOnly }
func (r *lsmReader) Sync(context.Context) error                  { return nil }
func (r *lsmReader) Flush(context.Context) error                 { return nil }
func (r *lsmReader) WriteUnlogged(context.Context, *kvBatch) error {
	return ErrReadOnly
}

func (r *lsmReader) Get(ctx context.Context, key []byte) ([]byte, bool, error) {
	return r.r.Get(ctx, key)
}

func (r *lsmReader) Scan(ctx context.Context, lower, upper []byte, fn func(k, v []byte) error) error {
	return r.ScanFiltered(ctx, lower, upper, nil, fn)
}

func (r *lsmReader) ScanFiltered(ctx context.Context, lower, upper []byte, want func([]byte) bool, fn func(k, v []byte) error) error {
	it, err := r.r.NewIterator(ctx, lower, upper)
	if err != nil {
		return err
	}
	it.SetFilter(want)
	return scan(it, fn)
}

func (r *lsmReader) Close(context.Context) error { return r.r.Close() }

func (r *lsmReader) Log(context.Context, []byte) error                   { return ErrReadOnly }
func (r *lsmReader) LogMark() uint64                                     { return 0 }
func (r *lsmReader) WaitLogRoom(context.Context) error                   { return ErrReadOnly }
func (r *lsmReader) AppendLog([]byte) (lsm.LogWait, error)               { return lsm.LogWait{}, ErrReadOnly }
func (r *lsmReader) Health() lsm.Health                                  { return lsm.Health{} }
func (r *lsmReader) TruncateLog(context.Context, uint64) error           { return ErrReadOnly }
func (r *lsmReader) ReplayLog(context.Context, func([]byte) error) error { return ErrReadOnly }

func (r *lsmReader) ReadLog(from lsm.LogPos, fn func(lsm.LogPos, []byte) error) (uint64, error) {
	return r.r.ReadLog(from, fn)
}

// ErrFenced is returned by writes once a newer writer has opened the same
// bucket and prefix.
var ErrFenced = lsm.ErrFenced

// Fenced returns a channel closed when the DB learns that a newer writer
// fenced it; a nil channel (never closed) for a read-only DB. After that every
// write fails with ErrFenced and the process should stop.
func (db *DB) Fenced() <-chan struct{} {
	if w, ok := db.kv.(*lsmWriter); ok {
		return w.fenced
	}
	return nil
}

// Refresh makes a read-only DB see the writer's newest manifest now rather
// than at the next poll.
func (db *DB) Refresh(ctx context.Context) error {
	if r, ok := db.kv.(*lsmReader); ok {
		return r.r.Refresh(ctx)
	}
	return nil
}
