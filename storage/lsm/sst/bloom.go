package sst

import (
	"math"

	"github.com/cespare/xxhash/v2"
)

// The filter is a standard bloom filter over whole keys. A key's 64-bit
// xxHash (XXH64, seed 0) h gives k probes by double hashing:
//
//	delta := h>>33 | h<<31   // h rotated right by 33
//	for i := 0; i < k; i++ { set bit h % m; h += delta }
//
// Filter block content: the m/8 bytes of the bit array (bit i is
// byte i/8, mask 1<<(i%8)), then k as one byte, then the filter version
// byte (1).

const filterVersion = 1

func bloomHash(key []byte) uint64 { return xxhash.Sum64(key) }

// bloomProbes is the number of probes k for a given bits-per-key, near the
// optimum bitsPerKey*ln 2.
func bloomProbes(bitsPerKey int) int {
	k := int(math.Round(float64(bitsPerKey) * math.Ln2))
	return min(max(k, 1), 30)
}

// appendFilter appends the filter block content for the key hashes to dst.
func appendFilter(dst []byte, hashes []uint64, bitsPerKey int) []byte {
	nbits := uint64(len(hashes)) * uint64(bitsPerKey)
	nbits = max((nbits+63)/64*64, 64)
	start := len(dst)
	dst = append(dst, make([]byte, nbits/8)...)
	bitsArr := dst[start:]
	k := bloomProbes(bitsPerKey)
	for _, h := range hashes {
		delta := h>>33 | h<<31
		for range k {
			bit := h % nbits
			bitsArr[bit/8] |= 1 << (bit % 8)
			h += delta
		}
	}
	return append(dst, byte(k), filterVersion)
}

// bloomFilter is a decoded filter block.
type bloomFilter struct {
	bits  []byte
	nbits uint64
	k     int
}

func decodeFilter(content []byte) (bloomFilter, error) {
	if len(content) < 2+8 || (len(content)-2)%8 != 0 {
		return bloomFilter{}, corruptf("filter block of %d bytes", len(content))
	}
	if v := content[len(content)-1]; v != filterVersion {
		return bloomFilter{}, corruptf("unknown filter version %d", v)
	}
	k := int(content[len(content)-2])
	if k < 1 || k > 30 {
		return bloomFilter{}, corruptf("filter with %d probes", k)
	}
	bits := content[:len(content)-2]
	return bloomFilter{bits: bits, nbits: uint64(len(bits)) * 8, k: k}, nil
}

func (f *bloomFilter) mayContain(h uint64) bool {
	delta := h>>33 | h<<31
	for range f.k {
		bit := h % f.nbits
		if f.bits[bit/8]&(1<<(bit%8)) == 0 {
			return false
		}
		h += delta
	}
	return true
}
