package lsm

import (
	"bytes"
	"fmt"
)

// Batch collects writes applied atomically by DB.Write: they get
// consecutive sequence numbers, land in one WAL object and become visible
// together. A Batch copies what it is given and may be reused after Reset.
type Batch struct {
	ops   []batchOp
	buf   []byte
	bytes int
}

type batchOp struct {
	kind       kind
	key, value [2]int // offsets into buf: [start, end)
}

// NewBatch returns an empty batch with room for ops operations of n key and
// value bytes in all, for a caller that knows its size.
func NewBatch(ops, n int) *Batch {
	return &Batch{buf: make([]byte, 0, n), ops: make([]batchOp, 0, ops)}
}

func (b *Batch) add(k kind, key, value []byte) {
	op := batchOp{kind: k}
	op.key = [2]int{len(b.buf), len(b.buf) + len(key)}
	b.buf = append(b.buf, key...)
	op.value = [2]int{len(b.buf), len(b.buf) + len(value)}
	b.buf = append(b.buf, value...)
	b.ops = append(b.ops, op)
	b.bytes += len(key) + len(value)
}

// Put sets key to value.
func (b *Batch) Put(key, value []byte) { b.add(kindPut, key, value) }

// Delete removes key.
func (b *Batch) Delete(key []byte) { b.add(kindDelete, key, nil) }

// Merge records operand for key; reads combine it with the key's older value
// through the DB's MergeOperator.
func (b *Batch) Merge(key, operand []byte) { b.add(kindMerge, key, operand) }

// DeleteRange removes every key in [start, end).
func (b *Batch) DeleteRange(start, end []byte) { b.add(kindRangeDelete, start, end) }

// Len returns the number of writes in the batch.
func (b *Batch) Len() int { return len(b.ops) }

// Reset empties the batch, keeping its memory.
func (b *Batch) Reset() {
	b.ops = b.ops[:0]
	b.buf = b.buf[:0]
	b.bytes = 0
}

func (b *Batch) validate(haveMerge bool) error {
	for i := range b.ops {
		op := &b.ops[i]
		key := b.buf[op.key[0]:op.key[1]]
		switch op.kind {
		case kindMerge:
			if !haveMerge {
				return ErrNoMergeOperator
			}
		case kindRangeDelete:
			end := b.buf[op.value[0]:op.value[1]]
			if bytes.Compare(key, end) >= 0 {
				return fmt.Errorf("lsm: delete range [%q, %q) is empty", key, end)
			}
		}
	}
	return nil
}

// entry returns write i with the given sequence number; key and value alias
// the batch.
func (b *Batch) entry(i int, seq uint64) entry {
	op := &b.ops[i]
	return entry{
		kind:  op.kind,
		seq:   seq,
		key:   b.buf[op.key[0]:op.key[1]:op.key[1]],
		value: b.buf[op.value[0]:op.value[1]:op.value[1]],
	}
}
