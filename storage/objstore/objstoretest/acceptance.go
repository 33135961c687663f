// Package objstoretest holds what tests of any package need to run against
// every object-store backend: an acceptance test of the Bucket contract, a
// versitygw S3 server started on demand, and constructors of fresh buckets.
package objstoretest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/shaledb/shale/storage/objstore"
)

// LargeObjectSize is the size of the acceptance test's large object: over the
// S3 minimum part, so a bucket with PartSize = objstore.MinS3PartSize uploads
// it in two parts.
const LargeObjectSize = objstore.MinS3PartSize + 12345

// AcceptanceTest checks that the buckets newBucket returns keep the Bucket
// contract. newBucket must return a new, empty bucket on every call.
func AcceptanceTest(t *testing.T, newBucket func(t *testing.T) objstore.Bucket) {
	t.Run("PutGetOverwrite", func(t *testing.T) { testPutGetOverwrite(t, newBucket(t)) })
	t.Run("GetRange", func(t *testing.T) { testGetRange(t, newBucket(t)) })
	t.Run("Attributes", func(t *testing.T) { testAttributes(t, newBucket(t)) })
	t.Run("NotFound", func(t *testing.T) { testNotFound(t, newBucket(t)) })
	t.Run("Delete", func(t *testing.T) { testDelete(t, newBucket(t)) })
	t.Run("ListOrder", func(t *testing.T) { testListOrder(t, newBucket(t)) })
	t.Run("ListPagination", func(t *testing.T) { testListPagination(t, newBucket(t)) })
	t.Run("EmptyObject", func(t *testing.T) { testEmptyObject(t, newBucket(t)) })
	t.Run("LargeObject", func(t *testing.T) { testLargeObject(t, newBucket(t)) })
	t.Run("IfAbsent", func(t *testing.T) { testIfAbsent(t, newBucket(t)) })
	t.Run("IfMatch", func(t *testing.T) { testIfMatch(t, newBucket(t)) })
	t.Run("ConcurrentIfAbsent", func(t *testing.T) { testConcurrentIfAbsent(t, newBucket(t)) })
	t.Run("ConcurrentIfMatch", func(t *testing.T) { testConcurrentIfMatch(t, newBucket(t)) })
	t.Run("BadPut", func(t *testing.T) { testBadPut(t, newBucket(t)) })
	t.Run("ContextCanceled", func(t *testing.T) { testContextCanceled(t, newBucket(t)) })
}

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// MustPut stores data under name and returns the attributes Put reported.
func MustPut(t testing.TB, b objstore.Bucket, name string, data []byte) objstore.Attributes {
	t.Helper()
	a, err := objstore.PutBytes(context.Background(), b, name, data, objstore.PutOptions{})
	if err != nil {
		t.Fatalf("put %s: %v", name, err)
	}
	return a
}

// MustGet returns the whole object.
func MustGet(t testing.TB, b objstore.Bucket, name string) []byte {
	t.Helper()
	data, err := objstore.ReadAll(context.Background(), b, name)
	if err != nil {
		t.Fatalf("get %s: %v", name, err)
	}
	return data
}

// ListAll returns the names of all objects under prefix, page after page of
// at most limit names.
func ListAll(t testing.TB, b objstore.Bucket, prefix, startAfter string, limit int) []string {
	t.Helper()
	var names []string
	for pages := 0; ; pages++ {
		if pages > 100000 {
			t.Fatalf("list %q: no end after %d pages", prefix, pages)
		}
		page, err := b.List(context.Background(), prefix, startAfter, limit)
		if err != nil {
			t.Fatalf("list %q after %q: %v", prefix, startAfter, err)
		}
		if limit > 0 && len(page.Objects) > limit {
			t.Fatalf("list %q: page of %d objects, limit %d", prefix, len(page.Objects), limit)
		}
		for _, o := range page.Objects {
			names = append(names, o.Name)
		}
		if !page.More {
			return names
		}
		if len(page.Objects) == 0 {
			t.Fatalf("list %q after %q: empty page with More set", prefix, startAfter)
		}
		startAfter = page.Objects[len(page.Objects)-1].Name
	}
}

func randomBytes(seed uint64, n int) []byte {
	var key [32]byte
	key[0] = byte(seed)
	b := make([]byte, n)
	rand.NewChaCha8(key).Read(b)
	return b
}

func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: got error %v, want %v", what, err, target)
	}
}

func testPutGetOverwrite(t *testing.T, b objstore.Bucket) {
	ctx := testContext(t)
	v1 := []byte("first version")
	a1, err := objstore.PutBytes(ctx, b, "dir/obj", v1, objstore.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if a1.Name != "dir/obj" || a1.Size != int64(len(v1)) || a1.ETag == "" {
		t.Fatalf("put returned %+v", a1)
	}
	if got := MustGet(t, b, "dir/obj"); !bytes.Equal(got, v1) {
		t.Fatalf("get = %q, want %q", got, v1)
	}

	// Overwrite with a body of unknown size that is no io.Seeker.
	v2 := []byte("second, longer version")
	a2, err := b.Put(ctx, "dir/obj", io.MultiReader(bytes.NewReader(v2[:5]), bytes.NewReader(v2[5:])), -1, objstore.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if a2.Size != int64(len(v2)) || a2.ETag == a1.ETag {
		t.Fatalf("overwrite returned %+v after %+v", a2, a1)
	}
	if got := MustGet(t, b, "dir/obj"); !bytes.Equal(got, v2) {
		t.Fatalf("get after overwrite = %q, want %q", got, v2)
	}

	// Same content, same ETag: it is derived from the content.
	a3 := MustPut(t, b, "other", v2)
	if a3.ETag != a2.ETag {
		t.Fatalf("same content got ETags %s and %s", a2.ETag, a3.ETag)
	}
}

func testGetRange(t *testing.T, b objstore.Bucket) {
	ctx := testContext(t)
	data := randomBytes(1, 100)
	MustPut(t, b, "r", data)
	for _, tc := range []struct {
		off, length int64
		want        []byte
		err         error
	}{
		{off: 0, length: -1, want: data},
		{off: 10, length: 20, want: data[10:30]},
		{off: 0, length: 1, want: data[:1]},
		{off: 90, length: -1, want: data[90:]},
		{off: 90, length: 10, want: data[90:]},
		{off: 90, length: 50, want: data[90:]},
		{off: 99, length: 1, want: data[99:]},
		{off: 50, length: 0, want: nil},
		{off: 100, length: 1, err: objstore.ErrInvalidRange},
		{off: 100, length: -1, err: objstore.ErrInvalidRange},
		{off: 150, length: 10, err: objstore.ErrInvalidRange},
		{off: -1, length: 10, err: objstore.ErrInvalidRange},
	} {
		what := fmt.Sprintf("range [%d,+%d)", tc.off, tc.length)
		got, err := objstore.ReadRange(ctx, b, "r", tc.off, tc.length)
		if tc.err != nil {
			wantErr(t, what, err, tc.err)
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if !bytes.Equal(got, tc.want) {
			t.Fatalf("%s: got %d bytes, want %d", what, len(got), len(tc.want))
		}
	}
}

func testAttributes(t *testing.T, b objstore.Bucket) {
	ctx := testContext(t)
	before := time.Now()
	put := MustPut(t, b, "a/b/attrs", []byte("hello attributes"))
	a, err := b.Attributes(ctx, "a/b/attrs")
	if err != nil {
		t.Fatal(err)
	}
	if a.Name != "a/b/attrs" || a.Size != 16 || a.ETag != put.ETag {
		t.Fatalf("attributes %+v, put returned %+v", a, put)
	}
	// Clocks of a server and the test may differ a little.
	if d := a.LastModified.Sub(before); d < -time.Hour || d > time.Hour {
		t.Fatalf("LastModified %v is far from %v", a.LastModified, before)
	}
	page, err := b.List(ctx, "a/", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Objects) != 1 {
		t.Fatalf("list = %+v", page)
	}
	o := page.Objects[0]
	if o.Name != a.Name || o.Size != a.Size || (o.ETag != "" && o.ETag != a.ETag) || o.LastModified.IsZero() {
		t.Fatalf("listed %+v, attributes %+v", o, a)
	}
}

func testNotFound(t *testing.T, b objstore.Bucket) {
	ctx := testContext(t)
	MustPut(t, b, "dir/present", []byte("x"))
	for _, name := range []string{"absent", "dir/absent", "dir", "dir/present/below", "dir/presen"} {
		_, err := b.Get(ctx, name)
		wantErr(t, "get "+name, err, objstore.ErrNotFound)
		_, err = b.GetRange(ctx, name, 0, 1)
		wantErr(t, "get range "+name, err, objstore.ErrNotFound)
		_, err = b.GetRange(ctx, name, 0, -1)
		wantErr(t, "get range to end "+name, err, objstore.ErrNotFound)
		_, err = b.GetRange(ctx, name, 0, 0)
		wantErr(t, "get empty range "+name, err, objstore.ErrNotFound)
		_, err = b.Attributes(ctx, name)
		wantErr(t, "attributes "+name, err, objstore.ErrNotFound)
		_, err = objstore.ReadAll(ctx, b, name)
		wantErr(t, "read all "+name, err, objstore.ErrNotFound)
	}
	if page, err := b.List(ctx, "nothing/", "", 0); err != nil || len(page.Objects) != 0 || page.More {
		t.Fatalf("list of an absent prefix = %+v, %v", page, err)
	}
}

func testDelete(t *testing.T, b objstore.Bucket) {
	ctx := testContext(t)
	MustPut(t, b, "x/y/z", []byte("doomed"))
	MustPut(t, b, "x/keep", []byte("kept"))
	for i := range 2 { // the second time the object is already gone
		if err := b.Delete(ctx, "x/y/z"); err != nil {
			t.Fatalf("delete #%d: %v", i+1, err)
		}
		_, err := b.Get(ctx, "x/y/z")
		wantErr(t, "get after delete", err, objstore.ErrNotFound)
	}
	if err := b.Delete(ctx, "never/was"); err != nil {
		t.Fatalf("delete of an absent object: %v", err)
	}
	if got := ListAll(t, b, "", "", 0); !slices.Equal(got, []string{"x/keep"}) {
		t.Fatalf("after delete list = %q", got)
	}
	// The name can be used again, also by a conditional create.
	if _, err := objstore.PutBytes(ctx, b, "x/y/z", []byte("again"), objstore.PutOptions{IfAbsent: true}); err != nil {
		t.Fatalf("create after delete: %v", err)
	}
}

// listNames sort in byte order in ways a directory walk gets wrong: '!', '-'
// and '.' sort before '/', so "a-b" comes before "a/b"; non-ASCII sorts last.
// No name is a prefix-directory of another name, since filesystems cannot
// hold a file and a directory of one name.
var listNames = []string{
	"a/b", "a-b", "a.b", "a!b", "a0", "a/b-c", "a/b0", "a/c/d", "a/c-d", "a/c.d/e",
	"ab", "b", "B", "z/z", "\u00e9t\u00e9", "a/\u00e9", "a~", "a b",
}

func testListOrder(t *testing.T, b objstore.Bucket) {
	for _, n := range listNames {
		MustPut(t, b, n, []byte(n))
	}
	sorted := slices.Clone(listNames)
	slices.Sort(sorted)
	filter := func(prefix, after string) []string {
		var out []string
		for _, n := range sorted {
			if len(n) >= len(prefix) && n[:len(prefix)] == prefix && n > after {
				out = append(out, n)
			}
		}
		return out
	}
	for _, tc := range []struct{ prefix, after string }{
		{"", ""}, {"a", ""}, {"a/", ""}, {"a/b", ""}, {"a/c", ""}, {"a/c/", ""}, {"a-", ""}, {"\u00e9", ""},
		{"", "a-b"}, {"", "a/"}, {"", "a/b"}, {"", "a/c"}, {"", "a/c/d"}, {"", "a0"}, {"", "a/\u00e9"},
		{"a/", "a/b0"}, {"a/", "a-"}, {"a/", "b"}, {"", "\u00ff"}, {"b", ""}, {"q", ""},
	} {
		want := filter(tc.prefix, tc.after)
		for _, limit := range []int{0, 2, 5} {
			got := ListAll(t, b, tc.prefix, tc.after, limit)
			if !slices.Equal(got, want) {
				t.Fatalf("list prefix %q after %q limit %d:\n got %q\nwant %q", tc.prefix, tc.after, limit, got, want)
			}
		}
	}
}

func testListPagination(t *testing.T, b objstore.Bucket) {
	ctx := testContext(t)
	var want []string
	for i := range 25 {
		n := fmt.Sprintf("p/%02d/obj", i)
		if i%3 == 0 {
			n = fmt.Sprintf("p/%02d", i)
		}
		want = append(want, n)
		MustPut(t, b, n, []byte{byte(i)})
	}
	slices.Sort(want)
	for _, limit := range []int{1, 2, 7, 24, 25, 26} {
		page, err := b.List(ctx, "p/", "", limit)
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Objects) == 0 || len(page.Objects) > limit {
			t.Fatalf("limit %d: first page has %d objects", limit, len(page.Objects))
		}
		if wantMore := limit < 25; page.More != wantMore && len(page.Objects) == limit {
			t.Fatalf("limit %d: More = %v with %d objects", limit, page.More, len(page.Objects))
		}
		if got := ListAll(t, b, "p/", "", limit); !slices.Equal(got, want) {
			t.Fatalf("limit %d: got %q, want %q", limit, got, want)
		}
	}
	var seen []string
	if err := objstore.Iter(ctx, b, "p/", func(a objstore.Attributes) error {
		seen = append(seen, a.Name)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(seen, want) {
		t.Fatalf("Iter saw %q", seen)
	}
	stop := errors.New("stop")
	if err := objstore.Iter(ctx, b, "p/", func(objstore.Attributes) error { return stop }); !errors.Is(err, stop) {
		t.Fatalf("Iter did not return fn's error: %v", err)
	}
}

func testEmptyObject(t *testing.T, b objstore.Bucket) {
	ctx := testContext(t)
	for _, tc := range []struct {
		name string
		put  func() (objstore.Attributes, error)
	}{
		{"e/known", func() (objstore.Attributes, error) {
			return objstore.PutBytes(ctx, b, "e/known", nil, objstore.PutOptions{})
		}},
		{"e/unknown", func() (objstore.Attributes, error) {
			return b.Put(ctx, "e/unknown", io.MultiReader(), -1, objstore.PutOptions{})
		}},
		{"e/ifabsent", func() (objstore.Attributes, error) {
			return objstore.PutBytes(ctx, b, "e/ifabsent", []byte{}, objstore.PutOptions{IfAbsent: true})
		}},
	} {
		a, err := tc.put()
		if err != nil {
			t.Fatalf("put %s: %v", tc.name, err)
		}
		if a.Size != 0 || a.ETag == "" {
			t.Fatalf("put %s returned %+v", tc.name, a)
		}
		if got := MustGet(t, b, tc.name); len(got) != 0 {
			t.Fatalf("get %s = %q", tc.name, got)
		}
		for _, length := range []int64{-1, 0, 10} {
			got, err := objstore.ReadRange(ctx, b, tc.name, 0, length)
			if err != nil || len(got) != 0 {
				t.Fatalf("range [0,+%d) of %s = %q, %v", length, tc.name, got, err)
			}
		}
		_, err = objstore.ReadRange(ctx, b, tc.name, 1, 1)
		wantErr(t, "range [1,+1) of "+tc.name, err, objstore.ErrInvalidRange)
		attrs, err := b.Attributes(ctx, tc.name)
		if err != nil || attrs.Size != 0 || attrs.ETag != a.ETag {
			t.Fatalf("attributes of %s = %+v, %v; put returned %+v", tc.name, attrs, err, a)
		}
	}
	page, err := b.List(ctx, "e/", "", 0)
	if err != nil || len(page.Objects) != 3 {
		t.Fatalf("list = %+v, %v", page, err)
	}
	for _, o := range page.Objects {
		if o.Size != 0 {
			t.Fatalf("listed %+v", o)
		}
	}
}

// onlyReader hides every method but Read, so a body cannot be sought or sized.
type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(p []byte) (int, error) { return o.r.Read(p) }

func testLargeObject(t *testing.T, b objstore.Bucket) {
	ctx := testContext(t)
	data := randomBytes(2, LargeObjectSize)
	for _, tc := range []struct {
		name string
		body io.Reader
		size int64
	}{
		{"large/known-seekable", bytes.NewReader(data), int64(len(data))},
		{"large/unknown", onlyReader{bytes.NewReader(data)}, -1},
	} {
		a, err := b.Put(ctx, tc.name, tc.body, tc.size, objstore.PutOptions{})
		if err != nil {
			t.Fatalf("put %s: %v", tc.name, err)
		}
		if a.Size != int64(len(data)) || a.ETag == "" {
			t.Fatalf("put %s returned %+v", tc.name, a)
		}
		if got := MustGet(t, b, tc.name); !bytes.Equal(got, data) {
			t.Fatalf("get %s: %d bytes differ from the %d put", tc.name, len(got), len(data))
		}
		attrs, err := b.Attributes(ctx, tc.name)
		if err != nil || attrs.Size != int64(len(data)) || attrs.ETag != a.ETag {
			t.Fatalf("attributes of %s = %+v, %v; put returned %+v", tc.name, attrs, err, a)
		}
	}
	// A range across the first part boundary, and the tail.
	off := int64(objstore.MinS3PartSize - 10)
	got, err := objstore.ReadRange(ctx, b, "large/unknown", off, 20)
	if err != nil || !bytes.Equal(got, data[off:off+20]) {
		t.Fatalf("range across a part boundary: %d bytes, %v", len(got), err)
	}
	got, err = objstore.ReadRange(ctx, b, "large/unknown", int64(len(data))-7, -1)
	if err != nil || !bytes.Equal(got, data[len(data)-7:]) {
		t.Fatalf("tail range: %d bytes, %v", len(got), err)
	}

	// A conditional create of a large object is as atomic as a small one.
	if _, err := b.Put(ctx, "large/once", onlyReader{bytes.NewReader(data)}, -1, objstore.PutOptions{IfAbsent: true}); err != nil {
		t.Fatalf("first large create: %v", err)
	}
	other := randomBytes(3, LargeObjectSize)
	_, err = b.Put(ctx, "large/once", onlyReader{bytes.NewReader(other)}, -1, objstore.PutOptions{IfAbsent: true})
	wantErr(t, "second large create", err, objstore.ErrPreconditionFailed)
	if got := MustGet(t, b, "large/once"); !bytes.Equal(got, data) {
		t.Fatal("a failed large create changed the object")
	}
	if got := ListAll(t, b, "large/", "", 0); len(got) != 3 {
		t.Fatalf("list after large puts = %q", got)
	}
}

func testIfAbsent(t *testing.T, b objstore.Bucket) {
	ctx := testContext(t)
	create := objstore.PutOptions{IfAbsent: true}
	a, err := objstore.PutBytes(ctx, b, "manifest/00001", []byte("one"), create)
	if err != nil {
		t.Fatalf("first create: %v", err)
	}
	for _, body := range []io.Reader{bytes.NewReader([]byte("two")), onlyReader{bytes.NewReader([]byte("two"))}} {
		_, err = b.Put(ctx, "manifest/00001", body, 3, create)
		wantErr(t, "second create", err, objstore.ErrPreconditionFailed)
	}
	// Same content again is still a second create.
	_, err = objstore.PutBytes(ctx, b, "manifest/00001", []byte("one"), create)
	wantErr(t, "second create with equal content", err, objstore.ErrPreconditionFailed)
	if got := MustGet(t, b, "manifest/00001"); string(got) != "one" {
		t.Fatalf("after failed creates content = %q", got)
	}
	if attrs, err := b.Attributes(ctx, "manifest/00001"); err != nil || attrs.ETag != a.ETag {
		t.Fatalf("attributes = %+v, %v; want ETag %s", attrs, err, a.ETag)
	}
	if got := ListAll(t, b, "", "", 0); !slices.Equal(got, []string{"manifest/00001"}) {
		t.Fatalf("list = %q", got)
	}
}

func testIfMatch(t *testing.T, b objstore.Bucket) {
	ctx := testContext(t)
	a1 := MustPut(t, b, "m", []byte("v1"))
	a2, err := objstore.PutBytes(ctx, b, "m", []byte("v2"), objstore.PutOptions{IfMatch: a1.ETag})
	if err != nil {
		t.Fatalf("put if match current: %v", err)
	}
	if a2.ETag == a1.ETag {
		t.Fatalf("ETag did not change: %s", a2.ETag)
	}
	_, err = objstore.PutBytes(ctx, b, "m", []byte("v3"), objstore.PutOptions{IfMatch: a1.ETag})
	wantErr(t, "put if match stale", err, objstore.ErrPreconditionFailed)
	if got := MustGet(t, b, "m"); string(got) != "v2" {
		t.Fatalf("content = %q, want v2", got)
	}
	// The ETag from Attributes works as well as the one Put returned.
	attrs, err := b.Attributes(ctx, "m")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := objstore.PutBytes(ctx, b, "m", []byte("v4"), objstore.PutOptions{IfMatch: attrs.ETag}); err != nil {
		t.Fatalf("put if match attributes' ETag: %v", err)
	}
	_, err = objstore.PutBytes(ctx, b, "absent", []byte("x"), objstore.PutOptions{IfMatch: a1.ETag})
	wantErr(t, "put if match of an absent object", err, objstore.ErrPreconditionFailed)
	if _, err := b.Attributes(ctx, "absent"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("failed put if match created the object: %v", err)
	}
}

func testConcurrentIfAbsent(t *testing.T, b objstore.Bucket) {
	ctx := testContext(t)
	const writers = 32
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		wins   []int
		others []error
	)
	for i := range writers {
		wg.Go(func() {
			body := fmt.Appendf(nil, "writer %02d", i)
			_, err := objstore.PutBytes(ctx, b, "race/fence", body, objstore.PutOptions{IfAbsent: true})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				wins = append(wins, i)
			case !errors.Is(err, objstore.ErrPreconditionFailed):
				others = append(others, err)
			}
		})
	}
	wg.Wait()
	if len(others) > 0 {
		t.Fatalf("%d creates failed for another reason than a lost race, e.g. %v", len(others), others[0])
	}
	if len(wins) != 1 {
		t.Fatalf("%d of %d concurrent creates succeeded (%v), want exactly 1", len(wins), writers, wins)
	}
	if got, want := string(MustGet(t, b, "race/fence")), fmt.Sprintf("writer %02d", wins[0]); got != want {
		t.Fatalf("content = %q, but the winner wrote %q", got, want)
	}
}

// testConcurrentIfMatch increments a counter object from several goroutines
// by compare-and-swap; a lost update shows as a final count too low.
func testConcurrentIfMatch(t *testing.T, b objstore.Bucket) {
	ctx := testContext(t)
	const workers, increments = 8, 5
	MustPut(t, b, "counter", []byte("0"))
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for done := 0; done < increments; {
				a, err := b.Attributes(ctx, "counter")
				if err != nil {
					errs <- err
					return
				}
				data, err := objstore.ReadAll(ctx, b, "counter")
				if err != nil {
					errs <- err
					return
				}
				n, err := strconv.Atoi(string(data))
				if err != nil {
					errs <- fmt.Errorf("counter holds %q", data)
					return
				}
				// Should the object change between the two reads, the
				// stale ETag makes the put below fail.
				_, err = objstore.PutBytes(ctx, b, "counter", []byte(strconv.Itoa(n+1)), objstore.PutOptions{IfMatch: a.ETag})
				switch {
				case err == nil:
					done++
				case !errors.Is(err, objstore.ErrPreconditionFailed):
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
	if got, want := string(MustGet(t, b, "counter")), strconv.Itoa(workers*increments); got != want {
		t.Fatalf("counter = %s, want %s: an update was lost", got, want)
	}
}

func testBadPut(t *testing.T, b objstore.Bucket) {
	ctx := testContext(t)
	for _, name := range []string{"", "/lead", "trail/", "a//b", "a/./b", "a/../b"} {
		if _, err := objstore.PutBytes(ctx, b, name, []byte("x"), objstore.PutOptions{}); err == nil {
			t.Fatalf("put %q succeeded", name)
		}
	}
	if _, err := objstore.PutBytes(ctx, b, "both", []byte("x"), objstore.PutOptions{IfAbsent: true, IfMatch: `"x"`}); err == nil {
		t.Fatal("put with both IfAbsent and IfMatch succeeded")
	}
	// A body shorter or longer than its declared size is refused and stores nothing.
	for _, tc := range []struct {
		name string
		body io.Reader
		size int64
	}{
		{"short-seekable", bytes.NewReader([]byte("12345")), 10},
		{"short-stream", onlyReader{bytes.NewReader([]byte("12345"))}, 10},
		{"long-stream", onlyReader{bytes.NewReader([]byte("1234567890"))}, 5},
	} {
		if _, err := b.Put(ctx, tc.name, tc.body, tc.size, objstore.PutOptions{}); err == nil {
			t.Fatalf("put %s with a wrong size succeeded", tc.name)
		}
		if _, err := b.Attributes(ctx, tc.name); !errors.Is(err, objstore.ErrNotFound) {
			t.Fatalf("put %s with a wrong size left an object: %v", tc.name, err)
		}
	}
	// A body that fails leaves nothing either.
	failing := io.MultiReader(bytes.NewReader([]byte("partial")), iotestErrReader{})
	if _, err := b.Put(ctx, "failing", failing, -1, objstore.PutOptions{}); err == nil {
		t.Fatal("put of a failing body succeeded")
	}
	if got := ListAll(t, b, "", "", 0); len(got) != 0 {
		t.Fatalf("failed puts left %q", got)
	}
}

var errBody = errors.New("body broke")

type iotestErrReader struct{}

func (iotestErrReader) Read([]byte) (int, error) { return 0, errBody }

// cancelingReader cancels its context after the first read, then goes on.
type cancelingReader struct {
	r      io.Reader
	cancel context.CancelFunc
}

func (c *cancelingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.cancel()
	return n, err
}

func testContextCanceled(t *testing.T, b objstore.Bucket) {
	MustPut(t, b, "c/present", []byte("still here"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	check := func(what string, err error) {
		t.Helper()
		wantErr(t, what, err, context.Canceled)
		if objstore.IsNotFound(err) || objstore.IsPreconditionFailed(err) {
			t.Fatalf("%s: canceled call reported %v", what, err)
		}
	}
	_, err := b.Get(ctx, "c/present")
	check("get", err)
	_, err = b.GetRange(ctx, "c/present", 1, 2)
	check("get range", err)
	_, err = b.Attributes(ctx, "c/present")
	check("attributes", err)
	_, err = b.List(ctx, "c/", "", 0)
	check("list", err)
	_, err = objstore.PutBytes(ctx, b, "c/new", []byte("x"), objstore.PutOptions{})
	check("put", err)
	_, err = objstore.PutBytes(ctx, b, "c/new", []byte("x"), objstore.PutOptions{IfAbsent: true})
	check("put if absent", err)
	check("delete", b.Delete(ctx, "c/present"))

	// Canceled while the body is being read.
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	body := &cancelingReader{r: onlyReader{bytes.NewReader(randomBytes(4, 1<<20))}, cancel: cancel2}
	_, err = b.Put(ctx2, "c/midway", body, -1, objstore.PutOptions{})
	check("put canceled while reading the body", err)

	if got := ListAll(t, b, "", "", 0); !slices.Equal(got, []string{"c/present"}) {
		t.Fatalf("after canceled calls list = %q", got)
	}
	if got := MustGet(t, b, "c/present"); string(got) != "still here" {
		t.Fatalf("content = %q", got)
	}
}
