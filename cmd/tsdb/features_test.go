package main

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/shaledb/shale/promql"
	"github.com/shaledb/shale/remotewrite"
)

// TestFeatureFlags: --enable-feature takes Prometheus' comma-separated,
// repeatable names, sets the engine and receiver settings they stand for
// over the config file's, and keeps unknown names to log, not refuse.
func TestFeatureFlags(t *testing.T) {
	cfg, err := parseFlags([]string{
		"--enable-feature=promql-experimental-functions,exemplar-storage",
		"--enable-feature=otlp-native-delta-ingestion, promql-delayed-name-removal,no-such-feature",
		"--enable-feature=promql-experimental-functions",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"promql-experimental-functions", "exemplar-storage", "otlp-native-delta-ingestion", "promql-delayed-name-removal"}
	if strings.Join(cfg.features.names, " ") != strings.Join(want, " ") {
		t.Fatalf("features %v, want %v", cfg.features.names, want)
	}
	if strings.Join(cfg.features.unknown, " ") != "no-such-feature" {
		t.Fatalf("unknown features %v", cfg.features.unknown)
	}
	if got := flagMap(cfg)["enable-feature"]; got != "promql-experimental-functions,exemplar-storage,otlp-native-delta-ingestion, promql-delayed-name-removal,no-such-feature,promql-experimental-functions" {
		t.Fatalf("/api/v1/status/flags shows enable-feature=%q, want the values given", got)
	}
	q, o := promql.DefaultOptions(), remotewrite.DefaultOTLPOptions()
	cfg.features.apply(&q, &o)
	if !q.EnableExperimentalFunctions || !q.EnableDelayedNameRemoval || !o.NativeDeltaIngestion {
		t.Fatalf("settings not applied: query %+v, otlp native delta %v", q, o.NativeDeltaIngestion)
	}
	if q.EnablePerStepStats || q.EnableBinopFillModifiers || q.UseStartTimestamps {
		t.Fatalf("settings applied that were not asked for: %+v", q)
	}

	cfg, err = parseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	q = promql.DefaultOptions()
	q.EnableExperimentalFunctions = true // from the config file
	cfg.features.apply(&q, &o)
	if !q.EnableExperimentalFunctions || len(cfg.features.names)+len(cfg.features.unknown) != 0 {
		t.Fatalf("no --enable-feature changed the settings: %+v %+v", cfg.features, q)
	}
}

// TestEnableFeatureServer: a server started with a Prometheus command
// line's --enable-feature runs the experimental functions it asks for and
// logs the names it does not know.
func TestEnableFeatureServer(t *testing.T) {
	skipEndToEnd(t)
	t.Parallel()
	query := "/api/v1/query?query=" + url.QueryEscape(`sort_by_label(vector(1), "a")`)

	off := startShale(t, "--storage.path="+t.TempDir())
	if code, body := sendGet(t, off.url+query); code != 400 || !strings.Contains(body, "not enabled") {
		t.Fatalf("without the feature: %d %s", code, body)
	}
	off.stop(t)

	on := startShale(t, "--storage.path="+t.TempDir(), "--enable-feature=promql-experimental-functions,exemplar-storage", "--enable-feature=no-such-feature")
	defer on.stop(t)
	if code, body := sendGet(t, on.url+query); code != 200 {
		t.Fatalf("with the feature: %d %s", code, body)
	}
	out := on.proc.Output()
	for _, want := range []string{"option=promql-experimental-functions", "msg=\"Unknown option for --enable-feature\" option=no-such-feature", "always on in Shale"} {
		if !strings.Contains(out, want) {
			t.Fatalf("log has no %q:\n%s", want, out)
		}
	}
}

// TestPrometheusFlagNames: Prometheus' names of settings Shale has under its
// own are taken, and --web.cors.origin overrides the config file's
// cors_origin only when given.
func TestPrometheusFlagNames(t *testing.T) {
	file := querySection(t, "  cors_origin: 'https://from-file\\.example'\n")
	cfg, got := withQueryFlags(t, file, "--storage.tsdb.retention.time=30d", "--web.enable-remote-write-receiver")
	if time.Duration(cfg.retention) != 30*24*time.Hour || !cfg.remoteWriteReceiver {
		t.Fatalf("retention %v, receiver switch %v", time.Duration(cfg.retention), cfg.remoteWriteReceiver)
	}
	if got.CORSOrigin != `https://from-file\.example` {
		t.Fatalf("CORS origin %q without the flag, want the file's", got.CORSOrigin)
	}
	_, got = withQueryFlags(t, file, `--web.cors.origin=https://a\.example`)
	if got.CORSOrigin != `https://a\.example` {
		t.Fatalf("CORS origin %q, want the flag's", got.CORSOrigin)
	}
}
