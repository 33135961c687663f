package objstore_test

import (
	"maps"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shaledb/shale/storage/objstore"
	"github.com/shaledb/shale/storage/objstore/objstoretest"
)

func TestMain(m *testing.M) { objstoretest.Main(m) }

// go test -race -run TestAcceptance ./storage/objstore/
func TestAcceptance(t *testing.T) {
	backends := objstoretest.Backends(t)
	for _, name := range slices.Sorted(maps.Keys(backends)) {
		newBucket := backends[name]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			objstoretest.AcceptanceTest(t, newBucket)
		})
	}
}

// The decorators keep the contract, whatever they wrap.
func TestAcceptanceDecorated(t *testing.T) {
	backends := objstoretest.Backends(t)
	stacks := map[string]func(objstore.Bucket) objstore.Bucket{
		"prefix": func(b objstore.Bucket) objstore.Bucket {
			p, err := objstore.NewPrefixBucket(b, "tenant/one")
			if err != nil {
				t.Fatal(err)
			}
			return p
		},
		"metrics+fault": func(b objstore.Bucket) objstore.Bucket {
			m, err := objstore.NewMetricsBucket(objstore.NewFaultBucket(b), prometheus.NewRegistry(), "test")
			if err != nil {
				t.Fatal(err)
			}
			return m
		},
	}
	for _, stack := range slices.Sorted(maps.Keys(stacks)) {
		on := []string{"memory"}
		if stack == "prefix" {
			on = []string{"memory", "s3"}
		}
		for _, backend := range on {
			t.Run(stack+"/"+backend, func(t *testing.T) {
				t.Parallel()
				objstoretest.AcceptanceTest(t, func(t *testing.T) objstore.Bucket {
					return stacks[stack](backends[backend](t))
				})
			})
		}
	}
}
