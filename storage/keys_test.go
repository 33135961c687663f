package storage

import "testing"

// TestFlushSplit checks where the LSM starts a new L0 table: at each change
// of key kind, and within a partition's keys at each change of partition or
// sub-kind, never between keys of one region.
func TestFlushSplit(t *testing.T) {
	const p1, p2 = int64(7_200_000), int64(14_400_000)
	for _, c := range []struct {
		name      string
		prev, key []byte
		want      bool
	}{
		{"forward entries of one partition", forwardKey(p1, 1), forwardKey(p1, 70_000), false},
		{"sample blocks of one partition", samplesKey(p1, 3), samplesKey(p1, 4), false},
		{"postings of one partition", postingsKey(p1, "job", "a"), postingsKey(p1, "job", "b"), false},
		{"forward entries, then sample blocks", forwardKey(p1, 9), samplesKey(p1, 0), true},
		{"an old partition's blocks, then a new one's forward entries", samplesKey(p1, 9), forwardKey(p2, 0), true},
		{"registry, then a partition", registryKey(p2), partSub(p1, subAll, 0), true},
		{"two registry entries", registryKey(p1), registryKey(p2), false},
		{"settings, then the registry", []byte{keySettings}, registryKey(p1), true},
		{"a short key of kind P, then a partition's key", []byte{keyPart}, forwardKey(p1, 0), true},
	} {
		if got := flushSplit(c.prev, c.key); got != c.want {
			t.Errorf("%s: flushSplit(%x, %x) = %v, want %v", c.name, c.prev, c.key, got, c.want)
		}
	}
}
