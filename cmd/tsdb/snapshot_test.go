package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/prompb"
)

// TestSnapshotBackupRestore takes a snapshot through the admin API of a
// writer on an S3-compatible store, changes the data after it (a delete, a
// new series), copies the snapshot to a local folder with tsdb snapshot
// copy and starts a server there: every sample acknowledged before the
// snapshot is served, nothing after it; so do a copy into another bucket
// and a reader of the snapshot in place. Then the snapshot is deleted.
func TestSnapshotBackupRestore(t *testing.T) {
	skipEndToEnd(t)
	t.Parallel()
	objstore := s3ConfigFile(t, "", "snap")
	w := startShale(t, "--objstore.config-file="+objstore, "--web.enable-admin-api")
	base := loadBase()
	const perWorker = 10
	acked := writeLoadFor(t, time.Second, w.url, 2, perWorker, base)

	code, body := sendPost(t, w.url+"/api/v1/admin/tsdb/snapshot", "", nil)
	if code != http.StatusOK {
		t.Fatalf("snapshot: %d %s", code, body)
	}
	var ans struct {
		Status string
		Data   struct{ Name string }
	}
	if err := json.Unmarshal([]byte(body), &ans); err != nil || ans.Status != "success" || ans.Data.Name == "" {
		t.Fatalf("snapshot answer %s: %v", body, err)
	}
	name := ans.Data.Name
	if code, body := sendPost(t, w.url+"/api/v1/admin/tsdb/snapshot?skip_head=maybe", "", nil); code != http.StatusBadRequest {
		t.Fatalf("snapshot with skip_head=maybe: %d %s", code, body)
	}

	// After the snapshot: series 0 deleted, a new series written.
	if code, body := sendPost(t, w.url+"/api/v1/admin/tsdb/delete_series?match[]="+url.QueryEscape(`e2e_load{series="0"}`), "", nil); code != http.StatusNoContent {
		t.Fatalf("delete_series: %d %s", code, body)
	}
	if code, body, err := remoteWrite(w.url, []prompb.TimeSeries{{
		Labels:  []prompb.Label{{Name: "__name__", Value: "after_snapshot"}},
		Samples: []prompb.Sample{{Timestamp: base, Value: 1}},
	}}); err != nil || code/100 != 2 {
		t.Fatalf("write after the snapshot: %d %s %v", code, body, err)
	}

	if out := snapshotCLI(t, "--objstore.config-file="+objstore, "list"); !strings.Contains(out, name) {
		t.Fatalf("tsdb snapshot list does not name %s:\n%s", name, out)
	}
	restored := t.TempDir()
	if out := snapshotCLI(t, "--objstore.config-file="+objstore, "copy", name, "--to.storage.path="+restored); !strings.Contains(out, "copied snapshot "+name) {
		t.Fatalf("tsdb snapshot copy: %s", out)
	}
	r := startShale(t, "--storage.path="+restored)
	checkLoad(t, r.url, acked, perWorker, base)
	var v []vectorSample
	queryResult(t, r.url, "/api/v1/query", url.Values{"query": {"count_over_time(after_snapshot[1h])"},
		"time": {strconv.FormatFloat(float64(base+1000)/1000, 'f', 3, 64)}}, &v)
	if len(v) != 0 {
		t.Fatalf("a sample written after the snapshot is in it: %v", v)
	}
	r.stop(t)

	// The same copied into another bucket of the store: a restore on S3.
	other := s3ConfigFile(t, "", "restored")
	snapshotCLI(t, "--objstore.config-file="+objstore, "copy", name, "--to.objstore.config-file="+other)
	r = startShale(t, "--objstore.config-file="+other)
	checkLoad(t, r.url, acked, perWorker, base)
	r.stop(t)

	// A reader serves the snapshot in place, as it was.
	r = startShale(t, "--objstore.config-file="+objstore, "--mode=reader", "--storage.reader.snapshot="+name)
	checkLoad(t, r.url, acked, perWorker, base)
	queryResult(t, r.url, "/api/v1/query", url.Values{"query": {"count_over_time(after_snapshot[1h])"},
		"time": {strconv.FormatFloat(float64(base+1000)/1000, 'f', 3, 64)}}, &v)
	if len(v) != 0 {
		t.Fatalf("the reader of the snapshot serves a sample written after it: %v", v)
	}
	r.stop(t)

	snapshotCLI(t, "--objstore.config-file="+objstore, "delete", name)
	if out := snapshotCLI(t, "--objstore.config-file="+objstore, "list"); strings.Contains(out, name) {
		t.Fatalf("deleted snapshot still listed:\n%s", out)
	}
	out, err := exec.Command(tsdbBinary, "snapshot", "--objstore.config-file="+objstore, "copy", name, "--to.storage.path="+t.TempDir()).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "has no snapshot named "+strconv.Quote(name)) {
		t.Fatalf("copy of a deleted snapshot: %v\n%s", err, out)
	}
	w.stop(t)
}

// snapshotCLI runs tsdb snapshot with args, fails the test unless it
// succeeds, and returns its standard output.
func snapshotCLI(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(tsdbBinary, append([]string{"snapshot"}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("tsdb snapshot %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String()
}
