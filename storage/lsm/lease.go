package lsm

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/shaledb/shale/storage/objstore"
)

// Reader leases let a writer that closes cleanly know whether anyone may
// still read older manifests. Each Reader keeps an object readers/<id>
// holding when it last rewrote it by its own clock (renewed=<RFC 3339
// time>) and rewrites it every readerLeaseInterval; a lease that neither
// the store's clock nor that stamp says was rewritten within readerLeaseTTL
// is stale (leaseAge). With no live lease, Close deletes
// garbage at once instead of leaving it for the grace period (tables
// replaced by compactions, WAL objects already in tables), so a stopped
// writer's prefix holds only what its last manifest needs.
const (
	readerLeaseInterval = 30 * time.Second
	readerLeaseTTL      = 3 * readerLeaseInterval
)

func newLeaseID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// renewLease rewrites the reader's lease when it is due. The caller holds
// refreshMu.
func (r *Reader) renewLease(ctx context.Context) error {
	now := r.clock.Now()
	if !r.leaseAt.IsZero() && now.Sub(r.leaseAt) < readerLeaseInterval {
		return nil
	}
	stamp := "renewed=" + leaseTime(now)
	if err := r.s.put(ctx, "lease", r.s.paths.lease(r.leaseID), []byte(stamp)); err != nil {
		return fmt.Errorf("lsm reader: write lease: %w", err)
	}
	r.leaseAt = now
	return nil
}

// dropLease deletes the reader's lease (best effort, on Close).
func (r *Reader) dropLease() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.s.delete(ctx, r.s.paths.lease(r.leaseID)); err != nil {
		r.logger.Warn("lsm reader: could not delete its lease; it goes stale", "err", err)
	}
}

// liveReaders counts the leases rewritten within readerLeaseTTL.
func (db *DB) liveReaders(ctx context.Context) (int, error) {
	objs, err := db.s.list(ctx, db.s.paths.readersDir(), "")
	if err != nil {
		return 0, err
	}
	now := db.clock.Now()
	n := 0
	for _, o := range objs {
		age, err := db.readerLeaseAge(ctx, now, o)
		if err != nil {
			return 0, err
		}
		if age < readerLeaseTTL {
			n++
		}
	}
	return n, nil
}

// readerLeaseAge is leaseAge of the reader lease o, listed: its body is read
// only when the store's clock alone says it is stale. A lease gone since the
// listing is as old as can be.
func (db *DB) readerLeaseAge(ctx context.Context, now time.Time, o objstore.Attributes) (time.Duration, error) {
	age := now.Sub(o.LastModified)
	if age < readerLeaseTTL {
		return age, nil
	}
	b, err := db.s.get(ctx, o.Name)
	if isNotFound(err) {
		return age, nil
	}
	if err != nil {
		return 0, err
	}
	return leaseAge(now, o.LastModified, string(b)), nil
}

// collectAtClose deletes every object the latest manifest does not need
// when no reader holds a live lease. The DB's own iterators must be closed.
func (db *DB) collectAtClose(ctx context.Context) {
	n, err := db.liveReaders(ctx)
	if err != nil {
		db.logger.Warn("lsm: could not list reader leases; garbage left for the grace period", "err", err)
		return
	}
	if n > 0 {
		db.logger.Info("lsm: readers hold leases; garbage left for the grace period", "readers", n)
		return
	}
	if _, err := db.collectGarbage(ctx, 0, 0); err != nil {
		db.logger.Warn("lsm: garbage collection at close failed", "err", err)
	}
}

// The writer's lease: the writer keeps an object "writer" naming itself and
// rewrites it every writerLeaseInterval, and deletes it when it closes. A
// writer that opens while that lease is fresh either refuses
// (Options.RefuseLiveWriter: on a local folder a second writer is an
// accident, two processes started on one path) or fences the live writer
// and says so loudly (on S3, where a new writer taking over is how a
// writer moves).
const (
	writerLeaseInterval = 15 * time.Second
	writerLeaseTTL      = 3 * writerLeaseInterval
)

// ErrLiveWriter is returned by Open with Options.RefuseLiveWriter when
// another writer's lease is fresh.
var ErrLiveWriter = errors.New("lsm: another writer is live on this prefix")

// writerLease is who holds the writer's lease: the process, since when it
// writes, and when it renewed the lease by its own clock.
func writerLease(epoch uint64, addr string, started, renewed time.Time) []byte {
	host, _ := os.Hostname()
	b := fmt.Appendf(nil, "host=%s pid=%d epoch=%d started=%s renewed=%s", host, os.Getpid(), epoch,
		leaseTime(started), leaseTime(renewed))
	if addr != "" {
		b = fmt.Appendf(b, " addr=%s", strings.ReplaceAll(addr, " ", ""))
	}
	return b
}

// LeaseField returns the value of key in a writer lease ("" if absent).
func LeaseField(lease, key string) string {
	for _, f := range strings.Fields(lease) {
		if k, v, ok := strings.Cut(f, "="); ok && k == key {
			return v
		}
	}
	return ""
}

// WriterLease returns the live writer's lease ("" when there is none, or
// it is stale): host, pid, epoch, start time, last renewal and, when the
// writer gave it (Options.Address), where it serves. Parse it with
// LeaseField.
func (r *Reader) WriterLease(ctx context.Context) (string, error) {
	name := r.s.paths.writerLease()
	attrs, err := r.s.attributes(ctx, name)
	if isNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	b, err := r.s.get(ctx, name)
	if isNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	if leaseAge(r.clock.Now(), attrs.LastModified, string(b)) >= writerLeaseTTL {
		return "", nil
	}
	return string(b), nil
}

// leaseTimeLayout is the layout of a lease's times (started, renewed):
// leaseTime writes them, leaseAge reads renewed back.
const leaseTimeLayout = time.RFC3339

func leaseTime(t time.Time) string { return t.UTC().Format(leaseTimeLayout) }

// leaseAge is how long ago a lease (a writer's or a reader's) was renewed:
// by the store's clock (the object's time) or by its holder's (its renewed
// field), whichever says more recently. A store whose clock is behind this
// host's would otherwise make a live writer's lease look stale, and an
// import or a second writer fence it without a word (or a writer's close
// delete what a live reader reads); the holder's own stamp, from a host kept
// in time as this one (often this one), says it is live.
func leaseAge(now, modified time.Time, lease string) time.Duration {
	age := now.Sub(modified)
	if renewed, err := time.Parse(leaseTimeLayout, LeaseField(lease, "renewed")); err == nil {
		age = min(age, now.Sub(renewed))
	}
	return age
}

// checkLiveWriter looks for a fresh lease of another writer before this one
// fences it.
func (db *DB) checkLiveWriter(ctx context.Context) error {
	name := db.s.paths.writerLease()
	attrs, err := db.s.attributes(ctx, name)
	if isNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("lsm open: read the writer lease: %w", err)
	}
	who, err := db.s.get(ctx, name)
	if isNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("lsm open: read the writer lease: %w", err)
	}
	age := leaseAge(db.clock.Now(), attrs.LastModified, string(who))
	if age >= writerLeaseTTL {
		return nil
	}
	if leaseHolderGone(string(who)) {
		db.logger.Info("lsm: the last writer's lease is fresh but its process is gone (a crash); taking over", "lease", string(who))
		return nil
	}
	if db.opts.RefuseLiveWriter {
		return fmt.Errorf("%w: its lease (%s) was renewed %s ago; stop it first, or take over on purpose", ErrLiveWriter, who, age.Round(time.Second))
	}
	db.logger.Warn("lsm: another writer is live on this prefix; fencing it, it will stop writing and exit", "lease", string(who), "renewed_ago", age.Round(time.Second))
	return nil
}

// leaseHolderGone reports whether a lease names a process on this host that
// no longer runs: a writer killed a moment ago, whose restart must not wait
// for its lease to go stale.
func leaseHolderGone(lease string) bool {
	host := LeaseField(lease, "host")
	pid, _ := strconv.Atoi(LeaseField(lease, "pid"))
	me, err := os.Hostname()
	if err != nil || host != me || pid <= 0 {
		return false
	}
	return !processRuns(pid)
}

// renewWriterLease writes the writer's lease.
func (db *DB) renewWriterLease(ctx context.Context) error {
	return db.s.put(ctx, "lease", db.s.paths.writerLease(), writerLease(db.epoch, db.opts.Address, db.openedAt, db.clock.Now()))
}

// dropWriterLease deletes the writer's lease (best effort, on Close).
func (db *DB) dropWriterLease(ctx context.Context) {
	if err := db.s.delete(ctx, db.s.paths.writerLease()); err != nil {
		db.logger.Warn("lsm: could not delete the writer lease; it goes stale", "err", err)
	}
}
