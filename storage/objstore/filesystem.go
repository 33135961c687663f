package objstore

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/shaledb/shale/internal/fsync"
	"github.com/shaledb/shale/internal/writeback"
)

// FilesystemBucket stores objects as files under a root directory: object
// "a/b/c" is the file <root>/a/b/c. It is the default backend of an embedded
// Shale.
//
// One process owns the directory: conditional writes are atomic against other
// goroutines of this process (renameat2(RENAME_NOREPLACE), or link(2), for
// IfAbsent; a bucket lock for IfMatch), not against another process writing
// the same folder.
//
// Every write goes to a temporary file in the object's directory, is fsynced,
// then renamed over the final name (without replacing, for IfAbsent), and the
// directory is fsynced, so a crash leaves either the old object or the new one.
// The fsyncs go through internal/fsync: on Linux the goroutine waiting for the
// disk leaves its scheduler P to other goroutines meanwhile.
// Temporary names start with TempFilePrefix; object names whose path elements
// start with it are refused, and listings skip such files.
//
// The ETag is the xxHash64 of the content and its length in quoted hex, the
// shape of S3's ETag for an object written in one piece. Put computes it
// while writing and stores it in an extended attribute (user.shale.etag) of
// the temporary file before publishing it, so the ETag belongs to the inode
// and can never describe other content. Reads take it from there. On a
// filesystem without user extended attributes, Attributes and IfMatch hash
// the file instead, and listings leave the ETag empty.
//
// A file and a directory cannot share a name, so unlike on S3 the objects
// "a/b" and "a/b/c" cannot both exist; such a Put fails with an error that is
// neither ErrPreconditionFailed nor ErrTransient.
type FilesystemBucket struct {
	root string
	// mu orders IfMatch puts (exclusive: compare then rename) against every
	// other change of a name (shared: a single rename, link or unlink).
	mu sync.RWMutex
	// pruneMu keeps directories in place while files are made in them: a
	// create holds it shared from making the directory until its file has
	// a name (an unnamed file does not keep a directory from looking
	// empty), and Delete drops empty directories only if it can take it
	// exclusively at once.
	pruneMu sync.RWMutex
	// noXattr is set once the filesystem refused an extended attribute.
	noXattr atomic.Bool
	// unnamed: creates if absent write an unnamed file and link it
	// (openUnnamed), found to work on the root when the bucket was made.
	unnamed bool
}

var (
	errXattrUnsupported   = errors.New("extended attributes not supported")
	errUnnamedUnsupported = errors.New("unnamed files (O_TMPFILE) not supported")
	errNoProcFD           = errors.New("cannot name an unnamed file: /proc/self/fd is missing")
)

// validETag accepts a stored ETag only in the form Put writes.
func validETag(b []byte) (string, bool) {
	if len(b) != 34 || b[0] != '"' || b[33] != '"' {
		return "", false
	}
	if _, err := hex.DecodeString(string(b[1:33])); err != nil {
		return "", false
	}
	return string(b), true
}

// TempFilePrefix starts the name of every temporary file the filesystem
// backend writes. Object names may not have path elements starting with it.
const TempFilePrefix = ".shale-tmp-"

const filesystemPageSize = 1000

// NewFilesystemBucket opens (creating it if needed) the directory dir as a
// bucket.
func NewFilesystemBucket(dir string) (*FilesystemBucket, error) {
	if dir == "" {
		return nil, errors.New("filesystem bucket: empty directory")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("filesystem bucket %s: %w", dir, err)
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, fmt.Errorf("filesystem bucket %s: %w", abs, classifyFSError(err))
	}
	st, err := os.Stat(abs)
	if err != nil {
		return nil, fmt.Errorf("filesystem bucket %s: %w", abs, classifyFSError(err))
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("filesystem bucket %s: not a directory", abs)
	}
	return &FilesystemBucket{root: abs, unnamed: unnamedWorks(abs)}, nil
}

// unnamedWorks reports whether an unnamed file made in dir can be given a
// name there (openUnnamed, linkUnnamed): the kernel, the filesystem and
// /proc all allow it. It leaves nothing behind.
func unnamedWorks(dir string) bool {
	f, err := openUnnamed(dir)
	if err != nil {
		return false
	}
	defer f.Close()
	probe := filepath.Join(dir, fmt.Sprintf("%sprobe-%d-%d", TempFilePrefix, os.Getpid(), time.Now().UnixNano()))
	if linkUnnamed(f, probe) != nil {
		return false
	}
	return os.Remove(probe) == nil
}

// Dir returns the bucket's root directory.
func (b *FilesystemBucket) Dir() string { return b.root }

func (b *FilesystemBucket) path(name string) string {
	return filepath.Join(b.root, filepath.FromSlash(name))
}

// checkFSName validates an object name for this backend.
func checkFSName(name string) error {
	if err := validateName(name); err != nil {
		return err
	}
	for part := range strings.SplitSeq(name, "/") {
		if strings.HasPrefix(part, TempFilePrefix) {
			return fmt.Errorf("object name %q has a path element starting with the reserved %q", name, TempFilePrefix)
		}
	}
	if strings.ContainsRune(name, 0) {
		return fmt.Errorf("object name %q contains a NUL byte", name)
	}
	return nil
}

// classifyFSError maps "does not exist" errors to ErrNotFound and leaves all
// others as they are: local I/O failures (disk full, read-only, EIO) are not
// fixed by retrying.
func classifyFSError(err error) error {
	if cannotExist(err) {
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	return err
}

// cannotExist reports whether err says that no object can be at the path it
// names: a part of it does not exist, is a file, or is longer than the
// filesystem allows a name to be (so no Put can have made it).
func cannotExist(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.ENAMETOOLONG)
}

// open opens the object's file for reading; a directory is not an object.
func (b *FilesystemBucket) open(name string) (*os.File, os.FileInfo, error) {
	if err := checkFSName(name); err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	f, err := os.Open(b.path(name))
	if err != nil {
		return nil, nil, classifyFSError(err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, nil, fmt.Errorf("%w: %s is not a regular file", ErrNotFound, name)
	}
	return f, st, nil
}

func (b *FilesystemBucket) Get(ctx context.Context, name string) (io.ReadCloser, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("get %s: %w", name, err)
	}
	f, _, err := b.open(name)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", name, err)
	}
	return f, nil
}

type sectionReadCloser struct {
	*io.SectionReader
	f *os.File
}

func (s sectionReadCloser) Close() error { return s.f.Close() }

func (b *FilesystemBucket) GetRange(ctx context.Context, name string, off, length int64) (io.ReadCloser, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("get %s: %w", name, err)
	}
	f, st, err := b.open(name)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", name, err)
	}
	start, end, err := clampRange(name, st.Size(), off, length)
	if err != nil {
		f.Close()
		return nil, err
	}
	return sectionReadCloser{io.NewSectionReader(f, start, end-start), f}, nil
}

func (b *FilesystemBucket) Attributes(ctx context.Context, name string) (Attributes, error) {
	if err := ctx.Err(); err != nil {
		return Attributes{}, fmt.Errorf("attributes %s: %w", name, err)
	}
	f, st, err := b.open(name)
	if err != nil {
		return Attributes{}, fmt.Errorf("attributes %s: %w", name, err)
	}
	defer f.Close()
	etag, err := openFileETag(ctx, f)
	if err != nil {
		return Attributes{}, fmt.Errorf("attributes %s: %w", name, err)
	}
	return Attributes{Name: name, Size: st.Size(), LastModified: st.ModTime(), ETag: etag}, nil
}

// openFileETag returns the ETag stored on f, or hashes f's content.
func openFileETag(ctx context.Context, f *os.File) (string, error) {
	if etag, ok := fileETagXattr(f); ok {
		return etag, nil
	}
	h := xxhash.New()
	n, err := io.Copy(h, ctxReader{ctx, f})
	if err != nil {
		return "", fmt.Errorf("hash content: %w", err)
	}
	return formatETag(h.Sum64(), n), nil
}

// fileETag returns the ETag of the file at path; ErrNotFound if it does not exist.
func fileETag(ctx context.Context, path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", classifyFSError(err)
	}
	defer f.Close()
	return openFileETag(ctx, f)
}

// ctxReader stops a long copy once ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

func (b *FilesystemBucket) Put(ctx context.Context, name string, r io.Reader, size int64, opts PutOptions) (Attributes, error) {
	if err := ctx.Err(); err != nil {
		return Attributes{}, fmt.Errorf("put %s: %w", name, err)
	}
	if err := checkFSName(name); err != nil {
		return Attributes{}, fmt.Errorf("put: %w", err)
	}
	if opts.IfAbsent && opts.IfMatch != "" {
		return Attributes{}, fmt.Errorf("put %s: IfAbsent and IfMatch both set", name)
	}
	final := b.path(name)
	dir := filepath.Dir(final)
	if opts.IfAbsent && b.unnamed {
		a, err := b.putUnnamed(ctx, name, final, dir, r, size)
		if err != errUnnamedUnsupported {
			return a, err
		}
		// A folder mounted below the root without O_TMPFILE: the body is
		// not read yet, the temporary name takes over.
	}

	tmp, err := b.createTemp(dir)
	if err != nil {
		return Attributes{}, fmt.Errorf("put %s: %w", name, err)
	}
	tmpName := tmp.Name()
	committed := false
	defer func() {
		if !committed {
			tmp.Close()
			os.Remove(tmpName)
		}
	}()

	attrs, err := b.writeDurable(ctx, name, tmp, r, size)
	if err != nil {
		return Attributes{}, err
	}
	if err := tmp.Close(); err != nil {
		return Attributes{}, fmt.Errorf("put %s: close: %w", name, err)
	}
	if err := ctx.Err(); err != nil {
		return Attributes{}, fmt.Errorf("put %s: %w", name, err)
	}

	switch {
	case opts.IfAbsent:
		b.mu.RLock()
		var linked bool
		linked, err = publishNoReplace(tmpName, final)
		b.mu.RUnlock()
		if err != nil {
			return Attributes{}, createErr(name, final, err)
		}
		// The object is in place; the temporary name is at most an extra link.
		committed = true
		if linked {
			if err := os.Remove(tmpName); err != nil {
				// The create succeeded; saying otherwise would make the
				// caller think it lost. RemoveTempFiles clears the leftover.
				slog.Warn("objstore: cannot remove a temporary link", "path", tmpName, "err", err)
			}
		}
	case opts.IfMatch != "":
		b.mu.Lock()
		cur, err := fileETag(ctx, final)
		if err == nil && cur == opts.IfMatch {
			err = os.Rename(tmpName, final)
			committed = err == nil
		} else if err == nil || errors.Is(err, ErrNotFound) {
			err = fmt.Errorf("if match %s: %w", opts.IfMatch, ErrPreconditionFailed)
		}
		b.mu.Unlock()
		if err != nil {
			return Attributes{}, fmt.Errorf("put %s: %w", name, err)
		}
	default:
		b.mu.RLock()
		err = os.Rename(tmpName, final)
		b.mu.RUnlock()
		if err != nil {
			return Attributes{}, fmt.Errorf("put %s: rename: %w", name, err)
		}
		committed = true
	}
	if err := fsync.Dir(dir); err != nil {
		return Attributes{}, fmt.Errorf("put %s: fsync directory: %w", name, err)
	}
	return attrs, nil
}

// createErr is the error of a create if absent whose link or rename to
// final failed with err.
func createErr(name, final string, err error) error {
	if errors.Is(err, fs.ErrExist) {
		if fi, serr := os.Lstat(final); serr == nil && !fi.Mode().IsRegular() {
			return fmt.Errorf("put %s: name is taken by a directory", name)
		}
		return fmt.Errorf("put %s if absent: %w", name, ErrPreconditionFailed)
	}
	return fmt.Errorf("put %s: link: %w", name, err)
}

// writeDurable writes the body r (size bytes, or any if negative) to f, a
// new file, with its ETag, fsyncs it, and returns the attributes of object
// name that f becomes.
func (b *FilesystemBucket) writeDurable(ctx context.Context, name string, f *os.File, r io.Reader, size int64) (Attributes, error) {
	h := xxhash.New()
	var (
		n   int64
		err error
	)
	// A large object goes to the disk while it is written, not all on its
	// fsync, so other puts' fsyncs do not wait behind it (writeback).
	w := io.MultiWriter(writeback.NewWriter(f), h)
	if br, ok := r.(*bytes.Reader); ok {
		// In memory (PutBytes): one write a writeback.Chunk, not one per 32 KiB.
		n, err = br.WriteTo(w)
	} else {
		n, err = io.Copy(w, ctxReader{ctx, r})
	}
	if err != nil {
		return Attributes{}, fmt.Errorf("put %s: write: %w", name, err)
	}
	if size >= 0 && n != size {
		return Attributes{}, fmt.Errorf("put %s: body has %d bytes, want %d", name, n, size)
	}
	etag := formatETag(h.Sum64(), n)
	if !b.noXattr.Load() {
		if err := setETagXattr(f, etag); err != nil {
			if !errors.Is(err, errXattrUnsupported) {
				return Attributes{}, fmt.Errorf("put %s: store ETag: %w", name, err)
			}
			b.noXattr.Store(true)
		}
	}
	if err := fsync.File(f); err != nil {
		return Attributes{}, fmt.Errorf("put %s: fsync: %w", name, err)
	}
	st, err := f.Stat()
	if err != nil {
		return Attributes{}, fmt.Errorf("put %s: %w", name, err)
	}
	return Attributes{Name: name, Size: n, LastModified: st.ModTime(), ETag: etag}, nil
}

// putUnnamed is Put if absent through an unnamed file: written and fsynced,
// then linked to its name, which it gets only if free.
func (b *FilesystemBucket) putUnnamed(ctx context.Context, name, final, dir string, r io.Reader, size int64) (Attributes, error) {
	b.pruneMu.RLock() // dir stays until the file is linked
	defer b.pruneMu.RUnlock()
	f, err := b.create(dir, openUnnamed)
	if err == errUnnamedUnsupported {
		return Attributes{}, err // nothing read: Put takes a temporary name
	}
	if err != nil {
		return Attributes{}, fmt.Errorf("put %s: %w", name, err)
	}
	defer f.Close()
	attrs, err := b.writeDurable(ctx, name, f, r, size)
	if err != nil {
		return Attributes{}, err
	}
	if err := ctx.Err(); err != nil {
		return Attributes{}, fmt.Errorf("put %s: %w", name, err)
	}
	// The folder holds no name of the file until the link; pruneMu keeps
	// this bucket's Deletes from pruning it meanwhile, and if anything
	// else removed it, it is made again.
	for range 8 {
		b.mu.RLock()
		err = linkUnnamed(f, final)
		b.mu.RUnlock()
		if !errors.Is(err, fs.ErrNotExist) {
			break
		}
		if merr := b.mkdirAll(dir); merr != nil && !errors.Is(merr, fs.ErrNotExist) {
			return Attributes{}, fmt.Errorf("put %s: %w", name, merr)
		}
	}
	if err != nil {
		return Attributes{}, createErr(name, final, err)
	}
	if err := fsync.Dir(dir); err != nil {
		return Attributes{}, fmt.Errorf("put %s: fsync directory: %w", name, err)
	}
	return attrs, nil
}

// createTemp creates a temporary file in dir, creating dir (and fsyncing the
// parents of every directory it creates) first. A concurrent Delete may remove
// a directory it just created, so that case is retried.
func (b *FilesystemBucket) createTemp(dir string) (*os.File, error) {
	b.pruneMu.RLock() // dir stays until the file has its name
	defer b.pruneMu.RUnlock()
	return b.create(dir, func(dir string) (*os.File, error) {
		return os.CreateTemp(dir, TempFilePrefix+"*")
	})
}

// create makes a new file in dir with open, creating dir as createTemp
// does: a directory a concurrent Delete removes is made again.
func (b *FilesystemBucket) create(dir string, open func(dir string) (*os.File, error)) (*os.File, error) {
	var lastErr error
	for range 8 {
		if err := b.mkdirAll(dir); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				lastErr = err // a parent went away under us
				continue
			}
			if errors.Is(err, syscall.ENOTDIR) || errors.Is(err, fs.ErrExist) {
				return nil, fmt.Errorf("a path element is taken by an object: %w", err)
			}
			return nil, err
		}
		f, err := open(dir)
		if err == nil {
			return f, nil
		}
		// ext4 answers EPERM, not ENOENT, to an unnamed file (O_TMPFILE)
		// in a directory removed after the lookup found it.
		if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.EPERM) {
			return nil, err
		}
		lastErr = err
	}
	return nil, lastErr
}

// mkdirAll creates dir and its missing parents inside the root and fsyncs the
// directory holding each one it creates, so a new object's path survives a
// crash.
func (b *FilesystemBucket) mkdirAll(dir string) error {
	if st, err := os.Stat(dir); err == nil {
		if !st.IsDir() {
			return fmt.Errorf("%s: %w", dir, syscall.ENOTDIR)
		}
		return nil
	}
	rel, err := filepath.Rel(b.root, dir)
	if err != nil {
		return err
	}
	cur := b.root
	for part := range strings.SplitSeq(rel, string(filepath.Separator)) {
		parent := cur
		cur = filepath.Join(cur, part)
		err := os.Mkdir(cur, 0o755)
		switch {
		case err == nil:
			if err := fsync.Dir(parent); err != nil {
				return err
			}
		case errors.Is(err, fs.ErrExist):
			st, serr := os.Stat(cur)
			if serr != nil {
				return serr
			}
			if !st.IsDir() {
				return fmt.Errorf("%s: %w", cur, syscall.ENOTDIR)
			}
		default:
			return err
		}
	}
	return nil
}

func (b *FilesystemBucket) Delete(ctx context.Context, name string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("delete %s: %w", name, err)
	}
	if err := checkFSName(name); err != nil {
		return nil // no such object can exist
	}
	p := b.path(name)
	if st, err := os.Lstat(p); err != nil || st.IsDir() {
		return nil
	}
	b.mu.RLock()
	err := os.Remove(p)
	b.mu.RUnlock()
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			return nil
		}
		return fmt.Errorf("delete %s: %w", name, err)
	}
	dir := filepath.Dir(p)
	if err := fsync.Dir(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("delete %s: fsync directory: %w", name, err)
	}
	// Best effort: drop directories left empty, up to the root, unless a
	// create is under way (its directory may be one of them).
	if b.pruneMu.TryLock() {
		for dir != b.root && strings.HasPrefix(dir, b.root) {
			if os.Remove(dir) != nil {
				break
			}
			dir = filepath.Dir(dir)
		}
		b.pruneMu.Unlock()
	}
	return nil
}

// List walks the tree in S3 byte order without reading more of it than the
// page needs. Within one directory, a file's names sort by its name and a
// subdirectory's by its name plus '/', and the names under different entries
// never interleave (none but d's own start with "d/"), so visiting entries in
// that order yields names in byte order.
func (b *FilesystemBucket) List(ctx context.Context, prefix, startAfter string, limit int) (ListPage, error) {
	if err := ctx.Err(); err != nil {
		return ListPage{}, fmt.Errorf("list %s: %w", prefix, err)
	}
	if limit <= 0 || limit > filesystemPageSize {
		limit = filesystemPageSize
	}
	l := fsLister{ctx: ctx, prefix: prefix, startAfter: startAfter, limit: limit}
	// Start at the deepest directory that the prefix fixes.
	startDir := ""
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		startDir = prefix[:i]
	}
	if startDir != "" && checkFSName(startDir) != nil {
		return ListPage{}, nil
	}
	err := l.walk(b.path(startDir), startDir)
	if err != nil && !errors.Is(err, errPageFull) {
		// No object's name can start with a prefix whose folder cannot exist.
		if cannotExist(err) {
			return ListPage{}, nil
		}
		return ListPage{}, fmt.Errorf("list %s: %w", prefix, err)
	}
	page := ListPage{Objects: l.out}
	if len(page.Objects) > limit {
		page.Objects, page.More = page.Objects[:limit], true
	}
	return page, nil
}

var errPageFull = errors.New("page full")

type fsLister struct {
	ctx        context.Context
	prefix     string
	startAfter string
	limit      int
	out        []Attributes
}

type fsEntry struct {
	key   string // object name, plus '/' for a directory
	entry fs.DirEntry
}

// walk lists directory dir, whose object-name prefix is rel ("" for the root).
func (l *fsLister) walk(dir, rel string) error {
	if err := l.ctx.Err(); err != nil {
		return err
	}
	des, err := os.ReadDir(dir)
	if err != nil {
		if rel != "" && (errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)) {
			return nil // removed while we walked
		}
		return err
	}
	base := rel
	if base != "" {
		base += "/"
	}
	entries := make([]fsEntry, 0, len(des))
	for _, de := range des {
		n := de.Name()
		if strings.HasPrefix(n, TempFilePrefix) {
			continue
		}
		key := base + n
		if de.IsDir() {
			key += "/"
		} else if !de.Type().IsRegular() {
			continue
		}
		entries = append(entries, fsEntry{key, de})
	}
	slices.SortFunc(entries, func(a, b fsEntry) int { return strings.Compare(a.key, b.key) })
	for _, e := range entries {
		if e.entry.IsDir() {
			// Names under this directory are in [key, key with '/' -> '0').
			if !strings.HasPrefix(e.key, l.prefix) && !strings.HasPrefix(l.prefix, e.key) {
				continue
			}
			if l.startAfter >= e.key[:len(e.key)-1]+"0" {
				continue
			}
			if err := l.walk(filepath.Join(dir, e.entry.Name()), e.key[:len(e.key)-1]); err != nil {
				return err
			}
			continue
		}
		if e.key <= l.startAfter || !strings.HasPrefix(e.key, l.prefix) {
			continue
		}
		info, err := e.entry.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue // deleted while we walked
			}
			return err
		}
		etag, _ := pathETagXattr(filepath.Join(dir, e.entry.Name()))
		l.out = append(l.out, Attributes{Name: e.key, Size: info.Size(), LastModified: info.ModTime(), ETag: etag})
		if len(l.out) > l.limit {
			return errPageFull
		}
	}
	return nil
}

// RemoveTempFiles deletes the temporary files that writes interrupted by a
// crash left behind, if they were last modified before olderThan ago (a
// running write's file is younger), and returns how many it removed. It
// walks the whole tree; call it at startup or now and then, not per request.
func (b *FilesystemBucket) RemoveTempFiles(ctx context.Context, olderThan time.Duration) (int, error) {
	cutoff := time.Now().Add(-olderThan)
	removed := 0
	err := filepath.WalkDir(b.root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed while we walked
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if d.IsDir() || !strings.HasPrefix(d.Name(), TempFilePrefix) {
			return nil
		}
		info, err := d.Info()
		if err != nil || !info.ModTime().Before(cutoff) {
			return nil
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		removed++
		return nil
	})
	if err != nil {
		return removed, fmt.Errorf("remove temporary files under %s: %w", b.root, err)
	}
	return removed, nil
}

// Close does nothing; the files stay.
func (b *FilesystemBucket) Close() error { return nil }
