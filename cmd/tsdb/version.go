package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// version is Shale's version, revision its git commit and buildDate the
// commit's time; the Makefile sets the last two with -ldflags "-X
// main.revision=... -X main.buildDate=...". Without them they come from the
// build's VCS stamp, when Go recorded one.
var (
	version   = "0.1.0-dev"
	revision  = ""
	buildDate = ""
)

// buildInfo is what the binary knows of how it was built.
type buildInfo struct {
	Version   string
	Revision  string // git commit, with "-modified" when the tree had changes
	BuildDate string // the commit's time
	GoVersion string
}

func readBuildInfo() buildInfo {
	b := buildInfo{Version: version, Revision: "unknown", GoVersion: runtime.Version()}
	if bi, ok := debug.ReadBuildInfo(); ok {
		modified := false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				b.Revision = s.Value
			case "vcs.time":
				b.BuildDate = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if modified {
			b.Revision += "-modified"
		}
	}
	if revision != "" {
		b.Revision = revision
	}
	if buildDate != "" {
		b.BuildDate = buildDate
	}
	return b
}

func (b buildInfo) String() string {
	date := ""
	if b.BuildDate != "" {
		date = ", " + b.BuildDate
	}
	return fmt.Sprintf("shale, version %s (revision %s%s)\n  go version: %s", b.Version, b.Revision, date, b.GoVersion)
}

// registerBuildInfo adds shale_build_info, 1 with the build as labels.
func registerBuildInfo(reg prometheus.Registerer, b buildInfo) {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "shale_build_info",
		Help: "1, with the version, revision and Go version Shale was built with as labels.",
	}, []string{"version", "revision", "goversion"})
	g.WithLabelValues(b.Version, b.Revision, b.GoVersion).Set(1)
	reg.MustRegister(g)
}
