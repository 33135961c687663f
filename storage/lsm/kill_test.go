package lsm

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/shaledb/shale/storage/objstore"
)

const killChildEnv = "SHALE_LSM_KILL_CHILD_DIR"

// TestKillProcess runs a writer in a child process on a filesystem bucket,
// kills it with SIGKILL while it writes, and checks that every write it
// reported as acknowledged (durable in the WAL) is there after reopening.
func TestKillProcess(t *testing.T) {
	if dir := os.Getenv(killChildEnv); dir != "" {
		killChild(dir)
		return
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestKillProcess$")
	cmd.Env = append(os.Environ(), killChildEnv+"="+dir)
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
	for sc.Scan() && len(acked) < 300 {
		if k, ok := strings.CutPrefix(sc.Text(), "ack "); ok {
			acked = append(acked, k)
		}
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if len(acked) < 300 {
		t.Fatalf("child acknowledged only %d writes before exiting", len(acked))
	}
	b, err := objstore.NewFilesystemBucket(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	db := openDB(t, b, testOptions(), Components{})
	defer db.Close()
	for _, k := range acked {
		if v, ok := mustGet(t, db, k); !ok || v != "value-"+k {
			t.Fatalf("acknowledged write %s lost after kill -9: %q,%v", k, v, ok)
		}
	}
}

// killChild writes until killed, printing each acknowledged key.
func killChild(dir string) {
	b, err := objstore.NewFilesystemBucket(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	opts := testOptions()
	opts.MemtableBytes = 8 << 10
	opts.L0CompactionTrigger = 2
	opts.CompactionInterval = time.Millisecond
	db, err := Open(context.Background(), b, "db", opts, Components{Merge: concatMerge})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	w := bufio.NewWriter(os.Stdout)
	for i := 0; ; i++ {
		k := fmt.Sprintf("key%06d", i)
		if err := db.Put(context.Background(), []byte(k), []byte("value-"+k)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		fmt.Fprintf(w, "ack %s\n", k)
		w.Flush()
	}
}
