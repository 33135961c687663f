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

// DecodeVMLine decodes one line of VictoriaMetrics' JSON-line format into
// a series, its samples sorted by time (a line may list them in any order;
// a repeated timestamp keeps the last value, as VictoriaMetrics does on
// import). sb is scratch; the labels returned are new.
//
//	{"metric":{"__name__":"up","job":"node"},"values":[1,NaN,"Infinity"],"timestamps":[1700000000000,1700000015000,1700000030000]}
//
// The line is JSON, with the values VictoriaMetrics also takes: bare NaN
// and Inf (any case, Inf signed), as vmctl writes them, and strings
// ("Infinity", "-Infinity", "NaN": VictoriaMetrics' export writes the
// infinities that way). A field other than the three or one written
// twice, a null value or timestamp, a label value that is not a string
// and a timestamp that is not an integer are refused, as is anything after
// the object.
func DecodeVMLine(line []byte, sb *labels.ScratchBuilder) (Series, error) {
	p := vmParser{b: line}
	var (
		metric     []labels.Label
		values     []float64
		timestamps []int64
	)
	var seen [3]bool
	if err := p.object(func(key string) error {
		var err error
		if k := slices.Index(vmFields, key); k >= 0 {
			if seen[k] {
				return fmt.Errorf("field %q appears more than once", key)
			}
			seen[k] = true
		}
		switch key {
		case "metric":
			metric, err = p.metric(metric[:0])
		case "values":
			values, err = p.values(values[:0])
		case "timestamps":
			timestamps, err = p.timestamps(timestamps[:0])
		default:
			err = fmt.Errorf("unknown field %q", key)
		}
		return err
	}); err != nil {
		return Series{}, err
	}
	if p.space(); p.i < len(p.b) {
		rest := p.b[p.i:]
		return Series{}, fmt.Errorf("%q after the JSON object: one object per line", rest[:min(len(rest), 16)])
	}
	if len(metric) == 0 {
		return Series{}, errors.New(`missing or empty "metric"`)
	}
	if len(values) != len(timestamps) {
		return Series{}, fmt.Errorf(`"timestamps" has %d elements and "values" %d: they must match`, len(timestamps), len(values))
	}
	sb.Reset()
	for _, lb := range metric {
		sb.Add(lb.Name, lb.Value)
	}
	sb.Sort()
	ser := Series{Labels: sb.Labels(), Samples: make([]Sample, len(values))}
	if name, dup := ser.Labels.HasDuplicateLabelNames(); dup {
		return Series{}, fmt.Errorf(`label %q appears more than once in "metric"`, name)
	}
	sorted := true
	for i, v := range values {
		ser.Samples[i] = Sample{T: timestamps[i], V: v}
		if i > 0 && timestamps[i] <= timestamps[i-1] {
			sorted = false
		}
	}
	if !sorted {
		ser.Samples = sortDedup(ser.Samples)
	}
	return ser, nil
}

// vmFields are the fields of a line.
var vmFields = []string{"metric", "values", "timestamps"}

// vmParser reads a line of VictoriaMetrics' JSON-line format from b at i.
// encoding/json cannot read it: VictoriaMetrics' tools write NaN and Inf
// bare, which JSON has no word for.
type vmParser struct {
	b []byte
	i int
}

// syntaxError is a line that is not JSON (as VictoriaMetrics reads it).
func (p *vmParser) syntaxError(want string) error {
	if p.i >= len(p.b) {
		return fmt.Errorf("invalid JSON: the line ends where %s was expected", want)
	}
	return fmt.Errorf("invalid JSON: %q at offset %d where %s was expected", p.b[p.i], p.i, want)
}

func (p *vmParser) space() {
	for p.i < len(p.b) && (p.b[p.i] == ' ' || p.b[p.i] == '\t' || p.b[p.i] == '\n' || p.b[p.i] == '\r') {
		p.i++
	}
}

// eat passes over c, after any space, if it comes next.
func (p *vmParser) eat(c byte) bool {
	p.space()
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

// null passes over a null, after any space, if one comes next.
func (p *vmParser) null() bool {
	p.space()
	if bytes.HasPrefix(p.b[p.i:], []byte("null")) {
		p.i += len("null")
		return true
	}
	return false
}

// object reads an object, calling field for each key with the parser at
// its value.
func (p *vmParser) object(field func(key string) error) error {
	if !p.eat('{') {
		return p.syntaxError("an object")
	}
	if p.eat('}') {
		return nil
	}
	for {
		p.space()
		key, err := p.str()
		if err != nil {
			return err
		}
		if !p.eat(':') {
			return p.syntaxError("a colon")
		}
		if err := field(key); err != nil {
			return err
		}
		if p.eat('}') {
			return nil
		}
		if !p.eat(',') {
			return p.syntaxError("a comma or a closing brace")
		}
	}
}

// array reads an array, calling elem with the parser at each element.
func (p *vmParser) array(elem func() error) error {
	if !p.eat('[') {
		return p.syntaxError("an array")
	}
	if p.eat(']') {
		return nil
	}
	for {
		p.space()
		if err := elem(); err != nil {
			return err
		}
		if p.eat(']') {
			return nil
		}
		if !p.eat(',') {
			return p.syntaxError("a comma or a closing bracket")
		}
	}
}

// metric reads the "metric" object, its labels appended to dst in the
// order written (a name written twice is kept twice, for the caller to
// refuse); null is no labels. A null label value is the empty value.
func (p *vmParser) metric(dst []labels.Label) ([]labels.Label, error) {
	if p.null() {
		return dst, nil
	}
	p.space()
	if p.i < len(p.b) && p.b[p.i] != '{' {
		return dst, errors.New(`"metric" is not an object`)
	}
	err := p.object(func(name string) error {
		var value string
		if !p.null() {
			if p.i >= len(p.b) || p.b[p.i] != '"' {
				return fmt.Errorf("the value of label %q is not a string", name)
			}
			var err error
			if value, err = p.str(); err != nil {
				return err
			}
		}
		dst = append(dst, labels.Label{Name: name, Value: value})
		return nil
	})
	return dst, err
}

// values reads the "values" array; null is none.
func (p *vmParser) values(dst []float64) ([]float64, error) {
	if p.null() {
		return dst, nil
	}
	err := p.array(func() error {
		if p.null() {
			return errors.New("value is null")
		}
		if p.i < len(p.b) && p.b[p.i] == '"' {
			s, err := p.str()
			if err != nil {
				return err
			}
			f, err := strconv.ParseFloat(s, 64)
			if err != nil && !errors.Is(err, strconv.ErrRange) {
				return fmt.Errorf("value %q is not a number", s)
			}
			dst = append(dst, f)
			return nil
		}
		tok := p.number()
		f, err := strconv.ParseFloat(string(tok), 64)
		if err != nil && !errors.Is(err, strconv.ErrRange) { // out of range: ±Inf or 0, as VictoriaMetrics reads it
			if len(tok) == 0 {
				return p.syntaxError("a value")
			}
			return fmt.Errorf("value %s is not a number", tok)
		}
		dst = append(dst, f)
		return nil
	})
	return dst, err
}

// timestamps reads the "timestamps" array of integers (milliseconds);
// null is none.
func (p *vmParser) timestamps(dst []int64) ([]int64, error) {
	if p.null() {
		return dst, nil
	}
	err := p.array(func() error {
		if p.null() {
			return errors.New("timestamp is null")
		}
		tok := p.number()
		t, err := strconv.ParseInt(string(tok), 10, 64)
		if err != nil {
			if len(tok) == 0 {
				return p.syntaxError("a timestamp")
			}
			return fmt.Errorf("timestamp %s is not an integer of milliseconds", tok)
		}
		dst = append(dst, t)
		return nil
	})
	return dst, err
}

// number returns the number token at i and passes over it: the characters
// of a JSON number, or NaN or Inf (any case, Inf after a sign), as
// VictoriaMetrics reads them. Empty when none is there.
func (p *vmParser) number() []byte {
	start, b := p.i, p.b
	i := p.i
	if i < len(b) && (b[i] == '-' || b[i] == '+') {
		i++
	}
	if i+3 <= len(b) && (bytes.EqualFold(b[i:i+3], []byte("inf")) || (i == start && bytes.EqualFold(b[i:i+3], []byte("nan")))) {
		p.i = i + 3
		return b[start:p.i]
	}
	for i < len(b) && (b[i] >= '0' && b[i] <= '9' || b[i] == '.' || b[i] == 'e' || b[i] == 'E' || b[i] == '-' || b[i] == '+') {
		i++
	}
	p.i = i
	return b[start:i]
}

// str reads the JSON string at i. One without escapes in valid UTF-8 is its
// bytes; any other is unescaped by encoding/json (which also replaces
// invalid UTF-8).
func (p *vmParser) str() (string, error) {
	b, i := p.b, p.i
	if i >= len(b) || b[i] != '"' {
		return "", p.syntaxError("a string")
	}
	plain := true
	j := i + 1
	for ; j < len(b) && b[j] != '"'; j++ {
		switch c := b[j]; {
		case c == '\\':
			plain = false
			j++
		case c < 0x20:
			p.i = j
			return "", p.syntaxError("a character of a string (a control character must be escaped)")
		case c >= utf8.RuneSelf:
			plain = false
		}
	}
	if j >= len(b) {
		p.i = len(b)
		return "", p.syntaxError("the end of a string")
	}
	p.i = j + 1
	if plain {
		return string(b[i+1 : j]), nil
	}
	var s string
	if err := json.Unmarshal(b[i:j+1], &s); err != nil {
		return "", fmt.Errorf("invalid JSON: %w", err)
	}
	return s, nil
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
