package lsm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shaledb/shale/storage/objstore"
)

// walGateBucket holds the puts of chosen WAL objects until released, and tells
// when a put of a WAL object has landed in the inner bucket.
type walGateBucket struct {
	objstore.Bucket
	paths paths

	mu     sync.Mutex
	gates  map[uint64]chan struct{}
	landed map[uint64]chan struct{}
}

func newWALGateBucket(b objstore.Bucket) *walGateBucket {
	return &walGateBucket{Bucket: b, paths: newPaths("db"), gates: map[uint64]chan struct{}{}, landed: map[uint64]chan struct{}{}}
}

// hold makes the put of WAL object id wait until the returned func is
// called (or its context ends).
func (g *walGateBucket) hold(id uint64) (release func()) {
	ch := make(chan struct{})
	g.mu.Lock()
	g.gates[id] = ch
	g.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { close(ch) }) }
}

// landedCh is closed once a put of WAL object id has landed.
func (g *walGateBucket) landedCh(id uint64) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	ch := g.landed[id]
	if ch == nil {
		ch = make(chan struct{})
		g.landed[id] = ch
	}
	return ch
}

func (g *walGateBucket) Put(ctx context.Context, name string, r io.Reader, size int64, opts objstore.PutOptions) (objstore.Attributes, error) {
	id, isWAL := g.paths.parseWAL(name)
	if isWAL {
		g.mu.Lock()
		gate := g.gates[id]
		g.mu.Unlock()
		if gate != nil {
			select {
			case <-gate:
			case <-ctx.Done():
				return objstore.Attributes{}, ctx.Err()
			}
		}
	}
	a, err := g.Bucket.Put(ctx, name, r, size, opts)
	if isWAL && err == nil {
		ch := g.landedCh(id)
		g.mu.Lock()
		select {
		case <-ch:
		default:
			close(ch)
		}
		g.mu.Unlock()
	}
	return a, err
}

// pipelineOptions seal WAL objects only when told (LogMark, FlushWAL), with
// several written at once.
func pipelineOptions() Options {
	o := testOptions()
	o.WALFlushInterval = time.Hour
	o.WALMaxInFlight = 4
	o.KeepLog = true // log records stay until truncated, whatever the flushes
	return o
}

// waitLanded waits until the writer has seen WAL object id stored (it is
// then acknowledged, or waits for an earlier one).
func waitLanded(t *testing.T, db *DB, g *walGateBucket, id uint64) {
	t.Helper()
	select {
	case <-g.landedCh(id):
	case <-time.After(10 * time.Second):
		t.Fatalf("wal %d never landed", id)
	}
	pollUntil(t, fmt.Sprintf("the writer never saw wal %d land", id), func() bool {
		db.mu.Lock()
		defer db.mu.Unlock()
		for _, b := range db.walFlight {
			if b.id == id && !b.landed {
				return false
			}
		}
		return true
	})
}

// pollUntil checks cond every millisecond until it holds, and fails with
// msg if it does not within 10 s.
func pollUntil(t *testing.T, msg string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal(msg)
		}
		time.Sleep(time.Millisecond)
	}
}

// openGated opens a writer with pipelineOptions on a walGateBucket over a
// fresh memory bucket, closed when the test ends.
func openGated(t *testing.T) (*objstore.MemoryBucket, *walGateBucket, *DB) {
	t.Helper()
	mem := objstore.NewMemoryBucket()
	g := newWALGateBucket(mem)
	db := openDB(t, g, pipelineOptions(), Components{})
	t.Cleanup(func() { db.Close() })
	return mem, g, db
}

// waitAll waits for every log wait, failing on the first error.
func waitAll(t *testing.T, what string, ws ...LogWait) {
	t.Helper()
	for i, w := range ws {
		if err := w.Wait(context.Background()); err != nil {
			t.Fatalf("%s: record %d: %v", what, i, err)
		}
	}
}

// wantWritten fails unless every key reads as written by appendSealed.
func wantWritten(t *testing.T, what string, get func(string) (string, bool), keys ...string) {
	t.Helper()
	for _, k := range keys {
		if v, ok := get(k); !ok || v != "v-"+k {
			t.Fatalf("%s: %s = %q %v, want %q", what, k, v, ok, "v-"+k)
		}
	}
}

// appendSealed appends one log record and one write to the WAL object being
// filled, seals it and returns its id and the record's wait.
func appendSealed(t *testing.T, db *DB, key string) (uint64, LogWait) {
	t.Helper()
	var b Batch
	b.Put([]byte(key), []byte("v-"+key))
	if err := db.Write(context.Background(), &b, WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	w, err := db.AppendLog([]byte("rec-" + key))
	if err != nil {
		t.Fatal(err)
	}
	return db.LogMark(), w
}

func isDone(w LogWait) bool {
	select {
	case <-w.buf.done:
		return true
	default:
		return false
	}
}

// TestWALAcknowledgedInOrder: with several WAL objects in flight, one stored
// before an earlier one is not acknowledged until the earlier one is too.
func TestWALAcknowledgedInOrder(t *testing.T) {
	_, g, db := openGated(t)

	first := db.nextWALID
	release := g.hold(first)
	id1, w1 := appendSealed(t, db, "a")
	id2, w2 := appendSealed(t, db, "b")
	id3, w3 := appendSealed(t, db, "c")
	if id1 != first || id2 != first+1 || id3 != first+2 {
		t.Fatalf("wal ids %d %d %d, want %d and the next two", id1, id2, id3, first)
	}
	waitLanded(t, db, g, id2)
	waitLanded(t, db, g, id3)
	if isDone(w1) || isDone(w2) || isDone(w3) {
		t.Fatalf("acknowledged before wal %d was stored: %v %v %v", id1, isDone(w1), isDone(w2), isDone(w3))
	}
	if st := db.Status(); st.PendingWALObjects != 3 {
		t.Fatalf("pending wal objects %d, want 3", st.PendingWALObjects)
	}
	release()
	waitAll(t, "after release", w1, w2, w3)
}

// TestWALWindow: no WAL object starts while the one WALMaxInFlight ids
// before it is not stored.
func TestWALWindow(t *testing.T) {
	g := newWALGateBucket(objstore.NewMemoryBucket())
	opts := pipelineOptions()
	db := openDB(t, g, opts, Components{})
	defer db.Close()

	first := db.nextWALID
	release := g.hold(first)
	var waits []LogWait
	for i := 0; i <= opts.WALMaxInFlight; i++ {
		_, w := appendSealed(t, db, fmt.Sprintf("k%d", i))
		waits = append(waits, w)
	}
	for id := first + 1; id < first+uint64(opts.WALMaxInFlight); id++ {
		waitLanded(t, db, g, id)
	}
	db.mu.Lock()
	flight, queued := len(db.walFlight), len(db.walQueue)
	db.mu.Unlock()
	if flight != opts.WALMaxInFlight || queued != 1 {
		t.Fatalf("%d in flight and %d queued, want %d and 1", flight, queued, opts.WALMaxInFlight)
	}
	if _, err := g.Bucket.Attributes(context.Background(), g.paths.wal(first+uint64(opts.WALMaxInFlight))); !objstore.IsNotFound(err) {
		t.Fatalf("wal %d written past the window: %v", first+uint64(opts.WALMaxInFlight), err)
	}
	release()
	waitAll(t, "after release", waits...)
}

// TestWALCrashWithObjectsInFlight: a writer stops (is fenced while its
// store hangs, as a crashed process whose request still lands later) with
// WAL object N in flight and N+1 stored. The next writer plugs N: the old
// writer's N can no longer land, nothing after it is acknowledged, N+1 is
// void for every later replay and reader, and acknowledged writes survive.
func TestWALCrashWithObjectsInFlight(t *testing.T) {
	ctx := context.Background()
	mem := objstore.NewMemoryBucket()
	g := newWALGateBucket(mem)
	old := openDB(t, g, pipelineOptions(), Components{})
	defer old.Close()

	_, w0 := appendSealed(t, old, "acked")
	if err := w0.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	n := old.nextWALID
	release := g.hold(n)
	defer release()
	_, w1 := appendSealed(t, old, "lost1")
	_, w2 := appendSealed(t, old, "lost2")
	waitLanded(t, old, g, n+1)
	if isDone(w1) || isDone(w2) {
		t.Fatal("acknowledged with an earlier wal object in flight")
	}

	// The next writer opens while the old one's object n is in flight.
	db := openDB(t, mem, pipelineOptions(), Components{})
	if db.logFence <= n+1 {
		t.Fatalf("new writer starts at wal %d, not past the old writer's %d", db.logFence, n+1)
	}
	// The old writer's object n now lands on a taken id: fenced, and
	// neither write it held is acknowledged.
	release()
	if err := w1.Wait(ctx); !errors.Is(err, ErrFenced) {
		t.Fatalf("old writer's record in wal %d: %v, want ErrFenced", n, err)
	}
	if err := w2.Wait(ctx); !errors.Is(err, ErrFenced) {
		t.Fatalf("old writer's record in wal %d (stored): %v, want ErrFenced", n+1, err)
	}

	check := func(who string, get func(string) (string, bool), recs []string) {
		t.Helper()
		if v, ok := get("acked"); !ok || v != "v-acked" {
			t.Fatalf("%s: acknowledged write lost: %q %v", who, v, ok)
		}
		for _, k := range []string{"lost1", "lost2"} {
			if v, ok := get(k); ok {
				t.Fatalf("%s: write %s of a void wal object replayed: %q", who, k, v)
			}
		}
		if recs != nil && (len(recs) != 1 || recs[0] != "rec-acked") {
			t.Fatalf("%s: log records %q, want only rec-acked", who, recs)
		}
	}
	replayLog := func(d *DB) []string {
		var recs []string
		if err := d.ReplayLog(ctx, func(rec []byte) error { recs = append(recs, string(rec)); return nil }); err != nil {
			t.Fatal(err)
		}
		return recs
	}
	check("new writer", func(k string) (string, bool) { return mustGet(t, db, k) }, replayLog(db))

	r, err := OpenReader(ctx, mem, "db", ReaderOptions{ReplayWAL: true, RetryBackoff: time.Millisecond}, Components{Merge: concatMerge})
	if err != nil {
		t.Fatal(err)
	}
	check("reader", func(k string) (string, bool) { return mustGet(t, r, k) }, nil)
	var readerRecs []string
	if _, err := r.ReadLog(LogPos{}, func(_ LogPos, rec []byte) error { readerRecs = append(readerRecs, string(rec)); return nil }); err != nil {
		t.Fatal(err)
	}
	if strings.Join(readerRecs, ",") != "rec-acked" {
		t.Fatalf("reader log records %q", readerRecs)
	}
	r.Close()

	// The new writer acknowledges more, crashes; the one after it replays
	// the same: the void object stays void.
	var later Batch
	later.Put([]byte("later"), []byte("v-later"))
	if err := db.Write(ctx, &later, WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := db.FlushWAL(ctx); err != nil {
		t.Fatal(err)
	}
	crash(db)
	db3 := openDB(t, mem, pipelineOptions(), Components{})
	defer db3.Close()
	get3 := func(k string) (string, bool) { return mustGet(t, db3, k) }
	check("third writer", get3, replayLog(db3))
	wantWritten(t, "second writer's acknowledged write", get3, "later")
}

// TestWALReaderStopsAtGap: a reader following the WAL reads no object past
// one not stored yet.
func TestWALReaderStopsAtGap(t *testing.T) {
	ctx := context.Background()
	mem, g, db := openGated(t)
	r, err := OpenReader(ctx, mem, "db", ReaderOptions{ReplayWAL: true, RetryBackoff: time.Millisecond}, Components{Merge: concatMerge})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()

	n := db.nextWALID
	release := g.hold(n)
	_, w1 := appendSealed(t, db, "first")
	_, w2 := appendSealed(t, db, "second")
	waitLanded(t, db, g, n+1)
	if err := r.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if v, ok := mustGet(t, r, "second"); ok {
		t.Fatalf("reader read wal %d before wal %d was stored: %q", n+1, n, v)
	}
	release()
	waitAll(t, "after release", w1, w2)
	if err := r.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	wantWritten(t, "reader after both stored", func(k string) (string, bool) { return mustGet(t, r, k) }, "first", "second")
}

// TestWALPutFailsAmongInFlight: the put of one WAL object fails (and is
// retried) while later ones are stored: nothing is acknowledged past it
// until it is stored, then everything is, in order, and survives a crash.
func TestWALPutFailsAmongInFlight(t *testing.T) {
	mem := objstore.NewMemoryBucket()
	fb := objstore.NewFaultBucket(mem)
	g := newWALGateBucket(fb)
	db := openDB(t, g, pipelineOptions(), Components{})

	n := db.nextWALID
	remove := fb.Inject(objstore.Fault{Ops: []objstore.Op{objstore.OpPut},
		Match: func(_ objstore.Op, name string) bool { return strings.HasSuffix(name, newPaths("db").wal(n)) }})
	_, w1 := appendSealed(t, db, "a")
	_, w2 := appendSealed(t, db, "b")
	_, w3 := appendSealed(t, db, "c")
	waitLanded(t, db, g, n+1)
	waitLanded(t, db, g, n+2)
	pollUntil(t, "the failing put was not retried", func() bool { return fb.Injected(objstore.OpPut) >= 2 })
	if isDone(w1) || isDone(w2) || isDone(w3) {
		t.Fatal("acknowledged while an earlier wal object's put fails")
	}
	remove()
	waitAll(t, "after the store recovered", w1, w2, w3)
	crash(db)
	db2 := openDB(t, mem, pipelineOptions(), Components{})
	defer db2.Close()
	wantWritten(t, "acknowledged write after a crash", func(k string) (string, bool) { return mustGet(t, db2, k) }, "a", "b", "c")
}

// TestWALFencedAmongInFlight: the put of one WAL object finds its id
// taken (a newer writer) while a later one is stored: the later one's
// writes are not acknowledged.
func TestWALFencedAmongInFlight(t *testing.T) {
	ctx := context.Background()
	mem, g, db := openGated(t)

	n := db.nextWALID
	release := g.hold(n)
	_, w1 := appendSealed(t, db, "a")
	_, w2 := appendSealed(t, db, "b")
	waitLanded(t, db, g, n+1)
	// Someone else's object takes id n.
	other := finishWAL(appendWALHeader(nil, db.epoch+1))
	if _, err := objstore.PutBytes(ctx, mem, g.paths.wal(n), other, objstore.PutOptions{IfAbsent: true}); err != nil {
		t.Fatal(err)
	}
	release()
	for i, w := range []LogWait{w1, w2} {
		if err := w.Wait(ctx); !errors.Is(err, ErrFenced) {
			t.Fatalf("record %d: %v, want ErrFenced", i, err)
		}
	}
}

// TestWALReplayPositionWaitsForWAL: a memtable frozen while its WAL
// objects are in flight is flushed to L0, but the manifest's replay
// position does not move past them until they are stored, so that no id
// below it is ever a gap.
func TestWALReplayPositionWaitsForWAL(t *testing.T) {
	ctx := context.Background()
	mem, g, db := openGated(t)

	n := db.nextWALID
	release := g.hold(n)
	defer release()
	_, w := appendSealed(t, db, "a")
	flushed := make(chan error, 1)
	go func() { flushed <- db.Flush(ctx) }()
	// The L0 table is written; the manifest waits for wal n.
	pollUntil(t, "no l0 table written", func() bool {
		objs, err := mem.List(ctx, "db/sst/", "", 0)
		if err != nil {
			t.Fatal(err)
		}
		return len(objs.Objects) > 0
	})
	select {
	case err := <-flushed:
		t.Fatalf("flush returned (%v) with wal %d in flight", err, n)
	default:
	}
	if replayAfter := replayPos(db); replayAfter >= n {
		t.Fatalf("replay position %d moved past wal %d before it was stored", replayAfter, n)
	}
	release()
	if err := <-flushed; err != nil {
		t.Fatal(err)
	}
	if err := w.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if replayAfter := replayPos(db); replayAfter < n {
		t.Fatalf("replay position %d after the flush, want at least %d", replayAfter, n)
	}
}

// replayPos is the replay position of db's manifest.
func replayPos(db *DB) uint64 {
	db.mu.Lock()
	defer db.mu.Unlock()
	return db.man.ReplayAfter
}
