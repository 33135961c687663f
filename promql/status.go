package promql

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/grafana/regexp"
	jsoniter "github.com/json-iterator/go"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/metadata"
	"github.com/prometheus/prometheus/util/httputil"
	"google.golang.org/protobuf/encoding/protojson"
)

// The endpoints whose data a Prometheus server takes from parts Shale does
// not have (scrape targets, rules, a head block, a data directory) or keeps
// differently. They render exactly as Prometheus renders them.

func (a *API) metadata(r *http.Request) result {
	limit, err := intParam(r, "limit")
	if err != nil {
		return fail(badData(err))
	}
	limitPerMetric, err := intParam(r, "limit_per_metric")
	if err != nil {
		return fail(badData(err))
	}
	res := map[string][]metadata.Metadata{}
	if a.comps.Metadata == nil {
		return ok(res)
	}
	all, err := a.comps.Metadata.MetricMetadata(r.Context(), r.FormValue("metric"))
	if err != nil {
		return fail(internalError(fmt.Errorf("metric metadata: %w", err)))
	}
	// Sorted so that a limit keeps the same families on every call.
	names := make([]string, 0, len(all))
	for name := range all {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if limit >= 0 && len(res) >= limit {
			break
		}
		out := make([]metadata.Metadata, 0, len(all[name]))
		for _, m := range all[name] {
			if limitPerMetric > 0 && len(out) >= limitPerMetric {
				break
			}
			if !slices.Contains(out, m) {
				out = append(out, m)
			}
		}
		res[name] = out
	}
	return ok(res)
}

// intParam parses an optional integer parameter; absent is -1.
func intParam(r *http.Request, name string) (int, error) {
	s := r.FormValue(name)
	if s == "" {
		return -1, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("%s must be a number", name)
	}
	return n, nil
}

type yamlData struct {
	YAML string `json:"yaml"`
}

func (a *API) config(*http.Request) result { return ok(yamlData{a.comps.ConfigYAML()}) }

func (a *API) flags(*http.Request) result { return ok(a.comps.Flags) }

type buildInfoData struct {
	Version   string `json:"version"`
	Revision  string `json:"revision"`
	Branch    string `json:"branch"`
	BuildUser string `json:"buildUser"`
	BuildDate string `json:"buildDate"`
	GoVersion string `json:"goVersion"`
}

func (a *API) buildInfo(*http.Request) result { return ok(a.build) }

type runtimeInfoData struct {
	StartTime           time.Time `json:"startTime"`
	CWD                 string    `json:"CWD"`
	Hostname            string    `json:"hostname"`
	ServerTime          time.Time `json:"serverTime"`
	ReloadConfigSuccess bool      `json:"reloadConfigSuccess"`
	LastConfigTime      time.Time `json:"lastConfigTime"`
	CorruptionCount     int64     `json:"corruptionCount"`
	GoroutineCount      int       `json:"goroutineCount"`
	GOMAXPROCS          int       `json:"GOMAXPROCS"`
	GOMEMLIMIT          int64     `json:"GOMEMLIMIT"`
	GOGC                string    `json:"GOGC"`
	GODEBUG             string    `json:"GODEBUG"`
	StorageRetention    string    `json:"storageRetention"`
}

func (a *API) runtimeInfo(*http.Request) result {
	cwd, err := os.Getwd()
	if err != nil {
		cwd = "<error retrieving current working directory>"
	}
	host, err := os.Hostname()
	if err != nil {
		host = "<error retrieving hostname>"
	}
	return ok(runtimeInfoData{
		StartTime:           a.started,
		CWD:                 cwd,
		Hostname:            host,
		ServerTime:          time.Now(),
		ReloadConfigSuccess: true,
		LastConfigTime:      a.started,
		GoroutineCount:      runtime.NumGoroutine(),
		GOMAXPROCS:          runtime.GOMAXPROCS(0),
		GOMEMLIMIT:          debug.SetMemoryLimit(-1),
		GOGC:                os.Getenv("GOGC"),
		GODEBUG:             os.Getenv("GODEBUG"),
		StorageRetention:    a.comps.StorageRetention,
	})
}

// features answers with the PromQL features the engine and parser enable,
// unescaped (">=" rather than "\u003e=") as Prometheus writes them.
func (a *API) features(*http.Request) result { return ok(featureData(a.featureRegistry.Get())) }

type featureData map[string]map[string]bool

var featureJSON = jsoniter.Config{EscapeHTML: false, SortMapKeys: true, ValidateJsonRawMessage: true}.Froze()

func (f featureData) MarshalJSON() ([]byte, error) {
	return featureJSON.Marshal(map[string]map[string]bool(f))
}

type walReplayData struct {
	Min     int `json:"min"`
	Max     int `json:"max"`
	Current int `json:"current"`
}

// walReplay answers that replay is done: Shale replays its log in Open,
// before the API serves.
func (a *API) walReplay(*http.Request) result { return ok(walReplayData{}) }

func (a *API) notifications(*http.Request) result { return ok([]struct{}{}) }

func (a *API) tsdbBlocks(*http.Request) result {
	return ok(map[string][]struct{}{"blocks": {}})
}

type tsdbStat struct {
	Name  string `json:"name"`
	Value uint64 `json:"value"`
}

type headStats struct {
	NumSeries     uint64 `json:"numSeries"`
	NumLabelPairs int    `json:"numLabelPairs"`
	ChunkCount    int64  `json:"chunkCount"`
	MinTime       int64  `json:"minTime"`
	MaxTime       int64  `json:"maxTime"`
}

type tsdbStatus struct {
	HeadStats                   headStats  `json:"headStats"`
	SeriesCountByMetricName     []tsdbStat `json:"seriesCountByMetricName"`
	LabelValueCountByLabelName  []tsdbStat `json:"labelValueCountByLabelName"`
	MemoryInBytesByLabelName    []tsdbStat `json:"memoryInBytesByLabelName"`
	SeriesCountByLabelValuePair []tsdbStat `json:"seriesCountByLabelValuePair"`
}

func (a *API) tsdbStatus(r *http.Request) result {
	const maxTSDBLimit = 10000
	limit := 10
	if s := r.FormValue("limit"); s != "" {
		var err error
		if limit, err = strconv.Atoi(s); err != nil || limit < 1 {
			return fail(badData(errors.New("limit must be a positive number")))
		}
		if limit > maxTSDBLimit {
			return fail(badData(fmt.Errorf("limit must not exceed %d", maxTSDBLimit)))
		}
	}
	if a.comps.Cardinality == nil {
		return fail(internalError(fmt.Errorf("cardinality statistics: %w", errUnsupported)))
	}
	c, err := a.comps.Cardinality.Cardinality(r.Context(), limit)
	if err != nil {
		return fail(internalError(fmt.Errorf("cardinality statistics: %w", err)))
	}
	return ok(tsdbStatus{
		HeadStats: headStats{
			NumSeries:     c.NumSeries,
			NumLabelPairs: c.NumLabelPairs,
			ChunkCount:    c.ChunkCount,
			MinTime:       c.MinTime,
			MaxTime:       c.MaxTime,
		},
		SeriesCountByMetricName:     topStats(c.SeriesCountByMetricName, limit),
		LabelValueCountByLabelName:  topStats(c.LabelValueCountByLabelName, limit),
		MemoryInBytesByLabelName:    topStats(c.MemoryInBytesByLabelName, limit),
		SeriesCountByLabelValuePair: topStats(c.SeriesCountByLabelValuePair, limit),
	})
}

// topStats orders by count, largest first, then by name, and keeps limit.
func topStats(in []NameCount, limit int) []tsdbStat {
	sorted := slices.Clone(in)
	slices.SortFunc(sorted, func(x, y NameCount) int {
		if x.Count != y.Count {
			if x.Count > y.Count {
				return -1
			}
			return 1
		}
		return strings.Compare(x.Name, y.Name)
	})
	if len(sorted) > limit {
		sorted = sorted[:limit]
	}
	out := make([]tsdbStat, 0, len(sorted))
	for _, s := range sorted {
		out = append(out, tsdbStat{Name: s.Name, Value: s.Count})
	}
	return out
}

// Shale receives samples; it scrapes nothing. The target endpoints answer
// as a Prometheus server with no scrape configuration does.

type targetDiscovery struct {
	ActiveTargets       []struct{}     `json:"activeTargets"`
	DroppedTargets      []struct{}     `json:"droppedTargets"`
	DroppedTargetCounts map[string]int `json:"droppedTargetCounts"`
}

func (a *API) targets(r *http.Request) result {
	res := targetDiscovery{ActiveTargets: []struct{}{}, DroppedTargets: []struct{}{}}
	state := strings.ToLower(r.URL.Query().Get("state"))
	if state == "" || state == "any" || state == "dropped" {
		res.DroppedTargetCounts = map[string]int{}
	}
	return ok(res)
}

func (a *API) targetMetadata(r *http.Request) result {
	if _, err := intParam(r, "limit"); err != nil {
		return fail(badData(err))
	}
	if s := r.FormValue("match_target"); s != "" {
		if _, err := a.parser.ParseMetricSelector(s); err != nil {
			return fail(invalidParam(err, "match_target"))
		}
	}
	return ok([]struct{}{})
}

func (a *API) scrapePools(*http.Request) result {
	return ok(struct {
		ScrapePools []string `json:"scrapePools"`
	}{[]string{}})
}

// Until a rules engine mounts its own handler on these paths, they answer as
// a Prometheus server with no rules and no Alertmanagers does.

type ruleDiscovery struct {
	RuleGroups []struct{} `json:"groups"`
}

func (a *API) rules(r *http.Request) result {
	if err := r.ParseForm(); err != nil {
		return fail(badData(fmt.Errorf("error parsing form values: %w", err)))
	}
	if _, err := a.parseMatchers(r.Form["match[]"]); err != nil {
		return fail(badData(err))
	}
	q := r.URL.Query()
	if typ := strings.ToLower(q.Get("type")); typ != "" && typ != "alert" && typ != "record" {
		return fail(invalidParam(fmt.Errorf("not supported value %q", typ), "type"))
	}
	if s := strings.ToLower(q.Get("exclude_alerts")); s != "" {
		if _, err := strconv.ParseBool(s); err != nil {
			return fail(invalidParam(fmt.Errorf("error converting exclude_alerts: %w", err), "exclude_alerts"))
		}
	}
	if apiErr := checkRulePage(q.Get("group_limit"), q.Get("group_next_token")); apiErr != nil {
		return fail(apiErr)
	}
	return ok(ruleDiscovery{RuleGroups: []struct{}{}})
}

// checkRulePage checks the pagination parameters of /rules; with no groups
// every next token is unknown.
func checkRulePage(limit, token string) *apiError {
	if token != "" && limit == "" {
		return invalidParam(errors.New("group_limit needs to be present in order to paginate over the groups"), "group_next_token")
	}
	if limit == "" {
		return nil
	}
	n, err := strconv.ParseInt(limit, 10, 32)
	if err != nil {
		return invalidParam(fmt.Errorf("group_limit needs to be a valid number: %w", err), "group_limit")
	}
	if n <= 0 {
		return invalidParam(errors.New("group_limit needs to be greater than 0"), "group_limit")
	}
	if token != "" {
		return invalidParam(fmt.Errorf("invalid group_next_token '%v'. were rule groups changed?", token), "group_next_token")
	}
	return nil
}

func (a *API) alerts(*http.Request) result {
	return ok(struct {
		Alerts []struct{} `json:"alerts"`
	}{[]struct{}{}})
}

func (a *API) alertmanagers(*http.Request) result {
	return ok(struct {
		Active  []struct{} `json:"activeAlertmanagers"`
		Dropped []struct{} `json:"droppedAlertmanagers"`
	}{[]struct{}{}, []struct{}{}})
}

// selfMetrics answers with the server's own metrics as protobuf JSON, those
// whose name matches metric_name_pattern (fully anchored) when given.
func (a *API) selfMetrics(r *http.Request) result {
	var filter *regexp.Regexp
	if pattern := r.FormValue("metric_name_pattern"); pattern != "" {
		var err error
		if filter, err = regexp.Compile("^(?:" + pattern + ")$"); err != nil {
			return fail(badData(fmt.Errorf("invalid metric_name_pattern: %w", err)))
		}
	}
	mfs, err := a.comps.Gatherer.Gather()
	if err != nil {
		return fail(internalError(fmt.Errorf("error gathering self metrics: %w", err)))
	}
	out := make([]json.RawMessage, 0, len(mfs))
	for _, mf := range mfs {
		if filter != nil && !filter.MatchString(mf.GetName()) {
			continue
		}
		b, err := protojson.MarshalOptions{}.Marshal(mf)
		if err != nil {
			return fail(internalError(fmt.Errorf("error marshaling metric family %q: %w", mf.GetName(), err)))
		}
		out = append(out, b)
	}
	return ok(out)
}

var errNoScrapePool = badData(fmt.Errorf("error retrieving scrape config: %w", errors.New("scrape pool not found")))

func (a *API) scrapePoolConfig(r *http.Request) result {
	if r.FormValue("scrapePool") == "" {
		return fail(badData(errors.New("no scrapePool parameter provided")))
	}
	return fail(errNoScrapePool)
}

func (a *API) relabelSteps(r *http.Request) result {
	if r.FormValue("scrapePool") == "" {
		return fail(badData(errors.New("no scrapePool parameter provided")))
	}
	s := r.FormValue("labels")
	if s == "" {
		return fail(badData(errors.New("no labels parameter provided")))
	}
	var ls labels.Labels
	if err := json.Unmarshal([]byte(s), &ls); err != nil {
		return fail(badData(fmt.Errorf("error parsing labels: %w", err)))
	}
	return fail(errNoScrapePool)
}

// searchDisabled answers the search endpoints, which Prometheus serves only
// with --enable-feature=search-api.
func (a *API) searchDisabled(w http.ResponseWriter, r *http.Request) {
	httputil.SetCORS(w, a.cors, r)
	a.respondError(w, &apiError{errorUnavailable, errors.New("search API disabled")}, nil)
}

// notificationsLive answers that there is no notification stream.
func (a *API) notificationsLive(w http.ResponseWriter, r *http.Request) {
	httputil.SetCORS(w, a.cors, r)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("Connection", "keep-alive")
	w.WriteHeader(http.StatusNoContent)
}
