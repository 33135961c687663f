package main

import (
	"encoding/json"
	"net/http"
	"os/exec"
	"strings"
	"testing"
)

// TestVersion: --version names Shale's version, and a running server shows
// it in shale_build_info and /api/v1/status/buildinfo beside the PromQL
// engine's version.
func TestVersion(t *testing.T) {
	skipEndToEnd(t)
	t.Parallel()
	out, err := exec.Command(tsdbBinary, "--version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "shale, version "+version) {
		t.Fatalf("--version: %v\n%s", err, out)
	}
	s := startShale(t, "--storage.path="+t.TempDir())
	defer s.stop(t)
	_, body := sendGet(t, s.url+"/metrics")
	if !strings.Contains(body, `shale_build_info{goversion="go`) || !strings.Contains(body, `version="`+version+`"`) {
		t.Fatalf("no shale_build_info in /metrics")
	}
	resp, err := http.Get(s.url + "/api/v1/status/buildinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var bi struct {
		Data struct {
			Version string `json:"version"`
			Branch  string `json:"branch"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&bi); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(bi.Data.Version, "3.") || bi.Data.Branch != "shale-"+version {
		t.Fatalf("buildinfo: %+v; want the engine's Prometheus 3 version and branch shale-%s", bi.Data, version)
	}
}

// TestBuildInfoString: --version leaves out a build date it does not know
// instead of printing an empty field.
func TestBuildInfoString(t *testing.T) {
	for _, c := range []struct {
		b    buildInfo
		want string
	}{
		{buildInfo{Version: "1.2.3", Revision: "abc", BuildDate: "2026-12-03T14:00:00Z", GoVersion: "go1.26"},
			"shale, version 1.2.3 (revision abc, 2026-12-03T14:00:00Z)\n  go version: go1.26"},
		{buildInfo{Version: "1.2.3", Revision: "unknown", GoVersion: "go1.26"},
			"shale, version 1.2.3 (revision unknown)\n  go version: go1.26"},
	} {
		if got := c.b.String(); got != c.want {
			t.Errorf("%+v: got %q, want %q", c.b, got, c.want)
		}
	}
}
