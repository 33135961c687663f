package storage

import (
	"context"
	"fmt"

	"github.com/shaledb/shale/storage/lsm"
)

// LSMOptions returns base with the settings the time-series engine needs of
// the LSM under it for opts: the WAL as opts.WAL says, and the WAL objects
// kept until the head truncates its log (the head logs each commit there).
func LSMOptions(opts Options, base lsm.Options) lsm.Options {
	base.WALEnabled = opts.WAL
	base.KeepLog = opts.WAL
	return base
}

// LSMComponents returns c with the merge operators of the engine's keys
// (sample blocks merge by time, postings by union), which the LSM under a
// DB must have, whether writer or reader.
func LSMComponents(c lsm.Components) lsm.Components {
	c.Merge = mergeValues
	c.ReadMerge = readMergeValues
	c.OperandInterval = sampleInterval
	c.FlushSplit = flushSplit
	return c
}

// Open opens the time-series engine for writing on w, an LSM opened with
// LSMOptions and LSMComponents, and recovers the head. The DB owns w from
// then on and closes it; on error the caller does. Call Run to start
// background flushes and retention.
func Open(ctx context.Context, w *lsm.DB, opts Options, comps Components) (*DB, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if lo := w.Options(); lo.WALEnabled != opts.WAL || lo.KeepLog != opts.WAL {
		return nil, fmt.Errorf("storage open: the LSM has WALEnabled=%v KeepLog=%v, the engine's WAL=%v needs both %v (open it with storage.LSMOptions)",
			lo.WALEnabled, lo.KeepLog, opts.WAL, opts.WAL)
	}
	return open(ctx, w, w, nil, opts, comps)
}

// OpenReadOnly opens the time-series engine for queries only on r, a
// reader opened with LSMComponents; it follows the writer's manifests and
// head log. The DB owns r from then on and closes it; on error the caller
// does.
func OpenReadOnly(ctx context.Context, r *lsm.Reader, opts Options, comps Components) (*DB, error) {
	return open(ctx, r, nil, r, opts, comps)
}

// scan calls fn for each key in [lower, upper) in order; upper nil means
// unbounded. key and value are valid only during the call.
func (db *DB) scan(ctx context.Context, lower, upper []byte, fn func(k, v []byte) error) error {
	return db.scanFiltered(ctx, lower, upper, nil, fn)
}

// scanFiltered is scan of the keys for which want is true; it skips the
// others without reading their values. want sees each key once, in order,
// right before fn sees it if it is wanted and live.
func (db *DB) scanFiltered(ctx context.Context, lower, upper []byte, want func([]byte) bool, fn func(k, v []byte) error) error {
	return db.scanWith(ctx, lower, upper, want, scanOpts{}, fn)
}

// scanOpts says how scanWith reads.
type scanOpts struct {
	// readAhead reads the range as a whole (lsm.Iterator.SetReadAhead), for
	// a range read once.
	readAhead bool
	// keep gives fn values it may keep (lsm.Iterator.TakeValue), for fn that
	// would otherwise copy each.
	keep bool
	// values and merge, if set, are the iterator's value filter and merge
	// operator (lsm.Iterator.SetValueFilter, SetMerge).
	values func(k, v []byte) bool
	merge  lsm.MergeOperator
	// interval, if set, is the iterator's (lsm.Iterator.SetInterval).
	interval *lsm.Interval
	// noFill leaves the block cache as it is (lsm.Iterator.SetNoFill).
	noFill bool
}

// scanWith is scanFiltered, reading as o says.
func (db *DB) scanWith(ctx context.Context, lower, upper []byte, want func([]byte) bool, o scanOpts, fn func(k, v []byte) error) error {
	it, err := db.lsm.NewIterator(ctx, lower, upper)
	if err != nil {
		return err
	}
	it.SetFilter(want)
	it.SetValueFilter(o.values)
	it.SetMerge(o.merge)
	if o.interval != nil {
		it.SetInterval(*o.interval)
	}
	if o.readAhead {
		it.SetReadAhead()
	}
	if o.noFill {
		it.SetNoFill()
	}
	for ok := it.First(); ok; ok = it.Next() {
		v := it.Value()
		if o.keep {
			v = it.TakeValue()
		}
		if err := fn(it.Key(), v); err != nil {
			_ = it.Close()
			return err
		}
	}
	err = it.Err()
	if cerr := it.Close(); err == nil {
		err = cerr
	}
	return err
}

// write applies b to the writer's LSM; logged puts it in the WAL too
// (durable at the next WAL object), else it is durable at the next flush.
func (db *DB) write(ctx context.Context, b *lsm.Batch, logged bool) error {
	if db.w == nil {
		return ErrReadOnly
	}
	return db.w.Write(ctx, b, lsm.WriteOptions{SkipWAL: !logged})
}

// sync makes every write so far durable: in the WAL when there is one,
// otherwise in tables.
func (db *DB) sync(ctx context.Context) error {
	if db.w == nil {
		return ErrReadOnly
	}
	if db.opts.WAL {
		return db.w.FlushWAL(ctx)
	}
	return db.w.Flush(ctx)
}

// ErrFenced is returned by writes once a newer writer has opened the same
// bucket and prefix.
var ErrFenced = lsm.ErrFenced

// Fenced returns a channel closed when the DB learns that a newer writer
// fenced it; a nil channel (never closed) for a read-only DB. After that every
// write fails with ErrFenced and the process should stop.
func (db *DB) Fenced() <-chan struct{} {
	if db.w == nil {
		return nil
	}
	return db.w.Fenced()
}

// Refresh makes a read-only DB see the writer's newest manifest now rather
// than at the next poll.
func (db *DB) Refresh(ctx context.Context) error {
	if db.r == nil {
		return nil
	}
	return db.r.Refresh(ctx)
}

// WriterAddress returns, on a read-only DB, where the live writer serves, as
// its lease says; "" when that is not known (no live writer, or it gave no
// address) and on a writer.
func (db *DB) WriterAddress(ctx context.Context) (string, error) {
	if db.r == nil {
		return "", nil
	}
	lease, err := db.r.WriterLease(ctx)
	if err != nil {
		return "", err
	}
	return lsm.LeaseField(lease, "addr"), nil
}

// StoreHealth says how the writer's object-store requests fare; a reader's
// is always healthy.
func (db *DB) StoreHealth() lsm.Health {
	if db.w == nil {
		return lsm.Health{}
	}
	return db.w.Health()
}
