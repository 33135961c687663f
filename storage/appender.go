package storage

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/exemplar"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/metadata"
	promstorage "github.com/prometheus/prometheus/storage"

	"github.com/shaledb/shale/storage/lsm"
)

// dataError is an error about data that can never be stored; senders should
// drop it rather than retry.
type dataError string

func (e dataError) Error() string { return string(e) }

// BadData marks the error for the remote-write layer (400, not 5xx).
func (dataError) BadData() bool { return true }

// ErrInvalidSeries marks labels the storage refuses: no labels at all, or a
// repeated label name.
var ErrInvalidSeries error = dataError("invalid series labels")

// ErrInvalidHistogram marks a native histogram that fails validation.
var ErrInvalidHistogram error = dataError("invalid native histogram")

// ErrTooFarInFuture marks a sample further ahead of the server's clock than
// Options.TooFarInFuture. It is bad data (400) that the remote-write
// receiver counts as too_far_in_future.
var ErrTooFarInFuture error = futureError{"too far in the future"}

// futureError is the dataError that names its refusal reason.
type futureError struct{ dataError }

// RejectReason names the error in the receivers' refusal metrics.
func (futureError) RejectReason() string { return "too_far_in_future" }

// ErrSeriesLimit marks a sample of a new series refused because its head
// partition holds Options.MaxHeadSeries series already. It is bad data
// (400): a sender that retried would meet the same limit until the
// partition ends, and its queue would stall behind the request. The
// remote-write receiver counts it as series_limit.
var ErrSeriesLimit = errors.New("series limit reached")

// seriesLimitError is ErrSeriesLimit for one partition.
type seriesLimitError struct {
	part  int64 // the partition's start
	limit int
}

func (e *seriesLimitError) Error() string {
	return fmt.Sprintf("%v: the head partition from %s holds %d series, the most allowed; new series are refused until it ends, samples of the series it holds are taken",
		ErrSeriesLimit, timeString(e.part), e.limit)
}

func (e *seriesLimitError) Unwrap() error { return ErrSeriesLimit }

// BadData marks the error for the remote-write layer (400, not 5xx).
func (*seriesLimitError) BadData() bool { return true }

// RejectReason names the error in the receivers' refusal metrics.
func (*seriesLimitError) RejectReason() string { return "series_limit" }

// ErrUnavailable marks a commit that the object store could not make durable
// within Options.WriteTimeout, or that was refused because the store has
// been failing for longer than that. Its samples may still be stored; the
// sender should retry (HTTP 503).
var ErrUnavailable = errors.New("storage unavailable")

// unavailableError is an ErrUnavailable with its cause.
type unavailableError struct {
	msg   string
	cause error
}

func (e *unavailableError) Error() string {
	if e.cause == nil {
		return ErrUnavailable.Error() + ": " + e.msg
	}
	return ErrUnavailable.Error() + ": " + e.msg + ": " + e.cause.Error()
}

func (e *unavailableError) Unwrap() []error { return []error{ErrUnavailable, e.cause} }

// Unavailable marks the error for the remote-write layer (503 with
// Retry-After, not 500).
func (*unavailableError) Unavailable() bool { return true }

// checkWritable refuses a commit at once while the store has been failing
// for longer than the write timeout: waiting would only end the same way,
// and the head would grow with samples that cannot be persisted.
func (db *DB) checkWritable() error {
	if db.opts.WriteTimeout <= 0 {
		return nil
	}
	h := db.StoreHealth()
	if d := h.WritesFailingFor(time.Now()); d > db.opts.WriteTimeout {
		return &unavailableError{
			msg:   fmt.Sprintf("the object store has been failing for %s (%s)", d.Round(time.Second), h.Op),
			cause: h.Err,
		}
	}
	return nil
}

// writeContext bounds ctx by the write timeout.
func (db *DB) writeContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if db.opts.WriteTimeout <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeoutCause(ctx, db.opts.WriteTimeout, errWriteTimeout)
}

var errWriteTimeout = errors.New("write timeout")

// waitErr turns the error of a wait for the store into ErrUnavailable when
// the write timeout, not the caller, ended it.
func (db *DB) waitErr(ctx context.Context, what string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(context.Cause(ctx), errWriteTimeout) {
		return &unavailableError{msg: fmt.Sprintf("%s: not durable within the write timeout of %s; the object store is slow or failing", what, db.opts.WriteTimeout),
			cause: db.StoreHealth().Err}
	}
	return fmt.Errorf("%s: %w", what, err)
}

type pendingSample struct {
	part *headPart
	s    *memSeries
	smp  sample
}

// appender collects samples until Commit, which logs them (WAL on), applies
// them to the head and, with the WAL on, waits until they are durable.
type appender struct {
	db      *DB
	ctx     context.Context
	pending []pendingSample
	ex      []pendingExemplar
	meta    []pendingMetadata
	metaAt  map[string]int // index in meta by family
	opts    promstorage.AppendV2Options
	// last is the series of the previous Append, a cheap cache for senders
	// that send a series' samples one after another.
	last *memSeries
	// known is last when the caller vouched that lset is its labels (see
	// IngestAppender.hint), nil otherwise.
	known *memSeries
	done  bool
	// queued: Commit does not wait for the WAL (QueuedAppendable).
	queued bool
	// expected: the WAL was told this appender's record is on its way
	// (lsm.DB.ExpectLog); Commit appends it or Commit and Rollback withdraw it.
	expected bool
	// latest is the newest sample time the appender takes (see
	// latestAccepted); 0 until its first append.
	latest int64
	// recommits is how many commits before this one the samples went
	// through (see recommit).
	recommits int
	// newestPending is the newest pending sample time by labels hash, kept
	// from the first start-time zero sample of the transaction on (see
	// IngestAppender.stZero).
	newestPending map[uint64]int64
}

type pendingExemplar struct {
	lset labels.Labels
	e    exemplar.Exemplar
}

type pendingMetadata struct {
	family string
	m      metadata.Metadata
}

// AppenderV2 returns an appender. It is not safe for concurrent use; many
// appenders may be used concurrently.
func (db *DB) AppenderV2(ctx context.Context) promstorage.AppenderV2 {
	return &appender{db: db, ctx: ctx}
}

// QueuedAppendable returns an Appendable whose commits return once their
// samples are applied (queries see them) and queued for the write-ahead log,
// without waiting for the log to make them durable: a crash loses at most
// the log's last group-commit interval of them. Rule evaluation uses it: a
// group commits after each rule, and waiting for the object store each time
// would make a group of n rules take n round trips. Without the WAL it is the
// DB itself.
func (db *DB) QueuedAppendable() promstorage.AppendableV2 { return queuedAppendable{db} }

type queuedAppendable struct{ db *DB }

func (q queuedAppendable) AppenderV2(ctx context.Context) promstorage.AppenderV2 {
	return &appender{db: q.db, ctx: ctx, queued: true}
}

// Appender returns an appender with Prometheus' version 1 interface.
func (db *DB) Appender(ctx context.Context) promstorage.Appender {
	return &appenderV1{a: &appender{db: db, ctx: ctx}}
}

func validateLabels(lset labels.Labels) error {
	if lset.IsEmpty() {
		return fmt.Errorf("%w: empty label set", ErrInvalidSeries)
	}
	if lset.Has("") {
		return fmt.Errorf("%w: empty label name in %s", ErrInvalidSeries, lset)
	}
	if name, dup := lset.HasDuplicateLabelNames(); dup {
		return fmt.Errorf("%w: label name %q repeats in %s", ErrInvalidSeries, name, lset)
	}
	return nil
}

// Append adds a float or histogram sample to the transaction. st, the start
// timestamp, is not stored.
func (a *appender) Append(ref promstorage.SeriesRef, lset labels.Labels, st, t int64, v float64, h *histogram.Histogram, fh *histogram.FloatHistogram, opts promstorage.AppendV2Options) (promstorage.SeriesRef, error) {
	if a.done {
		return 0, errors.New("append after commit or rollback")
	}
	if a.db.readOnly {
		return 0, ErrReadOnly
	}
	if a.db.isClosed() {
		return 0, ErrClosed
	}
	if h != nil {
		if err := h.Validate(); err != nil {
			return 0, fmt.Errorf("%w: %w", ErrInvalidHistogram, err)
		}
	}
	if fh != nil {
		if err := fh.Validate(); err != nil {
			return 0, fmt.Errorf("%w: %w", ErrInvalidHistogram, err)
		}
	}
	db := a.db
	if t > a.latestAccepted() {
		db.metrics.rejected.WithLabelValues("too_far_in_future").Inc()
		return 0, fmt.Errorf("%w: sample at %s is more than %s ahead of the server's clock (a timestamp in the wrong unit?)",
			ErrTooFarInFuture, timeString(t), db.opts.TooFarInFuture)
	}
	maxT := db.head.maxT.Load()
	if minT := db.oldestAccepted(maxT); t < minT {
		db.metrics.rejected.WithLabelValues("out_of_bounds").Inc()
		return 0, fmt.Errorf("%w: sample at %d is older than the retention of %s allows (%d; newest sample %d)", promstorage.ErrOutOfBounds, t, db.opts.Retention, minT, maxT)
	}
	s, err := a.series(t, lset)
	if err != nil {
		return 0, err
	}
	p := s.part
	p.noteAppend()
	smp := sample{t: t, v: v, h: h, fh: fh}
	if err := a.check(s, smp, maxT, opts.RejectOutOfOrder || a.opts.RejectOutOfOrder); err != nil {
		return 0, err
	}
	if h != nil {
		smp.h = h.Copy()
	}
	if fh != nil {
		smp.fh = fh.Copy()
	}
	a.pending = append(a.pending, pendingSample{part: p, s: s, smp: smp})
	if a.newestPending != nil {
		a.notePending(lset.Hash(), t)
	}
	for _, e := range opts.Exemplars {
		a.ex = append(a.ex, pendingExemplar{lset: s.lset(), e: e})
	}
	if !opts.Metadata.IsEmpty() {
		family := opts.MetricFamilyName
		if family == "" {
			family = lset.Get(model.MetricNameLabel)
		}
		a.queueMetadata(family, opts.Metadata, false)
	}
	return promstorage.SeriesRef(s.ref) + 1, nil
}

// waitWrittenOut waits until the flush writing partitions out for good
// has ended, so that a late sample for one of them can open it again: a
// sender catching up hours behind met a 503 for every request during each
// such flush (1.4 s at 20k series). It waits at most the write timeout and
// reports whether the flush ended.
func (db *DB) waitWrittenOut(ctx context.Context) bool {
	db.head.mu.RLock()
	done := db.head.writtenOut
	db.head.mu.RUnlock()
	if done == nil {
		return true
	}
	if db.waitingHook != nil {
		db.waitingHook()
	}
	var timeout <-chan time.Time
	if db.opts.WriteTimeout > 0 {
		t := time.NewTimer(db.opts.WriteTimeout)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-done:
		return true
	case <-ctx.Done():
	case <-timeout:
	}
	return false
}

// latestAccepted is the newest sample time the appender takes: the
// server's clock at its first append plus Options.TooFarInFuture. One read of
// the clock serves the whole transaction.
func (a *appender) latestAccepted() int64 {
	if a.latest != 0 {
		return a.latest
	}
	return a.readClock()
}

// readClock sets and returns a.latest (kept apart so that latestAccepted,
// called for every sample, is inlined).
func (a *appender) readClock() int64 {
	a.latest = math.MaxInt64
	if d := a.db.opts.TooFarInFuture; d > 0 {
		a.latest = a.db.now().Add(d).UnixMilli()
	}
	return a.latest
}

// timeString formats a sample time for an error: RFC 3339 when it is a date
// people use, the milliseconds otherwise.
func timeString(t int64) string {
	if t > 0 && t < 253402300800000 { // year 10000
		return time.UnixMilli(t).UTC().Format(time.RFC3339Nano)
	}
	return strconv.FormatInt(t, 10) + " ms"
}

// recordNewSeries writes the forward-index entries of the series of the
// appender's samples that the LSM does not hold yet (created by this
// appender or by another one not yet committed) before the samples are
// logged.
func (a *appender) recordNewSeries(ctx context.Context) error {
	var (
		p    *headPart
		need uint32
	)
	for _, ps := range a.pending {
		if ps.part != p {
			if p != nil {
				if err := a.db.recordSeries(ctx, p, need); err != nil {
					return err
				}
			}
			p, need = ps.part, 0
		}
		need = max(need, ps.s.ref+1)
	}
	if p == nil {
		return nil
	}
	return a.db.recordSeries(ctx, p, need)
}

func (a *appender) notePending(hash uint64, t int64) {
	if cur, ok := a.newestPending[hash]; !ok || t > cur {
		a.newestPending[hash] = t
	}
}

// series returns the series lset of the open partition of time t, creating
// it (and the partition) if needed. A series the partition holds is found
// without checking its labels again: they are the very labels checked when
// it was created.
func (a *appender) series(t int64, lset labels.Labels) (*memSeries, error) {
	db := a.db
	var (
		h      uint64
		missed *headPart // the partition that does not hold lset, hashed h
	)
	part := db.partitionOf(t)
	// The previous sample's series again, in a partition still open: the
	// head's partition of that start (see headPart.closed), found without
	// the head's lock, whose shared counter was 3 % of the ingest's CPU.
	if s := a.last; s != nil && s.part.start == part && !s.part.closed.Load() && (s == a.known || s.is(lset)) {
		return s, nil
	}
	if p := db.head.openPart(part); p != nil {
		h = lset.Hash()
		if s := p.get(h, lset); s != nil {
			a.last = s
			return s, nil
		}
		missed = p
	}
	if hasEmptyValues(lset) {
		lset, missed = lset.WithoutEmpty(), nil
	}
	if err := validateLabels(lset); err != nil {
		db.metrics.rejected.WithLabelValues("invalid_labels").Inc()
		return nil, err
	}
	p, err := db.headPartFor(a.ctx, t)
	if err == nil && p == nil && db.waitWrittenOut(a.ctx) {
		p, err = db.headPartFor(a.ctx, t)
	}
	if err != nil {
		return nil, err
	}
	if p == nil {
		// A flush is writing the partition out, and did not finish
		// within the write timeout; once it is done the partition opens
		// again for this sample. A retry succeeds: refusing the sample
		// for good (out of bounds) lost it.
		db.metrics.rejected.WithLabelValues("partition_closing").Inc()
		return nil, &unavailableError{msg: fmt.Sprintf("sample at %d falls in a partition being written out; retry", t)}
	}
	if p != missed {
		h = lset.Hash()
		if s := p.get(h, lset); s != nil {
			a.last = s
			return s, nil
		}
	}
	s, err := p.create(h, lset, db.opts.MaxHeadSeries)
	if err != nil {
		if errors.Is(err, ErrSeriesLimit) {
			db.metrics.rejected.WithLabelValues("series_limit").Inc()
		}
		return nil, err
	}
	a.last = s
	return s, nil
}

// hasEmptyValues reports whether a label has an empty value (an absent
// label, as Prometheus treats it).
func hasEmptyValues(lset labels.Labels) bool {
	empty := false
	lset.Range(func(l labels.Label) {
		empty = empty || l.Value == ""
	})
	return empty
}

// check rejects a sample the series cannot take when out-of-order samples
// are refused (a window of 0, or RejectOutOfOrder): one older than the
// series' newest, or a second, different value for the newest timestamp.
// With a window any time is taken here (the retention bounds it, in
// Append). maxT is the head's newest sample time.
func (a *appender) check(s *memSeries, smp sample, maxT int64, rejectOOO bool) error {
	db := a.db
	if !rejectOOO && db.opts.OutOfOrderWindow != 0 {
		// Any time is taken, in order or not: nothing to check, and no
		// series lock to take (a lock and an unlock per sample were 4 % of
		// the ingest's CPU).
		return nil
	}
	s.lock()
	seriesMaxT := s.maxT()
	dup := s.isDuplicateLocked(smp)
	s.unlock()
	if maxT >= s.part.end {
		// A series' newest sample may be in a later partition: a sample
		// older than it is out of order even where this partition has
		// nothing newer.
		seriesMaxT = max(seriesMaxT, db.newestInLaterParts(s.part, s.lset()))
	}
	if smp.t > seriesMaxT || dup {
		return nil
	}
	if smp.t == seriesMaxT {
		db.metrics.rejected.WithLabelValues("duplicate").Inc()
		return fmt.Errorf("%w: series %s at %d", promstorage.ErrDuplicateSampleForTimestamp, s.lset(), smp.t)
	}
	db.metrics.rejected.WithLabelValues("out_of_order").Inc()
	return fmt.Errorf("%w: series %s at %d, newest is %d", promstorage.ErrOutOfOrderSample, s.lset(), smp.t, seriesMaxT)
}

// newestInLaterParts returns the newest sample time of the series lset in
// the head's partitions after p, or math.MinInt64.
func (db *DB) newestInLaterParts(p *headPart, lset labels.Labels) int64 {
	newest := int64(math.MinInt64)
	db.head.mu.RLock()
	later := db.head.seriesAfterLocked(p, lset, nil)
	db.head.mu.RUnlock()
	for _, s := range later {
		s.lock()
		newest = max(newest, s.maxT())
		s.unlock()
	}
	return newest
}

// seriesAfterLocked appends to dst the series lset of each head partition
// after p, oldest partition first (the order Commit locks them in). Callers
// hold h.mu.
func (h *head) seriesAfterLocked(p *headPart, lset labels.Labels, dst []*memSeries) []*memSeries {
	from := len(dst)
	hash := lset.Hash()
	for start, q := range h.parts {
		if start <= p.start {
			continue
		}
		if s := q.get(hash, lset); s != nil {
			dst = append(dst, s)
		}
	}
	slices.SortFunc(dst[from:], func(a, b *memSeries) int { return cmp.Compare(a.part.start, b.part.start) })
	return dst
}

// Commit applies the transaction's samples to the head, where queries see
// them, and with the WAL on returns once they are durable. An error that
// wraps ErrUnavailable (the object store did not make them durable within
// Options.WriteTimeout, or has been failing for longer) leaves them in the
// head, and perhaps durable later: the sender retries, and the duplicates
// keep one value.
func (a *appender) Commit() error {
	if a.done {
		return errors.New("commit after commit or rollback")
	}
	a.done = true
	defer a.withdraw()
	db := a.db
	for _, e := range a.ex {
		db.ex.add(e.lset, e.e)
	}
	if len(a.pending) == 0 && len(a.meta) == 0 {
		return nil
	}
	if err := db.checkWritable(); err != nil {
		return err
	}
	ctx, cancel := db.writeContext(a.ctx)
	defer cancel()
	if err := a.commitMetadata(ctx); err != nil {
		return err
	}
	if len(a.pending) == 0 {
		return nil
	}
	var scratch *logScratch
	if db.opts.WAL {
		scratch = logPool.Get().(*logScratch)
		defer scratch.release()
		if err := a.encodeLog(scratch); err != nil {
			return err
		}
		if err := db.w.WaitLogRoom(ctx); err != nil {
			return db.waitErr(ctx, "wait for room in the write-ahead log", err)
		}
	}
	if err := a.recordNewSeries(ctx); err != nil {
		return db.waitErr(ctx, "record new series", err)
	}

	// The record is queued for the log and the samples applied to the head
	// under the head's read lock, and the commit waits for durability after
	// releasing it: a flush (which takes the log mark under the write lock)
	// then finds the samples of every record at or before its mark in the
	// head, so truncating the log up to the mark loses none, and it never
	// waits for a round trip to the object store.
	h := db.head
	h.mu.RLock()
	var logged lsm.LogWait
	if db.opts.WAL {
		var err error
		if a.expected {
			a.expected = false
			logged, err = db.w.AppendExpectedLog(scratch.buf)
		} else {
			logged, err = db.w.AppendLog(scratch.buf)
		}
		if err != nil {
			h.mu.RUnlock()
			return fmt.Errorf("log appended samples: %w", err)
		}
	}
	r := a.applyLocked()
	h.noteAppliedLocked(db, r.newest, int64(len(a.pending)-r.dropped-len(r.closed)))
	h.mu.RUnlock()
	db.changed(r.oldest, r.newest)
	if db.opts.WAL && !a.queued {
		if err := logged.Wait(ctx); err != nil {
			return db.waitErr(ctx, "log appended samples", err)
		}
	}
	db.metrics.appended.Add(float64(len(a.pending) - r.dropped - len(r.closed)))
	if len(r.closed) > 0 {
		if err := a.recommit(r.closed); err != nil {
			return err
		}
	}
	if r.dropped > 0 {
		db.metrics.rejected.WithLabelValues("commit_conflict").Add(float64(r.dropped))
		if r.firstErr != nil {
			return fmt.Errorf("%d of %d samples not stored: %w", r.dropped, len(a.pending), r.firstErr)
		}
		return fmt.Errorf("%w: %d of %d samples were out of order or too old by the time they were committed", promstorage.ErrOutOfOrderSample, r.dropped, len(a.pending))
	}
	return nil
}

// commitMetadata stores the metric metadata the appender collected, dated
// by its newest sample. A store that fails is logged and left for the next
// commit to try again, unless the commit's context ended.
func (a *appender) commitMetadata(ctx context.Context) error {
	if len(a.meta) == 0 {
		return nil
	}
	newest := int64(math.MinInt64)
	for _, ps := range a.pending {
		newest = max(newest, ps.smp.t)
	}
	if err := a.db.setMetadata(ctx, a.meta, newest); err != nil {
		if ctx.Err() != nil {
			return a.db.waitErr(ctx, "record metric metadata", err)
		}
		a.db.logger.Debug("metric metadata not stored", "err", err)
	}
	return nil
}

// encodeLog encodes the pending samples as one head log record in
// scratch.buf.
func (a *appender) encodeLog(scratch *logScratch) error {
	entries := slices.Grow(scratch.entries[:0], len(a.pending))[:len(a.pending)]
	scratch.entries = entries
	for i, ps := range a.pending {
		entries[i] = logEntry{part: ps.part.start, ref: ps.s.ref, t: ps.smp.t, v: ps.smp.v, h: ps.smp.h, fh: ps.smp.fh}
	}
	// About 12 bytes an entry: kind, three small deltas, a value.
	buf := slices.Grow(scratch.buf[:0], 16+14*len(entries))
	var err error
	scratch.buf, err = appendLogRecord(buf, entries)
	return err
}

// applied is what applying a commit's samples to the head did.
type applied struct {
	dropped        int   // refused: out of order by now, or failed
	firstErr       error // the first failure, if any
	oldest, newest int64 // of the samples stored
	// closed are the samples of partitions a flush closed since Append,
	// left to recommit.
	closed []pendingSample
}

// applyLocked applies the pending samples to their series, with the head's
// read lock held.
func (a *appender) applyLocked() applied {
	db, h := a.db, a.db.head
	r := applied{oldest: math.MaxInt64, newest: math.MinInt64}
	var later []*memSeries // the series in later partitions, window 0 only
	for _, ps := range a.pending {
		if ps.part.closed.Load() {
			r.closed = append(r.closed, ps)
			continue
		}
		later = later[:0]
		if db.opts.OutOfOrderWindow == 0 && h.maxT.Load() >= ps.part.end {
			// The series' newest sample may be in a later partition,
			// where another appender may have put it since Append: held
			// locked while this sample is applied (earlier partitions'
			// series are always locked first), so that it is refused as
			// out of order rather than stored behind it.
			later = h.seriesAfterLocked(ps.part, ps.s.lset(), later)
		}
		s := ps.s
		s.lock()
		for s.retired {
			// Retired since Append: the partition holds it again, or
			// brings it back.
			s.unlock()
			s = ps.part.revive(s.ref)
			s.lock()
		}
		seriesNewest := s.maxT()
		for _, q := range later {
			q.lock()
			seriesNewest = max(seriesNewest, q.maxT())
		}
		dup := s.isDuplicateLocked(ps.smp)
		// Another appender got a newer sample in first.
		conflict := !dup && ps.smp.t <= seriesNewest && db.opts.OutOfOrderWindow == 0
		var err error
		if !dup && !conflict {
			// The partition's bounds cover the sample before a flush can
			// cut it.
			ps.part.noteTime(ps.smp.t)
			err = s.appendLocked(ps.smp)
		}
		for _, q := range later {
			q.unlock()
		}
		s.unlock()
		switch {
		case dup:
		case conflict:
			r.dropped++
		case err != nil:
			if r.firstErr == nil {
				r.firstErr = err
			}
			r.dropped++
		default:
			r.oldest, r.newest = min(r.oldest, ps.smp.t), max(r.newest, ps.smp.t)
		}
	}
	return r
}

// noteAppliedLocked records, under the head's read lock, that n samples up
// to newest were applied: it moves the head's newest time and asks for a
// flush when the head holds enough samples.
func (h *head) noteAppliedLocked(db *DB, newest, n int64) {
	for {
		cur := h.maxT.Load()
		if newest <= cur || h.maxT.CompareAndSwap(cur, newest) {
			break
		}
	}
	// Counted under the head's read lock: a flush zeroes the count under
	// the write lock and drops a flush asked for before that, so the
	// samples it takes never ask for a second flush right after it.
	if n := h.unflushed.Add(n); db.opts.HeadFlushSamples > 0 && n >= h.flushAt.Load() {
		// The threshold follows the series the last flush cut; more may
		// have come since (the first samples after a start, a new
		// partition filling): then the bar goes up instead.
		series := 0
		if p := h.openPartLocked(db.partitionOf(h.maxT.Load())); p != nil {
			series = p.numSeries()
		}
		if at := flushThreshold(db.opts.HeadFlushSamples, series); n < at {
			h.flushAt.Store(at)
		} else {
			select {
			case db.flushNow <- struct{}{}:
			default: // a flush is already asked for
			}
		}
	}
}

// maxRecommits is how many times a commit appends again the samples of
// partitions a flush wrote out while it was in flight, before it gives up
// and asks the sender to retry.
const maxRecommits = 3

// recommit appends and commits again, in a transaction of their own, the
// samples of partitions a flush wrote out between their Append and the
// commit (a backfill racing the flushes it causes): Append opens the
// partition again, waiting for the flush to end. Their series are checked
// again, as a sender's retry would be: a sample now out of order fails the
// commit as a conflict does. After maxRecommits the sender retries.
func (a *appender) recommit(closed []pendingSample) error {
	db := a.db
	if a.recommits >= maxRecommits {
		db.metrics.rejected.WithLabelValues("partition_closing").Add(float64(len(closed)))
		return &unavailableError{msg: fmt.Sprintf("%d of %d samples fell in partitions written out while the request was in flight; retry", len(closed), len(a.pending))}
	}
	db.metrics.recommitted.Add(float64(len(closed)))
	b := &appender{db: db, ctx: a.ctx, opts: a.opts, queued: a.queued, latest: a.latest, recommits: a.recommits + 1}
	var (
		refused  int
		firstErr error
	)
	for _, ps := range closed {
		_, err := b.Append(0, ps.s.lset(), 0, ps.smp.t, ps.smp.v, ps.smp.h, ps.smp.fh, a.opts)
		switch {
		case err == nil:
		case errors.Is(err, promstorage.ErrOutOfBounds):
			// Newer samples moved the retention past it since its
			// Append took it: it is dropped as retention drops what it
			// took before (Prometheus checks the bounds only at Append,
			// too), counted as out_of_bounds.
		case errors.Is(err, ErrUnavailable) || errors.Is(err, ErrClosed):
			_ = b.Rollback()
			return err
		default:
			refused++
			firstErr = cmp.Or(firstErr, err)
		}
	}
	if err := b.Commit(); err != nil {
		return err
	}
	if refused > 0 {
		return fmt.Errorf("%d of %d samples not stored: %w", refused, len(a.pending), firstErr)
	}
	return nil
}

// logScratch is the buffers a commit encodes its head log record in,
// recycled through logPool: Log copies the record into the WAL object being
// filled, so the buffers are free once it returns. Allocating them for each
// commit was a fifth of the bytes the ingest allocated.
type logScratch struct {
	entries []logEntry
	buf     []byte
}

var logPool = sync.Pool{New: func() any { return new(logScratch) }}

// maxPooledLogEntries bounds the buffers kept (48 bytes an entry).
const maxPooledLogEntries = 1 << 14

func (s *logScratch) release() {
	if cap(s.entries) > maxPooledLogEntries {
		return
	}
	clear(s.entries) // drop the histograms they point to
	logPool.Put(s)
}

// Rollback drops the transaction's samples. Series it created remain (empty).
func (a *appender) Rollback() error {
	a.done = true
	a.withdraw()
	a.pending, a.ex, a.meta, a.metaAt = nil, nil, nil, nil
	return nil
}

// expect tells the WAL that this appender's commit is on its way, so that
// the WAL object being filled waits for it rather than leaving early
// (lsm.Options.WALMinInterval).
func (a *appender) expect() {
	if a.db.opts.WAL && !a.queued && a.db.w != nil {
		a.db.w.ExpectLog()
		a.expected = true
	}
}

// withdraw takes back an expect whose record was not appended.
func (a *appender) withdraw() {
	if a.expected {
		a.expected = false
		a.db.w.CancelLog()
	}
}

// appenderV1 adapts appender to Prometheus' version 1 Appender interface.
type appenderV1 struct {
	a *appender
}

func (v *appenderV1) Append(ref promstorage.SeriesRef, l labels.Labels, t int64, val float64) (promstorage.SeriesRef, error) {
	return v.a.Append(ref, l, 0, t, val, nil, nil, promstorage.AppendV2Options{})
}

func (v *appenderV1) AppendHistogram(ref promstorage.SeriesRef, l labels.Labels, t int64, h *histogram.Histogram, fh *histogram.FloatHistogram) (promstorage.SeriesRef, error) {
	return v.a.Append(ref, l, 0, t, 0, h, fh, promstorage.AppendV2Options{})
}

func (v *appenderV1) AppendHistogramSTZeroSample(promstorage.SeriesRef, labels.Labels, int64, int64, *histogram.Histogram, *histogram.FloatHistogram) (promstorage.SeriesRef, error) {
	return 0, nil
}

func (v *appenderV1) AppendSTZeroSample(promstorage.SeriesRef, labels.Labels, int64, int64) (promstorage.SeriesRef, error) {
	return 0, nil
}

func (v *appenderV1) AppendExemplar(ref promstorage.SeriesRef, l labels.Labels, e exemplar.Exemplar) (promstorage.SeriesRef, error) {
	v.a.ex = append(v.a.ex, pendingExemplar{lset: l.Copy(), e: e})
	return ref, nil
}

func (v *appenderV1) UpdateMetadata(ref promstorage.SeriesRef, l labels.Labels, m metadata.Metadata) (promstorage.SeriesRef, error) {
	v.a.updateMetadata(l, m)
	return ref, nil
}

func (v *appenderV1) SetOptions(opts *promstorage.AppendOptions) {
	if opts != nil {
		v.a.opts.RejectOutOfOrder = opts.DiscardOutOfOrder
	}
}

func (v *appenderV1) Commit() error   { return v.a.Commit() }
func (v *appenderV1) Rollback() error { return v.a.Rollback() }
