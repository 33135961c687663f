package objstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
)

// S3 part sizes: S3 refuses parts below 5 MiB (but the last) and above 5 GiB,
// and uploads of more than 10000 parts.
const (
	MinS3PartSize     = 5 << 20
	MaxS3PartSize     = 5 << 30
	DefaultS3PartSize = 16 << 20
	maxS3Parts        = 10000
	s3PageSize        = 1000
)

// S3Config says which S3 (or S3-compatible) bucket to use and how. A key
// prefix inside the bucket is not set here: wrap the bucket in a PrefixBucket.
// Retries are not set here either: the S3 client makes one attempt per call
// and its caller (the LSM's store) owns retries.
type S3Config struct {
	// Bucket is the S3 bucket name. Required.
	Bucket string `yaml:"bucket"`
	// Endpoint is the service URL, e.g. "http://127.0.0.1:7070" for an
	// S3-compatible server. Empty means AWS S3 in Region.
	Endpoint string `yaml:"endpoint,omitempty"`
	// Region is the AWS region; S3-compatible servers mostly accept the default.
	Region string `yaml:"region"`
	// ForcePathStyle addresses the bucket as <endpoint>/<bucket> instead of
	// <bucket>.<endpoint>. Most S3-compatible servers need it.
	ForcePathStyle bool `yaml:"force_path_style,omitempty"`
	// AccessKeyID, SecretAccessKey and SessionToken are static credentials.
	// When AccessKeyID is empty the AWS default credential chain is used
	// (environment, shared config and credentials files, web identity, ECS
	// and EC2 instance roles).
	AccessKeyID     string `yaml:"access_key_id,omitempty"`
	SecretAccessKey string `yaml:"secret_access_key,omitempty"`
	SessionToken    string `yaml:"session_token,omitempty"`
	// PartSize is the size of one part of a multipart upload, in bytes.
	// Objects larger than this, or of unknown size, are uploaded in parts;
	// smaller ones in one PutObject. It is also the most a Put buffers in
	// memory. Between MinS3PartSize and MaxS3PartSize.
	PartSize int64 `yaml:"part_size"`
}

// DefaultS3Config returns the defaults; Bucket (and for non-AWS servers
// Endpoint and credentials) must still be set.
func DefaultS3Config() S3Config {
	return S3Config{Region: "us-east-1", PartSize: DefaultS3PartSize}
}

// Validate reports the first setting that cannot work.
func (c S3Config) Validate() error {
	if c.Bucket == "" {
		return errors.New("s3: bucket is required")
	}
	if c.Region == "" {
		return errors.New("s3: region is required")
	}
	if c.Endpoint != "" {
		u, err := url.Parse(c.Endpoint)
		if err != nil {
			return fmt.Errorf("s3: endpoint: %w", err)
		}
		if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("s3: endpoint %q is not an http(s)://host URL", c.Endpoint)
		}
	}
	if (c.AccessKeyID == "") != (c.SecretAccessKey == "") {
		return errors.New("s3: access_key_id and secret_access_key must be set together")
	}
	if c.SessionToken != "" && c.AccessKeyID == "" {
		return errors.New("s3: session_token needs access_key_id and secret_access_key")
	}
	if c.PartSize < MinS3PartSize || c.PartSize > MaxS3PartSize {
		return fmt.Errorf("s3: part_size %d is outside [%d, %d]", c.PartSize, MinS3PartSize, MaxS3PartSize)
	}
	return nil
}

// LogValue keeps secrets out of logs.
func (c S3Config) LogValue() slog.Value {
	redact := func(s string) string {
		if s == "" {
			return ""
		}
		return "<redacted>"
	}
	return slog.GroupValue(
		slog.String("bucket", c.Bucket),
		slog.String("endpoint", c.Endpoint),
		slog.String("region", c.Region),
		slog.Bool("force_path_style", c.ForcePathStyle),
		slog.String("access_key_id", c.AccessKeyID),
		slog.String("secret_access_key", redact(c.SecretAccessKey)),
		slog.String("session_token", redact(c.SessionToken)),
		slog.Int64("part_size", c.PartSize),
	)
}

// S3Bucket is a Bucket in AWS S3 or an S3-compatible server.
//
// IfAbsent writes send "If-None-Match: *" and IfMatch writes "If-Match", on
// PutObject and on CompleteMultipartUpload, so the server decides atomically.
type S3Bucket struct {
	client   *s3.Client
	idle     interface{ CloseIdleConnections() } // nil if the HTTP client cannot
	bucket   string
	partSize int64
	// answerIdle and uploadIdle bound the wait for the next byte of an
	// answer's body, and for the store to take the next byte of an upload.
	answerIdle, uploadIdle time.Duration
}

// answerIdleTimeout is how long an answer's body may go without a byte
// before its read fails, as a transient error that is retried. A connection
// that stalls halfway through an answer (a load balancer or NAT that dropped
// it, a store node that hangs) would otherwise hold the read for as long as
// the connection stays open, and with it a writer's WAL replay or
// compaction, whose context does not end. S3 sends a body's bytes in well
// under a second and advises retrying a small read slower than about 2 s; a
// restarted writer's replay waits this long for each answer that stalls.
const answerIdleTimeout = 5 * time.Second

// uploadIdleTimeout is how long the store may take no byte of an upload's
// body before the put fails (transient, retried); longer than for answers,
// as a put sent again costs its whole body.
const uploadIdleTimeout = 15 * time.Second

// NewS3Bucket returns a bucket for cfg. It makes no request: a wrong bucket or
// credentials show up on first use.
func NewS3Bucket(ctx context.Context, cfg S3Config) (*S3Bucket, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// A buildable client, so that the config loader can still add a custom
	// CA bundle (AWS_CA_BUNDLE); it is frozen below so that Close can drop
	// its idle connections.
	httpClient := awshttp.NewBuildableClient().
		WithDialerOptions(func(d *net.Dialer) { d.Timeout = 10 * time.Second }).
		WithTransportOptions(func(tr *http.Transport) {
			tr.MaxIdleConns = 256
			tr.MaxIdleConnsPerHost = 256
			// A store that takes a request and never answers is failing: the
			// writer retries sooner. Uploads do not count (the timer starts once
			// the body is sent); S3 answers in well under a second.
			tr.ResponseHeaderTimeout = 15 * time.Second
		})
	opts := []func(*config.LoadOptions) error{
		config.WithRegion(cfg.Region),
		config.WithHTTPClient(httpClient),
		// One attempt per call: the caller owns retries (the LSM).
		config.WithRetryer(func() aws.Retryer { return aws.NopRetryer{} }),
		// Checksums only where S3 requires them: S3-compatible servers differ
		// in their support of the newer (trailing) checksums.
		config.WithRequestChecksumCalculation(aws.RequestChecksumCalculationWhenRequired),
		config.WithResponseChecksumValidation(aws.ResponseChecksumValidationWhenRequired),
	}
	if cfg.AccessKeyID != "" {
		opts = append(opts, config.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider(cfg.AccessKeyID, cfg.SecretAccessKey, cfg.SessionToken)))
	}
	awsCfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("s3: load AWS config: %w", err)
	}
	var closer interface{ CloseIdleConnections() }
	if bc, ok := awsCfg.HTTPClient.(*awshttp.BuildableClient); ok {
		awsCfg.HTTPClient = bc.Freeze()
	}
	closer, _ = awsCfg.HTTPClient.(interface{ CloseIdleConnections() })
	client := s3.NewFromConfig(awsCfg, func(o *s3.Options) {
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
		o.UsePathStyle = cfg.ForcePathStyle
	})
	return &S3Bucket{client: client, idle: closer, bucket: cfg.Bucket, partSize: cfg.PartSize,
		answerIdle: answerIdleTimeout, uploadIdle: uploadIdleTimeout}, nil
}

// BucketName returns the S3 bucket's name.
func (b *S3Bucket) BucketName() string { return b.bucket }

// Client returns the underlying S3 client, for administration in tests and tools.
func (b *S3Bucket) Client() *s3.Client { return b.client }

// s3Error turns an SDK error into one that matches the package's sentinels.
func s3Error(ctx context.Context, op, name string, err error) error {
	if err == nil {
		return nil
	}
	wrap := func(sentinel error) error { return fmt.Errorf("s3 %s %s: %w: %w", op, name, sentinel, err) }
	if cerr := ctx.Err(); cerr != nil {
		if errors.Is(err, cerr) {
			return fmt.Errorf("s3 %s %s: %w", op, name, err)
		}
		return wrap(cerr)
	}
	code := ""
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		code = apiErr.ErrorCode()
	}
	status := 0
	var respErr *awshttp.ResponseError
	if errors.As(err, &respErr) {
		status = respErr.HTTPStatusCode()
	}
	switch {
	case code == "NoSuchUpload":
		// The multipart upload was aborted under us (a lifecycle rule); the
		// whole put can be tried again.
		return wrap(ErrTransient)
	case code == "NoSuchKey" || code == "NotFound" || (status == http.StatusNotFound && code != "NoSuchBucket"):
		return wrap(ErrNotFound)
	case code == "PreconditionFailed" || code == "ConditionalRequestConflict" || status == http.StatusPreconditionFailed:
		return wrap(ErrPreconditionFailed)
	case code == "InvalidRange" || status == http.StatusRequestedRangeNotSatisfiable:
		return wrap(ErrInvalidRange)
	case retry.IsErrorRetryables(retry.DefaultRetryables).IsErrorRetryable(err) == aws.TrueTernary,
		status == http.StatusTooManyRequests || status == http.StatusRequestTimeout,
		status >= 500 && status != http.StatusNotImplemented,
		errors.Is(err, io.ErrUnexpectedEOF):
		return wrap(ErrTransient)
	}
	var netErr net.Error
	if errors.As(err, &netErr) && netErr.Timeout() {
		return wrap(ErrTransient)
	}
	return fmt.Errorf("s3 %s %s: %w", op, name, err)
}

func (b *S3Bucket) Get(ctx context.Context, name string) (io.ReadCloser, error) {
	out, err := b.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &b.bucket, Key: &name})
	if err != nil {
		return nil, s3Error(ctx, "get", name, err)
	}
	return newS3Body(out.Body, ctx, name, b.answerIdle), nil
}

// s3Body classifies the errors of a response body that breaks off, and
// closes one that stalls: a Read that waits more than idle for a byte fails.
type s3Body struct {
	body    io.ReadCloser
	ctx     context.Context
	name    string
	idle    time.Duration
	timer   *time.Timer
	stalled atomic.Bool
}

func newS3Body(body io.ReadCloser, ctx context.Context, name string, idle time.Duration) *s3Body {
	r := &s3Body{body: body, ctx: ctx, name: name, idle: idle}
	r.timer = time.AfterFunc(idle, func() {
		r.stalled.Store(true)
		_ = r.body.Close() // ends a Read blocked on the connection
	})
	r.timer.Stop() // armed by each Read
	return r
}

func (r *s3Body) Read(p []byte) (int, error) {
	r.timer.Reset(r.idle)
	n, err := r.body.Read(p)
	r.timer.Stop()
	if err != nil && err != io.EOF {
		switch cerr := r.ctx.Err(); {
		case r.stalled.Load():
			err = Transient(fmt.Errorf("s3 read %s: no byte of the answer for %s: %w", r.name, r.idle, err))
		case cerr != nil:
			err = fmt.Errorf("s3 read %s: %w: %w", r.name, cerr, err)
		default:
			err = Transient(fmt.Errorf("s3 read %s: %w", r.name, err))
		}
	}
	return n, err
}

func (r *s3Body) Close() error {
	r.timer.Stop()
	return r.body.Close()
}

func (b *S3Bucket) GetRange(ctx context.Context, name string, off, length int64) (io.ReadCloser, error) {
	if off < 0 {
		return nil, fmt.Errorf("s3 get %s: negative offset %d: %w", name, off, ErrInvalidRange)
	}
	if length == 0 {
		// HTTP cannot ask for zero bytes; check the range against the size.
		attrs, err := b.Attributes(ctx, name)
		if err != nil {
			return nil, err
		}
		if _, _, err := clampRange(name, attrs.Size, off, 0); err != nil {
			return nil, err
		}
		return io.NopCloser(bytes.NewReader(nil)), nil
	}
	rng := "bytes=" + strconv.FormatInt(off, 10) + "-"
	if length > 0 && length <= math.MaxInt64-off { // longer reads to the end anyway
		rng += strconv.FormatInt(off+length-1, 10)
	}
	out, err := b.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &b.bucket, Key: &name, Range: &rng})
	if err != nil {
		err = s3Error(ctx, "get", name, err)
		if off == 0 && errors.Is(err, ErrInvalidRange) {
			// Only an empty object has no byte 0.
			return io.NopCloser(bytes.NewReader(nil)), nil
		}
		return nil, err
	}
	return answerRange(name, newS3Body(out.Body, ctx, name, b.answerIdle), aws.ToString(out.ContentRange), off, length)
}

// answerRange checks that an answer to a ranged GET holds the range asked
// for. HTTP lets a server ignore Range and answer 200 with the whole object,
// without Content-Range (RFC 9110, 14.2), and some S3-compatible stores and
// caching proxies in front of them do: then the first off bytes are read
// and dropped and the answer cut at length, once a warning has said so (every
// ranged read then costs the object up to its range's end). An answer whose
// Content-Range starts elsewhere is refused, as a transient error.
func answerRange(name string, body io.ReadCloser, contentRange string, off, length int64) (io.ReadCloser, error) {
	if contentRange != "" {
		start, ok := rangeStart(contentRange)
		if !ok || start != off {
			body.Close()
			return nil, Transient(fmt.Errorf("s3 get %s: asked for bytes from %d, the answer holds %q", name, off, contentRange))
		}
		return body, nil
	}
	var r io.Reader = body
	if off > 0 {
		rangeIgnored.Do(func() {
			slog.Warn("objstore: the store answered a ranged read with the whole object; every ranged read will fetch its object up to the range's end", "object", name)
		})
		// S3 has no byte at off in an object of off bytes or fewer.
		var first [1]byte
		n, err := io.CopyN(io.Discard, body, off)
		if err == nil {
			_, err = io.ReadFull(body, first[:])
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			body.Close()
			return nil, fmt.Errorf("s3 get %s: offset %d past size %d: %w", name, off, n, ErrInvalidRange)
		}
		if err != nil {
			body.Close()
			return nil, err
		}
		r = io.MultiReader(bytes.NewReader(first[:]), body)
	}
	if length >= 0 {
		r = io.LimitReader(r, length)
	}
	return struct {
		io.Reader
		io.Closer
	}{r, body}, nil
}

// rangeIgnored makes the warning that a store ignores Range once a process.
var rangeIgnored sync.Once

// rangeStart returns the first byte of a Content-Range "bytes a-b/size".
func rangeStart(cr string) (int64, bool) {
	rest, ok := strings.CutPrefix(cr, "bytes ")
	if !ok {
		return 0, false
	}
	a, _, ok := strings.Cut(rest, "-")
	if !ok {
		return 0, false
	}
	start, err := strconv.ParseInt(a, 10, 64)
	return start, err == nil && start >= 0
}

func (b *S3Bucket) Attributes(ctx context.Context, name string) (Attributes, error) {
	out, err := b.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &b.bucket, Key: &name})
	if err != nil {
		return Attributes{}, s3Error(ctx, "head", name, err)
	}
	return Attributes{
		Name:         name,
		Size:         aws.ToInt64(out.ContentLength),
		LastModified: aws.ToTime(out.LastModified),
		ETag:         aws.ToString(out.ETag),
	}, nil
}

// conditions returns the If-None-Match and If-Match values for opts.
func conditions(opts PutOptions) (ifNoneMatch, ifMatch *string) {
	if opts.IfAbsent {
		ifNoneMatch = aws.String("*")
	}
	if opts.IfMatch != "" {
		ifMatch = aws.String(opts.IfMatch)
	}
	return ifNoneMatch, ifMatch
}

func (b *S3Bucket) Put(ctx context.Context, name string, r io.Reader, size int64, opts PutOptions) (Attributes, error) {
	if err := validateName(name); err != nil {
		return Attributes{}, fmt.Errorf("s3 put: %w", err)
	}
	if opts.IfAbsent && opts.IfMatch != "" {
		return Attributes{}, fmt.Errorf("s3 put %s: IfAbsent and IfMatch both set", name)
	}
	a, err := b.put(ctx, name, r, size, opts)
	if opts.IfMatch != "" && errors.Is(err, ErrNotFound) {
		// S3 answers 404 to If-Match on an absent object; the contract says
		// the precondition failed.
		return Attributes{}, fmt.Errorf("%w: %w", ErrPreconditionFailed, err)
	}
	return a, err
}

func (b *S3Bucket) put(ctx context.Context, name string, r io.Reader, size int64, opts PutOptions) (Attributes, error) {
	if size >= 0 && size <= b.partSize {
		if rs, ok := r.(io.ReadSeeker); ok {
			cur, err := rs.Seek(0, io.SeekCurrent)
			if err == nil {
				var end int64
				if end, err = rs.Seek(0, io.SeekEnd); err == nil {
					_, err = rs.Seek(cur, io.SeekStart)
				}
				if err == nil && end-cur != size {
					return Attributes{}, fmt.Errorf("s3 put %s: body has %d bytes, want %d", name, end-cur, size)
				}
			}
			if err == nil {
				return b.putSingle(ctx, name, rs, size, opts)
			}
		}
		buf := make([]byte, size+1)
		n, err := io.ReadFull(r, buf)
		if err != io.ErrUnexpectedEOF && err != io.EOF {
			if err == nil {
				return Attributes{}, fmt.Errorf("s3 put %s: body is longer than %d bytes", name, size)
			}
			return Attributes{}, fmt.Errorf("s3 put %s: read body: %w", name, err)
		}
		if int64(n) != size {
			return Attributes{}, fmt.Errorf("s3 put %s: body has %d bytes, want %d", name, n, size)
		}
		return b.putSingle(ctx, name, bytes.NewReader(buf[:n]), size, opts)
	}
	// Unknown or large size: read the first part to decide.
	buf := make([]byte, b.partSize)
	n, err := io.ReadFull(r, buf)
	switch {
	case err == io.ErrUnexpectedEOF || err == io.EOF:
		if size >= 0 && int64(n) != size {
			return Attributes{}, fmt.Errorf("s3 put %s: body has %d bytes, want %d", name, n, size)
		}
		return b.putSingle(ctx, name, bytes.NewReader(buf[:n]), int64(n), opts)
	case err != nil:
		return Attributes{}, fmt.Errorf("s3 put %s: read body: %w", name, err)
	}
	return b.putMultipart(ctx, name, buf, r, size, opts)
}

func (b *S3Bucket) putSingle(ctx context.Context, name string, body io.ReadSeeker, size int64, opts PutOptions) (Attributes, error) {
	ifNoneMatch, ifMatch := conditions(opts)
	w := b.watchUpload(ctx, body)
	out, err := b.client.PutObject(w.ctx, &s3.PutObjectInput{
		Bucket:        &b.bucket,
		Key:           &name,
		Body:          w,
		ContentLength: aws.Int64(size),
		IfNoneMatch:   ifNoneMatch,
		IfMatch:       ifMatch,
	})
	if err = w.done(ctx, "put", name, err); err != nil {
		return Attributes{}, err
	}
	return Attributes{Name: name, Size: size, ETag: aws.ToString(out.ETag)}, nil
}

// errUploadStalled cancels an upload the store stopped taking.
var errUploadStalled = errors.New("the store took no byte of the body")

// uploadWatch is an upload's body whose every Read, as the transport sends
// it, re-arms a timer that cancels the request once the store has taken no
// byte for the bucket's idle time: a store that stops reading a body, the
// connection left open, would otherwise hold the put, and the writer's WAL
// with it, for as long as the connection stays open. Once the body is read
// to its end (all of it handed to the connection), the transport's wait for
// the answer's headers takes over.
type uploadWatch struct {
	io.ReadSeeker
	ctx    context.Context
	cancel context.CancelCauseFunc
	idle   time.Duration
	timer  *time.Timer
}

func (b *S3Bucket) watchUpload(ctx context.Context, body io.ReadSeeker) *uploadWatch {
	w := &uploadWatch{ReadSeeker: body, idle: b.uploadIdle}
	w.ctx, w.cancel = context.WithCancelCause(ctx)
	w.timer = time.AfterFunc(w.idle, func() { w.cancel(errUploadStalled) })
	return w
}

func (w *uploadWatch) Read(p []byte) (int, error) {
	w.timer.Reset(w.idle)
	n, err := w.ReadSeeker.Read(p)
	if err == io.EOF {
		w.timer.Stop() // re-armed if the body is read again (a signature, a retry)
	}
	return n, err
}

// done ends the watch of a request made with w.ctx and classifies its
// error: a stalled upload is transient, whatever the client made of its
// cancellation.
func (w *uploadWatch) done(ctx context.Context, op, name string, err error) error {
	w.timer.Stop()
	stalled := errors.Is(context.Cause(w.ctx), errUploadStalled)
	w.cancel(nil)
	if err == nil {
		return nil
	}
	if stalled && ctx.Err() == nil {
		return Transient(fmt.Errorf("s3 %s %s: %w for %s: %w", op, name, errUploadStalled, w.idle, err))
	}
	return s3Error(ctx, op, name, err)
}

// putMultipart uploads buf (one full part already read) and the rest of r in
// parts of b.partSize, then completes the upload with opts' conditions. Any
// failure aborts the upload so no parts are left behind.
func (b *S3Bucket) putMultipart(ctx context.Context, name string, buf []byte, r io.Reader, size int64, opts PutOptions) (_ Attributes, err error) {
	created, err := b.client.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: &b.bucket, Key: &name})
	if err != nil {
		return Attributes{}, s3Error(ctx, "create multipart upload", name, err)
	}
	uploadID := created.UploadId
	defer func() {
		if err == nil {
			return
		}
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if _, aerr := b.client.AbortMultipartUpload(actx, &s3.AbortMultipartUploadInput{
			Bucket: &b.bucket, Key: &name, UploadId: uploadID,
		}); aerr != nil {
			slog.Warn("objstore: abort of a failed multipart upload failed; the bucket's lifecycle rules must clean it up",
				"bucket", b.bucket, "name", name, "err", aerr)
		}
	}()

	var parts []types.CompletedPart
	var total int64
	part := buf
	for {
		num := int32(len(parts) + 1)
		if num > maxS3Parts {
			return Attributes{}, fmt.Errorf("s3 put %s: more than %d parts of %d bytes", name, maxS3Parts, b.partSize)
		}
		w := b.watchUpload(ctx, bytes.NewReader(part))
		out, err := b.client.UploadPart(w.ctx, &s3.UploadPartInput{
			Bucket:        &b.bucket,
			Key:           &name,
			UploadId:      uploadID,
			PartNumber:    aws.Int32(num),
			Body:          w,
			ContentLength: aws.Int64(int64(len(part))),
		})
		if err = w.done(ctx, "upload part "+strconv.Itoa(int(num))+" of", name, err); err != nil {
			return Attributes{}, err
		}
		parts = append(parts, types.CompletedPart{ETag: out.ETag, PartNumber: aws.Int32(num)})
		total += int64(len(part))
		if len(part) < len(buf) {
			break
		}
		n, rerr := io.ReadFull(r, buf)
		if rerr != nil && rerr != io.ErrUnexpectedEOF && rerr != io.EOF {
			return Attributes{}, fmt.Errorf("s3 put %s: read body: %w", name, rerr)
		}
		if n == 0 {
			break
		}
		part = buf[:n]
	}
	if size >= 0 && total != size {
		return Attributes{}, fmt.Errorf("s3 put %s: body has %d bytes, want %d", name, total, size)
	}
	ifNoneMatch, ifMatch := conditions(opts)
	out, err := b.client.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{
		Bucket:          &b.bucket,
		Key:             &name,
		UploadId:        uploadID,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: parts},
		IfNoneMatch:     ifNoneMatch,
		IfMatch:         ifMatch,
	})
	if err != nil {
		return Attributes{}, s3Error(ctx, "complete multipart upload", name, err)
	}
	return Attributes{Name: name, Size: total, ETag: aws.ToString(out.ETag)}, nil
}

func (b *S3Bucket) Delete(ctx context.Context, name string) error {
	_, err := b.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &b.bucket, Key: &name})
	if err = s3Error(ctx, "delete", name, err); err != nil && !errors.Is(err, ErrNotFound) {
		return err
	}
	return nil
}

func (b *S3Bucket) List(ctx context.Context, prefix, startAfter string, limit int) (ListPage, error) {
	if limit <= 0 || limit > s3PageSize {
		limit = s3PageSize
	}
	in := &s3.ListObjectsV2Input{Bucket: &b.bucket, MaxKeys: aws.Int32(int32(limit))}
	if prefix != "" {
		in.Prefix = &prefix
	}
	if startAfter != "" {
		in.StartAfter = &startAfter
	}
	out, err := b.client.ListObjectsV2(ctx, in)
	if err != nil {
		return ListPage{}, s3Error(ctx, "list", prefix, err)
	}
	page := ListPage{Objects: make([]Attributes, 0, len(out.Contents)), More: aws.ToBool(out.IsTruncated)}
	for _, o := range out.Contents {
		page.Objects = append(page.Objects, Attributes{
			Name:         aws.ToString(o.Key),
			Size:         aws.ToInt64(o.Size),
			LastModified: aws.ToTime(o.LastModified),
			ETag:         aws.ToString(o.ETag),
		})
	}
	return page, nil
}

// Close drops idle connections. Calls in flight are not interrupted.
func (b *S3Bucket) Close() error {
	if b.idle != nil {
		b.idle.CloseIdleConnections()
	}
	return nil
}
