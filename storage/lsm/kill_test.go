package lsm

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shaledb/shale/storage/objstore"
)

const killChildEnv = "SHALE_LSM_KILL_CHILD_DIR"

// TestKillProcess runs a writer in a child process on a filesystem bucket,
// kills it with SIGKILL while it writes, and checks that every write it
// reported as acknowledged (durable in the WAL) is there after reopening.
func TestKillProcess(t *testing.T) {
	acked, b := killChildAfter(t, killChildEnv, 300, killChild)
	defer b.Close()
	db := openDB(t, b, testOptions(), Components{})
	defer db.Close()
	wantAcked(t, db, "reopened", acked)
}

// wantAcked fails unless db holds each acknowledged key of a killed child
// with the value the child wrote.
func wantAcked(t *testing.T, db *DB, what string, acked []string) {
	t.Helper()
	for _, k := range acked {
		if v, ok := mustGet(t, db, k); !ok || v != "value-"+k {
			t.Fatalf("%s: acknowledged write %s lost after kill -9: %q,%v", what, k, v, ok)
		}
	}
}

// exitOn ends a child process on err, reporting it.
func exitOn(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
}

// killChild writes until killed, printing each acknowledged key.
func killChild(dir string) {
	b, err := objstore.NewFilesystemBucket(dir)
	exitOn(err)
	opts := testOptions()
	opts.MemtableBytes = 8 << 10
	opts.L0CompactionTrigger = 2
	opts.CompactionInterval = time.Millisecond
	db, err := Open(context.Background(), b, "db", opts, Components{Merge: concatMerge})
	exitOn(err)
	w := bufio.NewWriter(os.Stdout)
	for i := 0; ; i++ {
		k := fmt.Sprintf("key%06d", i)
		exitOn(db.Put(context.Background(), []byte(k), []byte("value-"+k)))
		fmt.Fprintf(w, "ack %s\n", k)
		w.Flush()
	}
}

const killInFlightEnv = "SHALE_LSM_KILL_INFLIGHT_DIR"

// TestKillProcessInFlight kills a writer whose WAL objects are written
// several at once (each put delayed at random, so that several are in
// flight when the process dies and they land in any order): every acknowledged write is there after reopening, and
// each writer's unacknowledged writes that survive are a prefix of what it
// wrote after its last acknowledged one (no object replayed past one that
// was never stored).
func TestKillProcessInFlight(t *testing.T) {
	acked, b := killChildAfter(t, killInFlightEnv, 2000, killInFlightChild)
	defer b.Close()
	for round := range 2 { // the second writer must find what the first found
		db := openDB(t, b, testOptions(), Components{})
		wantAcked(t, db, fmt.Sprintf("round %d", round), acked)
		for w := range killInFlightWriters {
			gap := -1
			for i := 0; ; i++ {
				k := fmt.Sprintf("w%d-%06d", w, i)
				_, ok := mustGet(t, db, k)
				if !ok && gap < 0 {
					gap = i
				}
				if ok && gap >= 0 {
					t.Fatalf("round %d: writer %d's write %d survived without its write %d", round, w, i, gap)
				}
				if gap >= 0 && i > gap+2000 {
					break
				}
			}
		}
		crash(db)
	}
}

const killInFlightWriters = 8

// killInFlightChild writes from several goroutines through a store whose
// puts are slow until killed, printing each acknowledged key. Each writer
// awaits durability every 32nd write only, so that its writes spread over
// several WAL objects in flight.
func killInFlightChild(dir string) {
	fsb, err := objstore.NewFilesystemBucket(dir)
	exitOn(err)
	b := &jitterBucket{Bucket: fsb}
	opts := testOptions()
	opts.WALFlushInterval = time.Millisecond
	opts.WALMaxInFlight = 8
	opts.MemtableBytes = 64 << 10
	db, err := Open(context.Background(), b, "db", opts, Components{Merge: concatMerge})
	exitOn(err)
	var mu sync.Mutex
	w := bufio.NewWriter(os.Stdout)
	for g := range killInFlightWriters {
		go func() {
			for i := 0; ; i++ {
				k := fmt.Sprintf("w%d-%06d", g, i)
				var batch Batch
				batch.Put([]byte(k), []byte("value-"+k))
				await := i%32 == 31
				exitOn(db.Write(context.Background(), &batch, WriteOptions{AwaitDurable: await}))
				if await {
					mu.Lock()
					// Every write before it of this writer is acknowledged too.
					for j := i - 31; j <= i; j++ {
						fmt.Fprintf(w, "ack w%d-%06d\n", g, j)
					}
					w.Flush()
					mu.Unlock()
				} else {
					// Paced, so that one writer's writes spread over
					// several WAL objects.
					time.Sleep(500 * time.Microsecond)
				}
			}
		}()
	}
	select {}
}

// jitterBucket delays each put by 0 to 50 ms at random, so that puts land
// in any order.
type jitterBucket struct{ objstore.Bucket }

func (b *jitterBucket) Put(ctx context.Context, name string, r io.Reader, size int64, opts objstore.PutOptions) (objstore.Attributes, error) {
	time.Sleep(time.Duration(rand.N(50000)) * time.Microsecond)
	return b.Bucket.Put(ctx, name, r, size, opts)
}

// killChildAfter runs the test t again in a child process with env set to
// a new folder, where it calls child with the folder instead (child writes
// until killed and never returns). It reads the keys the child reports as
// acknowledged ("ack <key>" lines) until it has n, kills it with SIGKILL and
// returns them with a bucket on the folder.
func killChildAfter(t *testing.T, env string, n int, child func(dir string)) ([]string, objstore.Bucket) {
	t.Helper()
	if dir := os.Getenv(env); dir != "" {
		child(dir)
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$")
	cmd.Env = append(os.Environ(), env+"="+dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var acked []string
	sc := bufio.NewScanner(out)
	for sc.Scan() && len(acked) < n {
		if k, ok := strings.CutPrefix(sc.Text(), "ack "); ok {
			acked = append(acked, k)
		}
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if len(acked) < n {
		t.Fatalf("child acknowledged only %d writes before exiting", len(acked))
	}
	b, err := objstore.NewFilesystemBucket(dir)
	if err != nil {
		t.Fatal(err)
	}
	return acked, b
}
