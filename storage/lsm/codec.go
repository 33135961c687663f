package lsm

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"github.com/shaledb/shale/corrupt"
)

// ErrCorrupt marks an object (manifest or WAL) whose bytes cannot be
// decoded: bad magic, bad checksum, truncated or malformed. It wraps
// corrupt.Err.
var ErrCorrupt = corrupt.New("lsm: corrupt object")

var crcTable = crc32.MakeTable(crc32.Castagnoli)

const (
	// walMagic names the WAL format. SHW3 adds the writer's epoch after
	// the magic; SHW2 objects (no epoch, read as epoch 0) are still read.
	// SHW2 dropped the expire-at varint that every SHW1 record carried;
	// nothing was released with SHW1, so its objects are refused like any
	// other bad magic.
	walMagic      = "SHW3"
	walMagicV2    = "SHW2"
	manifestMagic = "SHM1"
	manifestFmtV1 = 1
	// manifestFmtV2 adds the log position after the range tombstones.
	manifestFmtV2 = 2
)

// kindLog marks a WAL record that only the WAL holds: a record of the
// caller's own log (DB.Log), never put in a memtable or table. Its seq and
// key are zero; its value is the record.
const kindLog kind = 5

func corruptf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrCorrupt}, args...)...)
}

// appendWALRecord appends one WAL record (see docs/format/lsm.md).
func appendWALRecord(dst []byte, e *entry) []byte {
	dst = append(dst, byte(e.kind))
	dst = binary.AppendUvarint(dst, e.seq)
	dst = appendBytes(dst, e.key)
	return appendBytes(dst, e.value)
}

// appendBytes appends b with its length before it, as decoder.bytes reads it.
func appendBytes(dst, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

// appendWALHeader starts a WAL object written by the writer of epoch.
func appendWALHeader(dst []byte, epoch uint64) []byte {
	return binary.AppendUvarint(append(dst, walMagic...), epoch)
}

// finishWAL appends the checksum of everything in obj and returns it.
func finishWAL(obj []byte) []byte {
	return binary.LittleEndian.AppendUint32(obj, crc32.Checksum(obj, crcTable))
}

// decodeWAL checks a whole WAL object, appends its records to dst and
// returns the epoch of its writer (0 for SHW2 objects). The entries alias
// data.
func decodeWAL(data []byte, dst []entry) (uint64, []entry, error) {
	if len(data) < len(walMagic)+4 {
		return 0, dst, corruptf("wal object too short (%d bytes)", len(data))
	}
	magic := string(data[:len(walMagic)])
	if magic != walMagic && magic != walMagicV2 {
		if string(data[:3]) == walMagic[:3] {
			return 0, dst, corruptf("wal object of format %q, written by an older, unreleased build of Shale; this one reads %q and %q: start from an empty bucket or prefix", magic, walMagic, walMagicV2)
		}
		return 0, dst, corruptf("wal object has bad magic %q", magic)
	}
	body := data[:len(data)-4]
	if got, want := crc32.Checksum(body, crcTable), binary.LittleEndian.Uint32(data[len(data)-4:]); got != want {
		return 0, dst, corruptf("wal checksum mismatch: computed %08x, stored %08x", got, want)
	}
	d := decoder{b: body[len(walMagic):]}
	var epoch uint64
	if magic == walMagic {
		if epoch = d.uvarint(); d.err != nil {
			return 0, dst, fmt.Errorf("wal header: %w", d.err)
		}
	}
	ents, err := decodeWALRecords(&d, dst)
	return epoch, ents, err
}

func decodeWALRecords(d *decoder, dst []entry) ([]entry, error) {
	for len(d.b) > 0 {
		var e entry
		e.kind = kind(d.byte())
		e.seq = d.uvarint()
		e.key = d.bytes()
		e.value = d.bytes()
		if d.err != nil {
			return dst, fmt.Errorf("wal record %d: %w", len(dst), d.err)
		}
		if e.kind < kindPut || e.kind > kindLog {
			return dst, corruptf("wal record %d has unknown kind %d", len(dst), e.kind)
		}
		dst = append(dst, e)
	}
	return dst, nil
}

// decoder reads varint-framed fields, remembering the first error.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = corruptf("truncated or malformed %s", what)
	}
	d.b = nil
}

func (d *decoder) byte() byte {
	if len(d.b) < 1 {
		d.fail("byte")
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("uvarint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.fail("length-prefixed bytes")
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

// count reads an element count and rejects counts that cannot fit in the
// remaining bytes (each element takes at least minSize bytes).
func (d *decoder) count(minSize int) int {
	n := d.uvarint()
	if d.err != nil {
		return 0
	}
	if n > uint64(len(d.b)/minSize) {
		d.fail("count")
		return 0
	}
	return int(n)
}

// tableMeta is what the manifest records of one SST: enough to pick tables
// for a read or a compaction without opening them.
type tableMeta struct {
	ID          string // object name suffix: sst/<ID>.sst
	Size        int64
	NumEntries  uint64
	SmallestKey []byte
	LargestKey  []byte
	MinSeq      uint64
	MaxSeq      uint64
	// MetaSize is the size of the table's meta region (filter, index,
	// footer), so that opening it takes one ranged read.
	MetaSize int64
}

// sortedRun is a list of tables with disjoint key ranges, sorted by key.
type sortedRun struct {
	ID     uint64
	Tables []tableMeta
}

func (r *sortedRun) size() int64 {
	var s int64
	for i := range r.Tables {
		s += r.Tables[i].Size
	}
	return s
}

// manifest is one decoded manifest version.
type manifest struct {
	WriterEpoch uint64
	// LastSeq is the largest sequence number stored in any table or tombstone
	// of this manifest.
	LastSeq uint64
	// ReplayAfter is the last WAL id whose contents are all in tables: a
	// writer or reader replays only WAL objects with larger ids.
	ReplayAfter uint64
	// LogAfter is the last WAL id whose log records (DB.Log) are no longer
	// needed (DB.TruncateLog). WAL objects with larger ids are kept even
	// when their writes are in tables.
	LogAfter  uint64
	NextRunID uint64
	L0        []tableMeta // newest first
	Runs      []sortedRun // newest first
	Tombs     []rangeTomb // in seq order
}

// walKeepAfter is the last WAL id this manifest needs no longer: neither
// for its writes nor for its log records.
func (m *manifest) walKeepAfter() uint64 { return min(m.ReplayAfter, m.LogAfter) }

func (m *manifest) clone() *manifest {
	c := *m
	c.L0 = append([]tableMeta(nil), m.L0...)
	c.Runs = append([]sortedRun(nil), m.Runs...)
	c.Tombs = append([]rangeTomb(nil), m.Tombs...)
	return &c
}

// tableIDs returns the set of tables m references.
func (m *manifest) tableIDs() map[string]bool {
	ids := make(map[string]bool, len(m.L0))
	for i := range m.L0 {
		ids[m.L0[i].ID] = true
	}
	for _, r := range m.Runs {
		for i := range r.Tables {
			ids[r.Tables[i].ID] = true
		}
	}
	return ids
}

func appendTableMeta(dst []byte, t *tableMeta) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(t.ID)))
	dst = append(dst, t.ID...)
	dst = binary.AppendUvarint(dst, uint64(t.Size))
	dst = binary.AppendUvarint(dst, t.NumEntries)
	dst = appendBytes(dst, t.SmallestKey)
	dst = appendBytes(dst, t.LargestKey)
	dst = binary.AppendUvarint(dst, t.MinSeq)
	dst = binary.AppendUvarint(dst, t.MaxSeq)
	dst = binary.AppendUvarint(dst, uint64(t.MetaSize))
	return dst
}

func (d *decoder) tableMeta() tableMeta {
	var t tableMeta
	t.ID = string(d.bytes())
	t.Size = int64(d.uvarint())
	t.NumEntries = d.uvarint()
	t.SmallestKey = d.bytes()
	t.LargestKey = d.bytes()
	t.MinSeq = d.uvarint()
	t.MaxSeq = d.uvarint()
	t.MetaSize = int64(d.uvarint())
	if d.err == nil && (t.ID == "" || t.Size < 0 || t.MetaSize < 0 || t.MetaSize > t.Size || !validTableID(t.ID)) {
		d.fail("table id or size")
	}
	return t
}

// appendManifest encodes m (see docs/format/lsm.md).
func appendManifest(dst []byte, m *manifest) []byte {
	start := len(dst)
	dst = append(dst, manifestMagic...)
	dst = binary.AppendUvarint(dst, manifestFmtV2)
	dst = binary.AppendUvarint(dst, m.WriterEpoch)
	dst = binary.AppendUvarint(dst, m.LastSeq)
	dst = binary.AppendUvarint(dst, m.ReplayAfter)
	dst = binary.AppendUvarint(dst, m.NextRunID)
	dst = appendTableMetas(dst, m.L0)
	dst = binary.AppendUvarint(dst, uint64(len(m.Runs)))
	for i := range m.Runs {
		r := &m.Runs[i]
		dst = binary.AppendUvarint(dst, r.ID)
		dst = appendTableMetas(dst, r.Tables)
	}
	dst = binary.AppendUvarint(dst, uint64(len(m.Tombs)))
	for i := range m.Tombs {
		t := &m.Tombs[i]
		dst = binary.AppendUvarint(dst, t.seq)
		dst = appendBytes(dst, t.start)
		dst = appendBytes(dst, t.end)
	}
	dst = binary.AppendUvarint(dst, m.LogAfter)
	return binary.LittleEndian.AppendUint32(dst, crc32.Checksum(dst[start:], crcTable))
}

// appendTableMetas appends the count of ts, then each of them.
func appendTableMetas(dst []byte, ts []tableMeta) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(ts)))
	for i := range ts {
		dst = appendTableMeta(dst, &ts[i])
	}
	return dst
}

// decodeManifest decodes and checks one manifest object. The result aliases
// data.
func decodeManifest(data []byte) (*manifest, error) {
	if len(data) < len(manifestMagic)+4 {
		return nil, corruptf("manifest too short (%d bytes)", len(data))
	}
	if string(data[:len(manifestMagic)]) != manifestMagic {
		return nil, corruptf("manifest has bad magic %q", data[:len(manifestMagic)])
	}
	body := data[:len(data)-4]
	if got, want := crc32.Checksum(body, crcTable), binary.LittleEndian.Uint32(data[len(data)-4:]); got != want {
		return nil, corruptf("manifest checksum mismatch: computed %08x, stored %08x", got, want)
	}
	d := decoder{b: body[len(manifestMagic):]}
	version := d.uvarint()
	if d.err == nil && version != manifestFmtV1 && version != manifestFmtV2 {
		return nil, corruptf("unknown manifest format version %d", version)
	}
	m := &manifest{}
	m.WriterEpoch = d.uvarint()
	m.LastSeq = d.uvarint()
	m.ReplayAfter = d.uvarint()
	m.NextRunID = d.uvarint()
	const minTable = 8
	if n := d.count(minTable); n > 0 {
		m.L0 = make([]tableMeta, 0, n)
		for i := 0; i < n && d.err == nil; i++ {
			m.L0 = append(m.L0, d.tableMeta())
		}
	}
	if n := d.count(2); n > 0 {
		m.Runs = make([]sortedRun, 0, n)
		for i := 0; i < n && d.err == nil; i++ {
			r := sortedRun{ID: d.uvarint()}
			nt := d.count(minTable)
			r.Tables = make([]tableMeta, 0, nt)
			for j := 0; j < nt && d.err == nil; j++ {
				r.Tables = append(r.Tables, d.tableMeta())
			}
			m.Runs = append(m.Runs, r)
		}
	}
	if n := d.count(3); n > 0 {
		m.Tombs = make([]rangeTomb, 0, n)
		for i := 0; i < n && d.err == nil; i++ {
			var t rangeTomb
			t.seq = d.uvarint()
			t.start = d.bytes()
			t.end = d.bytes()
			m.Tombs = append(m.Tombs, t)
		}
	}
	if version >= manifestFmtV2 {
		m.LogAfter = d.uvarint()
	} else {
		m.LogAfter = m.ReplayAfter // no log records before version 2
	}
	if d.err != nil {
		return nil, fmt.Errorf("decode manifest: %w", d.err)
	}
	if len(d.b) != 0 {
		return nil, corruptf("manifest has %d trailing bytes", len(d.b))
	}
	return m, nil
}
