package objstoretest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/shaledb/shale/internal/versitygw"
	"github.com/shaledb/shale/storage/objstore"
)

// Environment variables that steer the S3 tests.
const (
	// EnvVersityGW names the versitygw binary to run.
	EnvVersityGW = "SHALE_VERSITYGW"
	// EnvRequireE2E, set to 1, turns a missing versitygw from a skip into a failure.
	EnvRequireE2E = "SHALE_REQUIRE_E2E"
)

const installHint = "install it with `make tools` or " +
	"`GOBIN=$(git rev-parse --show-toplevel)/.tools go install github.com/versity/versitygw/cmd/versitygw@latest`, " +
	"or set " + EnvVersityGW

// S3Server is a versitygw process serving S3 on 127.0.0.1 from a temporary
// directory (posix backend).
type S3Server struct {
	*versitygw.Server
	buckets atomic.Int64
}

var shared struct {
	mu      sync.Mutex
	srv     *S3Server
	err     error
	missing bool
}

// Server returns the test binary's versitygw server, starting it on first
// use. When the binary cannot be found it skips t, or fails it if
// SHALE_REQUIRE_E2E=1. Stop it with StopServer (Main does).
func Server(t testing.TB) *S3Server {
	t.Helper()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.srv == nil && shared.err == nil {
		bin, err := findVersityGW()
		if err != nil {
			shared.err, shared.missing = err, true
		} else {
			shared.srv, shared.err = startServer(bin)
		}
	}
	if shared.err != nil {
		if shared.missing && os.Getenv(EnvRequireE2E) != "1" {
			t.Skipf("S3 tests need versitygw: %v", shared.err)
		}
		t.Fatalf("S3 test server: %v", shared.err)
	}
	return shared.srv
}

// StopServer stops the shared versitygw server if it runs and removes its data.
func StopServer() {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.srv != nil {
		shared.srv.Stop()
		shared.srv = nil
	}
	shared.err, shared.missing = nil, false
}

type serverM struct{ m *testing.M }

func (s serverM) Run() int {
	code := s.m.Run()
	StopServer()
	return code
}

// Main runs the tests, stops the shared S3 server and then checks for leaked
// goroutines (goleak.VerifyTestMain with opts). Use it as a package's TestMain:
//
//	func TestMain(m *testing.M) { objstoretest.Main(m) }
func Main(m *testing.M, opts ...goleak.Option) {
	goleak.VerifyTestMain(serverM{m}, opts...)
}

// findVersityGW looks in $SHALE_VERSITYGW, then <module root>/.tools, then PATH.
func findVersityGW() (string, error) {
	if p := os.Getenv(EnvVersityGW); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s=%s: %w; %s", EnvVersityGW, p, err, installHint)
		}
		return p, nil
	}
	if root, err := moduleRoot(); err == nil {
		p := filepath.Join(root, ".tools", "versitygw")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	if p, err := exec.LookPath("versitygw"); err == nil {
		return p, nil
	}
	return "", errors.New("versitygw not found; " + installHint)
}

// moduleRoot walks up from the working directory to the directory holding go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.mod not found above the working directory")
		}
		dir = parent
	}
}

func startServer(bin string) (*S3Server, error) {
	srv, err := versitygw.Start(context.Background(), bin, "")
	if err != nil {
		return nil, err
	}
	return &S3Server{Server: srv}, nil
}

// Config returns an S3Config for bucket on this server.
func (s *S3Server) Config(bucket string) objstore.S3Config { return s.S3Config(bucket, "") }

// CreateBucket creates a new, empty bucket with a unique name and returns the name.
func (s *S3Server) CreateBucket(ctx context.Context) (string, error) {
	name := fmt.Sprintf("shale-test-%04d", s.buckets.Add(1))
	if err := s.MakeBucket(ctx, name); err != nil {
		return "", err
	}
	return name, nil
}

// NewS3Bucket returns an S3Bucket on a fresh bucket of the shared server,
// closed when t ends. PartSize is the S3 minimum, so that objects over 5 MiB
// take the multipart path. modify, if not nil, may change the config further.
func NewS3Bucket(t testing.TB, modify func(*objstore.S3Config)) *objstore.S3Bucket {
	t.Helper()
	srv := Server(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	name, err := srv.CreateBucket(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cfg := srv.Config(name)
	cfg.PartSize = objstore.MinS3PartSize
	if modify != nil {
		modify(&cfg)
	}
	b, err := objstore.NewS3Bucket(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// Backends returns a constructor of a fresh, empty bucket for every backend:
// "memory", "filesystem" (in t.TempDir()) and "s3" (a new bucket on the
// shared versitygw server; skipped when versitygw is missing). Each bucket is
// closed when the test that made it ends.
func Backends(t testing.TB) map[string]func(t *testing.T) objstore.Bucket {
	return map[string]func(t *testing.T) objstore.Bucket{
		"memory": func(t *testing.T) objstore.Bucket {
			b := objstore.NewMemoryBucket()
			t.Cleanup(func() { b.Close() })
			return b
		},
		"filesystem": func(t *testing.T) objstore.Bucket {
			t.Helper()
			b, err := objstore.NewFilesystemBucket(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			return b
		},
		"s3": func(t *testing.T) objstore.Bucket {
			t.Helper()
			return NewS3Bucket(t, nil)
		},
	}
}
