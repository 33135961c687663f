package storage

import (
	"encoding/binary"
	"fmt"
)

// The key layout of the time-series engine in the LSM. docs/format/storage.md
// draws it; this file is the one place that builds or parses keys.
//
//	'C'                              engine settings fixed with the data -> settings
//	'R' part(8)                      partition registry entry -> partitionMeta
//	'P' part(8) 'F' ref(4)           forward index: series ref -> labels
//	'P' part(8) 'L' name 0x00 value  postings of a label pair (closed partitions)
//	'P' part(8) 'N' name             label name present in the partition
//	'P' part(8) 'X'                  all series refs of the partition
//	'P' part(8) 'S' ref(4)           sample block of one series (merge: union)
//	'P' part(8) 'M' family           metadata of a metric family received then
//	'P' part(8) 'T' chunk(4)         newest sample time of refs chunk*1024.. (seriestimes.go)
//
// part is the partition's start time in ms, big-endian with the sign bit
// flipped so that byte order is time order.
const (
	keySettings = 'C'
	keyRegistry = 'R'
	keyPart     = 'P'

	subForward  = 'F'
	subPostings = 'L'
	subNames    = 'N'
	subAll      = 'X'
	subSamples  = 'S'
	subMetadata = 'M'
	subTimes    = 'T'
)

// regionLen is the length of key's region: its kind, and for a
// partition's key the partition and the sub-kind. The LSM starts a new L0
// table where the region changes (flushSplit).
func regionLen(key []byte) int {
	if len(key) >= 10 && key[0] == keyPart {
		return 10
	}
	return min(len(key), 1)
}

// flushSplit is the LSM's Components.FlushSplit: a memtable flush puts each
// region in tables of its own. At a partition boundary every series is
// recorded again in the new partition while head flushes write the old
// one's blocks; split, the new partition's series entries (written in ref
// order) land in tables that overlap no other, and compactions move them
// instead of rewriting them with the blocks.
func flushSplit(prev, key []byte) bool {
	n := regionLen(key)
	return n != regionLen(prev) || string(prev[:n]) != string(key[:n])
}

func putPart(dst []byte, part int64) []byte {
	return binary.BigEndian.AppendUint64(dst, uint64(part)^(1<<63))
}

func getPart(b []byte) int64 { return int64(binary.BigEndian.Uint64(b) ^ (1 << 63)) }

func registryKey(part int64) []byte { return putPart([]byte{keyRegistry}, part) }

func partPrefix(part int64) []byte { return putPart([]byte{keyPart}, part) }

func partSub(part int64, sub byte, extra int) []byte {
	k := make([]byte, 0, 10+extra)
	k = append(k, keyPart)
	k = putPart(k, part)
	return append(k, sub)
}

func forwardKey(part int64, ref uint32) []byte {
	return binary.BigEndian.AppendUint32(partSub(part, subForward, 4), ref)
}

func samplesKey(part int64, ref uint32) []byte {
	return binary.BigEndian.AppendUint32(partSub(part, subSamples, 4), ref)
}

func timesKey(part int64, chunk uint32) []byte {
	return binary.BigEndian.AppendUint32(partSub(part, subTimes, 4), chunk)
}

func postingsKey(part int64, name, value string) []byte {
	k := partSub(part, subPostings, len(name)+1+len(value))
	k = append(k, name...)
	k = append(k, 0)
	return append(k, value...)
}

func postingsNamePrefix(part int64, name string) []byte {
	k := partSub(part, subPostings, len(name)+1)
	k = append(k, name...)
	return append(k, 0)
}

func nameKey(part int64, name string) []byte {
	return append(partSub(part, subNames, len(name)), name...)
}

func allSeriesKey(part int64) []byte { return partSub(part, subAll, 0) }

// prefixEnd returns the smallest key greater than every key with prefix p,
// or nil if there is none.
func prefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] != 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// parseRef returns the series ref at the end of a forward or samples key.
func parseRef(key []byte) (uint32, error) {
	if len(key) != 14 {
		return 0, fmt.Errorf("series key %x: want 14 bytes", key)
	}
	return binary.BigEndian.Uint32(key[10:]), nil
}
