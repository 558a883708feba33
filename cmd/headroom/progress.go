package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/headroom-ml/headroom/device"
)

// progressFlags are train's --progress and --progress-every.
type progressFlags struct {
	mode  string
	every time.Duration
}

func (p *progressFlags) define(fs *flag.FlagSet) {
	fs.StringVar(&p.mode, "progress", "auto", "how training, and an evaluation longer than 2s, show their progress on stderr: bar (redrawn in place), plain (one line at a time, for logs), none, or auto (bar when stderr is a terminal, else plain)")
	fs.DurationVar(&p.every, "progress-every", 0, "time between progress updates (default: 200ms for the bar, 10s for plain lines); the first step and the end of each epoch are always shown")
}

func (p *progressFlags) check() error {
	switch p.mode {
	case "", "auto", "bar", "plain", "none":
	default:
		return fmt.Errorf("--progress %q: valid are auto, bar, plain and none", p.mode)
	}
	if p.every < 0 {
		return fmt.Errorf("--progress-every %v: must not be negative", p.every)
	}
	return nil
}

// Default intervals between updates: a bar is cheap to redraw and reads
// as live; a log wants few lines.
const (
	barEvery   = 200 * time.Millisecond
	plainEvery = 10 * time.Second
)

// progress shows training's progress, updated by time rather than by
// step count (steps may take a millisecond or a minute): a bar redrawn in
// place on a terminal, plain lines in a log.
type progress struct {
	w     io.Writer
	bar   bool
	off   bool
	every time.Duration
	width int // terminal columns, for the bar
	now   func() time.Time

	epochs                 int
	epoch, steps           int // the current epoch (1-based) and its steps
	start, last            time.Time
	shown                  int // the step last shown, -1: none this epoch
	drawn                  bool
	first                  int    // the step the epoch started from (resumed mid-epoch)
	totalLeft, totalFactor int    // steps of later epochs, for the run's ETA
	noted                  string // note's line last shown ("": none)
}

// newProgress makes the progress display for w under the flags: auto is
// a bar when w is a terminal.
func newProgress(w io.Writer, p progressFlags) *progress {
	pr := &progress{w: w, now: time.Now, width: 100}
	switch p.mode {
	case "none":
		pr.off = true
	case "bar":
		pr.bar = true
	case "", "auto":
		if f, ok := w.(*os.File); ok && os.Getenv("TERM") != "dumb" {
			if cols, ok := terminalWidth(f); ok {
				pr.bar, pr.width = true, cols
			}
		}
	}
	pr.every = p.every
	if pr.every == 0 {
		pr.every = plainEvery
		if pr.bar {
			pr.every = barEvery
		}
	}
	return pr
}

// progressStat is what a step reports.
type progressStat struct {
	step    int     // steps done in this epoch
	loss    float64 // mean training loss of the epoch so far
	samples int     // samples of the epoch so far
	peak    int64   // peak allocated bytes of the epoch so far
}

// startEpoch begins epoch (1-based) of epochs, with steps steps of which
// first are already done (a resumed run); later is the number of steps of
// the epochs after it, for the ETA of the run.
func (p *progress) startEpoch(epoch, epochs, steps, first, later int) {
	p.epoch, p.epochs, p.steps, p.first, p.totalLeft = epoch, epochs, steps, first, later
	p.start, p.shown, p.drawn = p.now(), -1, false
}

// update shows s if the interval has passed since the last update, or it
// is the epoch's first or last step.
func (p *progress) update(s progressStat) {
	if p.off {
		return
	}
	if p.shown >= 0 && s.step < p.steps && p.now().Sub(p.last) < p.every {
		return
	}
	p.show(s)
}

func (p *progress) show(s progressStat) {
	t := p.now()
	p.last, p.shown = t, s.step
	line := p.format(s, t.Sub(p.start))
	if p.bar {
		fmt.Fprintf(p.w, "\r%s\x1b[K", line)
		p.drawn = true
		return
	}
	fmt.Fprintln(p.w, line)
}

// endEpoch shows the epoch's last state (stopped by --steps or an
// interruption, it may not have been) and ends the bar's line.
func (p *progress) endEpoch(s progressStat) {
	if p.off {
		return
	}
	if s.step != p.shown && s.step > p.first {
		p.show(s)
	}
	if p.drawn {
		fmt.Fprintln(p.w)
		p.drawn = false
	}
}

// note shows line, the state of work other than training steps (headroom
// prepare), by the rules of steps: the first at once, then at most once
// an interval, redrawn in place on a terminal, a line each in a log.
func (p *progress) note(line string) {
	if p.off || p.noted != "" && p.now().Sub(p.last) < p.every {
		return
	}
	p.put(line)
}

// endNote shows the work's last state, line, unless it was the last
// shown ("": nothing to show), and ends the bar's line.
func (p *progress) endNote(line string) {
	if p.off {
		return
	}
	if line != p.noted {
		p.put(line)
	}
	if p.drawn {
		fmt.Fprintln(p.w)
		p.drawn = false
	}
	p.noted = "" // the next work's first note shows at once
}

func (p *progress) put(line string) {
	p.last, p.noted = p.now(), line
	if p.bar {
		fmt.Fprintf(p.w, "\r%s\x1b[K", line)
		p.drawn = true
		return
	}
	fmt.Fprintln(p.w, line)
}

// clear removes the bar so that a message can be printed on a clean line;
// the next update draws it again.
func (p *progress) clear() {
	if p != nil && p.drawn {
		fmt.Fprint(p.w, "\r\x1b[K")
		p.drawn = false
		p.shown = -1
	}
}

// format is one update: in a bar, the bar first and the fields after it.
func (p *progress) format(s progressStat, el time.Duration) string {
	done := s.step - p.first // steps run in this process's epoch
	var rate float64         // steps per second
	if sec := el.Seconds(); sec > 0 && done > 0 {
		rate = float64(done) / sec
	}
	pct := 100 * float64(s.step) / float64(max(p.steps, 1))
	eta := "?"
	if rate > 0 {
		eta = clock(time.Duration(float64(p.steps-s.step) / rate * float64(time.Second)))
		if p.totalLeft > 0 {
			eta += " (run " + clock(time.Duration(float64(p.steps-s.step+p.totalLeft)/rate*float64(time.Second))) + ")"
		}
	}
	speed := "? steps/s"
	switch {
	case rate >= 1:
		speed = fmt.Sprintf("%.1f steps/s", rate)
	case rate > 0:
		speed = fmt.Sprintf("%.2f s/step", 1/rate)
	}
	var samples string
	if sec := el.Seconds(); sec > 0 && s.samples > 0 {
		samples = fmt.Sprintf(", %.0f samples/s", float64(s.samples)/sec)
	}
	mem := ""
	if s.peak > 0 {
		mem = "  peak " + device.FormatBytes(s.peak)
	}
	loss := fmt.Sprintf("loss %.4f", s.loss)
	if !p.bar {
		return fmt.Sprintf("epoch %d/%d  step %d/%d (%.0f%%)  %s  %s%s  elapsed %s  eta %s%s",
			p.epoch, p.epochs, s.step, p.steps, pct, loss, speed, samples, clock(el), eta, mem)
	}
	head := fmt.Sprintf("epoch %d/%d ", p.epoch, p.epochs)
	tail := fmt.Sprintf(" %3.0f%% %d/%d [%s<%s, %s] %s%s", pct, s.step, p.steps, clock(el), eta, speed, loss, mem)
	n := p.width - len([]rune(head)) - len([]rune(tail)) - 1
	n = min(max(n, 10), 40)
	fill := int(float64(n) * float64(s.step) / float64(max(p.steps, 1)))
	fill = min(max(fill, 0), n)
	return head + strings.Repeat("█", fill) + strings.Repeat("░", n-fill) + tail
}

// clock formats a duration as tqdm does: m:ss, or h:mm:ss past an hour.
func clock(d time.Duration) string {
	s := int64(d.Round(time.Second) / time.Second)
	if s < 0 {
		s = 0
	}
	if s >= 3600 {
		return fmt.Sprintf("%d:%02d:%02d", s/3600, s/60%60, s%60)
	}
	return fmt.Sprintf("%d:%02d", s/60, s%60)
}

// startProgress begins epoch (0-based) of the run, whose first b of steps
// are done, for the progress display.
func (r *runner) startProgress(epoch, steps, b int) {
	if r.prog == nil {
		r.prog = newProgress(r.log, r.f.progress)
	}
	left := (r.f.epochs-epoch)*steps - b // steps left in the run
	if r.f.steps > 0 {
		left = min(left, r.f.steps-int(r.last.Step))
	}
	r.prog.startEpoch(epoch+1, r.f.epochs, steps, b, max(0, left-(steps-b)))
}
