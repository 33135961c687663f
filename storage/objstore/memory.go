package objstore

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"sort"
	"sync"
	"time"
)

// MemoryBucket keeps objects in memory. It is for tests and has the same
// semantics as the other backends, conditional writes included.
type MemoryBucket struct {
	mu      sync.RWMutex
	objects map[string]memObject
	now     func() time.Time
}

type memObject struct {
	data  []byte
	attrs Attributes
}

// NewMemoryBucket returns an empty in-memory bucket.
func NewMemoryBucket() *MemoryBucket {
	return &MemoryBucket{objects: map[string]memObject{}, now: time.Now}
}

const memoryPageSize = 1000

func (b *MemoryBucket) lookup(name string) (memObject, error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	o, ok := b.objects[name]
	if !ok {
		return memObject{}, fmt.Errorf("get %s: %w", name, ErrNotFound)
	}
	return o, nil
}

func (b *MemoryBucket) Get(ctx context.Context, name string) (io.ReadCloser, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	o, err := b.lookup(name)
	if err != nil {
		return nil, err
	}
	return io.NopCloser(bytes.NewReader(o.data)), nil
}

func (b *MemoryBucket) GetRange(ctx context.Context, name string, off, length int64) (io.ReadCloser, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	o, err := b.lookup(name)
	if err != nil {
		return nil, err
	}
	start, end, err := clampRange(name, int64(len(o.data)), off, length)
	if err != nil {
		return nil, err
	}
	return io.NopCloser(bytes.NewReader(o.data[start:end])), nil
}

func (b *MemoryBucket) Attributes(ctx context.Context, name string) (Attributes, error) {
	if err := ctx.Err(); err != nil {
		return Attributes{}, err
	}
	o, err := b.lookup(name)
	if err != nil {
		return Attributes{}, err
	}
	return o.attrs, nil
}

func (b *MemoryBucket) Put(ctx context.Context, name string, r io.Reader, size int64, opts PutOptions) (Attributes, error) {
	if err := ctx.Err(); err != nil {
		return Attributes{}, err
	}
	if err := validateName(name); err != nil {
		return Attributes{}, fmt.Errorf("put: %w", err)
	}
	if opts.IfAbsent && opts.IfMatch != "" {
		return Attributes{}, fmt.Errorf("put %s: IfAbsent and IfMatch both set", name)
	}
	var buf bytes.Buffer
	body := r
	if size >= 0 && size < math.MaxInt64-bytes.MinRead {
		// Sized up front; a body longer than size shows as one extra byte.
		buf.Grow(int(min(size+bytes.MinRead, 64<<20)))
		body = io.LimitReader(r, size+1)
	}
	_, err := buf.ReadFrom(body)
	data := buf.Bytes()
	if err != nil {
		return Attributes{}, fmt.Errorf("put %s: read body: %w", name, err)
	}
	if size >= 0 && int64(len(data)) != size {
		return Attributes{}, fmt.Errorf("put %s: body has %d bytes, want %d", name, len(data), size)
	}
	if err := ctx.Err(); err != nil {
		return Attributes{}, fmt.Errorf("put %s: %w", name, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	cur, exists := b.objects[name]
	if opts.IfAbsent && exists {
		return Attributes{}, fmt.Errorf("put %s if absent: %w", name, ErrPreconditionFailed)
	}
	if opts.IfMatch != "" && (!exists || cur.attrs.ETag != opts.IfMatch) {
		return Attributes{}, fmt.Errorf("put %s if match %s: %w", name, opts.IfMatch, ErrPreconditionFailed)
	}
	attrs := Attributes{Name: name, Size: int64(len(data)), LastModified: b.now(), ETag: contentETag(data)}
	b.objects[name] = memObject{data: data, attrs: attrs}
	return attrs, nil
}

func (b *MemoryBucket) Delete(ctx context.Context, name string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b.mu.Lock()
	delete(b.objects, name)
	b.mu.Unlock()
	return nil
}

func (b *MemoryBucket) List(ctx context.Context, prefix, startAfter string, limit int) (ListPage, error) {
	if err := ctx.Err(); err != nil {
		return ListPage{}, err
	}
	if limit <= 0 || limit > memoryPageSize {
		limit = memoryPageSize
	}
	b.mu.RLock()
	names := make([]string, 0, 64)
	for name := range b.objects {
		if len(name) >= len(prefix) && name[:len(prefix)] == prefix && name > startAfter {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	var page ListPage
	if len(names) > limit {
		names, page.More = names[:limit], true
	}
	page.Objects = make([]Attributes, len(names))
	for i, n := range names {
		page.Objects[i] = b.objects[n].attrs
	}
	b.mu.RUnlock()
	return page, nil
}

// Close does nothing; the objects stay readable.
func (b *MemoryBucket) Close() error { return nil }

// TotalSize returns the sum of all objects' sizes, for tests and benchmarks.
func (b *MemoryBucket) TotalSize() int64 {
	b.mu.RLock()
	defer b.mu.RUnlock()
	var n int64
	for _, o := range b.objects {
		n += int64(len(o.data))
	}
	return n
}
