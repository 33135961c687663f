package objstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"go.yaml.in/yaml/v3"

	"github.com/shaledb/shale/storage/objstore"
	"github.com/shaledb/shale/storage/objstore/objstoretest"
)

func TestS3ConfigValidate(t *testing.T) {
	valid := objstore.DefaultS3Config()
	valid.Bucket = "b"
	if err := valid.Validate(); err != nil {
		t.Fatalf("default config with a bucket: %v", err)
	}
	for _, tc := range []struct {
		name   string
		modify func(*objstore.S3Config)
	}{
		{"no bucket", func(c *objstore.S3Config) { c.Bucket = "" }},
		{"no region", func(c *objstore.S3Config) { c.Region = "" }},
		{"endpoint without scheme", func(c *objstore.S3Config) { c.Endpoint = "127.0.0.1:9000" }},
		{"endpoint with other scheme", func(c *objstore.S3Config) { c.Endpoint = "ftp://host" }},
		{"key without secret", func(c *objstore.S3Config) { c.AccessKeyID = "k" }},
		{"secret without key", func(c *objstore.S3Config) { c.SecretAccessKey = "s" }},
		{"token without keys", func(c *objstore.S3Config) { c.SessionToken = "t" }},
		{"part size too small", func(c *objstore.S3Config) { c.PartSize = objstore.MinS3PartSize - 1 }},
		{"part size too large", func(c *objstore.S3Config) { c.PartSize = objstore.MaxS3PartSize + 1 }},
	} {
		c := valid
		tc.modify(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: validated", tc.name)
		}
		if _, err := objstore.NewS3Bucket(t.Context(), c); err == nil {
			t.Errorf("%s: NewS3Bucket accepted it", tc.name)
		}
	}
}

func TestS3ConfigYAMLAndLogging(t *testing.T) {
	cfg := objstore.DefaultS3Config()
	err := yaml.Unmarshal([]byte(`
bucket: metrics
endpoint: http://127.0.0.1:7070
force_path_style: true
access_key_id: AKIA
secret_access_key: very-secret
part_size: 8388608
`), &cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := objstore.S3Config{Bucket: "metrics", Endpoint: "http://127.0.0.1:7070", Region: "us-east-1",
		ForcePathStyle: true, AccessKeyID: "AKIA", SecretAccessKey: "very-secret", PartSize: 8 << 20}
	if cfg != want {
		t.Fatalf("decoded %+v", cfg)
	}
	var buf bytes.Buffer
	slog.New(slog.NewTextHandler(&buf, nil)).Info("s3", "config", cfg)
	if strings.Contains(buf.String(), "very-secret") || !strings.Contains(buf.String(), "AKIA") {
		t.Fatalf("log line %q", buf.String())
	}
}

// fakeS3 answers every request with the given status and S3 error code.
func fakeS3(t *testing.T, status int, code string) objstore.Bucket {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(status)
		if r.Method != http.MethodHead {
			fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code><Message>test</Message></Error>`, code)
		}
	}))
	t.Cleanup(srv.Close)
	return newS3Client(t, srv.URL)
}

func newS3Client(t *testing.T, endpoint string) objstore.Bucket {
	t.Helper()
	cfg := objstore.DefaultS3Config()
	cfg.Bucket, cfg.Endpoint, cfg.ForcePathStyle = "b", endpoint, true
	cfg.AccessKeyID, cfg.SecretAccessKey = "k", "s"
	b, err := objstore.NewS3Bucket(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func TestS3ErrorClasses(t *testing.T) {
	type class int
	const (
		other class = iota
		notFound
		precondition
		invalidRange
		transient
	)
	classOf := func(err error) class {
		switch {
		case objstore.IsNotFound(err):
			return notFound
		case objstore.IsPreconditionFailed(err):
			return precondition
		case errors.Is(err, objstore.ErrInvalidRange):
			return invalidRange
		case objstore.IsTransient(err):
			return transient
		}
		return other
	}
	for _, tc := range []struct {
		status int
		code   string
		op     objstore.Op
		want   class
	}{
		{404, "NoSuchKey", objstore.OpGet, notFound},
		{404, "NotFound", objstore.OpAttributes, notFound},
		{404, "NoSuchBucket", objstore.OpGet, other},
		{404, "NoSuchBucket", objstore.OpList, other},
		{412, "PreconditionFailed", objstore.OpPut, precondition},
		{409, "ConditionalRequestConflict", objstore.OpPut, precondition},
		{416, "InvalidRange", objstore.OpGetRange, invalidRange},
		{503, "SlowDown", objstore.OpPut, transient},
		{503, "ServiceUnavailable", objstore.OpList, transient},
		{500, "InternalError", objstore.OpGet, transient},
		{502, "BadGateway", objstore.OpAttributes, transient},
		{429, "TooManyRequests", objstore.OpDelete, transient},
		{400, "RequestTimeout", objstore.OpPut, transient},
		{404, "NoSuchUpload", objstore.OpPut, transient},
		{403, "AccessDenied", objstore.OpGet, other},
		{403, "AccessDenied", objstore.OpList, other},
		{400, "InvalidArgument", objstore.OpPut, other},
		{501, "NotImplemented", objstore.OpPut, other},
	} {
		t.Run(fmt.Sprintf("status=%d/code=%s/op=%s", tc.status, tc.code, tc.op), func(t *testing.T) {
			b := fakeS3(t, tc.status, tc.code)
			err := callOp(t.Context(), b, tc.op)
			if err == nil {
				t.Fatal("no error")
			}
			if got := classOf(err); got != tc.want {
				t.Fatalf("error %v has class %d, want %d", err, got, tc.want)
			}
		})
	}
}

func callOp(ctx context.Context, b objstore.Bucket, op objstore.Op) error {
	switch op {
	case objstore.OpGet:
		_, err := b.Get(ctx, "obj")
		return err
	case objstore.OpGetRange:
		_, err := b.GetRange(ctx, "obj", 5, 10)
		return err
	case objstore.OpAttributes:
		_, err := b.Attributes(ctx, "obj")
		return err
	case objstore.OpPut:
		_, err := objstore.PutBytes(ctx, b, "obj", []byte("x"), objstore.PutOptions{IfAbsent: true})
		return err
	case objstore.OpDelete:
		return b.Delete(ctx, "obj")
	case objstore.OpList:
		_, err := b.List(ctx, "", "", 0)
		return err
	}
	return nil
}

func TestS3ConnectionRefusedIsTransient(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	b := newS3Client(t, "http://"+addr)
	for _, op := range objstore.Ops {
		if err := callOp(t.Context(), b, op); !objstore.IsTransient(err) {
			t.Errorf("%s: %v is not transient", op, err)
		}
	}
}

// Objects over PartSize go up in parts (S3 marks a multipart ETag "-<parts>").
func TestS3Multipart(t *testing.T) {
	b := objstoretest.NewS3Bucket(t, nil)
	data := bytes.Repeat([]byte("0123456789abcdef"), objstoretest.LargeObjectSize/16)
	a, err := objstore.PutBytes(t.Context(), b, "big", data, objstore.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(a.ETag, `-2"`) {
		t.Fatalf("ETag %s of a %d-byte object with 5 MiB parts is not that of a 2-part upload", a.ETag, len(data))
	}
	small, err := objstore.PutBytes(t.Context(), b, "small", data[:objstore.MinS3PartSize], objstore.PutOptions{})
	if err != nil || strings.Contains(small.ETag, "-") {
		t.Fatalf("object of exactly PartSize: %+v, %v", small, err)
	}
}

type failAfter struct {
	r io.Reader
	n int
}

func (f *failAfter) Read(p []byte) (int, error) {
	if f.n <= 0 {
		return 0, errors.New("source broke")
	}
	if len(p) > f.n {
		p = p[:f.n]
	}
	n, err := f.r.Read(p)
	f.n -= n
	return n, err
}

// A failed multipart upload is aborted, leaving no parts behind.
func TestS3MultipartAbort(t *testing.T) {
	b := objstoretest.NewS3Bucket(t, nil)
	body := &failAfter{r: bytes.NewReader(make([]byte, 3*objstore.MinS3PartSize)), n: objstore.MinS3PartSize + 100}
	if _, err := b.Put(t.Context(), "broken", body, -1, objstore.PutOptions{}); err == nil {
		t.Fatal("put of a failing body succeeded")
	}
	out, err := b.Client().ListMultipartUploads(t.Context(), &s3.ListMultipartUploadsInput{Bucket: aws.String(b.BucketName())})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Uploads) != 0 {
		t.Fatalf("%d multipart uploads left", len(out.Uploads))
	}
	if _, err := b.Attributes(t.Context(), "broken"); !objstore.IsNotFound(err) {
		t.Fatalf("object exists: %v", err)
	}

	// Canceled after the first part went up: the abort still happens.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	canceling := &cancelAfter{r: bytes.NewReader(make([]byte, 3*objstore.MinS3PartSize)), n: objstore.MinS3PartSize + 100, cancel: cancel}
	if _, err := b.Put(ctx, "canceled", canceling, -1, objstore.PutOptions{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled multipart put: %v", err)
	}
	out, err = b.Client().ListMultipartUploads(t.Context(), &s3.ListMultipartUploadsInput{Bucket: aws.String(b.BucketName())})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Uploads) != 0 {
		t.Fatalf("%d multipart uploads left after cancel", len(out.Uploads))
	}
}

// cancelAfter cancels once n bytes were read, and goes on reading.
type cancelAfter struct {
	r      io.Reader
	n      int
	cancel context.CancelFunc
}

func (c *cancelAfter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if c.n -= n; c.n <= 0 {
		c.cancel()
	}
	return n, err
}

// A body that breaks off is a transient failure, unless the caller canceled.
func TestS3BrokenBodyIsTransient(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "100")
		w.WriteHeader(http.StatusOK)
		w.Write([]byte("only ten b"))
	}))
	t.Cleanup(srv.Close)
	b := newS3Client(t, srv.URL)
	rc, err := b.Get(t.Context(), "obj")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if _, err := io.ReadAll(rc); !objstore.IsTransient(err) {
		t.Fatalf("read error %v is not transient", err)
	}
}

// An answer whose body stops coming, the connection left open, fails the
// read after the idle timeout as a transient error; a slow body that keeps
// coming does not, however long it takes in all.
func TestS3StalledBodyFails(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/slow") {
			w.Header().Set("Content-Length", "40")
			w.WriteHeader(http.StatusOK)
			for range 40 {
				w.Write([]byte("x"))
				w.(http.Flusher).Flush()
				time.Sleep(40 * time.Millisecond) // the pace of the answer, not a wait for a condition
			}
			return
		}
		w.Header().Set("Content-Length", "10")
		w.WriteHeader(http.StatusOK)
		w.Write([]byte("half "))
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	b := newS3Client(t, srv.URL).(*objstore.S3Bucket)
	const idle = time.Second // well above a busy machine's scheduling delays
	objstore.SetIdleTimeouts(b, idle, idle)

	// Without the bound the read waits for as long as the connection
	// stays open: the test would hang.
	_, err := objstore.ReadAll(t.Context(), b, "stalls")
	if !objstore.IsTransient(err) || !strings.Contains(err.Error(), "no byte of the answer") {
		t.Fatalf("stalled body: %v, want a transient error naming the stall", err)
	}
	_, err = objstore.ReadRange(t.Context(), b, "stalls", 0, 10)
	if !objstore.IsTransient(err) {
		t.Fatalf("stalled ranged body: %v, want transient", err)
	}
	if got, err := objstore.ReadAll(t.Context(), b, "slow"); err != nil || string(got) != strings.Repeat("x", 40) {
		t.Fatalf("slow body (1.6 s in all, a byte every 40 ms): %q, %v", got, err)
	}
}

// A store that stops taking an upload's body, the connection left open,
// fails the put after the idle timeout as a transient error; one that takes
// it slowly but steadily does not.
func TestS3StalledUploadFails(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/slow") {
			buf := make([]byte, 64<<10)
			for {
				if _, err := io.ReadFull(r.Body, buf); err != nil {
					break
				}
				time.Sleep(20 * time.Millisecond) // the pace of the store, not a wait for a condition
			}
			w.Header().Set("ETag", `"e"`)
			return
		}
		select { // takes none of the body
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	cfg := objstore.DefaultS3Config()
	cfg.Bucket, cfg.Endpoint, cfg.ForcePathStyle = "b", srv.URL, true
	cfg.AccessKeyID, cfg.SecretAccessKey = "k", "s"
	cfg.PartSize = 64 << 20 // one PUT
	b, err := objstore.NewS3Bucket(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	const idle = time.Second // well above a busy machine's scheduling delays
	objstore.SetIdleTimeouts(b, idle, idle)

	// More than the connection's buffers hold, so that the sender blocks.
	// Without the bound the put waits for as long as the connection stays
	// open: the test would hang.
	body := make([]byte, 48<<20)
	_, err = objstore.PutBytes(t.Context(), b, "stalls", body, objstore.PutOptions{})
	if !objstore.IsTransient(err) || !strings.Contains(err.Error(), "took no byte") {
		t.Fatalf("stalled upload: %v, want a transient error naming the stall", err)
	}
	// 8 MiB at 64 KiB every 20 ms: about 2.6 s in all, and more than the
	// idle time to drain the connection's buffers after the last byte is
	// handed over.
	if _, err := objstore.PutBytes(t.Context(), b, "slow", body[:8<<20], objstore.PutOptions{}); err != nil {
		t.Fatalf("slow upload: %v", err)
	}
}

// Without keys in the config, the AWS default chain supplies them (here from
// the environment).
func TestS3DefaultCredentialChain(t *testing.T) {
	srv := objstoretest.Server(t)
	name, err := srv.CreateBucket(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	t.Setenv("AWS_SESSION_TOKEN", "")
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_CONFIG_FILE", t.TempDir()+"/none")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", t.TempDir()+"/none")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	cfg := srv.Config(name)
	cfg.AccessKeyID, cfg.SecretAccessKey = "", ""
	b, err := objstore.NewS3Bucket(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := objstore.PutBytes(t.Context(), b, "k", []byte("v"), objstore.PutOptions{}); err != nil {
		t.Fatalf("put with credentials from the environment: %v", err)
	}

	// Wrong keys are a permanent error, not a transient one.
	t.Setenv("AWS_SECRET_ACCESS_KEY", "wrong")
	bad, err := objstore.NewS3Bucket(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	if _, err := bad.Attributes(t.Context(), "k"); err == nil || objstore.IsTransient(err) || objstore.IsNotFound(err) {
		t.Fatalf("wrong secret gave %v", err)
	}
}

// HTTP lets a server ignore Range and answer 200 with the whole object, and
// some S3-compatible stores and caching proxies do: ranged reads still
// return the bytes asked for, and the ranges S3 refuses are refused. An
// answer whose Content-Range starts elsewhere than asked is refused.
func TestS3RangeIgnored(t *testing.T) {
	data := []byte("0123456789abcdefghijklmnopqrstuvwxyz")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasSuffix(r.URL.Path, "/misplaced"):
			w.Header().Set("Content-Range", fmt.Sprintf("bytes 0-9/%d", len(data)))
			w.Header().Set("Content-Length", "10")
			w.WriteHeader(http.StatusPartialContent)
			w.Write(data[:10])
		case strings.HasSuffix(r.URL.Path, "/empty"):
			w.Header().Set("Content-Length", "0")
		default:
			w.Header().Set("Content-Length", strconv.Itoa(len(data)))
			if r.Method != http.MethodHead {
				w.Write(data)
			}
		}
	}))
	t.Cleanup(srv.Close)
	b := newS3Client(t, srv.URL)
	n := int64(len(data))
	for _, tc := range []struct {
		off, length int64
		want        []byte
		err         error
	}{
		{off: 0, length: -1, want: data},
		{off: 0, length: 5, want: data[:5]},
		{off: 10, length: 20, want: data[10:30]},
		{off: 30, length: -1, want: data[30:]},
		{off: 30, length: 50, want: data[30:]},
		{off: n - 1, length: 1, want: data[n-1:]},
		{off: 5, length: 0, want: nil},
		{off: n, length: 1, err: objstore.ErrInvalidRange},
		{off: n, length: -1, err: objstore.ErrInvalidRange},
		{off: n + 10, length: 3, err: objstore.ErrInvalidRange},
	} {
		what := fmt.Sprintf("range [%d,+%d)", tc.off, tc.length)
		got, err := objstore.ReadRange(t.Context(), b, "whole", tc.off, tc.length)
		if tc.err != nil {
			if !errors.Is(err, tc.err) {
				t.Fatalf("%s: %v, want %v", what, err, tc.err)
			}
			continue
		}
		if err != nil || !bytes.Equal(got, tc.want) {
			t.Fatalf("%s: %q, %v; want %q", what, got, err, tc.want)
		}
	}
	// A reader that reads to the end of its body gets the range only.
	rc, err := b.GetRange(t.Context(), "whole", 3, 4)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || string(got) != "3456" {
		t.Fatalf("read to the end of [3,+4): %q, %v", got, err)
	}
	if got, err := objstore.ReadRange(t.Context(), b, "empty", 0, 10); err != nil || len(got) != 0 {
		t.Fatalf("empty object: %q, %v", got, err)
	}
	if _, err := objstore.ReadRange(t.Context(), b, "misplaced", 20, 10); !objstore.IsTransient(err) || !strings.Contains(err.Error(), "bytes 0-9/36") {
		t.Fatalf("answer of another range: %v, want a transient error naming it", err)
	}
}
