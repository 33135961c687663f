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
