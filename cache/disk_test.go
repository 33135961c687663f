package cache

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/shaledb/shale/internal/writeback"
)

// segmentFiles lists the finished segment files of a disk tier directory.
func segmentFiles(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, segmentPrefix+"*"+segmentSuffix))
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// fillAndClose writes n blocks through a cache with a disk tier and closes it.
func fillAndClose(t *testing.T, o Options, n, size int) {
	t.Helper()
	c, err := New(o, Components{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		class := ClassData
		if i%4 == 0 {
			class = ClassMeta
		}
		c.Set(testKey(i), testValue(i, size), class)
	}
	c.Flush()
	if s := c.Stats(); s.DiskWrites != uint64(n) {
		t.Fatalf("%d disk writes, want %d (drops %d)", s.DiskWrites, n, s.DiskWriteDrops)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestDiskTierSurvivesRestart(t *testing.T) {
	o := diskOptions(t)
	const n = 200
	fillAndClose(t, o, n, 1000)
	if len(segmentFiles(t, o.DiskPath)) == 0 {
		t.Fatal("no segment files after Close")
	}

	c := newTestCache(t, o)
	if s := c.Stats(); s.Disk.Entries != n {
		t.Fatalf("reopened disk tier indexes %d blocks, want %d", s.Disk.Entries, n)
	}
	for i := range n {
		class := ClassData
		if i%4 == 0 {
			class = ClassMeta
		}
		v, err := c.GetOrLoad(context.Background(), testKey(i), class, loadFails(t, testKey(i)))
		if err != nil || !bytes.Equal(v, testValue(i, 1000)) {
			t.Fatalf("block %d after restart: err %v, right bytes %v", i, err, bytes.Equal(v, testValue(i, 1000)))
		}
	}
	s := c.Stats()
	if s.Disk.Hits != n || s.Loads != 0 {
		t.Fatalf("disk hits %d loads %d, want %d and 0", s.Disk.Hits, s.Loads, n)
	}
	// Promoted: the second read is a RAM hit, with the class the block was stored with.
	for i := range n {
		if _, ok := c.mem.get(testKey(i), map[bool]Class{true: ClassMeta, false: ClassData}[i%4 == 0]); !ok {
			t.Fatalf("block %d not promoted to RAM in its class", i)
		}
	}
	// Nothing already on disk is written again.
	c.Set(testKey(0), testValue(0, 1000), ClassMeta)
	c.Flush()
	if s := c.Stats(); s.DiskWrites != 0 {
		t.Fatalf("%d disk writes of blocks the disk tier held", s.DiskWrites)
	}
}

func TestDiskTierBudgetAndFIFOEviction(t *testing.T) {
	o := diskOptions(t)
	o.MemoryBytes = 64 << 10
	o.DiskBytes = 256 << 10
	o.DiskSegmentBytes = 16 << 10
	c := newTestCache(t, o)
	const n = 300 // about 1.2 MiB through a 256 KiB tier
	for i := range n {
		c.Set(testKey(i), testValue(i, 4000), ClassData)
		if i%50 == 49 {
			c.Flush() // keep the queue from dropping
		}
	}
	c.Flush()
	s := c.Stats()
	if s.DiskWriteDrops != 0 || s.DiskWrites != n {
		t.Fatalf("writes %d drops %d, want %d and 0", s.DiskWrites, s.DiskWriteDrops, n)
	}
	if s.Disk.Bytes > o.DiskBytes {
		t.Errorf("disk tier charges %d bytes, budget %d", s.Disk.Bytes, o.DiskBytes)
	}
	var onDisk int64
	entries, _ := os.ReadDir(o.DiskPath)
	for _, e := range entries {
		info, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		onDisk += info.Size()
	}
	// The active segment is charged for its footer before it has one.
	if onDisk > s.Disk.Bytes || s.Disk.Bytes-onDisk > int64(footerSize(int(o.DiskSegmentBytes/4000))) {
		t.Errorf("files hold %d bytes, tier charges %d", onDisk, s.Disk.Bytes)
	}
	if s.Disk.Evictions == 0 || s.Disk.Entries+int64(s.Disk.Evictions) != n {
		t.Errorf("entries %d + evictions %d, want %d", s.Disk.Entries, s.Disk.Evictions, n)
	}
	// FIFO: the newest blocks are there, the oldest are gone.
	if _, _, ok := c.disk.get(testKey(0)); ok {
		t.Error("oldest block still on disk")
	}
	for i := n - 40; i < n; i++ {
		v, _, ok := c.disk.get(testKey(i))
		if !ok || !bytes.Equal(v, testValue(i, 4000)) {
			t.Fatalf("recent block %d: hit %v", i, ok)
		}
	}
}

func TestDiskTierDropsWrites(t *testing.T) {
	t.Run("queue bytes full", func(t *testing.T) {
		o := diskOptions(t)
		o.DiskWriteQueueBytes = 100
		c := newTestCache(t, o)
		for i := range 10 {
			c.Set(testKey(i), testValue(i, 500), ClassData)
		}
		c.Flush()
		if s := c.Stats(); s.DiskWriteDrops != 10 || s.DiskWrites != 0 {
			t.Fatalf("drops %d writes %d, want 10 and 0", s.DiskWriteDrops, s.DiskWrites)
		}
		mustGet(t, c, testKey(3), testValue(3, 500)) // RAM has it all the same
	})
	t.Run("block larger than a segment", func(t *testing.T) {
		o := diskOptions(t)
		o.DiskSegmentBytes = 16 << 10
		c := newTestCache(t, o)
		c.Set("big", make([]byte, 16<<10), ClassData)
		c.Set("small", make([]byte, 1<<10), ClassData)
		c.Flush()
		if s := c.Stats(); s.DiskWriteDrops != 1 || s.DiskWrites != 1 {
			t.Fatalf("drops %d writes %d, want 1 and 1", s.DiskWriteDrops, s.DiskWrites)
		}
	})
}

// TestDiskTierCorruption damages the files of a closed disk tier in many ways
// and checks that a reopened cache misses the damaged blocks, serves the rest,
// and never returns wrong bytes.
func TestDiskTierCorruption(t *testing.T) {
	const n = 10
	const size = 300
	recordOffset := func(t *testing.T, seg []byte, i int) int {
		t.Helper()
		at := bytes.Index(seg, []byte(testKey(i)))
		if at < recordHeaderSize {
			t.Fatalf("key %d not found in segment", i)
		}
		return at - recordHeaderSize
	}
	tests := []struct {
		name string
		// damage edits the directory; it returns the blocks that must miss.
		damage          func(t *testing.T, dir, seg string) []int
		wantCorruptions bool
	}{
		{"flipped value byte", func(t *testing.T, dir, seg string) []int {
			editFile(t, seg, func(b []byte) []byte {
				b[recordOffset(t, b, 3)+recordHeaderSize+len(testKey(3))+17] ^= 0x01
				return b
			})
			return []int{3}
		}, true},
		{"flipped key byte", func(t *testing.T, dir, seg string) []int {
			editFile(t, seg, func(b []byte) []byte {
				b[recordOffset(t, b, 5)+recordHeaderSize+2] ^= 0x40
				return b
			})
			return []int{5}
		}, true},
		{"flipped length", func(t *testing.T, dir, seg string) []int {
			editFile(t, seg, func(b []byte) []byte {
				b[recordOffset(t, b, 6)+8] ^= 0x01 // value length
				return b
			})
			return []int{6}
		}, true},
		{"flipped length, damaged footer", func(t *testing.T, dir, seg string) []int {
			editFile(t, seg, func(b []byte) []byte {
				b[recordOffset(t, b, 6)+8] ^= 0x01
				b[len(b)-1] ^= 0x01 // the scan of records misreads every one after 6
				return b
			})
			return []int{6, 7, 8, 9}
		}, true},
		{"damaged footer", func(t *testing.T, dir, seg string) []int {
			editFile(t, seg, func(b []byte) []byte { b[len(b)-trailerSize-3] ^= 0x01; return b })
			return nil // found by reading the records instead
		}, true},
		{"footer cut off", func(t *testing.T, dir, seg string) []int {
			editFile(t, seg, func(b []byte) []byte {
				return b[:recordOffset(t, b, 9)+recordSize(len(testKey(9)), len(testValue(9, size)))]
			})
			return nil
		}, true},
		{"truncated inside the last value", func(t *testing.T, dir, seg string) []int {
			editFile(t, seg, func(b []byte) []byte { return b[:recordOffset(t, b, 9)+recordHeaderSize+len(testKey(9))+10] })
			return []int{9}
		}, true},
		{"truncated inside a header", func(t *testing.T, dir, seg string) []int {
			editFile(t, seg, func(b []byte) []byte { return b[:recordOffset(t, b, 8)+5] })
			return []int{8, 9}
		}, true},
		{"truncated to nothing", func(t *testing.T, dir, seg string) []int {
			editFile(t, seg, func(b []byte) []byte { return nil })
			return []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}
		}, true},
		{"damaged segment header", func(t *testing.T, dir, seg string) []int {
			editFile(t, seg, func(b []byte) []byte { b[2] ^= 0xff; return b })
			return []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}
		}, true},
		{"segment renamed to another id", func(t *testing.T, dir, seg string) []int {
			if err := os.Rename(seg, filepath.Join(dir, segmentName(99, true))); err != nil {
				t.Fatal(err)
			}
			return []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}
		}, true},
		{"garbage segment file", func(t *testing.T, dir, seg string) []int {
			garbage := bytes.Repeat([]byte("garbage!"), 1000)
			if err := os.WriteFile(filepath.Join(dir, segmentName(1000, true)), garbage, 0o644); err != nil {
				t.Fatal(err)
			}
			return nil
		}, true},
		{"record of another key in place", func(t *testing.T, dir, seg string) []int {
			// A valid record, checksum and all, whose key differs from the one
			// the block was written under, in the place of block 4.
			editFile(t, seg, func(b []byte) []byte {
				at := recordOffset(t, b, 4)
				other := appendRecord(nil, testKey(4)[:len(testKey(4))-1]+"X", testValue(4, size), ClassData)
				copy(b[at:], other)
				return b
			})
			return []int{4}
		}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := diskOptions(t)
			fillAndClose(t, o, n, size)
			segs := segmentFiles(t, o.DiskPath)
			if len(segs) != 1 {
				t.Fatalf("%d segment files, want 1", len(segs))
			}
			missing := tt.damage(t, o.DiskPath, segs[0])

			c := newTestCache(t, o)
			checkBlocks(t, c, n, size, missing)
			if got := c.Stats().DiskCorruptions > 0; got != tt.wantCorruptions {
				t.Errorf("corruptions counted: %v, want %v", got, tt.wantCorruptions)
			}
			// A damaged block reads as a miss again, without a second report.
			before := c.Stats().DiskCorruptions
			checkBlocks(t, c, n, size, missing)
			if after := c.Stats().DiskCorruptions; after != before {
				t.Errorf("corruptions went from %d to %d on the second read", before, after)
			}
			// Invalid segment files are gone from the directory.
			for _, f := range segmentFiles(t, o.DiskPath) {
				if filepath.Base(f) == segmentName(1000, true) || filepath.Base(f) == segmentName(99, true) {
					t.Errorf("invalid segment %s kept", f)
				}
			}
		})
	}
}

// checkBlocks reads blocks 0..n-1 from disk: the missing ones must miss, the
// others hit, and every hit must be the right bytes.
func checkBlocks(t *testing.T, c *Tiered, n, size int, missing []int) {
	t.Helper()
	for i := range n {
		v, _, ok := c.disk.get(testKey(i))
		if ok && !bytes.Equal(v, testValue(i, size)) {
			t.Fatalf("block %d: wrong bytes from disk", i)
		}
		wantMiss := contains(missing, i)
		if ok == wantMiss {
			t.Errorf("block %d: hit %v, want %v", i, ok, !wantMiss)
		}
	}
}

func contains(s []int, x int) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}

func editFile(t *testing.T, path string, edit func([]byte) []byte) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, edit(b), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestDiskTierDamageWhileOpen damages records under a running cache: reads
// validate the bytes they get, not just the index built on open.
func TestDiskTierDamageWhileOpen(t *testing.T) {
	const n, size = 10, 300
	tests := []struct {
		name   string
		damage func(t *testing.T, seg string)
	}{
		{"flipped value byte", func(t *testing.T, seg string) {
			editInPlace(t, seg, func(b []byte) { b[bytes.Index(b, []byte(testKey(4)))+40] ^= 0x10 })
		}},
		{"record of another key", func(t *testing.T, seg string) {
			editInPlace(t, seg, func(b []byte) {
				at := bytes.Index(b, []byte(testKey(4))) - recordHeaderSize
				// Same length, valid checksum, the key of block 5.
				k5 := testKey(5)
				rec := appendRecord(nil, k5, testValue(4, size)[:len(testValue(4, size))-(len(k5)-len(testKey(4)))], ClassData)
				copy(b[at:], rec)
			})
		}},
		{"truncated", func(t *testing.T, seg string) {
			b, err := os.ReadFile(seg)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(seg, int64(bytes.Index(b, []byte(testKey(4)))+5)); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := diskOptions(t)
			fillAndClose(t, o, n, size)
			c := newTestCache(t, o)
			tt.damage(t, segmentFiles(t, o.DiskPath)[0])
			v, ok := c.Get(testKey(4))
			if ok {
				t.Fatalf("damaged block 4 hit: %d bytes", len(v))
			}
			if c.Stats().DiskCorruptions != 1 {
				t.Fatalf("corruptions %d, want 1", c.Stats().DiskCorruptions)
			}
			mustGet(t, c, testKey(3), testValue(3, size))
		})
	}
}

func editInPlace(t *testing.T, path string, edit func([]byte)) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	edit(b)
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, 0); err != nil {
		t.Fatal(err)
	}
}

func TestDiskTierOpenCleansDirectory(t *testing.T) {
	o := diskOptions(t)
	fillAndClose(t, o, 5, 100)
	write := func(name string, b []byte) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(o.DiskPath, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(segmentName(77, false), appendSegmentHeader(nil, 77)) // unfinished segment
	write("seg-zz.seg", []byte("misnamed"))
	write("seg-000000000000004d.seg", nil) // empty
	write("README", []byte("not the cache's"))

	c := newTestCache(t, o)
	for i := range 5 {
		mustGet(t, c, testKey(i), testValue(i, 100))
	}
	for _, name := range []string{segmentName(77, false), "seg-zz.seg", "seg-000000000000004d.seg"} {
		if _, err := os.Stat(filepath.Join(o.DiskPath, name)); !os.IsNotExist(err) {
			t.Errorf("%s: stat err %v, want removed", name, err)
		}
	}
	if _, err := os.Stat(filepath.Join(o.DiskPath, "README")); err != nil {
		t.Errorf("foreign file removed: %v", err)
	}
}

func TestDiskTierShrunkBudgetOnOpen(t *testing.T) {
	o := diskOptions(t)
	o.DiskBytes = 512 << 10
	o.DiskSegmentBytes = 16 << 10
	fillAndClose(t, o, 100, 4000)
	o.DiskBytes = 128 << 10
	c := newTestCache(t, o)
	s := c.Stats()
	if s.Disk.Bytes > o.DiskBytes || s.Disk.Entries == 0 {
		t.Fatalf("reopened with a smaller budget: %d bytes in %d blocks, budget %d", s.Disk.Bytes, s.Disk.Entries, o.DiskBytes)
	}
	mustGet(t, c, testKey(99), testValue(99, 4000))
	if _, ok := c.Get(testKey(0)); ok {
		t.Fatal("oldest block kept over budget")
	}
}

func TestDiskTierDirectoryLocked(t *testing.T) {
	o := diskOptions(t)
	c := newTestCache(t, o)
	if _, err := New(o, Components{}); err == nil {
		t.Fatal("a second cache opened a disk tier directory in use")
	}
	c.Close()
	c2, err := New(o, Components{})
	if err != nil {
		t.Fatalf("reopen after Close: %v", err)
	}
	c2.Close()
}

// TestDiskTierWriteErrors takes the directory away under a running cache:
// writes fail, are counted and logged, and the cache keeps serving.
func TestDiskTierWriteErrors(t *testing.T) {
	o := diskOptions(t)
	c := newTestCache(t, o)
	if err := os.RemoveAll(o.DiskPath); err != nil {
		t.Fatal(err)
	}
	c.Set("k1", []byte("v1"), ClassData)
	c.Set("k2", []byte("v2"), ClassData)
	c.Flush()
	s := c.Stats()
	if s.DiskWrites != 0 || c.ctr.diskDrops[dropError].Load() != 2 {
		t.Fatalf("writes %d, error drops %d; want 0 and 2", s.DiskWrites, c.ctr.diskDrops[dropError].Load())
	}
	mustGet(t, c, "k1", []byte("v1"))
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestDiskTierCloseAfterDirectoryRemoved(t *testing.T) {
	o := diskOptions(t)
	c := newTestCache(t, o)
	c.Set("k1", []byte("v1"), ClassData) // starts the active segment
	c.Flush()
	if err := os.RemoveAll(o.DiskPath); err != nil {
		t.Fatal(err)
	}
	c.Set("k2", []byte("v2"), ClassData) // the open file takes it
	c.Flush()
	if v, _, ok := c.disk.get("k2"); !ok || string(v) != "v2" {
		t.Fatalf("read from the unlinked active segment: %q %v", v, ok)
	}
	if err := c.Close(); err != nil { // finishing the segment fails: logged, dropped
		t.Fatal(err)
	}
	if s := c.Stats(); s.Disk.Entries != 0 {
		t.Fatalf("%d blocks indexed after the segment was dropped", s.Disk.Entries)
	}
}

// withDisk makes the disk tier's files live on a disk of capacity bytes for
// the rest of the test: statFree tells what is free when known is set, and
// writes that would take the folder's files past capacity fail with ENOSPC.
func withDisk(t *testing.T, dir string, capacity int64, known bool) {
	t.Helper()
	used := func() int64 {
		var n int64
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if info, err := e.Info(); err == nil && info.Mode().IsRegular() {
				n += info.Size()
			}
		}
		return n
	}
	oldWrite, oldFree := writeAt, statFree
	t.Cleanup(func() { writeAt, statFree = oldWrite, oldFree })
	writeAt = func(f *os.File, b []byte, off int64) (int, error) {
		info, err := f.Stat()
		if err != nil {
			return 0, err
		}
		if grow := off + int64(len(b)) - info.Size(); grow > 0 && used()+grow > capacity {
			return 0, &os.PathError{Op: "write", Path: f.Name(), Err: syscall.ENOSPC}
		}
		return f.WriteAt(b, off)
	}
	statFree = func(string) (int64, bool) { return capacity - used(), known }
}

// A budget larger than the disk: the tier uses what the disk has room for,
// known at open, and keeps writing, evicting its oldest segments.
func TestDiskTierBudgetFitsTheDisk(t *testing.T) {
	o := diskOptions(t)
	o.DiskBytes = 16 << 30 // the default, on a disk of 300 KiB
	withDisk(t, o.DiskPath, 300<<10, true)
	c := newTestCache(t, o)
	if b := c.Stats().Disk.Budget; b > 300<<10 || b < 200<<10 {
		t.Fatalf("budget %d on a disk of %d bytes", b, 300<<10)
	}
	const n, size = 300, 4000
	for i := range n {
		c.Set(testKey(i), testValue(i, size), ClassData)
		c.Flush()
	}
	s := c.Stats()
	if drops := c.ctr.diskDrops[dropError].Load(); drops != 0 || s.DiskWrites != n {
		t.Fatalf("%d writes, %d failed; want all %d written", s.DiskWrites, drops, n)
	}
	if s.Disk.Bytes > s.Disk.Budget {
		t.Errorf("%d bytes over the budget of %d", s.Disk.Bytes, s.Disk.Budget)
	}
	mustGet(t, c, testKey(n-1), testValue(n-1, size))
}

// A disk that fills up under the tier (its room unknown at open, or taken
// by another user): writes that fail for want of room shrink the budget and
// evict the oldest segments, and later writes find room again.
func TestDiskTierDiskFull(t *testing.T) {
	o := diskOptions(t)
	o.DiskBytes = 16 << 20
	o.DiskSegmentBytes = 32 << 10
	withDisk(t, o.DiskPath, 300<<10, false)
	c := newTestCache(t, o)
	const n, size = 300, 4000 // 1.2 MB on a disk of 300 KiB
	for i := range n {
		c.Set(testKey(i), testValue(i, size), ClassData)
		c.Flush()
	}
	s := c.Stats()
	if s.Disk.Budget >= o.DiskBytes {
		t.Errorf("budget %d after the disk filled, want less than %d", s.Disk.Budget, o.DiskBytes)
	}
	// Without the shrink, every write after the first 75 or so fails.
	if s.DiskWrites < n*3/4 {
		t.Errorf("%d of %d writes made (%d failed): the tier did not make room", s.DiskWrites, n, c.ctr.diskDrops[dropError].Load())
	}
	mustGet(t, c, testKey(n-1), testValue(n-1, size))
}

// TestDiskTierStartsWriteback: the writeback of a segment's bytes is started
// as they are written, every whole writeback.Chunk, not left to the kernel.
func TestDiskTierStartsWriteback(t *testing.T) {
	o := diskOptions(t)
	o.DiskBytes = 64 << 20
	o.DiskSegmentBytes = 16 << 20
	c := newTestCache(t, o)
	const size = 3 << 19 // 1.5 MiB
	for i := range 3 {
		c.Set(testKey(i), testValue(i, size), ClassData)
	}
	c.Flush()
	if s := c.Stats(); s.DiskWrites != 3 {
		t.Fatalf("%d disk writes, want 3 (drops %d)", s.DiskWrites, s.DiskWriteDrops)
	}
	seg := c.disk.active
	if want := seg.size / writeback.Chunk * writeback.Chunk; want < 4<<20 || seg.wb.Started() != want {
		t.Fatalf("segment of %d bytes: writeback started for %d, want %d", seg.size, seg.wb.Started(), want)
	}
}
