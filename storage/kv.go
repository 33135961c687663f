package storage

import (
	"context"

	"github.com/shaledb/shale/storage/lsm"
)

// kv is what the time-series engine needs from its key-value store. The LSM
// (storage/lsm) satisfies it through lsmKV; keeping the surface this small
// keeps the engine's assumptions about the LSM in one place.
type kv interface {
	// Write applies the batch atomically, in order after every earlier
	// Write. With durable it returns once the batch, and so every earlier
	// write, is durable in the object store.
	Write(ctx context.Context, b *kvBatch, durable bool) error
	// WriteUnlogged applies the batch like Write but leaves it out of the
	// write-ahead log: it is durable only after the next Flush, and a later
	// logged write may survive a crash that it does not. For bulk writes
	// the caller can rebuild from its own log (head flushes).
	WriteUnlogged(ctx context.Context, b *kvBatch) error
	// Flush makes every write so far durable in the store's tables.
	Flush(ctx context.Context) error
	// Sync makes every write so far durable: in the write-ahead log when the
	// store has one, otherwise in its tables.
	Sync(ctx context.Context) error
	// Get returns the value of key (merge operands resolved), or ok=false.
	// The value is the caller's.
	Get(ctx context.Context, key []byte) (value []byte, ok bool, err error)
	// Scan calls fn for each key in [lower, upper) in order; upper nil means
	// unbounded. key and value are valid only during the call.
	Scan(ctx context.Context, lower, upper []byte, fn func(key, value []byte) error) error
	// ScanFiltered is Scan of the keys for which want is true; it skips the
	// others without reading their values. want sees each key once, in
	// order, right before fn sees it if it is wanted and live.
	ScanFiltered(ctx context.Context, lower, upper []byte, want func(key []byte) bool, fn func(key, value []byte) error) error
	// Close makes every write so far durable, retrying until ctx ends,
	// and releases the store (also when ctx ended first).
	Close(ctx context.Context) error

	// The head log: records durable in the store's write-ahead log that
	// never enter its keyspace (see lsm.DB.Log).

	// Log makes rec durable; records are durable in call order.
	Log(ctx context.Context, rec []byte) error
	// WaitLogRoom blocks while the log's backlog is full (a slow store).
	WaitLogRoom(ctx context.Context) error
	// AppendLog queues rec after every record logged before without
	// blocking on the store; Wait on the result returns once it is durable.
	AppendLog(rec []byte) (lsm.LogWait, error)
	// Health says how the store's requests fare (writers; a reader's is
	// always healthy).
	Health() lsm.Health
	// LogMark returns a mark at or after every record logged so far and
	// before every record logged later.
	LogMark() uint64
	// TruncateLog makes every write so far durable, then drops the records
	// at or before mark.
	TruncateLog(ctx context.Context, mark uint64) error
	// ReplayLog calls fn with each record left by earlier writers, in order.
	ReplayLog(ctx context.Context, fn func(rec []byte) error) error
	// ReadLog (read-only stores) calls fn with each record at or after from,
	// in order, and returns the truncation mark: records at or before it are
	// gone.
	ReadLog(from lsm.LogPos, fn func(pos lsm.LogPos, rec []byte) error) (uint64, error)
}

type kvOp uint8

const (
	opPut kvOp = iota
	opMerge
	opDelete
	opDeleteRange
)

type kvEntry struct {
	op         kvOp
	key, value []byte // for opDeleteRange: [key, value) is the range
}

// kvBatch is an ordered list of writes applied atomically.
type kvBatch struct{ ops []kvEntry }

func (b *kvBatch) Put(k, v []byte)   { b.ops = append(b.ops, kvEntry{opPut, k, v}) }
func (b *kvBatch) Merge(k, v []byte) { b.ops = append(b.ops, kvEntry{opMerge, k, v}) }
func (b *kvBatch) Delete(k []byte)   { b.ops = append(b.ops, kvEntry{opDelete, k, nil}) }

// DeleteRange removes every key in [lo, hi).
func (b *kvBatch) DeleteRange(lo, hi []byte) { b.ops = append(b.ops, kvEntry{opDeleteRange, lo, hi}) }
func (b *kvBatch) Len() int                  { return len(b.ops) }
func (b *kvBatch) Reset()                    { b.ops = b.ops[:0] }
