package objstore

import (
	"bytes"
	"context"
	"crypto/md5"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shaledb/shale/internal/fsync"
	"github.com/shaledb/shale/internal/writeback"
)

func newFS(t *testing.T) *FilesystemBucket {
	t.Helper()
	b, err := NewFilesystemBucket(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// tempFiles returns the temporary files left anywhere under dir.
func tempFiles(t *testing.T, dir string) []string {
	t.Helper()
	var found []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(d.Name(), TempFilePrefix) {
			found = append(found, p)
		}
		return nil
	})
	return found
}

// The ordered walk must list exactly what a sorted flat listing does, for
// any prefix, start and page size.
func TestFilesystemListMatchesSortedNames(t *testing.T) {
	ctx := t.Context()
	b := newFS(t)
	mem := NewMemoryBucket()
	rng := rand.New(rand.NewPCG(3, 4))
	alphabet := []string{"a", "b", "-", ".", "!", "0", "~", "/", "\u00e9"}
	var names []string
	for len(names) < 150 {
		var sb strings.Builder
		for range 1 + rng.IntN(7) {
			sb.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		n := sb.String()
		if validateName(n) != nil {
			continue
		}
		// A filesystem cannot hold both "x" and "x/y".
		if slices.ContainsFunc(names, func(o string) bool {
			return o == n || strings.HasPrefix(o, n+"/") || strings.HasPrefix(n, o+"/")
		}) {
			continue
		}
		names = append(names, n)
		for _, bk := range []Bucket{b, mem} {
			if _, err := PutBytes(ctx, bk, n, []byte(n), PutOptions{}); err != nil {
				t.Fatalf("put %q: %v", n, err)
			}
		}
	}
	probes := []string{""}
	for range 60 {
		n := names[rng.IntN(len(names))]
		probes = append(probes, n, n[:rng.IntN(len(n)+1)])
	}
	for _, prefix := range probes {
		for _, after := range []string{"", probes[rng.IntN(len(probes))], prefix + "/", prefix + "0"} {
			limit := []int{0, 1, 3, 50}[rng.IntN(4)]
			for {
				got, err := b.List(ctx, prefix, after, limit)
				if err != nil {
					t.Fatal(err)
				}
				want, _ := mem.List(ctx, prefix, after, limit)
				if limit == 0 {
					want, _ = mem.List(ctx, prefix, after, filesystemPageSize)
				}
				if !slices.Equal(attrNames(got.Objects), attrNames(want.Objects)) || got.More != want.More {
					t.Fatalf("list %q after %q limit %d:\n got %q %v\nwant %q %v", prefix, after, limit,
						attrNames(got.Objects), got.More, attrNames(want.Objects), want.More)
				}
				if !got.More {
					break
				}
				after = got.Objects[len(got.Objects)-1].Name
			}
		}
	}
}

func attrNames(as []Attributes) []string {
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = a.Name
	}
	return out
}

func TestFilesystemTempFiles(t *testing.T) {
	ctx := t.Context()
	b := newFS(t)
	PutBytes(ctx, b, "d/obj", []byte("x"), PutOptions{})
	// What a crash between create and rename leaves behind.
	for _, p := range []string{TempFilePrefix + "123", "d/" + TempFilePrefix + "456"} {
		if err := os.WriteFile(filepath.Join(b.Dir(), p), []byte("partial"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Get(ctx, p); !IsNotFound(err) {
			t.Fatalf("get of temporary file %s: %v", p, err)
		}
		if _, err := PutBytes(ctx, b, p, []byte("x"), PutOptions{}); err == nil {
			t.Fatalf("put of reserved name %s succeeded", p)
		}
	}
	page, err := b.List(ctx, "", "", 0)
	if err != nil || !slices.Equal(attrNames(page.Objects), []string{"d/obj"}) {
		t.Fatalf("list = %q, %v", attrNames(page.Objects), err)
	}

	// Young temporary files may belong to a running write and stay.
	if n, err := b.RemoveTempFiles(ctx, time.Hour); err != nil || n != 0 {
		t.Fatalf("removed %d young files, %v", n, err)
	}
	old := time.Now().Add(-2 * time.Hour)
	os.Chtimes(filepath.Join(b.Dir(), TempFilePrefix+"123"), old, old)
	if n, err := b.RemoveTempFiles(ctx, time.Hour); err != nil || n != 1 {
		t.Fatalf("removed %d, %v; want the one old file", n, err)
	}
	if n, err := b.RemoveTempFiles(ctx, 0); err != nil || n != 1 {
		t.Fatalf("removed %d, %v; want the last one", n, err)
	}
	if left := tempFiles(t, b.Dir()); len(left) > 0 {
		t.Fatalf("left %q", left)
	}
	if got, _ := ReadAll(ctx, b, "d/obj"); string(got) != "x" {
		t.Fatalf("object touched: %q", got)
	}
}

func TestFilesystemNoTempFilesLeft(t *testing.T) {
	ctx := t.Context()
	b := newFS(t)
	a, _ := PutBytes(ctx, b, "d/obj", []byte("v1"), PutOptions{})
	PutBytes(ctx, b, "d/obj", []byte("v2"), PutOptions{IfAbsent: true})
	PutBytes(ctx, b, "d/obj", []byte("v2"), PutOptions{IfMatch: `"stale"`})
	PutBytes(ctx, b, "d/obj", []byte("v2"), PutOptions{IfMatch: a.ETag})
	b.Put(ctx, "d/failed", strings.NewReader("short"), 10, PutOptions{})
	PutBytes(ctx, b, "d/new", []byte("v1"), PutOptions{IfAbsent: true})
	if left := tempFiles(t, b.Dir()); len(left) > 0 {
		t.Fatalf("temporary files left: %q", left)
	}
}

func TestFilesystemDeleteRemovesEmptyDirs(t *testing.T) {
	ctx := t.Context()
	b := newFS(t)
	PutBytes(ctx, b, "a/b/c/d", []byte("x"), PutOptions{})
	PutBytes(ctx, b, "a/keep", []byte("x"), PutOptions{})
	if err := b.Delete(ctx, "a/b/c/d"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(b.Dir(), "a", "b")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("empty directory a/b left: %v", err)
	}
	if err := b.Delete(ctx, "a/keep"); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(b.Dir())
	if err != nil || len(entries) != 0 {
		t.Fatalf("root holds %v, %v", entries, err)
	}
	// The root itself stays.
	if _, err := PutBytes(ctx, b, "x", []byte("x"), PutOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestFilesystemNameConflicts(t *testing.T) {
	ctx := t.Context()
	b := newFS(t)
	PutBytes(ctx, b, "a/b", []byte("file"), PutOptions{})
	for _, tc := range []struct {
		name string
		opts PutOptions
	}{
		{"a/b/c", PutOptions{}},
		{"a/b/c", PutOptions{IfAbsent: true}},
		{"a", PutOptions{}},
		{"a", PutOptions{IfAbsent: true}},
	} {
		_, err := PutBytes(ctx, b, tc.name, []byte("x"), tc.opts)
		if err == nil || IsPreconditionFailed(err) || IsTransient(err) {
			t.Errorf("put %s %+v: err = %v, want a plain error", tc.name, tc.opts, err)
		}
	}
	if err := b.Delete(ctx, "a"); err != nil {
		t.Fatalf("delete of a directory name: %v", err)
	}
	if got, _ := ReadAll(ctx, b, "a/b"); string(got) != "file" {
		t.Fatalf("a/b = %q", got)
	}
}

// Readers see the old or the new content in full, never a mix.
func TestFilesystemAtomicOverwrite(t *testing.T) {
	ctx := t.Context()
	b := newFS(t)
	versions := [][]byte{bytes.Repeat([]byte("A"), 256<<10), bytes.Repeat([]byte("B"), 128<<10)}
	PutBytes(ctx, b, "obj", versions[0], PutOptions{})
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	wg.Go(func() {
		for i := range 40 {
			if _, err := PutBytes(ctx, b, "obj", versions[i%2], PutOptions{}); err != nil {
				errs <- err
				return
			}
		}
	})
	for range 3 {
		wg.Go(func() {
			for range 40 {
				got, err := ReadAll(ctx, b, "obj")
				if err != nil {
					errs <- err
					return
				}
				if !bytes.Equal(got, versions[0]) && !bytes.Equal(got, versions[1]) {
					errs <- fmt.Errorf("read %d bytes that are neither version", len(got))
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func TestFilesystemReopen(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nested", "bucket")
	b, err := NewFilesystemBucket(dir)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := PutBytes(context.Background(), b, "k", []byte("durable"), PutOptions{})
	b.Close()
	b2, err := NewFilesystemBucket(dir)
	if err != nil {
		t.Fatal(err)
	}
	got, err := b2.Attributes(context.Background(), "k")
	if err != nil || got.ETag != a.ETag || got.Size != 7 {
		t.Fatalf("after reopen %+v, %v; put returned %+v", got, err, a)
	}
	if _, err := NewFilesystemBucket(filepath.Join(dir, "k")); err == nil {
		t.Fatal("a file opened as a bucket")
	}
	if _, err := NewFilesystemBucket(""); err == nil {
		t.Fatal("empty directory accepted")
	}
}

func TestClassifyFSError(t *testing.T) {
	for _, tc := range []struct {
		err      error
		notFound bool
	}{
		{&fs.PathError{Op: "open", Path: "x", Err: syscall.ENOENT}, true},
		{&fs.PathError{Op: "open", Path: "x", Err: syscall.ENOTDIR}, true},
		{&fs.PathError{Op: "open", Path: "x", Err: syscall.ENAMETOOLONG}, true},
		{&fs.PathError{Op: "write", Path: "x", Err: syscall.ENOSPC}, false},
		{&fs.PathError{Op: "write", Path: "x", Err: syscall.EIO}, false},
		{&fs.PathError{Op: "open", Path: "x", Err: syscall.EACCES}, false},
	} {
		err := classifyFSError(tc.err)
		if IsNotFound(err) != tc.notFound || IsTransient(err) || !errors.Is(err, tc.err) {
			t.Errorf("classifyFSError(%v) = %v", tc.err, err)
		}
	}
}

// TestFilesystemNameTooLong reads objects whose names have a part longer
// than the filesystem allows: none can exist, so each read says "not found",
// as it does for any other object that is not there, and a Put of such a
// name fails.
func TestFilesystemNameTooLong(t *testing.T) {
	ctx := context.Background()
	b, err := NewFilesystemBucket(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("n", 300)
	for _, name := range []string{long, long + "/x", "a/" + long} {
		if _, err := b.Get(ctx, name); !IsNotFound(err) {
			t.Errorf("Get(%.12s…): %v, want not found", name, err)
		}
		if _, err := b.GetRange(ctx, name, 0, 1); !IsNotFound(err) {
			t.Errorf("GetRange(%.12s…): %v, want not found", name, err)
		}
		if _, err := b.Attributes(ctx, name); !IsNotFound(err) {
			t.Errorf("Attributes(%.12s…): %v, want not found", name, err)
		}
		if err := b.Delete(ctx, name); err != nil {
			t.Errorf("Delete(%.12s…): %v", name, err)
		}
		if _, err := PutBytes(ctx, b, name, []byte("v"), PutOptions{}); err == nil || IsNotFound(err) {
			t.Errorf("Put(%.12s…): %v, want an error other than not found", name, err)
		}
	}
}

func TestFilesystemETag(t *testing.T) {
	ctx := t.Context()
	data := []byte("some content")
	want := contentETag(data)
	for _, tc := range []struct {
		name  string
		write func(b *FilesystemBucket)
	}{
		{"put", func(b *FilesystemBucket) { PutBytes(ctx, b, "k", data, PutOptions{}) }},
		{"put without xattrs", func(b *FilesystemBucket) {
			b.noXattr.Store(true)
			PutBytes(ctx, b, "k", data, PutOptions{})
		}},
		{"file placed by hand", func(b *FilesystemBucket) {
			os.WriteFile(filepath.Join(b.Dir(), "k"), data, 0o644)
		}},
		{"malformed stored ETag", func(b *FilesystemBucket) {
			PutBytes(ctx, b, "k", data, PutOptions{})
			setXattrForTest(t, filepath.Join(b.Dir(), "k"), `"not-an-etag"`)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newFS(t)
			tc.write(b)
			a, err := b.Attributes(ctx, "k")
			if err != nil || a.ETag != want {
				t.Fatalf("attributes = %+v, %v; want ETag %s", a, err, want)
			}
			page, _ := b.List(ctx, "", "", 0)
			if len(page.Objects) != 1 || (page.Objects[0].ETag != "" && page.Objects[0].ETag != want) {
				t.Fatalf("listed %+v", page.Objects)
			}
			if _, err := PutBytes(ctx, b, "k", []byte("next"), PutOptions{IfMatch: want}); err != nil {
				t.Fatalf("put if match: %v", err)
			}
			if a, _ := b.Attributes(ctx, "k"); a.ETag != contentETag([]byte("next")) {
				t.Fatalf("ETag after overwrite %s", a.ETag)
			}
		})
	}
	// A file stored with an earlier ETag (the content's MD5) keeps it:
	// a conditional put with it succeeds, one with the new form fails.
	t.Run("earlier stored ETag", func(t *testing.T) {
		b := newFS(t)
		PutBytes(ctx, b, "k", data, PutOptions{})
		md5ETag := fmt.Sprintf("%q", fmt.Sprintf("%x", md5.Sum(data)))
		setXattrForTest(t, filepath.Join(b.Dir(), "k"), md5ETag)
		if a, err := b.Attributes(ctx, "k"); err != nil || a.ETag != md5ETag {
			t.Fatalf("attributes = %+v, %v; want the stored ETag %s", a, err, md5ETag)
		}
		if _, err := PutBytes(ctx, b, "k", []byte("next"), PutOptions{IfMatch: want}); !errors.Is(err, ErrPreconditionFailed) {
			t.Fatalf("put if match with another ETag: %v, want ErrPreconditionFailed", err)
		}
		if _, err := PutBytes(ctx, b, "k", []byte("next"), PutOptions{IfMatch: md5ETag}); err != nil {
			t.Fatalf("put if match with the stored ETag: %v", err)
		}
	})
	// Same length, other content: another ETag.
	if contentETag([]byte("abc")) == contentETag([]byte("abd")) || contentETag(nil) == contentETag([]byte{0}) {
		t.Fatal("ETags of different contents are equal")
	}
}

// Deletes prune empty directories while puts create them; no put may fail.
func TestFilesystemPutDeleteRace(t *testing.T) {
	ctx := t.Context()
	b := newFS(t)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 4 {
		wg.Go(func() {
			for i := range 30 {
				name := fmt.Sprintf("deep/er/dir/%d-%d", w, i)
				if _, err := PutBytes(ctx, b, name, []byte("x"), PutOptions{IfAbsent: i%2 == 0}); err != nil {
					errs <- err
					return
				}
				if err := b.Delete(ctx, name); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if left := listAllNames(t, b); len(left) != 0 {
		t.Fatalf("left %q", left)
	}
}

func listAllNames(t *testing.T, b Bucket) []string {
	t.Helper()
	var names []string
	if err := Iter(t.Context(), b, "", func(a Attributes) error { names = append(names, a.Name); return nil }); err != nil {
		t.Fatal(err)
	}
	return names
}

// TestFilesystemLargePut: objects of several writeback chunks, from memory
// and from a stream, plain, if absent and through the temporary name (no
// O_TMPFILE), read back whole with the ETag of their content.
func TestFilesystemLargePut(t *testing.T) {
	ctx := t.Context()
	data := make([]byte, 3*writeback.Chunk+12345)
	for i := range data {
		data[i] = byte(i*7 + i/4096)
	}
	for _, tc := range []struct {
		name    string
		opts    PutOptions
		stream  bool
		unnamed bool
	}{
		{"bytes", PutOptions{}, false, true},
		{"stream", PutOptions{}, true, true},
		{"bytes if absent", PutOptions{IfAbsent: true}, false, true},
		{"stream if absent", PutOptions{IfAbsent: true}, true, true},
		{"stream if absent, temporary name", PutOptions{IfAbsent: true}, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newFS(t)
			b.unnamed = b.unnamed && tc.unnamed
			var err error
			if tc.stream {
				_, err = b.Put(ctx, "big", struct{ io.Reader }{bytes.NewReader(data)}, int64(len(data)), tc.opts)
			} else {
				_, err = PutBytes(ctx, b, "big", data, tc.opts)
			}
			if err != nil {
				t.Fatal(err)
			}
			got, err := ReadAll(ctx, b, "big")
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("read back %d bytes (%v), want the %d put", len(got), err, len(data))
			}
			if a, err := b.Attributes(ctx, "big"); err != nil || a.ETag != contentETag(data) || a.Size != int64(len(data)) {
				t.Fatalf("attributes = %+v, %v; want size %d, ETag %s", a, err, len(data), contentETag(data))
			}
		})
	}
}

// TestFilesystemSyncsThroughAIO: a put fsyncs its file and its folder, a
// delete its folder, through internal/fsync, so that the goroutine waiting
// for the disk leaves its P to others where the kernel allows AIO.
func TestFilesystemSyncsThroughAIO(t *testing.T) {
	if !fsync.Async() {
		t.Skip("this kernel refuses AIO: the bucket's fsyncs are f.Sync's")
	}
	ctx := t.Context()
	for _, tc := range []struct {
		name    string
		opts    PutOptions
		unnamed bool
	}{
		{"plain", PutOptions{}, true},
		{"if absent", PutOptions{IfAbsent: true}, true},
		{"if absent, temporary name", PutOptions{IfAbsent: true}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newFS(t)
			b.unnamed = b.unnamed && tc.unnamed
			if _, err := PutBytes(ctx, b, "d/first", []byte("x"), PutOptions{}); err != nil {
				t.Fatal(err) // makes the folder d
			}
			before := fsync.Completed()
			if _, err := PutBytes(ctx, b, "d/second", []byte("durable"), tc.opts); err != nil {
				t.Fatal(err)
			}
			if got := fsync.Completed() - before; got != 2 {
				t.Fatalf("put: %d fsyncs through AIO, want 2 (the file, the folder)", got)
			}
			before = fsync.Completed()
			if err := b.Delete(ctx, "d/second"); err != nil {
				t.Fatal(err)
			}
			if got := fsync.Completed() - before; got != 1 {
				t.Fatalf("delete: %d fsyncs through AIO, want 1 (the folder)", got)
			}
		})
	}
}
