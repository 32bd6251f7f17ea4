package runtime

import (
	"bytes"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
)

// Guest log lines are limited per module to logRate lines a second with bursts
// of logBurst; the lines over the limit are dropped and counted, and the count is
// reported with the next line that gets through.
const (
	logRate     = 20.0
	logBurst    = 100.0
	maxLogLine  = 1024
	oomMarker   = "out of memory"
	wasiStdout  = 1
	wasiStderr  = 2
	levelStdout = zerolog.InfoLevel
	levelStderr = zerolog.WarnLevel
)

// guestLog writes guest output to the collector's log under a rate limit.
type guestLog struct {
	logger  zerolog.Logger
	mu      sync.Mutex
	tokens  float64
	last    time.Time
	dropped int64
	total   atomic.Int64 // lines dropped since load (for tests and status)
}

func newGuestLog(logger zerolog.Logger) *guestLog {
	return &guestLog{logger: logger, tokens: logBurst, last: time.Now()}
}

func (g *guestLog) write(level zerolog.Level, stream string, line []byte) {
	g.mu.Lock()
	now := time.Now()
	g.tokens += now.Sub(g.last).Seconds() * logRate
	if g.tokens > logBurst {
		g.tokens = logBurst
	}
	g.last = now
	if g.tokens < 1 {
		g.dropped++
		g.total.Add(1)
		g.mu.Unlock()
		return
	}
	g.tokens--
	dropped := g.dropped
	g.dropped = 0
	g.mu.Unlock()

	if len(line) > maxLogLine {
		line = line[:maxLogLine]
	}
	ev := g.logger.WithLevel(level).Str("stream", stream)
	if dropped > 0 {
		ev = ev.Int64("dropped_lines", dropped)
	}
	ev.Msg(string(line))
}

func abiLevel(level int32) zerolog.Level {
	switch level {
	case 0:
		return zerolog.DebugLevel
	case 2:
		return zerolog.WarnLevel
	case 3:
		return zerolog.ErrorLevel
	}
	return zerolog.InfoLevel
}

// lineWriter is a WASI stdout or stderr: it splits what the guest writes into
// lines and hands them to the guest log.
type lineWriter struct {
	log    *guestLog
	level  zerolog.Level
	stream string
	buf    []byte
	oom    *atomic.Bool // set when stderr mentions running out of memory
}

func (w *lineWriter) Write(p []byte) (int, error) {
	n := len(p)
	if w.oom != nil && bytes.Contains(p, []byte(oomMarker)) {
		w.oom.Store(true)
	}
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			room := maxLogLine - len(w.buf)
			if len(p) > room {
				w.buf = append(w.buf, p[:room]...)
				w.flush()
				p = p[room:]
				continue
			}
			w.buf = append(w.buf, p...)
			break
		}
		w.buf = append(w.buf, p[:i]...)
		w.flush()
		p = p[i+1:]
	}
	return n, nil
}

func (w *lineWriter) flush() {
	if len(w.buf) > 0 {
		w.log.write(w.level, w.stream, w.buf)
	}
	w.buf = w.buf[:0]
}
