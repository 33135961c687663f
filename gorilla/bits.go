package gorilla

import "encoding/binary"

// bitWriter appends bits, most significant first, to a byte slice. Pending
// bits wait right-aligned in acc until 64 of them can be flushed at once.
type bitWriter struct {
	buf []byte
	acc uint64
	n   uint // pending bits in acc, 0..63
}

// write appends the low nb bits of v, nb in 0..64.
func (w *bitWriter) write(v uint64, nb uint) {
	if nb < 64 {
		v &= 1<<nb - 1
	}
	free := 64 - w.n
	if nb < free {
		w.acc = w.acc<<nb | v
		w.n += nb
		return
	}
	rest := nb - free
	w.acc = w.acc<<free | v>>rest // acc<<64 is 0 when nothing is pending
	w.buf = binary.BigEndian.AppendUint64(w.buf, w.acc)
	w.acc = v & (1<<rest - 1)
	w.n = rest
}

// bits is the number of bits written so far.
func (w *bitWriter) bits() int { return len(w.buf)*8 + int(w.n) }

// finish flushes the pending bits, the last byte padded with zero bits, and
// returns the buffer.
func (w *bitWriter) finish() []byte {
	w.buf = w.appendTail(w.buf)
	w.acc, w.n = 0, 0
	return w.buf
}

func (w *bitWriter) appendTail(dst []byte) []byte {
	if w.n > 0 {
		tail := w.acc << (64 - w.n)
		for i := uint(0); i < (w.n+7)/8; i++ {
			dst = append(dst, byte(tail>>(56-8*i)))
		}
	}
	return dst
}

// appendTo appends all bits written so far to dst, the last byte padded with
// zero bits, without changing the writer.
func (w *bitWriter) appendTo(dst []byte) []byte {
	return w.appendTail(append(dst, w.buf...))
}

// readPad is the number of zero bytes a bitReader needs after the data.
// Decoders check for overrun once per sample (or per sparse event), after
// having read at most maxStepBits bits, and every peek loads 8 bytes.
const readPad = (maxStepBits+7)/8 + 8 + 8

// maxStepBits bounds the bits read between two overrun checks: two residuals
// of a sparse event, or a timestamp and a value of the appender stream.
const maxStepBits = 2 * (3 + 64 + 2 + 5 + 6 + 64)

// bitReader reads bits most significant first from data, which must end in
// readPad zero bytes beyond the end bits of real data.
type bitReader struct {
	data []byte
	pos  uint
	end  uint
}

// peek returns the next 57 or more bits, left-aligned.
func (r *bitReader) peek() uint64 {
	return binary.BigEndian.Uint64(r.data[r.pos>>3:]) << (r.pos & 7)
}

// read returns the next nb bits, nb in 0..64.
func (r *bitReader) read(nb uint) uint64 {
	if nb <= 56 {
		v := r.peek() >> (64 - nb) // a shift by 64 yields 0
		r.pos += nb
		return v
	}
	hi := r.peek() >> 32
	r.pos += 32
	lo := r.peek() >> (96 - nb)
	r.pos += nb - 32
	return hi<<(nb-32) | lo
}

func (r *bitReader) overrun() bool { return r.pos > r.end }

// padded copies b into scratch followed by readPad zero bytes.
func padded(scratch, b []byte) []byte {
	scratch = append(scratch[:0], b...)
	var zero [readPad]byte
	return append(scratch, zero[:]...)
}
