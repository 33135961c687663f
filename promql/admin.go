package promql

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/prometheus/model/timestamp"
)

// The admin endpoints, under --web.enable-admin-api.

// errUnsupported is returned by admin operations the storage does not offer.
var errUnsupported = errors.New("not supported by this storage")

var errAdminDisabled = &apiError{errorUnavailable, errors.New("admin APIs disabled")}

func (a *API) deleteSeries(r *http.Request) result {
	if !a.opts.EnableAdmin {
		return fail(errAdminDisabled)
	}
	if err := r.ParseForm(); err != nil {
		return fail(badData(fmt.Errorf("error parsing form values: %w", err)))
	}
	if len(r.Form["match[]"]) == 0 {
		return fail(badData(errors.New("no match[] parameter provided")))
	}
	start, end, apiErr := timeRange(r)
	if apiErr != nil {
		return fail(apiErr)
	}
	for _, s := range r.Form["match[]"] {
		ms, err := a.parser.ParseMetricSelector(s)
		if err != nil {
			return fail(invalidParam(err, "match[]"))
		}
		if a.comps.Deleter == nil {
			return fail(internalError(fmt.Errorf("delete series: %w", errUnsupported)))
		}
		if err := a.comps.Deleter.Delete(r.Context(), timestamp.FromTime(start), timestamp.FromTime(end), ms...); err != nil {
			return fail(adminError(err))
		}
	}
	return result{}
}

// adminError answers a failed admin operation: unavailable (503, see
// statusCode) when the storage asks to be retried later, internal (500)
// otherwise.
func adminError(err error) *apiError {
	if unavailable(err) {
		return &apiError{errorUnavailable, err}
	}
	return internalError(err)
}

func (a *API) cleanTombstones(*http.Request) result {
	if !a.opts.EnableAdmin {
		return fail(errAdminDisabled)
	}
	if c, ok := a.comps.Deleter.(TombstoneCleaner); ok {
		if err := c.CleanTombstones(context.Background()); err != nil {
			return fail(internalError(err))
		}
	}
	return result{}
}

// snapshot answers as Prometheus does: the name of the new snapshot, a
// time and a random number. Shale's is a checkpoint in the object store
// (docs/operations.md, Backups), not a folder.
func (a *API) snapshot(r *http.Request) result {
	if !a.opts.EnableAdmin {
		return fail(errAdminDisabled)
	}
	skipHead := false
	if s := r.FormValue("skip_head"); s != "" {
		var err error
		if skipHead, err = strconv.ParseBool(s); err != nil {
			return fail(invalidParam(fmt.Errorf("unable to parse boolean: %w", err), "skip_head"))
		}
	}
	if a.comps.Snapshotter == nil {
		return fail(internalError(fmt.Errorf("create snapshot: %w", errUnsupported)))
	}
	name := fmt.Sprintf("%s-%016x", time.Now().UTC().Format("20060102T150405Z0700"), rand.Uint64())
	if err := a.comps.Snapshotter.Snapshot(r.Context(), name, !skipHead); err != nil {
		return fail(adminError(fmt.Errorf("create snapshot: %w", err)))
	}
	return ok(struct {
		Name string `json:"name"`
	}{name})
}
