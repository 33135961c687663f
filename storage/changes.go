package storage

import (
	"context"
	"math"
	"sync/atomic"
)

// changeHook is what DB.OnChange installed.
type changeHook struct {
	fn atomic.Pointer[func(mint, maxt int64)]
}

// OnChange makes f be called whenever data that queries see changes in the
// time range [mint, maxt] (ms, inclusive): after a commit's samples are
// applied (with the range of their timestamps), after Delete and after
// retention drops partitions. On a read-only DB it is called for every head
// log record of the writer's that it applies, and with the whole time range
// whenever the writer's manifest changes (a flush, a compaction, a delete or
// retention there), since a reader cannot tell what those changed. A query
// results cache uses it to drop what no longer holds. f must be fast and
// must not call back into the DB; nil removes it.
func (db *DB) OnChange(f func(mint, maxt int64)) {
	if f == nil {
		db.changes.fn.Store(nil)
		return
	}
	db.changes.fn.Store(&f)
}

// changed reports a change in [mint, maxt] to the OnChange hook.
func (db *DB) changed(mint, maxt int64) {
	if f := db.changes.fn.Load(); f != nil && mint <= maxt {
		(*f)(mint, maxt)
	}
}

// CatchUp makes a read-only DB apply what the writer has made durable since
// its last look (reporting it to OnChange), so that a cache consulted next is
// as fresh as a query would be. On a writer it does nothing.
func (db *DB) CatchUp(ctx context.Context) error {
	if !db.readOnly {
		return nil
	}
	return db.followHeadLog(ctx)
}

// allTime is the range OnChange gets when any time may have changed.
const allTimeMin, allTimeMax = math.MinInt64, math.MaxInt64
