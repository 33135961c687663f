// Package objstore is the gateway between Shale and an object store: a small
// Bucket interface, its backends (local filesystem, S3, in-memory) and
// decorators (retries, metrics, fault injection).
//
// Every backend reports failures through the sentinel errors below, so callers
// never inspect SDK types: errors.Is(err, ErrNotFound), ErrPreconditionFailed
// and ErrTransient say all a caller needs to decide what to do.
package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"
)

// ErrNotFound means the named object does not exist.
var ErrNotFound = errors.New("object not found")

// ErrPreconditionFailed means a conditional write lost: the object already
// existed (PutOptions.IfAbsent) or its ETag no longer matched (PutOptions.IfMatch).
var ErrPreconditionFailed = errors.New("precondition failed")

// ErrTransient marks an error that a retry may fix (timeouts, throttling,
// 5xx answers, broken connections).
var ErrTransient = errors.New("transient object store error")

// ErrInvalidRange means a ranged read starts past the end of the object.
var ErrInvalidRange = errors.New("invalid range")

// Transient wraps err so that errors.Is(result, ErrTransient) holds.
func Transient(err error) error {
	if err == nil || errors.Is(err, ErrTransient) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrTransient, err)
}

// IsNotFound reports whether err says the object does not exist.
func IsNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

// IsPreconditionFailed reports whether err says a conditional write lost.
func IsPreconditionFailed(err error) bool { return errors.Is(err, ErrPreconditionFailed) }

// IsTransient reports whether a retry may fix err.
func IsTransient(err error) bool { return errors.Is(err, ErrTransient) }

// Attributes describe one stored object.
type Attributes struct {
	// Name is the full object name (key) in the bucket.
	Name string
	// Size is the object's length in bytes.
	Size int64
	// LastModified is when the object was last written, as the store reports it.
	LastModified time.Time
	// ETag identifies the object's current content; it is what PutOptions.IfMatch
	// compares against. Opaque; compare only for equality.
	ETag string
}

// PutOptions make a Put conditional. The zero value is an unconditional write.
type PutOptions struct {
	// IfAbsent writes only if no object of that name exists; otherwise Put
	// returns ErrPreconditionFailed and the existing object is untouched.
	// Exactly one of many concurrent IfAbsent puts of one name succeeds.
	IfAbsent bool
	// IfMatch, when not empty, replaces the object only if its current ETag
	// equals IfMatch; otherwise Put returns ErrPreconditionFailed (also when the
	// object does not exist). Setting both IfAbsent and IfMatch is an error.
	IfMatch string
}

// ListPage is one page of a listing.
type ListPage struct {
	// Objects are sorted by name in byte order, as S3 lists them. Their ETag
	// may be empty (the filesystem backend does not hash listed files); call
	// Attributes for it.
	Objects []Attributes
	// More is true when objects after the last one returned remain.
	More bool
}

// Bucket is an object store namespace. Object names are '/'-separated paths
// without a leading slash. Implementations are safe for concurrent use.
//
// Writes are atomic: a reader sees either the old object or the new one in
// full, never a partial write.
type Bucket interface {
	// Get returns a reader of the whole object. The caller must close it.
	// ErrNotFound if the object does not exist.
	Get(ctx context.Context, name string) (io.ReadCloser, error)

	// GetRange returns a reader of the bytes [off, off+length) of the object;
	// length < 0 reads to the end. A range running past the end is cut at the
	// end; one starting at or past the end of a non-empty object gives
	// ErrInvalidRange. The caller must close the reader.
	GetRange(ctx context.Context, name string, off, length int64) (io.ReadCloser, error)

	// Attributes returns the object's size, modification time and ETag.
	Attributes(ctx context.Context, name string) (Attributes, error)

	// Put stores the object read from r, replacing any object of that name
	// unless opts make the write conditional. size is r's length if known,
	// or -1; a body of another length, or one whose Read fails, stores
	// nothing. It returns the new object's attributes (Name, Size and ETag are
	// always set).
	Put(ctx context.Context, name string, r io.Reader, size int64, opts PutOptions) (Attributes, error)

	// Delete removes the object. Deleting an object that does not exist is
	// not an error (S3 semantics).
	Delete(ctx context.Context, name string) error

	// List returns up to limit objects (a backend may return fewer) whose
	// names start with prefix and sort strictly after startAfter, in byte
	// order. The listing is flat: '/' has no special meaning. limit <= 0 means
	// the backend's page size.
	List(ctx context.Context, prefix, startAfter string, limit int) (ListPage, error)

	// Close releases the bucket's resources.
	Close() error
}

// Iter calls fn for every object whose name starts with prefix, in byte
// order, fetching page after page. It stops at the first error fn returns
// and returns it.
func Iter(ctx context.Context, b Bucket, prefix string, fn func(Attributes) error) error {
	after := ""
	for {
		page, err := b.List(ctx, prefix, after, 0)
		if err != nil {
			return err
		}
		for _, a := range page.Objects {
			if err := fn(a); err != nil {
				return err
			}
		}
		if !page.More || len(page.Objects) == 0 {
			return nil
		}
		after = page.Objects[len(page.Objects)-1].Name
	}
}

// ReadAll returns the whole object. An error while reading the body keeps the
// backend's classification (a broken S3 response is ErrTransient).
func ReadAll(ctx context.Context, b Bucket, name string) ([]byte, error) {
	rc, err := b.Get(ctx, name)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	return data, nil
}

// ReadRange returns the bytes [off, off+length) of the object (see GetRange).
func ReadRange(ctx context.Context, b Bucket, name string, off, length int64) ([]byte, error) {
	rc, err := b.GetRange(ctx, name, off, length)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	if length < 0 {
		data, err := io.ReadAll(rc)
		if err != nil {
			return nil, fmt.Errorf("read %s [%d,end): %w", name, off, err)
		}
		return data, nil
	}
	// The range may be cut at the end of the object: fewer bytes are fine.
	data := make([]byte, length)
	n, err := io.ReadFull(rc, data)
	if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
		return nil, fmt.Errorf("read %s [%d,+%d): %w", name, off, length, err)
	}
	return data[:n], nil
}

// PutBytes stores data under name with opts.
func PutBytes(ctx context.Context, b Bucket, name string, data []byte, opts PutOptions) (Attributes, error) {
	return b.Put(ctx, name, bytesReader(data), int64(len(data)), opts)
}
