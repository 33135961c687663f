package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"go.yaml.in/yaml/v3"

	"github.com/shaledb/shale/promql"
	"github.com/shaledb/shale/remotewrite"
	"github.com/shaledb/shale/rules"
	"github.com/shaledb/shale/storage/objstore"
)

// objstoreConfig is the content of --objstore.config-file.
//
//	type: s3            # or filesystem
//	prefix: shale       # optional key prefix inside the bucket
//	config:             # the backend's settings
//	  bucket: metrics
//	  endpoint: http://127.0.0.1:7070
//	  region: us-east-1
//	  force_path_style: true
//	  access_key_id: ...       # empty: the AWS default credential chain
//	  secret_access_key: ...
type objstoreConfig struct {
	Type   string    `yaml:"type"`
	Prefix string    `yaml:"prefix"`
	Config yaml.Node `yaml:"config"`
}

// fileConfig is the content of --config.file: the settings flags do poorly.
type fileConfig struct {
	RemoteWrite remotewrite.Options     `yaml:"remote_write"`
	Query       promql.Options          `yaml:"query"`
	OTLP        remotewrite.OTLPOptions `yaml:"otlp"`
	// Prometheus holds the sections with Prometheus' keys: global,
	// rule_files and alerting.
	Prometheus rules.FileConfig `yaml:",inline"`
}

func defaultFileConfig() fileConfig {
	return fileConfig{RemoteWrite: remotewrite.DefaultOptions(), Query: promql.DefaultOptions(), OTLP: remotewrite.DefaultOTLPOptions()}
}

// decodeStrict decodes YAML, refusing unknown fields.
func decodeStrict(data []byte, v any) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil && err.Error() != "EOF" {
		return err
	}
	return nil
}

func loadFileConfig(path string) (fileConfig, error) {
	cfg := defaultFileConfig()
	if path == "" {
		return cfg, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return cfg, fmt.Errorf("read config file: %w", err)
	}
	if err := decodeStrict(data, &cfg); err != nil {
		return cfg, fmt.Errorf("config file %s: %w", path, err)
	}
	if err := cfg.RemoteWrite.Validate(); err != nil {
		return cfg, fmt.Errorf("config file %s: remote_write: %w", path, err)
	}
	if err := cfg.OTLP.Validate(); err != nil {
		return cfg, fmt.Errorf("config file %s: otlp: %w", path, err)
	}
	return cfg, nil
}

// openedBucket is the object store the server runs on.
type openedBucket struct {
	bucket objstore.Bucket
	// prefix is the key prefix of the server's objects in the bucket.
	prefix string
	// name is the bucket's label (bucket=) on the objstore metrics: the S3
	// bucket's name, or the local folder's absolute path. The prefix is left
	// out: it names a place in the bucket, not the bucket the requests go
	// to, and the S3 name alone matches the store's own request metrics.
	name string
	// where says, in logs and errors, where the data is:
	// s3:<bucket>/<prefix> or filesystem:<path>.
	where string
}

// bucketFlags adds to a subcommand the server's flags that say which object
// store openBucket opens.
func bucketFlags(app *kingpin.Application, storagePath, configPath *string) {
	app.Flag("storage.path", "Folder of the local object store (as the server's flag), used when no --objstore.config-file is given.").
		Default("data").StringVar(storagePath)
	app.Flag("objstore.config-file", "Object store config file (as the server's flag).").
		Default("").StringVar(configPath)
}

// openBucket opens the object store: the local folder storagePath, or what
// configPath describes.
func openBucket(ctx context.Context, configPath, storagePath string) (openedBucket, error) {
	if configPath == "" {
		return openFolder(storagePath, "")
	}
	data, err := os.ReadFile(configPath)
	if err != nil {
		return openedBucket{}, fmt.Errorf("read object store config: %w", err)
	}
	var oc objstoreConfig
	if err := decodeStrict(data, &oc); err != nil {
		return openedBucket{}, fmt.Errorf("object store config %s: %w", configPath, err)
	}
	switch oc.Type {
	case "s3", "S3":
		s3cfg := objstore.DefaultS3Config()
		if oc.Config.Kind != 0 {
			if err := oc.Config.Decode(&s3cfg); err != nil {
				return openedBucket{}, fmt.Errorf("object store config %s: s3: %w", configPath, err)
			}
		}
		if err := s3cfg.Validate(); err != nil {
			return openedBucket{}, fmt.Errorf("object store config %s: %w", configPath, err)
		}
		b, err := objstore.NewS3Bucket(ctx, s3cfg)
		if err != nil {
			return openedBucket{}, err
		}
		return openedBucket{bucket: b, prefix: oc.Prefix, name: s3cfg.Bucket, where: fmt.Sprintf("s3:%s/%s", s3cfg.Bucket, oc.Prefix)}, nil
	case "filesystem", "FILESYSTEM":
		var fc struct {
			Path string `yaml:"path"`
		}
		if err := oc.Config.Decode(&fc); err != nil || fc.Path == "" {
			return openedBucket{}, fmt.Errorf("object store config %s: filesystem needs config.path", configPath)
		}
		return openFolder(fc.Path, oc.Prefix)
	default:
		return openedBucket{}, fmt.Errorf("object store config %s: unknown type %q (want s3 or filesystem)", configPath, oc.Type)
	}
}

// openFolder opens the local folder path as the object store.
func openFolder(path, prefix string) (openedBucket, error) {
	b, err := objstore.NewFilesystemBucket(path)
	if err != nil {
		return openedBucket{}, fmt.Errorf("open local object store %s: %w", path, err)
	}
	name, err := filepath.Abs(path)
	if err != nil {
		name = filepath.Clean(path)
	}
	return openedBucket{bucket: b, prefix: prefix, name: name, where: "filesystem:" + path}, nil
}

// walFlushInterval is the group-commit interval: the flag's value, or when
// it is 0, 100ms for S3 (every WAL object is a billed PUT: 10 a second at
// most) and 10ms for a local folder (no per-request cost; a write waits for
// the next object, so the interval is ingest latency).
func walFlushInterval(flag time.Duration, where string) time.Duration {
	switch {
	case flag > 0:
		return flag
	case strings.HasPrefix(where, "s3:"):
		return 100 * time.Millisecond
	default:
		return 10 * time.Millisecond
	}
}

// walMinInterval is the least time between two WAL objects when one goes
// before its interval because every write in progress has joined it: the
// flag's value, or when it is 0, half the flush interval for a local folder
// (an object costs about half a millisecond of CPU, a file and two fsyncs:
// 1ms let a few senders cost twice the CPU per sample, docs/benchmarks.md)
// and the flush interval for S3 (never early: every object is a billed PUT).
func walMinInterval(flag, flush time.Duration, where string) time.Duration {
	switch {
	case flag > 0:
		return flag
	case strings.HasPrefix(where, "s3:"):
		return flush
	default:
		return flush / 2
	}
}
