package lsm

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shaledb/shale/storage/objstore"
)

// garbageRounds writes, flushes and compacts so that replaced tables and
// WAL objects already in tables wait for collection.
func garbageRounds(t *testing.T, db *DB) {
	t.Helper()
	ctx := context.Background()
	for round := 0; round < 4; round++ {
		flushKeys(t, db, fmt.Sprintf("r%d-", round), 50)
	}
	if err := db.Compact(ctx); err != nil {
		t.Fatal(err)
	}
}

// onlyLive fails unless the prefix holds just the tables of the newest
// manifest and no WAL object at or below what it still needs.
func onlyLive(t *testing.T, b objstore.Bucket) {
	t.Helper()
	m, _ := newMetrics(nil) // a nil registry registers nothing and cannot fail
	_, man, err := newStore(b, "db", nil, m, nil, time.Millisecond, time.Millisecond).latestManifest(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	live := man.tableIDs()
	for _, name := range listNames(t, b, "db/sst/") {
		id := strings.TrimSuffix(strings.TrimPrefix(name, "db/sst/"), ".sst")
		if !live[id] {
			t.Errorf("table %s is not in the last manifest but was kept", name)
		}
	}
	p := newPaths("db")
	for _, name := range listNames(t, b, "db/wal/") {
		if id, _ := p.parseWAL(name); id <= man.walKeepAfter() {
			t.Errorf("wal %s at or below %d was kept", name, man.walKeepAfter())
		}
	}
}

func TestCloseCollectsWithoutReaders(t *testing.T) {
	b := objstore.NewMemoryBucket()
	db := openDB(t, b, testOptions(), Components{})
	garbageRounds(t, db)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	onlyLive(t, b)
	db = openDB(t, b, testOptions(), Components{})
	defer db.Close()
	if v, ok := mustGet(t, db, "r0-0001"); !ok || v != strings.Repeat("v", 50) {
		t.Fatalf("after close and reopen: %q,%v", v, ok)
	}
}

func TestCloseKeepsGarbageForLiveReaders(t *testing.T) {
	ctx := context.Background()
	b := objstore.NewMemoryBucket()
	clock := newFakeClock()
	db := openDB(t, b, testOptions(), Components{Clock: clock})
	rdr, err := OpenReader(ctx, b, "db", ReaderOptions{RetryBackoff: time.Millisecond}, Components{Merge: concatMerge})
	if err != nil {
		t.Fatal(err)
	}
	if len(listNames(t, b, "db/readers/")) != 1 {
		t.Fatal("an open reader has no lease")
	}
	garbageRounds(t, db)
	tables := len(listNames(t, b, "db/sst/"))
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if got := len(listNames(t, b, "db/sst/")); got != tables {
		t.Fatalf("close with a live reader left %d of %d tables", got, tables)
	}
	if err := rdr.Close(); err != nil {
		t.Fatal(err)
	}
	if n := len(listNames(t, b, "db/readers/")); n != 0 {
		t.Fatalf("%d leases after the reader closed", n)
	}

	// A lease not renewed for its time to live no longer holds garbage.
	rdr, err = OpenReader(ctx, b, "db", ReaderOptions{RetryBackoff: time.Millisecond}, Components{Merge: concatMerge})
	if err != nil {
		t.Fatal(err)
	}
	defer rdr.Close()
	db = openDB(t, b, testOptions(), Components{Clock: clock})
	garbageRounds(t, db)
	// The reader stamps its lease with the real clock, which has moved
	// on since the fake one started (seconds, under the race detector on
	// a busy machine): past the lease's last renewal, not the fake start.
	clock.Advance(time.Since(clock.Now()) + readerLeaseTTL + time.Second)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	onlyLive(t, b)
}
