package importer

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// progress draws the state of an import: a bar redrawn in place on a
// terminal, a plain line every interval otherwise (a log file, a pipe).
type progress struct {
	w        io.Writer
	terminal bool
	src      Source
	st       *state
	start    time.Time
}

// barInterval is how often the bar is redrawn on a terminal.
const barInterval = 200 * time.Millisecond

func (p *progress) loop(stop <-chan struct{}, interval time.Duration) {
	if p.terminal {
		interval = barInterval
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			p.draw(true)
			return
		case <-t.C:
			p.draw(false)
		}
	}
}

func (p *progress) draw(last bool) {
	done, total, unit := p.src.Progress()
	written, refused := p.st.counts()
	elapsed := time.Since(p.start)
	rate := 0.0
	if s := elapsed.Seconds(); s > 0 {
		rate = float64(written-refused) / s
	}
	if !p.terminal {
		if last {
			return // the summary follows
		}
		line := fmt.Sprintf("import: %s %s read", human(done), unit)
		if total > 0 {
			line = fmt.Sprintf("import: %s of %s %s read (%.0f%%)", human(done), human(total), unit, 100*float64(done)/float64(total))
		}
		fmt.Fprintf(p.w, "%s, %d samples stored, %d refused, %s samples/s, %s\n", line, written-refused, refused, human(int64(rate)), elapsed.Round(time.Second))
		return
	}
	const width = 30
	bar := strings.Repeat("?", width)
	pct := ""
	if total > 0 {
		frac := min(1, float64(done)/float64(total))
		n := int(frac * width)
		bar = strings.Repeat("=", n) + strings.Repeat(" ", width-n)
		if n < width {
			bar = bar[:n] + ">" + bar[n+1:]
		}
		pct = fmt.Sprintf(" %3.0f%%", 100*frac)
	}
	fmt.Fprintf(p.w, "\r[%s]%s %s %s  %s stored  %s refused  %s samples/s  %s\x1b[K",
		bar, pct, human(done), unit, human(written-refused), human(refused), human(int64(rate)), elapsed.Round(time.Second))
	if last {
		fmt.Fprintln(p.w)
	}
}

// human renders n with a k, M or G suffix.
func human(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.2fG", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.2fM", float64(n)/1e6)
	case n >= 1e4:
		return fmt.Sprintf("%.1fk", float64(n)/1e3)
	}
	return fmt.Sprint(n)
}
