package storage

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/metadata"

	"github.com/shaledb/shale/storage/lsm"
)

// Metric metadata (type, unit, help of a metric family) lives in the LSM
// under the partition it was received in ('P' part 'M' family), so it
// survives restarts, a reader sees the writer's, and retention drops it with
// its partition. A family's metadata is written again in each partition it
// is received in, and when it changes; the newest partition's wins.

// metaEntry is a family's newest metadata and the partition it was written
// in.
type metaEntry struct {
	md   metadata.Metadata
	part int64
}

// metadataStore is the writer's view of the metadata in the LSM, and a
// reader's cache of it.
type metadataStore struct {
	mu sync.RWMutex
	m  map[string]metaEntry
	// loadedAt is when a reader last loaded m from the LSM.
	loadedAt time.Time
}

func newMetadataStore() *metadataStore { return &metadataStore{m: map[string]metaEntry{}} }

// metaVersion is the layout of a metadata value: version(1), then type,
// unit and help, each uvarint length + bytes.
const metaVersion = 1

func encodeMetadata(dst []byte, md metadata.Metadata) []byte {
	dst = append(dst, metaVersion)
	for _, s := range []string{string(md.Type), md.Unit, md.Help} {
		dst = binary.AppendUvarint(dst, uint64(len(s)))
		dst = append(dst, s...)
	}
	return dst
}

var errBadMetadata = errors.New("corrupt metadata value")

func decodeMetadata(b []byte) (metadata.Metadata, error) {
	if len(b) == 0 || b[0] != metaVersion {
		return metadata.Metadata{}, fmt.Errorf("%w: unknown version", errBadMetadata)
	}
	b = b[1:]
	var f [3]string
	for i := range f {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			return metadata.Metadata{}, fmt.Errorf("%w: bad length", errBadMetadata)
		}
		f[i] = string(b[k : k+int(n)])
		b = b[k+int(n):]
	}
	if len(b) != 0 {
		return metadata.Metadata{}, fmt.Errorf("%w: %d trailing bytes", errBadMetadata, len(b))
	}
	return metadata.Metadata{Type: model.MetricType(f[0]), Unit: f[1], Help: f[2]}, nil
}

func metaKey(part int64, family string) []byte {
	return append(partSub(part, subMetadata, len(family)), family...)
}

// setMetadata records the metadata of the families of one commit, writing
// those new or changed, or not yet written in the commit's partition: that
// of its newest sample t, else of the head's newest sample, else of now.
func (db *DB) setMetadata(ctx context.Context, ms []pendingMetadata, t int64) error {
	if t == math.MinInt64 {
		t = db.head.maxT.Load()
	}
	if t == math.MinInt64 {
		t = db.now().UnixMilli()
	}
	// The partition is registered (so that a reader and a restart find its
	// metadata) and open in the head (a flush writes it out).
	p, err := db.headPartFor(ctx, t)
	if err != nil {
		return err
	}
	part := db.partitionOf(t)
	if p != nil {
		part = p.start
	}
	s := db.meta
	var b lsm.Batch
	s.mu.Lock()
	for _, m := range ms {
		if m.family == "" {
			continue
		}
		cur, known := s.m[m.family]
		if known && cur.md == m.m && cur.part >= part {
			continue
		}
		// Every family has a series: more families than the head takes
		// series are a sender's names exploding, which the series limit
		// keeps out of the head but not out of this map (remote write 1.0
		// sends metadata apart from samples).
		if !known && db.opts.MaxHeadSeries > 0 && len(s.m) >= db.opts.MaxHeadSeries {
			db.metrics.metadataRefused.Inc()
			continue
		}
		s.m[m.family] = metaEntry{md: m.m, part: part}
		b.Put(metaKey(part, m.family), encodeMetadata(nil, m.m))
	}
	s.mu.Unlock()
	if b.Len() == 0 {
		return nil
	}
	return db.write(ctx, &b, true)
}

// loadMetadata reads the metadata of every partition, oldest first, so the
// newest partition's wins.
func (db *DB) loadMetadata(ctx context.Context) (map[string]metaEntry, error) {
	var parts []int64
	err := db.scan(ctx, []byte{keyRegistry}, []byte{keyRegistry + 1}, func(k, _ []byte) error {
		parts = append(parts, getPart(k[1:]))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("load metadata: %w", err)
	}
	out := map[string]metaEntry{}
	for _, part := range parts {
		pre := partSub(part, subMetadata, 0)
		err := db.scan(ctx, pre, prefixEnd(pre), func(k, v []byte) error {
			md, err := decodeMetadata(v)
			if err != nil {
				return fmt.Errorf("metadata key %x: %w", k, err)
			}
			out[string(k[len(pre):])] = metaEntry{md: md, part: part}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("load metadata of partition %d: %w", part, err)
		}
	}
	return out, nil
}

// dropMetadataBefore forgets the families whose newest metadata is in a
// partition before part (dropped by retention).
func (db *DB) dropMetadataBefore(part int64) {
	s := db.meta
	s.mu.Lock()
	defer s.mu.Unlock()
	for f, e := range s.m {
		if e.part < part {
			delete(s.m, f)
		}
	}
}

// readerMetadataTTL is how long a reader serves metadata it loaded before
// loading it again.
const readerMetadataTTL = 5 * time.Second

// MetricMetadata returns the metadata of each metric family, or of the
// family named metric only when it is not empty. The map is the caller's.
func (db *DB) MetricMetadata(ctx context.Context, metric string) (map[string][]metadata.Metadata, error) {
	s := db.meta
	if db.readOnly {
		s.mu.RLock()
		stale := time.Since(s.loadedAt) > readerMetadataTTL
		s.mu.RUnlock()
		if stale {
			if err := db.followHeadLog(ctx); err != nil {
				return nil, fmt.Errorf("follow the writer's head log: %w", err)
			}
			m, err := db.loadMetadata(ctx)
			if err != nil {
				return nil, err
			}
			s.mu.Lock()
			s.m, s.loadedAt = m, time.Now()
			s.mu.Unlock()
		}
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := map[string][]metadata.Metadata{}
	for n, e := range s.m {
		if metric == "" || n == metric {
			out[n] = []metadata.Metadata{e.md}
		}
	}
	return out, nil
}
