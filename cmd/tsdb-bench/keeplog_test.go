package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestRemoveKeepingLog: the working folder goes, the system's log stays
// under -out when it holds anything.
func TestRemoveKeepingLog(t *testing.T) {
	out := t.TempDir()
	o := &options{out: out}
	for _, tc := range []struct {
		name, log string
		kept      bool
	}{{"shale", "panic: something\n", true}, {"quiet", "", false}} {
		s := &system{name: tc.name, dir: filepath.Join(out, "data", tc.name)}
		if err := os.MkdirAll(filepath.Join(s.dir, "data"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(s.dir, "log.txt"), []byte(tc.log), 0o644); err != nil {
			t.Fatal(err)
		}
		o.removeKeepingLog(s)
		if _, err := os.Stat(s.dir); !os.IsNotExist(err) {
			t.Errorf("%s: working folder still there (%v)", tc.name, err)
		}
		b, err := os.ReadFile(filepath.Join(out, tc.name+"-log.txt"))
		switch {
		case tc.kept && string(b) != tc.log:
			t.Errorf("%s: kept log %q (%v), want %q", tc.name, b, err, tc.log)
		case !tc.kept && err == nil:
			t.Errorf("%s: an empty log was kept", tc.name)
		}
	}
}

// TestLogLevelArg: a level among a system's extra flags replaces the
// default one, which the server would otherwise refuse as repeated.
func TestLogLevelArg(t *testing.T) {
	for _, tc := range []struct {
		kind  string
		extra []string
		want  string
	}{
		{"shale", nil, "--log.level=warn"},
		{"shale", []string{"--log.level=debug"}, "--log.level=debug"},
		{"victoria-metrics", []string{"-loggerLevel=INFO"}, "-loggerLevel=INFO"},
	} {
		s := &system{kind: tc.kind, extra: tc.extra}
		var levels []string
		for _, a := range s.args() {
			if isLogLevel(a) {
				levels = append(levels, a)
			}
		}
		if len(levels) != 1 || levels[0] != tc.want {
			t.Errorf("%s %v: log levels %v, want [%s]", tc.kind, tc.extra, levels, tc.want)
		}
	}
}
