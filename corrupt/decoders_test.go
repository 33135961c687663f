package corrupt_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/prometheus/prometheus/model/labels"

	"github.com/shaledb/shale/cache"
	"github.com/shaledb/shale/corrupt"
	"github.com/shaledb/shale/gorilla"
	"github.com/shaledb/shale/index"
	"github.com/shaledb/shale/storage/lsm"
	"github.com/shaledb/shale/storage/lsm/sst"
	"github.com/shaledb/shale/storage/objstore"
)

// TestDecodersMarkCorruption damages the input of every decoder that reads
// bytes back from storage and checks, through each package's exported API,
// that the error is both corrupt.Err and the package's own sentinel.
func TestDecodersMarkCorruption(t *testing.T) {
	for _, c := range []struct {
		name     string
		sentinel error
		// decode damages a valid input, decodes it and returns the error.
		decode func(t *testing.T) error
	}{
		{"gorilla block cut short", gorilla.ErrCorrupt, func(t *testing.T) error {
			blk, err := gorilla.Encode(nil, []int64{1000, 2000, 3000}, []float64{1, 2.5, 3})
			if err != nil {
				t.Fatal(err)
			}
			_, err = gorilla.NewIterator(blk[:len(blk)-1])
			return err
		}},
		{"index labels cut short", index.ErrCorrupt, func(t *testing.T) error {
			b := index.EncodeLabels(nil, labels.FromStrings("__name__", "up", "job", "node"))
			var sb labels.ScratchBuilder
			_, err := index.DecodeLabels(b[:len(b)-2], &sb)
			return err
		}},
		{"index postings cut short", index.ErrCorrupt, func(t *testing.T) error {
			b := index.EncodePostings(nil, roaring.BitmapOf(1, 5, 1000, 70000))
			_, err := index.DecodePostings(b[:len(b)-3])
			return err
		}},
		{"sst footer magic", sst.ErrCorrupt, func(t *testing.T) error {
			b := sstTable(t)
			b[len(b)-1] ^= 0x01
			_, err := sst.Open(context.Background(), sst.BytesReadable(b), "t.sst", nil)
			return err
		}},
		{"sst data block", sst.ErrCorrupt, func(t *testing.T) error {
			b := sstTable(t)
			b[3] ^= 0x01 // inside the first data block, covered by its checksum
			tbl, err := sst.Open(context.Background(), sst.BytesReadable(b), "t.sst", nil)
			if err != nil {
				t.Fatalf("open with a damaged data block: %v", err)
			}
			_, err = tbl.Get(context.Background(), []byte("a"), nil)
			return err
		}},
		{"lsm manifest", lsm.ErrCorrupt, func(t *testing.T) error {
			return openDamagedLSM(t, "manifest/")
		}},
		{"lsm WAL", lsm.ErrCorrupt, func(t *testing.T) error {
			return openDamagedLSM(t, "wal/")
		}},
		{"cache disk tier segment", cache.ErrCorrupt, damagedCacheSegment},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.decode(t)
			t.Log(err)
			if !errors.Is(err, corrupt.Err) {
				t.Errorf("error %v is not corrupt.Err", err)
			}
			if !errors.Is(err, c.sentinel) {
				t.Errorf("error %v is not %v", err, c.sentinel)
			}
		})
	}
}

// sstTable returns a small valid table, blocks uncompressed.
func sstTable(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	opts := sst.DefaultWriterOptions()
	opts.Compression = sst.CompressionNone
	w := sst.NewWriter(&buf, opts)
	for i, k := range []string{"a", "b", "c"} {
		if err := w.Add(sst.Entry{Key: []byte(k), Seq: uint64(10 - i), Kind: sst.KindPut, Value: []byte("value of " + k)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// openDamagedLSM writes through an LSM with the WAL on and takes a copy of
// its bucket while it runs (as a crash would leave it), flips a byte in the
// newest object under dir in the copy and returns the error of opening the
// copy.
func openDamagedLSM(t *testing.T, dir string) error {
	t.Helper()
	ctx := context.Background()
	const prefix = "db"
	src := objstore.NewMemoryBucket()
	db, err := lsm.Open(ctx, src, prefix, lsm.DefaultOptions(), lsm.Components{})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Put(ctx, []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	dst := objstore.NewMemoryBucket()
	page, err := src.List(ctx, "", "", 0)
	if err != nil || page.More {
		t.Fatalf("list: %v (more %v)", err, page.More)
	}
	var victim string
	for _, o := range page.Objects {
		data := get(t, src, o.Name)
		if strings.HasPrefix(o.Name, prefix+"/"+dir) {
			victim = o.Name
		}
		if _, err := dst.Put(ctx, o.Name, bytes.NewReader(data), int64(len(data)), objstore.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if victim == "" {
		t.Fatalf("no object under %s/%s", prefix, dir)
	}
	data := get(t, dst, victim)
	data[len(data)/2] ^= 0x01
	if _, err := dst.Put(ctx, victim, bytes.NewReader(data), int64(len(data)), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	db, err = lsm.Open(ctx, dst, prefix, lsm.DefaultOptions(), lsm.Components{})
	if err == nil {
		db.Close()
	}
	return err
}

func get(t *testing.T, b objstore.Bucket, name string) []byte {
	t.Helper()
	r, err := b.Get(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	data, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// damagedCacheSegment cuts the footer off a disk tier segment and reopens the
// cache. The cache keeps the records before the damage and reports the error
// only in its log, so the error is taken from there.
func damagedCacheSegment(t *testing.T) error {
	t.Helper()
	opts := cache.DefaultOptions()
	opts.DiskPath = t.TempDir()
	opts.DiskBytes = 8 << 20
	c, err := cache.New(opts, cache.Components{})
	if err != nil {
		t.Fatal(err)
	}
	c.Stash(context.Background(), "block", bytes.Repeat([]byte("x"), 1000), cache.ClassData)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	segs, err := filepath.Glob(filepath.Join(opts.DiskPath, "*"))
	if err != nil {
		t.Fatal(err)
	}
	var seg string
	for _, s := range segs {
		if fi, err := os.Stat(s); err == nil && fi.Size() > 1000 {
			seg = s
		}
	}
	if seg == "" {
		t.Fatalf("no segment file in %v", segs)
	}
	fi, err := os.Stat(seg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(seg, fi.Size()-8); err != nil {
		t.Fatal(err)
	}
	logged := &errorLog{}
	c, err = cache.New(opts, cache.Components{Logger: slog.New(logged)})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	return logged.first()
}

// errorLog is a slog.Handler that keeps the errors logged under "err".
type errorLog struct {
	mu   sync.Mutex
	errs []error
}

func (*errorLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *errorLog) Handle(_ context.Context, r slog.Record) error {
	r.Attrs(func(a slog.Attr) bool {
		if err, ok := a.Value.Any().(error); ok && a.Key == "err" {
			l.mu.Lock()
			l.errs = append(l.errs, err)
			l.mu.Unlock()
		}
		return true
	})
	return nil
}
func (l *errorLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *errorLog) WithGroup(string) slog.Handler      { return l }

func (l *errorLog) first() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.errs) == 0 {
		return nil
	}
	return l.errs[0]
}
