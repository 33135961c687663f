package importer

import (
	"bufio"
	"bytes"
	"cmp"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"sync/atomic"
	"unicode/utf8"

	"github.com/prometheus/prometheus/model/labels"
)

// MaxVMLineBytes bounds one line of VictoriaMetrics' JSON-line format:
// one series with all its samples of the export.
const MaxVMLineBytes = 64 << 20

// vmLine is one line of VictoriaMetrics' JSON-line export:
//
//	{"metric":{"__name__":"up","job":"node"},"values":[1,1,"Infinity"],"timestamps":[1700000000000,1700000015000,1700000030000]}
type vmLine struct {
	Metric     vmMetric  `json:"metric"`
	Values     []vmValue `json:"values"`
	Timestamps []int64   `json:"timestamps"`
}

// vmMetric is a line's "metric" object: label names and values, as
// written. (Decoded into a map, a name written twice would keep one of its
// values without a word; DecodeVMLine refuses the line instead.)
type vmMetric []labels.Label

// UnmarshalJSON reads the object itself: most names and values need no
// unescaping, and are taken as they are.
func (m *vmMetric) UnmarshalJSON(b []byte) error {
	*m = (*m)[:0]
	b = bytes.TrimSpace(b)
	if bytes.Equal(b, []byte("null")) {
		return nil
	}
	if len(b) < 2 || b[0] != '{' {
		return errors.New(`"metric" is not an object`)
	}
	// b is valid JSON: the decoder checked it before calling.
	for i := 1; ; {
		i = skipSpace(b, i)
		switch {
		case i >= len(b):
			return errors.New(`"metric" ends early`)
		case b[i] == '}':
			return nil
		case b[i] == ',':
			i++
			continue
		}
		name, next, err := jsonString(b, i)
		if err != nil {
			return err
		}
		i = skipSpace(b, next)
		if i >= len(b) || b[i] != ':' {
			return errors.New(`"metric" is not an object`)
		}
		i = skipSpace(b, i+1)
		var value string
		switch {
		case bytes.HasPrefix(b[i:], []byte("null")):
			i += len("null")
		case i < len(b) && b[i] == '"':
			if value, i, err = jsonString(b, i); err != nil {
				return err
			}
		default:
			return fmt.Errorf("the value of label %q is not a string", name)
		}
		*m = append(*m, labels.Label{Name: name, Value: value})
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// jsonString returns the JSON string that starts at b[i] and the index
// after it. One without escapes in valid UTF-8 is its bytes; any other is
// unescaped by encoding/json (which also replaces invalid UTF-8).
func jsonString(b []byte, i int) (string, int, error) {
	if i >= len(b) || b[i] != '"' {
		return "", i, errors.New(`"metric" is not an object of strings`)
	}
	plain := true
	j := i + 1
	for ; j < len(b) && b[j] != '"'; j++ {
		if b[j] == '\\' {
			plain = false
			j++
		} else if b[j] >= utf8.RuneSelf {
			plain = false
		}
	}
	if j >= len(b) {
		return "", j, errors.New(`"metric" has an unterminated string`)
	}
	if plain {
		return string(b[i+1 : j]), j + 1, nil
	}
	var s string
	if err := json.Unmarshal(b[i:j+1], &s); err != nil {
		return "", j + 1, err
	}
	return s, j + 1, nil
}

// vmValue is a sample value: a JSON number, or a string for what JSON
// numbers cannot say ("Infinity", "-Infinity", "NaN"; VictoriaMetrics
// exports the infinities that way).
type vmValue float64

func (v *vmValue) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return fmt.Errorf("value %q is not a number", s)
		}
		*v = vmValue(f)
		return nil
	}
	if bytes.Equal(b, []byte("null")) {
		return errors.New("value is null")
	}
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil {
		if ne, ok := err.(*strconv.NumError); ok && errors.Is(ne.Err, strconv.ErrRange) {
			*v = vmValue(f) // ±Inf or 0, as VictoriaMetrics reads it
			return nil
		}
		return fmt.Errorf("value %s is not a number", b)
	}
	*v = vmValue(f)
	return nil
}

// DecodeVMLine decodes one line of VictoriaMetrics' JSON-line format into
// a series, its samples sorted by time (a line may list them in any order;
// a repeated timestamp keeps the last value, as VictoriaMetrics does on
// import). sb is scratch; the labels returned are new.
func DecodeVMLine(line []byte, sb *labels.ScratchBuilder) (Series, error) {
	var l vmLine
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&l); err != nil {
		return Series{}, fmt.Errorf("invalid JSON: %w", err)
	}
	// Anything but JSON whitespace after the object (another object, a
	// stray brace) is refused, as encoding/json's Unmarshal refuses it.
	if rest := bytes.TrimLeft(line[dec.InputOffset():], " \t\r\n"); len(rest) > 0 {
		return Series{}, fmt.Errorf("%q after the JSON object: one object per line", rest[:min(len(rest), 16)])
	}
	if len(l.Metric) == 0 {
		return Series{}, errors.New(`missing or empty "metric"`)
	}
	if len(l.Values) != len(l.Timestamps) {
		return Series{}, fmt.Errorf(`"timestamps" has %d elements and "values" %d: they must match`, len(l.Timestamps), len(l.Values))
	}
	sb.Reset()
	for _, lb := range l.Metric {
		sb.Add(lb.Name, lb.Value)
	}
	sb.Sort()
	ser := Series{Labels: sb.Labels(), Samples: make([]Sample, len(l.Values))}
	if name, dup := ser.Labels.HasDuplicateLabelNames(); dup {
		return Series{}, fmt.Errorf(`label %q appears more than once in "metric"`, name)
	}
	sorted := true
	for i, v := range l.Values {
		ser.Samples[i] = Sample{T: l.Timestamps[i], V: float64(v)}
		if i > 0 && l.Timestamps[i] <= l.Timestamps[i-1] {
			sorted = false
		}
	}
	if !sorted {
		ser.Samples = sortDedup(ser.Samples)
	}
	return ser, nil
}

// sortDedup sorts samples by time, keeping the last of each timestamp.
func sortDedup(s []Sample) []Sample {
	idx := make([]int, len(s))
	for i := range idx {
		idx[i] = i
	}
	// Stable by position, so that the last of equal timestamps is last.
	slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(s[a].T, s[b].T) })
	out := make([]Sample, 0, len(s))
	for _, i := range idx {
		if n := len(out); n > 0 && out[n-1].T == s[i].T {
			out[n-1] = s[i]
			continue
		}
		out = append(out, s[i])
	}
	return out
}

// VMReader reads VictoriaMetrics' JSON-line format line by line, in
// batches of about BatchSamples samples.
type VMReader struct {
	r    *bufio.Reader
	line int
	sb   labels.ScratchBuilder
}

// NewVMReader returns a reader of r, which may be gzip-compressed (told by
// its first bytes).
func NewVMReader(r io.Reader) (*VMReader, error) {
	br := bufio.NewReaderSize(r, 1<<20)
	if magic, err := br.Peek(2); err == nil && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("gzip: %w", err)
		}
		br = bufio.NewReaderSize(zr, 1<<20)
	}
	return &VMReader{r: br}, nil
}

// Line returns the number of the last line read, from 1.
func (v *VMReader) Line() int { return v.line }

// Next returns the next batch, with at least one series unless the input
// ended (io.EOF). Empty lines are skipped. An error names its line.
func (v *VMReader) Next(maxSamples int) (Batch, error) {
	var (
		b Batch
		n int
	)
	for n < maxSamples {
		line, err := v.readLine()
		if err == io.EOF {
			if len(b) == 0 {
				return nil, io.EOF
			}
			return b, nil
		}
		if err != nil {
			return b, err
		}
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		ser, err := DecodeVMLine(line, &v.sb)
		if err != nil {
			return b, fmt.Errorf("line %d: %w", v.line, err)
		}
		if len(ser.Samples) == 0 {
			continue
		}
		b = append(b, ser)
		n += len(ser.Samples)
	}
	return b, nil
}

// readLine returns the next line, without its newline; the slice is valid
// until the next call.
func (v *VMReader) readLine() ([]byte, error) {
	var long []byte
	for {
		frag, err := v.r.ReadSlice('\n')
		if err == nil || (err == io.EOF && len(frag)+len(long) > 0) {
			v.line++
			if long == nil {
				return frag, nil
			}
			return append(long, frag...), nil
		}
		if err == bufio.ErrBufferFull {
			if len(long)+len(frag) > MaxVMLineBytes {
				v.line++
				return nil, fmt.Errorf("line %d: longer than %d bytes", v.line, MaxVMLineBytes)
			}
			long = append(long, frag...)
			continue
		}
		if err == io.EOF {
			return nil, io.EOF
		}
		return nil, fmt.Errorf("line %d: read: %w", v.line+1, err)
	}
}

// VMFileSource reads a file of VictoriaMetrics' JSON-line export (gzip
// accepted), or standard input for "-".
type VMFileSource struct {
	path       string
	size       int64
	readCount  atomic.Int64
	readerOpen func() (io.ReadCloser, error)
}

// NewVMFileSource returns a source reading path.
func NewVMFileSource(path string) (*VMFileSource, error) {
	s := &VMFileSource{path: path}
	if path == "-" {
		s.readerOpen = func() (io.ReadCloser, error) { return io.NopCloser(os.Stdin), nil }
		return s, nil
	}
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	s.size = st.Size()
	s.readerOpen = func() (io.ReadCloser, error) { return os.Open(path) }
	return s, nil
}

// Progress implements Source: bytes of the file read.
func (s *VMFileSource) Progress() (done, total int64, unit string) {
	return s.readCount.Load(), s.size, "bytes"
}

// Run implements Source.
func (s *VMFileSource) Run(ctx context.Context, emit func(Batch) error) error {
	f, err := s.readerOpen()
	if err != nil {
		return err
	}
	defer f.Close()
	vr, err := NewVMReader(&countingReader{r: f, n: &s.readCount})
	if err != nil {
		return fmt.Errorf("%s: %w", s.path, err)
	}
	// An export holds each series' whole history on one line: read it
	// all, keeping the samples by window, and hand the windows on as the
	// other sources do (see emitWindows).
	windows := map[int64]*omWindow{}
	for {
		if err := ctx.Err(); err != nil {
			return context.Cause(ctx)
		}
		b, err := vr.Next(BatchSamples)
		for _, ser := range b {
			addToWindows(windows, ser.Labels.String(), ser)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("%s: %w", s.path, err)
		}
	}
	return emitWindows(ctx, windows, func(int) {}, emit)
}

type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}
