package cache

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/cespare/xxhash/v2"

	"github.com/shaledb/shale/internal/writeback"
)

// diskTier is the local-disk tier: blocks appended as checksummed records to
// segment files, a hash index in memory, FIFO eviction of whole segments.
//
// One writer goroutine owns the active segment; it takes blocks from a
// bounded queue, so the read path never waits for disk writes. The active
// segment is written under a temporary name and renamed when it is full (or
// on Close), so a segment file under its final name is always complete. On
// open the tier scans the finished segments to rebuild its index and removes
// temporary and invalid ones.
//
// Reads validate every record (checksum, lengths, key); whatever fails is a
// miss and leaves the index.
type diskTier struct {
	dir        string
	lock       *os.File
	budget     atomic.Int64 // lowered when the disk has less room (fitBudget, shrinkFull)
	segSize    int64
	queueBytes int64
	log        *slog.Logger
	ctr        *counters

	mu     sync.RWMutex
	index  map[uint64]diskLoc // xxhash of key -> newest record
	segs   map[uint64]*segment
	order  []uint64 // segment ids, oldest first; the active one last
	bytes  int64    // sum of segment sizes
	nextID uint64

	// Owned by the writer goroutine.
	active      *segment
	buf         []byte
	errorLogged bool

	queue   chan writeReq
	pending atomic.Int64 // value bytes waiting in queue
	closed  atomic.Bool
	done    chan struct{} // closed to stop the writer
	exited  chan struct{} // closed by the writer when it returns
}

// diskLoc locates one record.
type diskLoc struct {
	seg   uint64
	off   uint32
	size  uint32
	class Class
}

type segment struct {
	id      uint64
	f       *os.File
	size    int64     // bytes in the file
	charged int64     // bytes charged to the budget: size plus, while active, its future footer
	hashes  []uint64  // key hashes of its records, to clean the index on eviction
	locs    []diskLoc // while active: its records, for the footer
	sealed  bool      // renamed to its final name
	// wb: the writeback of the bytes written so far is started a
	// writeback.Chunk at a time (the tier's writer alone touches it): left
	// to the kernel, tens of MiB of cache go to the disk at once, and the
	// WAL's fsyncs on the same disk wait behind them.
	wb writeback.Progress
}

type writeReq struct {
	key     string
	value   []byte
	class   Class
	flushed chan struct{} // set for a flush marker, closed when reached
}

const (
	lockName      = "LOCK"
	segmentPrefix = "seg-"
	segmentSuffix = ".seg"
	tempSuffix    = ".tmp"
	// scanBufSize holds any record header and key, so a scan always advances.
	scanBufSize = 128 << 10
)

func segmentName(id uint64, sealed bool) string {
	suffix := tempSuffix
	if sealed {
		suffix = segmentSuffix
	}
	return fmt.Sprintf("%s%016x%s", segmentPrefix, id, suffix)
}

// parseSegmentName returns the id of a finished segment's file name.
func parseSegmentName(name string) (uint64, bool) {
	hex, ok := strings.CutPrefix(name, segmentPrefix)
	if !ok {
		return 0, false
	}
	hex, ok = strings.CutSuffix(hex, segmentSuffix)
	if !ok || len(hex) != 16 {
		return 0, false
	}
	id, err := strconv.ParseUint(hex, 16, 64)
	return id, err == nil
}

func openDiskTier(opts Options, log *slog.Logger, ctr *counters) (*diskTier, error) {
	d := &diskTier{
		dir:        opts.DiskPath,
		segSize:    opts.segmentBytes(),
		queueBytes: opts.DiskWriteQueueBytes,
		log:        log,
		ctr:        ctr,
		index:      make(map[uint64]diskLoc),
		segs:       make(map[uint64]*segment),
		queue:      make(chan writeReq, opts.DiskWriteQueue),
		done:       make(chan struct{}),
		exited:     make(chan struct{}),
	}
	if err := os.MkdirAll(d.dir, 0o755); err != nil {
		return nil, fmt.Errorf("cache: create disk tier directory: %w", err)
	}
	lock, err := lockDir(filepath.Join(d.dir, lockName))
	if err != nil {
		return nil, err
	}
	d.lock = lock
	d.budget.Store(opts.DiskBytes)
	d.fitBudget(opts)
	if err := d.load(); err != nil {
		d.closeFiles()
		return nil, err
	}
	go d.run()
	return d, nil
}

// writeAt writes to a segment file; a variable for tests (a full disk).
var writeAt = (*os.File).WriteAt

// statFree returns the bytes an unprivileged writer may still write on the
// filesystem of dir; ok is false where it cannot tell. A variable for tests.
var statFree = freeBytes

// fitBudget lowers the budget, and the segment size with it, to what the
// folder's filesystem has room for: its free space and the segment files
// already there, less a twentieth left to the filesystem and its other
// users. A budget larger than the disk (the default --cache.disk-size on a
// small disk) would otherwise fill it and then fail every write, the tier
// never evicting because it is under its budget.
func (d *diskTier) fitBudget(opts Options) {
	free, ok := statFree(d.dir)
	if !ok {
		return
	}
	room := free + d.segmentFileBytes()
	limit := max(room-room/20, 2*minSegmentBytes)
	if limit >= d.budget.Load() {
		return
	}
	d.budget.Store(limit)
	o := opts
	o.DiskBytes = limit
	d.segSize = min(o.segmentBytes(), limit/2)
	d.log.Warn("cache: the disk tier's folder has room for less than its budget (--cache.disk-size); the tier uses what there is",
		"folder", d.dir, "budget", opts.DiskBytes, "room", room, "using", limit)
}

// segmentFileBytes sums the sizes of the segment files in the folder,
// finished or not.
func (d *diskTier) segmentFileBytes() int64 {
	entries, err := os.ReadDir(d.dir)
	if err != nil {
		return 0
	}
	var n int64
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), segmentPrefix) || !e.Type().IsRegular() {
			continue
		}
		if info, err := e.Info(); err == nil {
			n += info.Size()
		}
	}
	return n
}

// shrinkFull lowers the budget when the disk filled up before the tier
// reached it (another user of the disk took the room): the active segment
// is finished (or dropped, when even its footer does not fit), and the
// oldest segments are evicted until the tier holds an eighth less than it
// did, so that writes find room again.
func (d *diskTier) shrinkFull() {
	d.finishActive()
	d.mu.Lock()
	limit := max(d.bytes-d.bytes/8, 2*d.segSize)
	shrunk := limit < d.budget.Load()
	if shrunk {
		d.budget.Store(limit)
	}
	var victims []*segment
	for d.bytes > limit && len(d.order) > 1 {
		victims = append(victims, d.evictOldestLocked())
	}
	d.mu.Unlock()
	d.dispose(victims)
	if shrunk {
		d.log.Warn("cache: the disk tier's folder is full; its budget shrinks to what it holds", "folder", d.dir, "budget", limit)
	}
}

// load rebuilds the index from the finished segments in the directory,
// removes temporary and invalid files, and evicts down to the budget.
func (d *diskTier) load() error {
	entries, err := os.ReadDir(d.dir)
	if err != nil {
		return fmt.Errorf("cache: read disk tier directory: %w", err)
	}
	var ids []uint64
	for _, e := range entries {
		name := e.Name()
		path := filepath.Join(d.dir, name)
		id, ok := parseSegmentName(name)
		switch {
		case name == lockName:
		case ok && e.Type().IsRegular():
			ids = append(ids, id)
		case strings.HasPrefix(name, segmentPrefix) && e.Type().IsRegular():
			// Unfinished (a crash before the rename) or misnamed.
			d.removeFile(path, "leftover")
		default:
			d.log.Warn("cache: foreign file in disk tier directory left alone", "path", path)
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		if err := d.loadSegment(id); err != nil {
			return err
		}
		d.nextID = id + 1
	}
	var victims []*segment
	d.mu.Lock()
	for d.bytes > d.budget.Load() && len(d.order) > 0 {
		victims = append(victims, d.evictOldestLocked())
	}
	d.mu.Unlock()
	d.dispose(victims)
	return nil
}

// loadSegment opens one finished segment and indexes its records up to the
// first invalid one. A segment without a valid record is removed.
func (d *diskTier) loadSegment(id uint64) error {
	path := filepath.Join(d.dir, segmentName(id, true))
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("cache: open segment: %w", err)
	}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("cache: stat segment: %w", err)
	}
	recs, err := scanSegment(f, info.Size(), id)
	if err != nil {
		d.ctr.corruptions.Add(1)
		d.log.Warn("cache: disk tier segment damaged; keeping the records before the damage",
			"path", path, "records", len(recs), "err", err)
	}
	if len(recs) == 0 {
		f.Close()
		d.removeFile(path, "empty or invalid segment")
		return nil
	}
	seg := &segment{id: id, f: f, size: info.Size(), charged: info.Size(), sealed: true, hashes: make([]uint64, len(recs))}
	d.mu.Lock()
	defer d.mu.Unlock()
	for i, r := range recs {
		seg.hashes[i] = r.hash
		d.index[r.hash] = r.loc // later segments overwrite earlier ones
	}
	d.segs[id] = seg
	d.order = append(d.order, id)
	d.bytes += seg.charged
	return nil
}

// scannedRecord is a record found by scanSegment.
type scannedRecord struct {
	hash uint64 // of the key
	loc  diskLoc
}

// scanSegment finds the records of segment id, whose file f holds size
// bytes: from its index footer, or, when that is damaged, by reading every
// record header and key. On damage it returns the records before the damage
// and an ErrCorrupt error. Values are not read (nor checked): reads check
// them.
func scanSegment(f io.ReaderAt, size int64, id uint64) ([]scannedRecord, error) {
	if size > maxSegmentBytes {
		return nil, fmt.Errorf("segment of %d bytes: %w", size, ErrCorrupt)
	}
	var header [segmentHeaderSize]byte
	if _, err := f.ReadAt(header[:], 0); err != nil {
		return nil, fmt.Errorf("read segment header: %w (%w)", ErrCorrupt, err)
	}
	got, err := parseSegmentHeader(header[:])
	if err != nil {
		return nil, err
	}
	if got != id {
		return nil, fmt.Errorf("segment header says id %d, file name %d: %w", got, id, ErrCorrupt)
	}
	recs, footerErr := readFooter(f, size, id)
	if footerErr == nil {
		return recs, nil
	}
	recs, err = scanRecords(f, size, id)
	if err == nil {
		err = footerErr // a finished segment always has a footer
	}
	return recs, err
}

// readFooter reads and checks the index footer of a segment.
func readFooter(f io.ReaderAt, size int64, id uint64) ([]scannedRecord, error) {
	if size < segmentHeaderSize+trailerSize {
		return nil, fmt.Errorf("segment of %d bytes has no footer: %w", size, ErrCorrupt)
	}
	var trailer [trailerSize]byte
	if _, err := f.ReadAt(trailer[:], size-trailerSize); err != nil {
		return nil, fmt.Errorf("read footer: %w (%w)", ErrCorrupt, err)
	}
	start, recordsEnd, count, err := parseTrailer(trailer[:], size)
	if err != nil {
		return nil, err
	}
	footer := make([]byte, size-start)
	if _, err := f.ReadAt(footer, start); err != nil {
		return nil, fmt.Errorf("read footer: %w (%w)", ErrCorrupt, err)
	}
	return parseFooter(footer, id, recordsEnd, count)
}

// scanRecords reads the record headers and keys of a segment from the first
// record on, until the end or the first invalid header.
func scanRecords(f io.ReaderAt, size int64, id uint64) ([]scannedRecord, error) {
	buf := make([]byte, scanBufSize)
	var recs []scannedRecord
	off := int64(segmentHeaderSize)
	for off < size {
		n := int(min(int64(len(buf)), size-off))
		if _, err := f.ReadAt(buf[:n], off); err != nil {
			return recs, fmt.Errorf("read segment at %d: %w (%w)", off, ErrCorrupt, err)
		}
		// Parse what the buffer holds; the key of every record must be in it,
		// the value may run past it. scanBufSize exceeds any header and key,
		// so each pass parses at least one record or finds damage.
		p := 0
		for p+recordHeaderSize <= n {
			at := off + int64(p)
			h, err := parseRecordHeader(buf[p:n])
			if err != nil {
				return recs, fmt.Errorf("record at %d: %w", at, err)
			}
			if end := at + int64(h.size()); end > size {
				return recs, fmt.Errorf("record at %d ends at %d, past the end of the segment at %d: %w", at, end, size, ErrCorrupt)
			}
			if p+recordHeaderSize+h.keyLen > n {
				break
			}
			key := buf[p+recordHeaderSize : p+recordHeaderSize+h.keyLen]
			recs = append(recs, scannedRecord{
				hash: xxhash.Sum64(key),
				loc:  diskLoc{seg: id, off: uint32(at), size: uint32(h.size()), class: h.class},
			})
			p += h.size()
		}
		if p == 0 {
			return recs, fmt.Errorf("%d stray bytes at %d: %w", n, off, ErrCorrupt)
		}
		off += int64(p)
	}
	return recs, nil
}

// contains reports whether the index holds key's hash.
func (d *diskTier) contains(key string) bool {
	h := xxhash.Sum64String(key)
	d.mu.RLock()
	_, ok := d.index[h]
	d.mu.RUnlock()
	return ok
}

// get reads and validates key's record. The returned value is a new slice.
func (d *diskTier) get(key string) ([]byte, Class, bool) {
	h := xxhash.Sum64String(key)
	d.mu.RLock()
	loc, ok := d.index[h]
	var seg *segment
	if ok {
		seg = d.segs[loc.seg]
	}
	d.mu.RUnlock()
	if seg == nil {
		return nil, 0, false
	}
	buf := make([]byte, loc.size)
	n, err := seg.f.ReadAt(buf, int64(loc.off))
	if err != nil && n < len(buf) {
		if errors.Is(err, os.ErrClosed) {
			return nil, 0, false // evicted while we read
		}
		d.corrupt(h, loc, fmt.Errorf("read %d bytes at %d of segment %d: %w (%w)", loc.size, loc.off, loc.seg, ErrCorrupt, err))
		return nil, 0, false
	}
	k, v, class, err := decodeRecord(buf)
	if err == nil && string(k) != key {
		err = fmt.Errorf("record holds key %q: %w", k, ErrCorrupt)
	}
	if err == nil && class != loc.class {
		err = fmt.Errorf("record class %s, index says %s: %w", class, loc.class, ErrCorrupt)
	}
	if err != nil {
		d.corrupt(h, loc, fmt.Errorf("segment %d offset %d: %w", loc.seg, loc.off, err))
		return nil, 0, false
	}
	return v, class, true
}

// corrupt drops a record that failed validation from the index.
func (d *diskTier) corrupt(h uint64, loc diskLoc, err error) {
	d.mu.Lock()
	if d.index[h] == loc {
		delete(d.index, h)
	}
	d.mu.Unlock()
	d.ctr.corruptions.Add(1)
	d.log.Warn("cache: disk tier record dropped", "err", err)
}

// wants reports whether the tier would write the block: it is open, the
// record fits a segment (else the drop is counted) and the key is not
// stored yet.
func (d *diskTier) wants(key string, value []byte) bool {
	if d.closed.Load() {
		return false
	}
	if len(key) == 0 || len(key) > maxKeyLen || int64(recordSize(len(key), len(value))) > d.maxRecord() {
		d.ctr.diskDrops[dropTooLarge].Add(1)
		return false
	}
	return !d.contains(key)
}

// enqueue hands a block to the writer, or drops it when the queue is full.
func (d *diskTier) enqueue(key string, value []byte, class Class) {
	if !d.wants(key, value) {
		return
	}
	n := int64(len(value))
	if d.pending.Add(n) > d.queueBytes {
		d.pending.Add(-n)
		d.ctr.diskDrops[dropQueueFull].Add(1)
		return
	}
	select {
	case d.queue <- writeReq{key: key, value: value, class: class}:
	default:
		d.pending.Add(-n)
		d.ctr.diskDrops[dropQueueFull].Add(1)
	}
}

// enqueueWait is enqueue for a writer that would rather wait than lose the
// block: while the queue is full it waits for the queued blocks to be
// written, until ctx ends.
func (d *diskTier) enqueueWait(ctx context.Context, key string, value []byte, class Class) {
	if !d.wants(key, value) {
		return
	}
	n := int64(len(value))
	for {
		// A block larger than the whole queue goes in alone.
		if p := d.pending.Add(n); p <= d.queueBytes || p == n {
			select {
			case d.queue <- writeReq{key: key, value: value, class: class}:
				return
			case <-ctx.Done():
			case <-d.exited:
			}
			d.pending.Add(-n)
			return
		}
		d.pending.Add(-n)
		if ctx.Err() != nil || d.closed.Load() {
			return
		}
		d.flush()
	}
}

// maxRecord is the size of the largest record a segment holds.
func (d *diskTier) maxRecord() int64 {
	return d.segSize - segmentHeaderSize - int64(footerSize(1))
}

// flush waits until every block enqueued before it is written or dropped.
func (d *diskTier) flush() {
	ch := make(chan struct{})
	select {
	case d.queue <- writeReq{flushed: ch}:
	case <-d.exited:
		return
	}
	select {
	case <-ch:
	case <-d.exited:
	}
}

// close stops the writer after it has written what is queued, finishes the
// active segment and closes all files.
func (d *diskTier) close() {
	if d.closed.Swap(true) {
		return
	}
	close(d.done)
	<-d.exited
	d.closeFiles()
}

func (d *diskTier) closeFiles() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, seg := range d.segs {
		seg.f.Close()
	}
	d.lock.Close()
}

func (d *diskTier) run() {
	defer close(d.exited)
	for {
		select {
		case req := <-d.queue:
			d.handle(req)
		case <-d.done:
			for {
				select {
				case req := <-d.queue:
					d.handle(req)
				default:
					d.finishActive()
					return
				}
			}
		}
	}
}

func (d *diskTier) handle(req writeReq) {
	if req.flushed != nil {
		close(req.flushed)
		return
	}
	d.pending.Add(-int64(len(req.value)))
	if err := d.write(req.key, req.value, req.class); err != nil {
		d.ctr.diskDrops[dropError].Add(1)
		if errors.Is(err, syscall.ENOSPC) {
			d.shrinkFull()
		}
		if !d.errorLogged {
			d.log.Error("cache: disk tier write failed; further failures are only counted until one succeeds", "err", err)
			d.errorLogged = true
		}
		return
	}
	d.errorLogged = false
}

// write appends one record to the active segment, starting a new segment and
// evicting the oldest ones as needed.
func (d *diskTier) write(key string, value []byte, class Class) error {
	h := xxhash.Sum64String(key)
	d.mu.RLock()
	_, dup := d.index[h]
	d.mu.RUnlock()
	if dup {
		return nil
	}
	n := int64(recordSize(len(key), len(value)))
	// A record is charged its footer entry too, so that sealing never takes
	// a segment past segSize or the tier past its budget.
	charge := n + footerEntrySize
	if d.active != nil && d.active.charged+charge > d.segSize {
		d.seal()
	}
	if d.active == nil {
		if err := d.startSegment(); err != nil {
			return err
		}
	}
	var victims []*segment
	d.mu.Lock()
	for d.bytes+charge > d.budget.Load() && len(d.order) > 1 {
		victims = append(victims, d.evictOldestLocked())
	}
	d.mu.Unlock()
	d.dispose(victims)

	seg := d.active
	// The value is written from where it lies: copied into d.buf, the
	// largest value (a whole table, several MiB) stayed allocated.
	d.buf = appendRecordHead(d.buf[:0], key, value, class)
	if _, err := writeAt(seg.f, d.buf, seg.size); err != nil {
		return fmt.Errorf("cache: write segment %d: %w", seg.id, err)
	}
	if _, err := writeAt(seg.f, value, seg.size+int64(len(d.buf))); err != nil {
		return fmt.Errorf("cache: write segment %d: %w", seg.id, err)
	}
	seg.wb.Wrote(seg.f, seg.size+n)
	loc := diskLoc{seg: seg.id, off: uint32(seg.size), size: uint32(n), class: class}
	seg.locs = append(seg.locs, loc)
	d.mu.Lock()
	d.index[h] = loc
	seg.hashes = append(seg.hashes, h)
	seg.size += n
	seg.charged += charge
	d.bytes += charge
	d.mu.Unlock()
	d.ctr.diskWrites.Add(1)
	return nil
}

func (d *diskTier) startSegment() error {
	id := d.nextID
	d.nextID++
	path := filepath.Join(d.dir, segmentName(id, false))
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("cache: create segment: %w", err)
	}
	if _, err := writeAt(f, appendSegmentHeader(nil, id), 0); err != nil {
		f.Close()
		os.Remove(path)
		return fmt.Errorf("cache: write segment header: %w", err)
	}
	seg := &segment{id: id, f: f, size: segmentHeaderSize, charged: segmentHeaderSize + trailerSize}
	d.mu.Lock()
	d.segs[id] = seg
	d.order = append(d.order, id)
	d.bytes += seg.charged
	d.mu.Unlock()
	d.active = seg
	return nil
}

// seal writes the active segment's index footer and gives it its final name.
// An active segment that cannot be finished is dropped: it would be lost on
// restart anyway.
func (d *diskTier) seal() {
	seg := d.active
	d.active = nil
	recs := make([]scannedRecord, len(seg.locs))
	for i, loc := range seg.locs {
		recs[i] = scannedRecord{hash: seg.hashes[i], loc: loc}
	}
	seg.locs = nil
	d.buf = appendFooter(d.buf[:0], recs, uint32(seg.size))
	_, err := writeAt(seg.f, d.buf, seg.size)
	if err == nil {
		seg.size += int64(len(d.buf))
		tmp := filepath.Join(d.dir, segmentName(seg.id, false))
		err = os.Rename(tmp, filepath.Join(d.dir, segmentName(seg.id, true)))
	}
	if err != nil {
		d.log.Error("cache: finish disk tier segment", "err", err)
		d.mu.Lock()
		d.removeLocked(seg)
		d.mu.Unlock()
		d.dispose([]*segment{seg})
		return
	}
	d.mu.Lock()
	seg.sealed = true
	d.mu.Unlock()
}

// finishActive seals the active segment, or removes it when it holds nothing.
func (d *diskTier) finishActive() {
	seg := d.active
	if seg == nil {
		return
	}
	if len(seg.hashes) > 0 {
		d.seal()
		return
	}
	d.active = nil
	d.mu.Lock()
	d.removeLocked(seg)
	d.mu.Unlock()
	d.dispose([]*segment{seg})
}

// evictOldestLocked takes the oldest segment out of the tier and returns it
// for dispose.
func (d *diskTier) evictOldestLocked() *segment {
	seg := d.segs[d.order[0]]
	d.ctr.evictions[tierDisk].Add(uint64(d.removeLocked(seg)))
	return seg
}

// removeLocked takes seg out of the index and segment list and returns how
// many index entries pointed to it.
func (d *diskTier) removeLocked(seg *segment) int {
	dropped := 0
	for _, h := range seg.hashes {
		if loc, ok := d.index[h]; ok && loc.seg == seg.id {
			delete(d.index, h)
			dropped++
		}
	}
	delete(d.segs, seg.id)
	if i := slices.Index(d.order, seg.id); i >= 0 {
		d.order = slices.Delete(d.order, i, i+1)
	}
	d.bytes -= seg.charged
	return dropped
}

// dispose closes and deletes segments already taken out of the tier. Readers
// that still hold one see a closed file and miss.
func (d *diskTier) dispose(segs []*segment) {
	for _, seg := range segs {
		seg.f.Close()
		d.removeFile(filepath.Join(d.dir, segmentName(seg.id, seg.sealed)), "evicted")
	}
}

func (d *diskTier) removeFile(path, why string) {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		d.log.Warn("cache: remove disk tier file", "path", path, "reason", why, "err", err)
	}
}

func (d *diskTier) stats() tierUsage {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return tierUsage{bytes: d.bytes, entries: int64(len(d.index))}
}
