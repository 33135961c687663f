# Shale build, test and tooling. See README.md.
GO      ?= go
TOOLS   := $(CURDIR)/.tools
BIN     := $(CURDIR)/bin
PKGS    ?= ./...
# Flags for `make run`; override with `make run ARGS='--web.listen-address=:9300'`.
ARGS    ?=
FUZZTIME ?= 20s
BENCH   ?= .
BENCHTIME ?= 1s
COUNT   ?= 1

export PATH := $(TOOLS):$(PATH)

.PHONY: all build run test test-short bench bench-e2e bench-coldwarm soak soak-short lint fuzz tools peers clean ui ui-check

all: build

# The revision (with -modified for uncommitted changes) and the commit's date
# go into --version, the startup log, shale_build_info and
# /api/v1/status/buildinfo.
REVISION := $(shell git rev-parse HEAD 2>/dev/null)$(shell git diff --quiet HEAD 2>/dev/null || echo -modified)
BUILD_DATE := $(shell git log -1 --format=%cI 2>/dev/null)

# STRIP leaves the symbol table and the DWARF debugging data out of the
# binary (a third of its size); stack traces and pprof profiles keep their
# function names and lines. `make build STRIP=` keeps them, for a debugger or
# perf, which reads the symbol table.
STRIP ?= -s -w

build:
	$(GO) build -ldflags "$(STRIP) -X main.revision=$(REVISION) -X main.buildDate=$(BUILD_DATE)" -o $(BIN)/tsdb ./cmd/tsdb

run: build
	$(BIN)/tsdb --storage.path=./data $(ARGS)

# The web UI's bundle (web/static, embedded in the binary and committed, so
# that building Shale needs no Node.js), rebuilt from web/ui with the locked
# npm packages. ui-check fails when the committed bundle differs from what
# its sources build.
ui:
	cd web/ui && npm ci --no-audit --no-fund && npm run check && npm run build

ui-check: ui
	@git diff --exit-code --stat -- web/static || { echo "web/static differs from what web/ui builds: run make ui and commit it"; exit 1; }
	@test -z "$$(git status --porcelain -- web/static)" || { git status --porcelain -- web/static; echo "web/static has files web/ui does not build, or misses some: run make ui and commit it"; exit 1; }

# Every test, race detector on. Tests that need an external program (versitygw,
# Debian's prometheus) skip with the install step named, unless
# SHALE_REQUIRE_E2E=1, where they fail.
# bin/tsdb first: tsdb-bench's smoke tests run the server binary.
# The browser tests then run once more without it (see browser in
# cmd/tsdb/ui_e2e_test.go): they skip under -race.
test: build
	$(GO) test -race -timeout 20m $(PKGS)
	$(GO) test -timeout 10m -run '^TestUI' ./cmd/tsdb

test-short:
	$(GO) test -short $(PKGS)

bench:
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchtime $(BENCHTIME) -count $(COUNT) -benchmem $(PKGS)

# End-to-end benchmark: Shale, Prometheus and VictoriaMetrics side by side
# (docs/benchmarks.md). Quick: make bench-e2e BENCH_ARGS='-series=10000 -duration=30s'
BENCH_ARGS ?=
bench-e2e: build
	$(GO) build -o $(BIN)/tsdb-bench ./cmd/tsdb-bench
	$(BIN)/tsdb-bench -shale-bin=$(BIN)/tsdb $(BENCH_ARGS)

# Cold and warm query latency by series count (10 to 10,000 series over 6 h),
# the data in versitygw behind a proxy adding 50 ms to every request
# (cmd/tsdb-bench/coldwarm.go, docs/benchmarks.md). Report, chart and request
# traces under bench-out/coldwarm/. Extra flags: COLDWARM_ARGS='-coldwarm-colds=3'
COLDWARM_ARGS ?=
bench-coldwarm: build $(TOOLS)/versitygw
	$(GO) build -o $(BIN)/tsdb-bench ./cmd/tsdb-bench
	$(BIN)/tsdb-bench -mode=coldwarm -shale-bin=$(BIN)/tsdb -versitygw-bin=$(TOOLS)/versitygw -out=bench-out/coldwarm $(COLDWARM_ARGS)

# Fault soak: Shale on versitygw behind a fault proxy (latency, 503 SlowDown,
# resets, lost answers, a 2-minute outage), SIGKILL and SIGTERM restarts,
# then every acknowledged sample read back (cmd/tsdb-bench/soak.go). Report
# and timeline under bench-out/; the exit status is 1 unless every
# acknowledged sample came back and the writer never exited on its own.
# Not part of `make test`.
# Extra flags: make soak SOAK_ARGS='-series=50000 -outage-mode=hang'
SOAK_ARGS ?=
soak: build $(TOOLS)/versitygw
	$(GO) build -o $(BIN)/tsdb-bench ./cmd/tsdb-bench
	$(BIN)/tsdb-bench -mode=soak -duration=2h -shale-bin=$(BIN)/tsdb -versitygw-bin=$(TOOLS)/versitygw $(SOAK_ARGS)

# 15 minutes: 3 SIGKILL restarts, one SIGTERM, the same 2-minute outage.
soak-short: build $(TOOLS)/versitygw
	$(GO) build -o $(BIN)/tsdb-bench ./cmd/tsdb-bench
	$(BIN)/tsdb-bench -mode=soak -duration=15m -shale-bin=$(BIN)/tsdb -versitygw-bin=$(TOOLS)/versitygw $(SOAK_ARGS)

# gofmt (fails listing the files it would change), go vet (without the
# stdmethods check: gorilla's iterators have Prometheus' Seek(int64), not
# io.Seeker's) and staticcheck.
lint: $(TOOLS)/staticcheck
	@out=$$(find . -path ./.tools -prune -o -path ./.git -prune -o -name node_modules -prune -o -name '*.go' -print | xargs gofmt -l); \
	if [ -n "$$out" ]; then echo "gofmt -w these files:"; echo "$$out"; exit 1; fi
	$(GO) vet -stdmethods=false $(PKGS)
	$(TOOLS)/staticcheck $(PKGS)
	@# The server and its tools build for macOS and FreeBSD too.
	GOOS=darwin GOARCH=arm64 $(GO) vet -stdmethods=false $(PKGS)
	GOOS=freebsd GOARCH=amd64 $(GO) build -o /dev/null $(PKGS)

# Runs every fuzz target for FUZZTIME each: a duration (20s) or a number of
# inputs (4000x). CI gives a number: a duration arms the coordinator's
# deadline, and Go 1.26 can report that deadline itself as a failure ("context
# deadline exceeded", no failing input; go.dev/issue/75804), which a count
# never does. A target failing that way on a duration is run once more.
fuzz:
	@set -e; log=$$(mktemp); trap 'rm -f $$log' EXIT; \
	for pkg in $$($(GO) list $(PKGS)); do \
		dir=$$($(GO) list -f '{{.Dir}}' $$pkg); \
		for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
			for try in 1 2; do \
				echo "fuzz $$pkg $$f"; \
				before=$$(ls $$dir/testdata/fuzz/$$f 2>/dev/null | wc -l); \
				if $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg >$$log 2>&1; then cat $$log; break; fi; \
				cat $$log; \
				after=$$(ls $$dir/testdata/fuzz/$$f 2>/dev/null | wc -l); \
				if [ $$try = 1 ] && [ "$$after" = "$$before" ] && grep -q '^    context deadline exceeded$$' $$log; then \
					echo "fuzz $$f: the coordinator's deadline race, no failing input written: once more"; \
				else exit 1; fi; \
			done; \
		done; \
	done

# Project-local tools: versitygw (the S3-compatible server the tests start),
# Prometheus 3.16 (the remote write 2.0 sender and reference of the parity
# test, cmd/tsdb/parity_test.go; about 5 minutes to build), staticcheck
# (lint), benchstat (comparing benchmark runs) and the remote write 2.0
# receiver compliance suite (cmd/tsdb/rw2compliance_test.go).
tools: $(TOOLS)/versitygw $(TOOLS)/prometheus-3.16 $(TOOLS)/staticcheck $(TOOLS)/benchstat $(TOOLS)/rw2-compliance-receiver

# The current peers of the side-by-side benchmark, built from the Go module
# proxy at pinned versions (not part of `make test`; about 8 minutes):
#   make peers && make bench-e2e BENCH_ARGS='-prometheus-bin=.tools/prometheus-3.16 -victoria-metrics-bin=.tools/victoria-metrics-1.151'
peers: $(TOOLS)/prometheus-3.16 $(TOOLS)/victoria-metrics-1.151

$(TOOLS)/victoria-metrics-1.151:
	mkdir -p $(TOOLS)/peers
	GOBIN=$(TOOLS)/peers $(GO) install github.com/VictoriaMetrics/VictoriaMetrics/app/victoria-metrics@v1.151.0
	mv $(TOOLS)/peers/victoria-metrics $@

$(TOOLS)/prometheus-3.16:
	mkdir -p $(TOOLS)/peers
	GOBIN=$(TOOLS)/peers $(GO) install github.com/prometheus/prometheus/cmd/prometheus@v0.316.0
	mv $(TOOLS)/peers/prometheus $@

$(TOOLS)/versitygw:
	GOBIN=$(TOOLS) $(GO) install github.com/versity/versitygw/cmd/versitygw@v1.8.0

# The Prometheus project's remote write 2.0 receiver compliance suite
# (github.com/prometheus/compliance/remotewrite, directory receiver), built as
# a test binary that cmd/tsdb's TestRemoteWriteCompliance runs against the
# server. At this commit two lines of its helpers set the created timestamp on
# the time series, a field the Prometheus version its own go.mod pins no
# longer has (2.0-rc.4 moved it to each sample as start_timestamp): they are
# rewritten to set it there, and the build stops if they are not found.
RW2_COMPLIANCE := github.com/prometheus/compliance/remotewrite@v0.0.0-20260223092825-818283e1171e
$(TOOLS)/rw2-compliance-receiver:
	@set -e; tmp=$$(mktemp -d); trap 'chmod -R u+w $$tmp; rm -rf $$tmp' EXIT; \
	src=$$(cd $$tmp && $(GO) mod download -json $(RW2_COMPLIANCE) | sed -n 's/^\t"Dir": "\(.*\)",$$/\1/p'); \
	test -n "$$src"; cp -r $$src $$tmp/rw; chmod -R u+w $$tmp/rw; \
	f=$$tmp/rw/receiver/helpers_test.go; \
	test $$(grep -c 'ts\.CreatedTimestamp = \(s\|hw\)\.CreatedTimestamp' $$f) = 2; \
	sed -i -e 's/ts\.CreatedTimestamp = s\.CreatedTimestamp/ts.Samples[0].StartTimestamp = s.CreatedTimestamp/' \
	       -e 's/ts\.CreatedTimestamp = hw\.CreatedTimestamp/ts.Histograms[0].StartTimestamp = hw.CreatedTimestamp/' $$f; \
	cd $$tmp/rw/receiver && $(GO) test -c -o $@ .

$(TOOLS)/staticcheck:
	GOBIN=$(TOOLS) $(GO) install honnef.co/go/tools/cmd/staticcheck@v0.8.2

$(TOOLS)/benchstat:
	GOBIN=$(TOOLS) $(GO) install golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da

clean:
	rm -rf $(BIN)
