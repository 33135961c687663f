package lsm

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// paths owns every object name the LSM uses under its prefix:
//
//	<prefix>/manifest/<id:020d>.manifest
//	<prefix>/wal/<id:020d>.wal
//	<prefix>/sst/<table id>.sst
//	<prefix>/readers/<reader id>     lease of a live reader (empty object)
//	<prefix>/probe/<table id>        a writer's check of create-if-absent puts, deleted at once
//
// With an empty prefix the names start at "manifest/", "wal/", "sst/" and
// "readers/".
type paths struct{ root string }

func newPaths(prefix string) paths {
	prefix = strings.Trim(prefix, "/")
	if prefix == "" {
		return paths{}
	}
	return paths{root: prefix + "/"}
}

func (p paths) manifestDir() string    { return p.root + "manifest/" }
func (p paths) walDir() string         { return p.root + "wal/" }
func (p paths) sstDir() string         { return p.root + "sst/" }
func (p paths) readersDir() string     { return p.root + "readers/" }
func (p paths) lease(id string) string { return p.readersDir() + id }
func (p paths) writerLease() string    { return p.root + "writer" }
func (p paths) probe(id string) string { return p.root + "probe/" + id }

func (p paths) manifest(id uint64) string {
	return fmt.Sprintf("%s%020d.manifest", p.manifestDir(), id)
}
func (p paths) wal(id uint64) string { return fmt.Sprintf("%s%020d.wal", p.walDir(), id) }
func (p paths) sst(id string) string { return p.sstDir() + id + ".sst" }

// parseID extracts the numeric id of a manifest or WAL object name.
func parseID(name, dir, suffix string) (uint64, bool) {
	s, ok := strings.CutPrefix(name, dir)
	if !ok {
		return 0, false
	}
	s, ok = strings.CutSuffix(s, suffix)
	if !ok || len(s) != 20 {
		return 0, false
	}
	id, err := strconv.ParseUint(s, 10, 64)
	return id, err == nil
}

func (p paths) parseManifest(name string) (uint64, bool) {
	return parseID(name, p.manifestDir(), ".manifest")
}
func (p paths) parseWAL(name string) (uint64, bool) { return parseID(name, p.walDir(), ".wal") }

func (p paths) parseSST(name string) (string, bool) {
	s, ok := strings.CutPrefix(name, p.sstDir())
	if !ok {
		return "", false
	}
	s, ok = strings.CutSuffix(s, ".sst")
	return s, ok && validTableID(s)
}

// newTableID returns a fresh table id: creation time in ms and 64 random
// bits, hex, so ids never repeat and sort roughly by age.
func newTableID(now time.Time) string {
	var b [16]byte
	ms := uint64(now.UnixMilli())
	for i := 0; i < 8; i++ {
		b[i] = byte(ms >> (56 - 8*i))
	}
	_, _ = rand.Read(b[8:])
	return hex.EncodeToString(b[:])
}

func validTableID(id string) bool {
	if len(id) != 32 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
