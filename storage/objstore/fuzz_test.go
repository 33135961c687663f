package objstore

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
)

// go test -run '^$' -fuzz FuzzClampRange ./storage/objstore/
func FuzzClampRange(f *testing.F) {
	f.Add(int64(100), int64(10), int64(20))
	f.Add(int64(0), int64(0), int64(-1))
	f.Add(int64(5), int64(5), int64(1))
	f.Fuzz(func(t *testing.T, size, off, length int64) {
		if size < 0 {
			return
		}
		start, end, err := clampRange("x", size, off, length)
		valid := off >= 0 && (off < size || (size == 0 && off == 0))
		if (err == nil) != valid {
			t.Fatalf("clampRange(%d, %d, %d) err = %v", size, off, length, err)
		}
		if err != nil {
			return
		}
		if start != off || end < start || end > size {
			t.Fatalf("clampRange(%d, %d, %d) = [%d, %d)", size, off, length, start, end)
		}
		if length >= 0 && end-start != min(length, size-off) {
			t.Fatalf("clampRange(%d, %d, %d) = [%d, %d): wrong length", size, off, length, start, end)
		}
		if length < 0 && end != size {
			t.Fatalf("clampRange(%d, %d, %d) = [%d, %d): not to the end", size, off, length, start, end)
		}
	})
}

// The stored ETag is bytes from the disk: anything but Put's own form is refused.
func FuzzValidETag(f *testing.F) {
	f.Add([]byte(contentETag([]byte("x"))))
	f.Add([]byte(`"short"`))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		etag, ok := validETag(b)
		if ok && (etag != string(b) || len(etag) != 34 || etag[0] != '"' || etag[33] != '"') {
			t.Fatalf("accepted %q as %q", b, etag)
		}
	})
}

// Any set of names lists from the filesystem in the byte order a sorted
// flat listing has, page by page.
//
// go test -run '^$' -fuzz FuzzFilesystemList ./storage/objstore/
func FuzzFilesystemList(f *testing.F) {
	f.Add([]byte("a/b\na-b\na0\na.b/c\n"), "a", uint8(2))
	f.Add([]byte("x\ny/z\n\u00e9\nA\n"), "", uint8(1))
	f.Fuzz(func(t *testing.T, data []byte, prefix string, limit uint8) {
		ctx := context.Background()
		b, err := NewFilesystemBucket(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, line := range bytes.Split(data, []byte("\n")) {
			n := string(line)
			if checkFSName(n) != nil || slices.ContainsFunc(names, func(o string) bool {
				return o == n || strings.HasPrefix(o, n+"/") || strings.HasPrefix(n, o+"/")
			}) {
				continue
			}
			if _, err := PutBytes(ctx, b, n, nil, PutOptions{}); err != nil {
				continue // e.g. a path element too long for the filesystem
			}
			names = append(names, n)
		}
		var want []string
		for _, n := range names {
			if strings.HasPrefix(n, prefix) {
				want = append(want, n)
			}
		}
		slices.Sort(want)
		var got []string
		after := ""
		for range len(want) + 2 {
			page, err := b.List(ctx, prefix, after, int(limit))
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, attrNames(page.Objects)...)
			if !page.More {
				break
			}
			after = page.Objects[len(page.Objects)-1].Name
		}
		if !slices.Equal(got, want) {
			t.Fatalf("prefix %q limit %d:\n got %q\nwant %q", prefix, limit, got, want)
		}
	})
}
