package storage

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/shaledb/shale/storage/objstore"
)

const crashChildEnv = "SHALE_STORAGE_CRASH_CHILD_DIR"

// TestCrashChild is the child process of TestCrashKill: it appends batches
// forever and prints "acked N" after each commit returns. It does nothing
// unless started by TestCrashKill.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashChildEnv)
	if dir == "" {
		t.Skip("child process of TestCrashKill")
	}
	b, err := objstore.NewFilesystemBucket(dir)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(3)
	}
	opts := DefaultOptions()
	opts.WAL = true
	db, err := openOn(context.Background(), b, "tsdb", opts, testLSMOptions(), nil, Components{})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(3)
	}
	w := bufio.NewWriter(os.Stdout)
	for batch := int64(0); ; batch++ {
		app := db.Appender(context.Background())
		for s := range 50 {
			lset := labels.FromStrings("__name__", "crash_test", "series", strconv.Itoa(s))
			if _, err := app.Append(0, lset, batch*1000, float64(batch)); err != nil {
				fmt.Println("error", err)
				os.Exit(3)
			}
		}
		if err := app.Commit(); err != nil {
			fmt.Println("error", err)
			os.Exit(3)
		}
		if batch%25 == 24 {
			// Exercise recovery from blocks and the head log together.
			if err := db.Flush(context.Background()); err != nil {
				fmt.Println("error", err)
				os.Exit(3)
			}
		}
		fmt.Fprintf(w, "acked %d\n", batch)
		w.Flush()
	}
}

// TestCrashKill kills a process that appends with the WAL on at a random
// point and checks that every sample whose commit returned is there after
// reopening.
func TestCrashKill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a child process")
	}
	for round := range 3 {
		t.Run(fmt.Sprintf("round=%d", round), func(t *testing.T) {
			dir := t.TempDir()
			cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.v=false")
			cmd.Env = append(os.Environ(), crashChildEnv+"="+dir)
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			killAfter := int64(40 + 37*round)
			acked := int64(-1)
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				line := sc.Text()
				if strings.HasPrefix(line, "error") {
					t.Fatalf("child: %s", line)
				}
				if n, ok := strings.CutPrefix(line, "acked "); ok {
					acked, _ = strconv.ParseInt(n, 10, 64)
					if acked >= killAfter {
						break
					}
				}
			}
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			_ = cmd.Wait()
			if acked < killAfter {
				t.Fatalf("child stopped after %d acknowledged batches", acked)
			}

			b, err := objstore.NewFilesystemBucket(dir)
			if err != nil {
				t.Fatal(err)
			}
			opts := DefaultOptions()
			db := openTestDB(t, b, opts)
			defer db.Close()
			got := queryFloats(t, db, math.MinInt64, math.MaxInt64, labels.MustNewMatcher(labels.MatchEqual, "__name__", "crash_test"))
			if len(got) != 50 {
				t.Fatalf("want 50 series after the crash, got %d", len(got))
			}
			for k, ss := range got {
				if int64(len(ss)) < acked+1 {
					t.Fatalf("series %s: %d samples, but %d batches were acknowledged", k, len(ss), acked+1)
				}
				for i := int64(0); i <= acked; i++ {
					if ss[i].t != i*1000 || ss[i].v != float64(i) {
						t.Fatalf("series %s: sample %d is %v, want (%d, %d)", k, i, ss[i], i*1000, i)
					}
				}
			}
		})
	}
}
