package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shaledb/shale/promql"
	"github.com/shaledb/shale/storage/lsm"
)

func TestParseBytes(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
		err  bool
	}{
		{"512MiB", 512 << 20, false},
		{"16GiB", 16 << 30, false},
		{"1.5KB", 1500, false},
		{"100", 100, false},
		{"10B", 10, false},
		{"-1MiB", 0, true},
		{"lots", 0, true},
	} {
		got, err := parseBytes(c.in)
		if (err != nil) != c.err || got != c.want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d, error %v", c.in, got, err, c.want, c.err)
		}
	}
}

// TestCacheMemoryFollowsMemoryLimit: with --memory.limit and no
// --cache.memory-size the RAM block cache gets an eighth of the limit when
// that is less than its default; a size given is kept.
func TestCacheMemoryFollowsMemoryLimit(t *testing.T) {
	for _, c := range []struct {
		args []string
		want kingpinBytes
	}{
		{nil, 512 << 20},
		{[]string{"--memory.limit=2GiB"}, 256 << 20},
		{[]string{"--memory.limit=16GiB"}, 512 << 20},
		{[]string{"--memory.limit=2GiB", "--cache.memory-size=1GiB"}, 1 << 30},
	} {
		cfg, err := parseFlags(c.args)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.cacheMemory != c.want {
			t.Errorf("%v: cache memory %d, want %d", c.args, cfg.cacheMemory, c.want)
		}
	}
}

func TestParseFlags(t *testing.T) {
	cfg, err := parseFlags([]string{"--storage.wal=false", "--storage.retention.time=30d", "--cache.memory-size=1GiB", "--mode=reader"})
	if err != nil {
		t.Fatal(err)
	}
	if bool(cfg.wal) || time.Duration(cfg.retention) != 30*24*time.Hour || cfg.cacheMemory != 1<<30 || cfg.mode != "reader" {
		t.Fatalf("flags parsed wrong: %+v", cfg)
	}
	if cfg.listenAddress != defaultListenAddress || !strings.HasSuffix(defaultListenAddress, ":9292") {
		t.Fatalf("default listen address %q", cfg.listenAddress)
	}
	if cfg.sizeRatio != lsm.DefaultOptions().SizeRatio {
		t.Fatalf("default compaction size ratio %v, want the LSM's %v", cfg.sizeRatio, lsm.DefaultOptions().SizeRatio)
	}
	if cfg, err := parseFlags([]string{"--storage.compaction.size-ratio=1.5"}); err != nil || cfg.sizeRatio != 1.5 {
		t.Fatalf("--storage.compaction.size-ratio=1.5: %v, %v", cfg, err)
	}
	for _, bad := range [][]string{{"--mode=primary"}, {"--storage.wal=maybe"}, {"--cache.disk-size=big"}, {"--storage.compaction.size-ratio=x"}, {"--storage.compaction.size-ratio=0"}, {"--storage.compaction.size-ratio=NaN"},
		{"--storage.reader.snapshot=s1"}, {"--mode=reader", "--storage.reader.snapshot=../s1"}} {
		if _, err := parseFlags(bad); err == nil {
			t.Errorf("parseFlags(%v) accepted bad input", bad)
		}
	}
}

func TestObjstoreConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ctx := context.Background()
	ob, err := openBucket(ctx, write("fs.yml", "type: filesystem\nprefix: p1\nconfig:\n  path: "+filepath.Join(dir, "objs")+"\n"), "")
	if err != nil {
		t.Fatal(err)
	}
	ob.bucket.Close()
	if ob.prefix != "p1" || !strings.HasPrefix(ob.where, "filesystem:") || ob.name != filepath.Join(dir, "objs") {
		t.Fatalf("prefix %q, where %q, name %q", ob.prefix, ob.where, ob.name)
	}
	// The default: the local folder, named by its absolute path.
	t.Chdir(dir)
	ob, err = openBucket(ctx, "", "data")
	if err != nil {
		t.Fatal(err)
	}
	ob.bucket.Close()
	if ob.prefix != "" || ob.name != filepath.Join(dir, "data") {
		t.Fatalf("local folder: prefix %q, name %q", ob.prefix, ob.name)
	}
	for name, content := range map[string]string{
		"unknown-type.yml":  "type: gcs\nconfig: {}\n",
		"unknown-field.yml": "type: s3\nbuckett: x\n",
		"s3-no-bucket.yml":  "type: s3\nconfig:\n  region: us-east-1\n",
		"fs-no-path.yml":    "type: filesystem\nconfig: {}\n",
	} {
		if _, err := openBucket(ctx, write(name, content), ""); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := loadFileConfig(write("bad.yml", "remote_write:\n  max_series_per_request: -1\n")); err == nil {
		t.Error("config file with an invalid limit accepted")
	}
	if _, err := loadFileConfig(write("typo.yml", "remote_writ: {}\n")); err == nil {
		t.Error("config file with an unknown section accepted")
	}
	cfg, err := loadFileConfig(write("ok.yml", "remote_write:\n  max_series_per_request: 5000\n"))
	if err != nil || cfg.RemoteWrite.MaxSeriesPerRequest != 5000 {
		t.Fatalf("config file: %v %+v", err, cfg.RemoteWrite)
	}
}

func TestWALFlushInterval(t *testing.T) {
	for _, tc := range []struct {
		flag  time.Duration
		where string
		want  time.Duration
	}{
		{0, "s3:bucket/prefix", 100 * time.Millisecond},
		{0, "filesystem:/data", 10 * time.Millisecond},
		{0, "/var/lib/shale/data", 10 * time.Millisecond},
		{250 * time.Millisecond, "s3:bucket/prefix", 250 * time.Millisecond},
		{5 * time.Millisecond, "filesystem:/data", 5 * time.Millisecond},
	} {
		if got := walFlushInterval(tc.flag, tc.where); got != tc.want {
			t.Errorf("walFlushInterval(%s, %q) = %s, want %s", tc.flag, tc.where, got, tc.want)
		}
	}
}

func TestWALMinInterval(t *testing.T) {
	for _, tc := range []struct {
		flag, flush time.Duration
		where       string
		want        time.Duration
	}{
		{0, 100 * time.Millisecond, "s3:bucket/prefix", 100 * time.Millisecond},
		{0, 10 * time.Millisecond, "filesystem:/data", 5 * time.Millisecond},
		{0, 4 * time.Millisecond, "/var/lib/shale/data", 2 * time.Millisecond},
		{20 * time.Millisecond, 100 * time.Millisecond, "s3:bucket/prefix", 20 * time.Millisecond},
		{time.Millisecond, 10 * time.Millisecond, "filesystem:/data", time.Millisecond},
	} {
		if got := walMinInterval(tc.flag, tc.flush, tc.where); got != tc.want {
			t.Errorf("walMinInterval(%s, %s, %q) = %s, want %s", tc.flag, tc.flush, tc.where, got, tc.want)
		}
	}
}

// querySection writes a config file with the query section yaml and returns
// the section as loadFileConfig reads it.
func querySection(t *testing.T, yaml string) promql.Options {
	t.Helper()
	path := filepath.Join(t.TempDir(), "shale.yml")
	if err := os.WriteFile(path, []byte("query:\n"+yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	file, err := loadFileConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	return file.Query
}

// withQueryFlags parses the command line args and returns the config and
// the query settings file with the overrides of the flags given applied.
func withQueryFlags(t *testing.T, file promql.Options, args ...string) (*config, promql.Options) {
	t.Helper()
	cfg, err := parseFlags(args)
	if err != nil {
		t.Fatal(err)
	}
	cfg.applyQueryLimits(&file)
	return cfg, file
}

// TestQueryLimitFlags checks the query limits' flags: their defaults are
// the query package's, and each overrides the config file only when given.
func TestQueryLimitFlags(t *testing.T) {
	file := querySection(t, "  max_query_length: 1000\n  max_query_depth: 7\n  max_subquery_steps: 99\n  max_memory: 12345\n")

	cfg, got := withQueryFlags(t, file)
	def := promql.DefaultOptions()
	if int(cfg.queryMaxLength) != def.MaxQueryLength || cfg.queryMaxDepth != def.MaxQueryDepth ||
		cfg.queryMaxSubquerySteps != def.MaxSubquerySteps || int64(cfg.queryMaxMemory) != def.MaxMemory {
		t.Errorf("flag defaults %d, %d, %d, %d differ from the query package's %+v",
			cfg.queryMaxLength, cfg.queryMaxDepth, cfg.queryMaxSubquerySteps, cfg.queryMaxMemory, def)
	}
	if got.MaxQueryLength != 1000 || got.MaxQueryDepth != 7 || got.MaxSubquerySteps != 99 || got.MaxMemory != 12345 {
		t.Errorf("flags not given replaced the config file's limits: %+v", got)
	}

	_, got = withQueryFlags(t, file, "--query.max-length=1MiB", "--query.max-depth=64", "--query.max-subquery-steps=5000", "--query.max-memory=2GiB")
	if got.MaxQueryLength != 1<<20 || got.MaxQueryDepth != 64 || got.MaxSubquerySteps != 5000 || got.MaxMemory != 2<<30 {
		t.Errorf("flags given did not override the config file: %+v", got)
	}
	for _, bad := range [][]string{{"--query.max-memory=lots"}, {"--query.max-depth=deep"}} {
		if _, err := parseFlags(bad); err == nil {
			t.Errorf("parseFlags(%v) accepted bad input", bad)
		}
	}
}

// TestQueryConfigSection: the query section of --config.file takes effect;
// the --query.* flags replace it only when given.
func TestQueryConfigSection(t *testing.T) {
	file := querySection(t, "  query_timeout: 45s\n  max_samples: 1000\n  max_concurrent_queries: 3\n  lookback_delta: 2m\n")
	_, got := withQueryFlags(t, file)
	if got.QueryTimeout != 45*time.Second || got.MaxSamples != 1000 || got.MaxConcurrentQueries != 3 || got.LookbackDelta != 2*time.Minute {
		t.Errorf("the config file's query section was not used: %+v", got)
	}
	_, got = withQueryFlags(t, file, "--query.timeout=10s", "--query.max-samples=5", "--query.max-concurrency=7", "--query.lookback-delta=1m")
	if got.QueryTimeout != 10*time.Second || got.MaxSamples != 5 || got.MaxConcurrentQueries != 7 || got.LookbackDelta != time.Minute {
		t.Errorf("flags given did not override the config file: %+v", got)
	}
}
