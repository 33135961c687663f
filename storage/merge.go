package storage

import (
	"encoding/binary"
	"fmt"

	"github.com/shaledb/shale/gorilla"
	"github.com/shaledb/shale/index"
	"github.com/shaledb/shale/storage/lsm"
)

// mergeValues is the LSM merge operator of the time-series engine. Sample
// blocks merge by time (the newer operand wins on equal timestamps);
// postings merge by union; anything else keeps the newest operand.
// operands are oldest first; existing is nil when there is no base value.
func mergeValues(key, existing []byte, operands [][]byte) ([]byte, error) {
	if len(key) >= 10 && key[0] == keyPart {
		switch key[9] {
		case subSamples:
			blocks := make([][]byte, 0, len(operands)+1)
			if len(existing) > 0 {
				blocks = append(blocks, existing)
			}
			for _, op := range operands {
				if len(op) > 0 {
					blocks = append(blocks, op)
				}
			}
			if len(blocks) == 1 {
				return append([]byte(nil), blocks[0]...), nil
			}
			out, err := gorilla.MergeAll(nil, blocks...)
			if err != nil {
				return nil, fmt.Errorf("merge sample blocks of key %x: %w", key, err)
			}
			return out, nil
		case subPostings, subAll:
			return index.MergePostings(nil, existing, operands)
		}
	}
	if len(operands) == 0 {
		return existing, nil
	}
	return operands[len(operands)-1], nil
}

// sampleFrames marks a value read from the LSM that holds several sample
// blocks of one key unmerged (readMergeValues): no gorilla block starts with
// this byte.
//
//	frames := 0xfe count(uvarint) (len(uvarint) block)*   blocks oldest first
const sampleFrames = 0xfe

// readMergeValues is the LSM merge operator of reads. Sample blocks are
// framed together instead of merged: the querier merges them while decoding
// (gorilla.Iterator.ResetMerge), so a read right after ingest, before
// compaction has merged a key's operands, does not decode and re-encode
// them first. Other keys merge as mergeValues does.
func readMergeValues(key, existing []byte, operands [][]byte) ([]byte, error) {
	if !isSampleKey(key) {
		return mergeValues(key, existing, operands)
	}
	n := 0
	if len(existing) > 0 {
		n++
	}
	for _, op := range operands {
		if len(op) > 0 {
			n++
		}
	}
	if n <= 1 {
		return mergeValues(key, existing, operands)
	}
	return frameSampleBlocks(n, existing, operands), nil
}

// scanMergeValues is readMergeValues for a scan of sample keys whose
// iterator owns the operands (lsm.Iterator.SetMerge): a lone block is
// returned as it is rather than copied, and no block at all gives an empty
// value. Empty operands are blocks a value filter left out.
func scanMergeValues(key, existing []byte, operands [][]byte) ([]byte, error) {
	if !isSampleKey(key) {
		return readMergeValues(key, existing, operands)
	}
	n, last := 0, existing
	if len(existing) > 0 {
		n++
	}
	for _, op := range operands {
		if len(op) > 0 {
			n, last = n+1, op
		}
	}
	if n <= 1 {
		return last, nil
	}
	return frameSampleBlocks(n, existing, operands), nil
}

// sampleInterval maps a merge operand of a sample key, one block, to the
// time range of its samples (lsm.Components.OperandInterval), so that a
// scan of a short range skips the table blocks of the head flushes that
// wrote other times. Anything else is not mapped, and read.
func sampleInterval(key, v []byte) (lsm.Interval, bool) {
	if !isSampleKey(key) || len(v) == 0 || v[0] == sampleFrames {
		return lsm.Interval{}, false
	}
	m, err := gorilla.ReadMeta(v)
	if err != nil || m.Count == 0 {
		return lsm.Interval{}, false
	}
	return lsm.Interval{Lo: m.MinTime, Hi: m.MaxTime}, true
}

func isSampleKey(key []byte) bool {
	return len(key) >= 10 && key[0] == keyPart && key[9] == subSamples
}

// frameSampleBlocks frames the n non-empty blocks of existing and operands,
// oldest first.
func frameSampleBlocks(n int, existing []byte, operands [][]byte) []byte {
	size := len(existing) + binary.MaxVarintLen32
	for _, op := range operands {
		size += len(op) + binary.MaxVarintLen32
	}
	out := make([]byte, 0, 1+binary.MaxVarintLen32+size)
	out = append(out, sampleFrames)
	out = binary.AppendUvarint(out, uint64(n))
	frame := func(blk []byte) {
		if len(blk) > 0 {
			out = binary.AppendUvarint(out, uint64(len(blk)))
			out = append(out, blk...)
		}
	}
	frame(existing)
	for _, op := range operands {
		frame(op)
	}
	return out
}

// sampleBlocks calls fn with each block of a sample value read from the
// LSM, oldest first: the value itself, or the blocks readMergeValues framed.
// The blocks alias v.
func sampleBlocks(v []byte, fn func(blk []byte) error) error {
	if len(v) == 0 || v[0] != sampleFrames {
		return fn(v)
	}
	b := v[1:]
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)) {
		return fmt.Errorf("%w: bad frame count", gorilla.ErrCorrupt)
	}
	b = b[k:]
	for i := uint64(0); i < n; i++ {
		l, k := binary.Uvarint(b)
		if k <= 0 || l > uint64(len(b)-k) {
			return fmt.Errorf("%w: bad frame %d", gorilla.ErrCorrupt, i)
		}
		if err := fn(b[k : k+int(l)]); err != nil {
			return err
		}
		b = b[k+int(l):]
	}
	if len(b) != 0 {
		return fmt.Errorf("%w: %d bytes after the frames", gorilla.ErrCorrupt, len(b))
	}
	return nil
}

// sampleBlockCount returns how many blocks sampleBlocks finds in v, or a
// guess if v is corrupt.
func sampleBlockCount(v []byte) int {
	if len(v) == 0 || v[0] != sampleFrames {
		return 1
	}
	n, k := binary.Uvarint(v[1:])
	if k <= 0 || n > uint64(len(v)) {
		return 1
	}
	return int(n)
}

// mergedSampleValue returns a sample value read from the LSM as one block.
func mergedSampleValue(v []byte) ([]byte, error) {
	if len(v) == 0 || v[0] != sampleFrames {
		return v, nil
	}
	var blks [][]byte
	if err := sampleBlocks(v, func(blk []byte) error {
		blks = append(blks, blk)
		return nil
	}); err != nil {
		return nil, err
	}
	return gorilla.MergeAll(nil, blks...)
}
