package objstore

import (
	"context"
	"fmt"
	"io"
	"strings"
)

// PrefixBucket places every object of an inner bucket under "prefix/": the
// object "a" is stored as "prefix/a", and listings see only that subtree,
// with the prefix removed from names. It lets several Shale instances, or a
// Shale and other data, share one S3 bucket.
type PrefixBucket struct {
	inner  Bucket
	prefix string // ends with '/'
}

// NewPrefixBucket returns b seen through prefix. Leading and trailing slashes
// of prefix are ignored; an empty prefix is an error (use b itself).
func NewPrefixBucket(b Bucket, prefix string) (*PrefixBucket, error) {
	p := strings.Trim(prefix, "/")
	if err := validateName(p); err != nil {
		return nil, fmt.Errorf("bucket prefix: %w", err)
	}
	return &PrefixBucket{inner: b, prefix: p + "/"}, nil
}

// Prefix returns the prefix, with its trailing '/'.
func (b *PrefixBucket) Prefix() string { return b.prefix }

func (b *PrefixBucket) Get(ctx context.Context, name string) (io.ReadCloser, error) {
	return b.inner.Get(ctx, b.prefix+name)
}

func (b *PrefixBucket) GetRange(ctx context.Context, name string, off, length int64) (io.ReadCloser, error) {
	return b.inner.GetRange(ctx, b.prefix+name, off, length)
}

func (b *PrefixBucket) Attributes(ctx context.Context, name string) (Attributes, error) {
	a, err := b.inner.Attributes(ctx, b.prefix+name)
	a.Name = strings.TrimPrefix(a.Name, b.prefix)
	return a, err
}

func (b *PrefixBucket) Put(ctx context.Context, name string, r io.Reader, size int64, opts PutOptions) (Attributes, error) {
	if err := validateName(name); err != nil {
		return Attributes{}, fmt.Errorf("put: %w", err)
	}
	a, err := b.inner.Put(ctx, b.prefix+name, r, size, opts)
	a.Name = strings.TrimPrefix(a.Name, b.prefix)
	return a, err
}

func (b *PrefixBucket) Delete(ctx context.Context, name string) error {
	return b.inner.Delete(ctx, b.prefix+name)
}

func (b *PrefixBucket) List(ctx context.Context, prefix, startAfter string, limit int) (ListPage, error) {
	if startAfter != "" {
		startAfter = b.prefix + startAfter
	}
	page, err := b.inner.List(ctx, b.prefix+prefix, startAfter, limit)
	for i := range page.Objects {
		page.Objects[i].Name = strings.TrimPrefix(page.Objects[i].Name, b.prefix)
	}
	return page, err
}

// Close closes the inner bucket.
func (b *PrefixBucket) Close() error { return b.inner.Close() }
