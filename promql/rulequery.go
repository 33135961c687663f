package promql

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	upstream "github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/storage"
)

// EngineQueryFunc returns the query function of rule evaluation (the rules
// package's QueryFunc, the templates' query function): an instant query on
// engine over q at t, whose result is a vector; a scalar becomes a vector of
// one sample without labels, any other type is an error. Rules get the
// engine through it, so that this package alone imports the engine.
func EngineQueryFunc(engine upstream.QueryEngine, q storage.Queryable) func(ctx context.Context, qs string, t time.Time) (upstream.Vector, error) {
	return func(ctx context.Context, qs string, t time.Time) (upstream.Vector, error) {
		query, err := engine.NewInstantQuery(ctx, q, nil, qs, t)
		if err != nil {
			return nil, err
		}
		defer query.Close()
		res := query.Exec(ctx)
		if res.Err != nil {
			return nil, res.Err
		}
		switch v := res.Value.(type) {
		case upstream.Vector:
			return v, nil
		case upstream.Scalar:
			return upstream.Vector{{T: v.T, F: v.V, Metric: labels.EmptyLabels()}}, nil
		default:
			return nil, errors.New("rule result is not a vector or scalar")
		}
	}
}
