package lsm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"time"

	"github.com/shaledb/shale/storage/lsm/sst"
)

// compactionLane is one of the two lanes compactions run in, one
// compaction at a time in each, side by side. laneL0 drains L0 into a new
// run, taking in the newest runs while they are small; laneRuns merges runs
// once they add up to Options.RunLaneBytes, which takes minutes at millions
// of series, and L0 would fill and stall writers if its compactions waited.
//
// The lanes never share a run (DB.busyRuns), and what each merges is
// contiguous in age: laneL0 takes every L0 table and the newest runs, and
// puts its output at the front; laneRuns takes consecutive runs from the
// newest one laneL0 is not using, and puts its output in their place. So
// every L0 table stays newer than every run, and runs stay in age order,
// whichever lane commits first.
type compactionLane int

const (
	laneL0 compactionLane = iota
	laneRuns
)

func (l compactionLane) String() string {
	if l == laneL0 {
		return "l0"
	}
	return "runs"
}

// compactionPlan says what one compaction merges: L0 tables, or consecutive
// sorted runs, or both (the oldest L0 tables and the newest runs); its
// output takes their place.
type compactionPlan struct {
	Lane   compactionLane
	L0     []string // ids of the L0 tables merged
	Runs   []uint64 // ids of the sorted runs merged, newest first
	Bottom bool     // no data older than the sources exists: deletes may go
}

func (p *compactionPlan) String() string {
	return fmt.Sprintf("lane=%v l0=%d runs=%v bottom=%v", p.Lane, len(p.L0), p.Runs, p.Bottom)
}

// planCompaction is the size-tiered policy: it decides, the executor does.
// It returns the next compaction of lane that leaves out the runs busy in
// the other, or nil when there is nothing for the lane to do.
func planCompaction(m *manifest, o *Options, lane compactionLane, busy map[uint64]bool) *compactionPlan {
	if lane == laneL0 {
		return planL0(m, o, busy)
	}
	return planRuns(m, o, busy)
}

// planL0 merges every L0 table, once L0 is L0CompactionTrigger tables deep
// (or holds L0StallTables tables, however shallow), with the newest free runs
// while each is no larger than SizeRatio times what is taken before it and
// all stays under RunLaneBytes. With too few L0 tables and no run busy, it
// rewrites the runs a range tombstone still reaches (and all that is newer),
// so the deleted entries and the tombstone can go.
func planL0(m *manifest, o *Options, busy map[uint64]bool) *compactionPlan {
	p := compactionPlan{Lane: laneL0}
	last := -1 // index in m.Runs of the oldest run taken
	switch {
	case l0Depth(m.L0) >= o.L0CompactionTrigger || len(m.L0) >= o.L0StallTables:
		var size float64
		for i := range m.L0 {
			p.L0 = append(p.L0, m.L0[i].ID)
			size += float64(m.L0[i].Size)
		}
		for i := range m.Runs {
			rs := float64(m.Runs[i].size())
			if busy[m.Runs[i].ID] || rs > size*o.SizeRatio || size+rs > float64(o.RunLaneBytes) {
				break
			}
			p.Runs = append(p.Runs, m.Runs[i].ID)
			size += rs
			last = i
		}
	case len(m.Tombs) > 0 && len(busy) == 0:
		for i := range m.Runs {
			for j := range m.Tombs {
				if runHitByTomb(&m.Runs[i], &m.Tombs[j]) {
					last = i
				}
			}
		}
		if last < 0 {
			return nil
		}
		for k := range m.L0 {
			p.L0 = append(p.L0, m.L0[k].ID)
		}
		for i := 0; i <= last; i++ {
			p.Runs = append(p.Runs, m.Runs[i].ID)
		}
	default:
		return nil
	}
	p.Bottom = last == len(m.Runs)-1
	return &p
}

// planRuns merges consecutive free runs from the newest free one: as many
// as bring the count back to MaxSortedRuns when it is exceeded, otherwise
// those that keep within SizeRatio of what is taken before them, once they
// add up to RunLaneBytes (smaller ones are the L0 lane's to take in).
func planRuns(m *manifest, o *Options, busy map[uint64]bool) *compactionPlan {
	p := compactionPlan{Lane: laneRuns}
	first := 0
	for first < len(m.Runs) && busy[m.Runs[first].ID] {
		first++
	}
	free := func(i int) bool { return i < len(m.Runs) && !busy[m.Runs[i].ID] }
	last := first
	if len(m.Runs) > o.MaxSortedRuns {
		n := len(m.Runs) - o.MaxSortedRuns + 1
		for i := first; free(i) && len(p.Runs) < n; i++ {
			p.Runs = append(p.Runs, m.Runs[i].ID)
			last = i
		}
	} else if free(first) {
		size := float64(m.Runs[first].size())
		p.Runs = append(p.Runs, m.Runs[first].ID)
		for i := first + 1; free(i); i++ {
			rs := float64(m.Runs[i].size())
			if rs > size*o.SizeRatio {
				break
			}
			p.Runs = append(p.Runs, m.Runs[i].ID)
			size += rs
			last = i
		}
		if size < float64(o.RunLaneBytes) {
			return nil
		}
	}
	if len(p.Runs) < 2 {
		return nil
	}
	p.Bottom = last == len(m.Runs)-1
	return &p
}

// tombHits reports whether rt may delete entries of t: t holds keys in rt's
// range written before it.
func tombHits(t *tableMeta, rt *rangeTomb) bool {
	return t.MinSeq < rt.seq && bytes.Compare(t.LargestKey, rt.start) >= 0 && bytes.Compare(t.SmallestKey, rt.end) < 0
}

// tombReachesOther reports whether rt may delete entries of a table not in
// skip.
func tombReachesOther(m *manifest, rt *rangeTomb, skip map[string]bool) bool {
	for i := range m.L0 {
		if !skip[m.L0[i].ID] && tombHits(&m.L0[i], rt) {
			return true
		}
	}
	for _, r := range m.Runs {
		for i := range r.Tables {
			if !skip[r.Tables[i].ID] && tombHits(&r.Tables[i], rt) {
				return true
			}
		}
	}
	return false
}

func runHitByTomb(r *sortedRun, rt *rangeTomb) bool {
	for i := range r.Tables {
		if tombHits(&r.Tables[i], rt) {
			return true
		}
	}
	return false
}

// Compact runs compactions in both lanes until the policy finds nothing to
// do.
func (db *DB) Compact(ctx context.Context) error {
	for {
		done, err := db.compactOnce(ctx, laneL0)
		if err != nil {
			return err
		}
		if !done {
			continue
		}
		if done, err = db.compactOnce(ctx, laneRuns); err != nil || done {
			return err
		}
	}
}

// compactLane runs compactions of lane until it finds nothing to do; after
// each of laneL0 it kicks laneRuns, whose work the new run may complete.
func (db *DB) compactLane(ctx context.Context, lane compactionLane) error {
	for {
		done, err := db.compactOnce(ctx, lane)
		if lane == laneL0 && !done {
			kick(db.runsKick)
		}
		if err != nil || done {
			return err
		}
	}
}

// errSourcesGone abandons a compaction whose sources left the manifest
// while it ran (a range tombstone dropped a table whole); its output would
// bring back what the tombstone deleted.
var errSourcesGone = errors.New("lsm: compaction sources left the manifest")

// compactOnce plans and runs one compaction of lane; done means there was
// none.
func (db *DB) compactOnce(ctx context.Context, lane compactionLane) (done bool, err error) {
	db.laneMu[lane].Lock()
	defer db.laneMu[lane].Unlock()
	db.compacting.Add(1)
	defer db.compacting.Add(-1)
	// The manifest is read under planMu: a run the other lane merged is
	// either still busy or already out of the manifest.
	db.planMu.Lock()
	db.mu.Lock()
	man, err := db.man, db.err
	db.mu.Unlock()
	if err != nil {
		db.planMu.Unlock()
		return true, err
	}
	plan := planCompaction(man, &db.opts, lane, db.busyRuns)
	if plan != nil {
		for _, id := range plan.Runs {
			db.busyRuns[id] = true
		}
	}
	db.planMu.Unlock()
	if plan == nil {
		return true, nil
	}
	defer func() {
		db.planMu.Lock()
		for _, id := range plan.Runs {
			delete(db.busyRuns, id)
		}
		db.planMu.Unlock()
	}()
	err = db.runCompaction(ctx, man, plan)
	if errors.Is(err, errSourcesGone) {
		db.logger.Info("lsm: compaction abandoned: a range tombstone dropped one of its tables", "plan", plan.String())
		return false, nil // planned again from the new manifest
	}
	if err != nil {
		return true, err
	}
	return false, nil
}

// runCompaction is the executor: it merges the plan's sources, writes the
// output run split into tables of TargetTableBytes and commits it. A source
// table that no other source overlaps, that no range tombstone reaches and
// that is not small goes into the output as it is (a move: its object stays,
// nothing is read or written); what lies between such tables is merged, and
// an output table never spans a moved one.
func (db *DB) runCompaction(ctx context.Context, man *manifest, plan *compactionPlan) error {
	start := time.Now()
	src := &view{man: &manifest{}}
	inL0, inRuns := setOf(plan.L0), setOf(plan.Runs)
	for i := range man.L0 {
		if inL0[man.L0[i].ID] {
			src.man.L0 = append(src.man.L0, man.L0[i])
		}
	}
	for i := range man.Runs {
		if inRuns[man.Runs[i].ID] {
			src.man.Runs = append(src.man.Runs, man.Runs[i])
		}
	}
	var inputBytes int64
	for i := range src.man.L0 {
		inputBytes += src.man.L0[i].Size
	}
	for i := range src.man.Runs {
		inputBytes += src.man.Runs[i].size()
	}

	var (
		out     []tableMeta
		made    []string // ids of the tables written, protected until the commit
		written int64
		moved   int64
		nMoved  int
		w       *sst.Writer
		buf     bytes.Buffer
		curID   string
	)
	defer func() {
		for _, id := range made {
			db.protect(id, false)
		}
	}()
	finishTable := func() error {
		info, err := w.Finish()
		if err != nil {
			return fmt.Errorf("finish table: %w", err)
		}
		if err := db.s.putTable(ctx, curID, buf.Bytes()); err != nil {
			return fmt.Errorf("write compacted table: %w", err)
		}
		written += info.Size
		out = append(out, tableMetaFromInfo(curID, info))
		curID, w = "", nil
		return nil
	}
	emit := func(e *entry) error {
		if w == nil {
			buf.Reset()
			// The table is built whole before its upload: room for all of
			// it up front, instead of doubling a buffer past twice its size.
			buf.Grow(int(max(min(db.opts.TargetTableBytes, inputBytes-written-moved), 0) + outputSlack))
			curID = newTableID(db.clock.Now())
			db.protect(curID, true)
			made = append(made, curID)
			w = sst.NewWriter(&buf, db.opts.Table)
			w.SetInterval(db.comp.OperandInterval)
		}
		return w.Add(sst.Entry{Key: e.key, Seq: e.seq, Kind: sst.Kind(e.kind), Value: e.value})
	}
	c := compactor{merge: db.merge, tombs: man.Tombs, bottom: plan.Bottom}
	// merge writes the entries of the tables of part.
	merge := func(part *manifest) error {
		it := newCompactionIter(ctx, db.s, part)
		defer it.close()
		// Compaction runs beside the writes it serves: it lets other
		// goroutines run every 64 keys (a millisecond or less) rather than
		// keep its P for Go's 10 ms time slice while a WAL put back from its
		// fsync, or a request, waits for one. On two cores the WAL puts over
		// 8 ms halved, and remote write's p99 fell by a seventh
		// (docs/benchmarks.md).
		keys := 0
		for ok := it.seekGE(nil); ok; {
			if keys++; keys%64 == 0 {
				runtime.Gosched()
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			if w != nil && w.EstimatedSize() >= db.opts.TargetTableBytes {
				if err := finishTable(); err != nil {
					return err
				}
			}
			ok = c.key(it, emit)
			if c.err != nil {
				return c.err
			}
		}
		if err := it.err(); err != nil {
			return fmt.Errorf("lsm compaction: read sources: %w", err)
		}
		return nil
	}
	for _, step := range moveOrMerge(src.man, man.Tombs, db.opts.TargetTableBytes/minMoveFraction) {
		if step.move == nil {
			if err := merge(step.merge); err != nil {
				return err
			}
			continue
		}
		if w != nil {
			if err := finishTable(); err != nil {
				return err
			}
		}
		out = append(out, *step.move)
		moved += step.move.Size
		nMoved++
	}
	if w != nil {
		if err := finishTable(); err != nil {
			return err
		}
	}
	isOut := setOf(made)
	err := db.commit(func(next *manifest) error {
		if !sourcesPresent(next, src.man) {
			return errSourcesGone
		}
		l0 := next.L0[:0:0]
		for _, t := range next.L0 {
			if !inL0[t.ID] {
				l0 = append(l0, t)
			}
		}
		next.L0 = l0
		// The output takes the place of its newest run (the front when it
		// merged L0 alone): runs the other lane put in front meanwhile are
		// newer, the ones behind older.
		runs := next.Runs[:0:0]
		placed := len(out) == 0
		place := func() {
			if !placed {
				runs = append(runs, sortedRun{ID: next.NextRunID, Tables: out})
				next.NextRunID++
				placed = true
			}
		}
		if len(plan.Runs) == 0 {
			place()
		}
		for _, r := range next.Runs {
			if inRuns[r.ID] {
				place()
				continue
			}
			runs = append(runs, r)
		}
		next.Runs = runs
		// The output holds nothing the snapshot's tombstones delete; those
		// that reach no other table are done.
		// (Moved tables are not the output's: no tombstone reaches them.)
		applied := map[uint64]bool{}
		for _, rt := range man.Tombs {
			applied[rt.seq] = true
		}
		tombs := next.Tombs[:0:0]
		for _, rt := range next.Tombs {
			if !applied[rt.seq] || tombReachesOther(next, &rt, isOut) {
				tombs = append(tombs, rt)
			}
		}
		next.Tombs = tombs
		return nil
	}, nil)
	if err != nil {
		return err
	}
	db.m.compactions[plan.Lane].Inc()
	db.compactionsDone.Add(1)
	db.m.compactionBytes[plan.Lane].Add(float64(written))
	db.m.compactionMoved[plan.Lane].Add(float64(moved))
	db.logger.Info("lsm: compaction done", "plan", plan.String(), "tables", len(out), "bytes", written,
		"moved_tables", nMoved, "moved_bytes", moved, "took", time.Since(start))
	return nil
}

// minMoveFraction: a compaction moves a table of at least
// TargetTableBytes/minMoveFraction; smaller ones are merged with their
// neighbours, so that runs do not collect many small tables (each is an
// object, and an entry in every manifest written).
const minMoveFraction = 8

// compactionStep is one step of a compaction's output, in key order: a
// source table moved as it is, or sources merged.
type compactionStep struct {
	move  *tableMeta
	merge *manifest // L0 tables and runs (each a part of a source run)
}

// moveOrMerge splits the sources of a compaction into steps in key order.
// Sources that overlap, directly or through others, make a group; a group
// of one table at least minMove bytes that no tombstone of tombs may reach
// is moved, and consecutive other groups are merged together. The entries of
// one key are all in one group, so a move never keeps apart what the merge
// would fold.
func moveOrMerge(src *manifest, tombs []rangeTomb, minMove int64) []compactionStep {
	type source struct {
		t   *tableMeta
		l0  int // index in src.L0, or -1
		run int // index in src.Runs when l0 < 0
	}
	var all []source
	for i := range src.L0 {
		all = append(all, source{t: &src.L0[i], l0: i})
	}
	for r := range src.Runs {
		for i := range src.Runs[r].Tables {
			all = append(all, source{t: &src.Runs[r].Tables[i], l0: -1, run: r})
		}
	}
	slices.SortStableFunc(all, func(a, b source) int { return bytes.Compare(a.t.SmallestKey, b.t.SmallestKey) })
	var (
		steps   []compactionStep
		pending []source // the groups to merge next
	)
	flush := func() {
		if len(pending) == 0 {
			return
		}
		part := &manifest{}
		// Sources keep the order reads rank them in: L0 newest first, then
		// runs newest first, each run's tables in key order.
		slices.SortStableFunc(pending, func(a, b source) int {
			switch {
			case a.l0 >= 0 && b.l0 >= 0:
				return a.l0 - b.l0
			case a.l0 >= 0:
				return -1
			case b.l0 >= 0:
				return 1
			}
			return a.run - b.run
		})
		lastRun := -1
		for _, s := range pending {
			switch {
			case s.l0 >= 0:
				part.L0 = append(part.L0, *s.t)
			case s.run != lastRun:
				part.Runs = append(part.Runs, sortedRun{ID: src.Runs[s.run].ID, Tables: []tableMeta{*s.t}})
				lastRun = s.run
			default:
				r := &part.Runs[len(part.Runs)-1]
				r.Tables = append(r.Tables, *s.t)
			}
		}
		steps = append(steps, compactionStep{merge: part})
		pending = nil
	}
	for i := 0; i < len(all); {
		j, largest := i+1, all[i].t.LargestKey
		for j < len(all) && bytes.Compare(all[j].t.SmallestKey, largest) <= 0 {
			if bytes.Compare(all[j].t.LargestKey, largest) > 0 {
				largest = all[j].t.LargestKey
			}
			j++
		}
		if t := all[i].t; j == i+1 && t.Size >= minMove && !slices.ContainsFunc(tombs, func(rt rangeTomb) bool { return tombHits(t, &rt) }) {
			flush()
			steps = append(steps, compactionStep{move: t})
		} else {
			pending = append(pending, all[i:j]...)
		}
		i = j
	}
	flush()
	return steps
}

// sourcesPresent reports whether every table of src is still in m.
func sourcesPresent(m, src *manifest) bool {
	live := m.tableIDs()
	for id := range src.tableIDs() {
		if !live[id] {
			return false
		}
	}
	return true
}

// outputSlack is what a compaction output table may hold beyond
// TargetTableBytes (or its sources' bytes): the split is checked between
// keys, and output blocks may compress a little worse than the sources'.
const outputSlack = 1 << 20

// newCompactionIter merges the tables of man, reading each with a scan that
// bypasses the block cache (sst.Table.NewScanIter): a compaction reads every
// block once and replaces the tables, so its reads must not evict the blocks
// queries use, nor fill the cache and its disk-tier write queue with blocks
// that are garbage once the compaction commits.
func newCompactionIter(ctx context.Context, s *store, man *manifest) *mergeIter {
	m := &mergeIter{}
	for i := range man.L0 {
		m.children = append(m.children, &scanRunIter{ctx: ctx, s: s, tables: man.L0[i : i+1]})
	}
	for i := range man.Runs {
		m.children = append(m.children, &scanRunIter{ctx: ctx, s: s, tables: man.Runs[i].Tables})
	}
	first := make([]*tableMeta, 0, len(m.children))
	for _, c := range m.children {
		if r := c.(*scanRunIter); len(r.tables) > 0 {
			first = append(first, &r.tables[0])
		}
	}
	s.openAll(ctx, first, nil)
	return m
}

// scanRunIter walks every entry of the tables of a sorted run (or one L0
// table) in order, with scan iterators.
type scanRunIter struct {
	ctx    context.Context
	s      *store
	tables []tableMeta
	i      int
	cur    tableIter
	open   bool
	e      error
}

// seekGE supports only a seek to the first entry: compactions read whole
// tables.
func (r *scanRunIter) seekGE(key []byte) bool {
	if key != nil {
		r.e = fmt.Errorf("lsm compaction: seek to a key is not supported")
		return false
	}
	r.closeCur()
	return r.startAt(0)
}

// startAt opens table i, or the first non-empty one after it, at its first
// entry.
func (r *scanRunIter) startAt(i int) bool {
	for ; i < len(r.tables) && r.e == nil; i++ {
		r.i = i
		h, err := r.s.table(r.ctx, &r.tables[i])
		if err != nil {
			r.e = err
			return false
		}
		r.cur, r.open = tableIter{it: h.NewScanIter(r.ctx, nil, nil), scan: true}, true
		if r.cur.seekGE(nil) {
			return true
		}
		r.closeCur()
	}
	return false
}

func (r *scanRunIter) closeCur() {
	if !r.open {
		return
	}
	// Err before Close: a closed sst.Iter reports that it is closed.
	if err := r.cur.err(); err != nil && r.e == nil {
		r.e = err
	}
	if err := r.cur.close(); err != nil && r.e == nil {
		r.e = err
	}
	r.cur, r.open = tableIter{}, false
}

func (r *scanRunIter) next() bool {
	if !r.open || r.e != nil {
		return false
	}
	if r.cur.next() {
		return true
	}
	r.closeCur()
	return r.startAt(r.i + 1)
}

func (r *scanRunIter) valid() bool  { return r.open && r.e == nil && r.cur.valid() }
func (r *scanRunIter) entry() entry { return r.cur.entry() }
func (r *scanRunIter) err() error   { return r.e }
func (r *scanRunIter) close() error {
	r.closeCur()
	return r.e
}

// compactor rewrites the versions of one key at a time. With no snapshots
// to keep, each key keeps at most one entry: its newest Put or Delete with
// the merge operands above it folded in, or, when it has only operands and
// older tables outside the compaction may hold its base, one folded operand.
type compactor struct {
	merge  MergeOperator
	tombs  []rangeTomb
	bottom bool
	err    error

	key_ []byte
	ops  [][]byte
	bufs [][]byte
}

// key consumes every entry of the key at it and emits what survives. It
// returns whether it is positioned at another key.
func (c *compactor) key(it internalIter, emit func(e *entry) error) bool {
	e := it.entry()
	c.key_ = append(c.key_[:0], e.key...)
	c.ops = c.ops[:0]
	var (
		terminal  *entry
		term      entry
		newestSeq uint64
		nb        int
		seen      bool
		lastSeq   uint64
	)
	keep := func(v []byte) []byte {
		if nb == len(c.bufs) {
			c.bufs = append(c.bufs, nil)
		}
		c.bufs[nb] = append(c.bufs[nb][:0], v...)
		nb++
		return c.bufs[nb-1]
	}
	ok := true
	for {
		if terminal == nil && !(seen && e.seq == lastSeq) {
			if !seen {
				newestSeq = e.seq
			}
			seen, lastSeq = true, e.seq
			switch {
			case covered(c.tombs, c.key_, e.seq):
				term = entry{kind: kindDelete, seq: e.seq}
				terminal = &term
			case e.kind == kindMerge:
				c.ops = append(c.ops, keep(e.value))
			default:
				term = entry{kind: e.kind, seq: e.seq, value: keep(e.value)}
				terminal = &term
			}
		}
		if ok = it.next(); !ok {
			break
		}
		e = it.entry()
		if !bytes.Equal(e.key, c.key_) {
			break
		}
	}
	c.err = c.write(terminal, newestSeq, emit)
	return ok
}

func (c *compactor) fold(existing []byte) ([]byte, error) {
	for i, j := 0, len(c.ops)-1; i < j; i, j = i+1, j-1 {
		c.ops[i], c.ops[j] = c.ops[j], c.ops[i]
	}
	if c.merge == nil {
		return nil, ErrNoMergeOperator
	}
	v, err := c.merge(c.key_, existing, c.ops)
	if err != nil {
		return nil, fmt.Errorf("lsm compaction: merge operator on key %q: %w", c.key_, err)
	}
	return v, nil
}

func (c *compactor) write(terminal *entry, newestSeq uint64, emit func(e *entry) error) error {
	key := c.key_
	switch {
	case len(c.ops) == 0 && terminal == nil:
		return nil
	case len(c.ops) == 0:
		if terminal.kind == kindDelete && c.bottom {
			return nil
		}
		terminal.key = key
		if terminal.kind == kindDelete {
			terminal.value = nil
		}
		return emit(terminal)
	case terminal == nil && !c.bottom:
		v := c.ops[0]
		if len(c.ops) > 1 {
			var err error
			if v, err = c.fold(nil); err != nil {
				return err
			}
		}
		return emit(&entry{key: key, seq: newestSeq, kind: kindMerge, value: v})
	default:
		var base []byte
		if terminal != nil && terminal.kind == kindPut {
			base = terminal.value
		}
		v, err := c.fold(base)
		if err != nil {
			return err
		}
		return emit(&entry{key: key, seq: newestSeq, kind: kindPut, value: v})
	}
}

// setOf returns the set of ids.
func setOf[K comparable](ids []K) map[K]bool {
	set := make(map[K]bool, len(ids))
	for _, id := range ids {
		set[id] = true
	}
	return set
}
