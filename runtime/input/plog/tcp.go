package plog

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/tally-billing/tally-openstack-collector/internal/backoff"
)

// acceptTCP accepts connections up to MaxConnections, and up to
// MaxConnectionsPerSource from one source address; one over either cap is
// closed at once (counted in tcp_refused_connections or
// tcp_refused_per_source) rather than left waiting.
func (l *listener) acceptTCP(ctx context.Context) {
	defer func() {
		l.closeConns()
		for l.st.tcpConnections.Load() > 0 {
			time.Sleep(time.Millisecond)
		}
	}()
	backoff.Accepting(l.tcp.Accept, func(err error, _ time.Duration) {
		l.st.exceptions.Add(1)
		l.log.Warn().Err(err).Msg("plog tcp accept failed")
	}, func(c net.Conn) bool {
		if l.st.tcpConnections.Load() >= int64(l.set.MaxConnections) {
			l.st.tcpRefused.Add(1)
			_ = c.Close()
			return true
		}
		closed, overSource := l.trackConn(c)
		if closed {
			_ = c.Close()
			return false
		}
		if overSource {
			l.st.tcpRefusedPerSource.Add(1)
			l.cmdLog.Warn().Stringer("from", c.RemoteAddr()).Int("cap", l.set.MaxConnectionsPerSource).
				Msg("plog tcp connection refused: too many from this source")
			_ = c.Close()
			return true
		}
		l.st.tcpConnections.Add(1)
		go func() {
			defer l.st.tcpConnections.Add(-1)
			defer l.untrackConn(c)
			defer c.Close()
			l.serveConn(ctx, c)
		}()
		return true
	})
}

// tcpReadBuffer is each connection's read buffer. A line that fits in it is
// handed on from there; only a longer one is gathered in a line buffer, which
// the listener's line budget bounds.
const tcpReadBuffer = 64 << 10

// Reasons a listener closes a TCP connection, the reason label of
// tally_collector_plog_tcp_closed_connections_total.
const (
	closedIdleTimeout = "idle_timeout"
	closedLineBudget  = "line_budget"
)

// lineBudget bounds the bytes the line buffers of one listener's connections
// hold, whatever the clients send. Each of MaxConnections connections may hold
// share bytes (budget / (2 × MaxConnections)) whatever the others do; a line
// buffer past its share borrows the excess from common (the rest of the
// budget), and a connection that cannot borrow is closed. With at most
// MaxConnections connections open, the buffers hold at most
// MaxConnections × share + common = budget bytes, and a connection whose lines
// fit in its read buffer and its share is never refused for the others.
type lineBudget struct {
	share    int64
	common   int64
	borrowed atomic.Int64
	held     *heldBytes // stats.tcpLineBytes
}

func newLineBudget(budget int64, conns int, held *heldBytes) *lineBudget {
	share := budget / (2 * int64(conns))
	return &lineBudget{share: share, common: budget - share*int64(conns), held: held}
}

func (b *lineBudget) excess(n int64) int64 { return max(0, n-b.share) }

// resize moves one connection's line buffer from from to to bytes of
// capacity. It reports false, and changes nothing, when the growth past the
// connection's share cannot be borrowed.
func (b *lineBudget) resize(from, to int64) bool {
	d := b.excess(to) - b.excess(from)
	for d > 0 {
		cur := b.borrowed.Load()
		if cur+d > b.common {
			return false
		}
		if b.borrowed.CompareAndSwap(cur, cur+d) {
			break
		}
	}
	if d < 0 {
		b.borrowed.Add(d)
	}
	b.held.add(to - from)
	return true
}

// appendLine appends chunk to a connection's line buffer, growing it (at
// most doubling, never past limit) within the budget. It reports false when
// the budget refused the growth; line is then unchanged.
func (b *lineBudget) appendLine(line, chunk []byte, limit int) ([]byte, bool) {
	need := len(line) + len(chunk)
	if need > cap(line) {
		grown := min(max(2*cap(line), need), limit)
		if !b.resize(int64(cap(line)), int64(grown)) {
			return line, false
		}
		n := make([]byte, len(line), grown)
		copy(n, line)
		line = n
	}
	return append(line, chunk...), true
}

// serveConn reads newline-separated messages. Each line must arrive in full
// within IdleTimeout of the previous one, so a client trickling bytes holds its
// connection no longer than one honest idle client. A line longer than
// MaxLineBytes is skipped up to its newline and counted; the connection stays
// open. A line that fits in the read buffer is handed on from there; a longer
// one is gathered in a line buffer under the listener's line budget, and a
// connection whose line the budget cannot hold is closed and counted. A last
// line without a newline at end of stream is a message too.
func (l *listener) serveConn(ctx context.Context, c net.Conn) {
	r := bufio.NewReaderSize(c, tcpReadBuffer)
	ext := tcpExt{c: c, lim: newCommandLimiter(1, commandRate, commandBurst)}
	var line []byte
	defer func() { l.lines.resize(int64(cap(line)), 0) }()
	overlong := false
	for {
		if l.set.IdleTimeout > 0 && len(line) == 0 && !overlong {
			_ = c.SetReadDeadline(time.Now().Add(l.set.IdleTimeout))
		}
		chunk, err := r.ReadSlice('\n')
		var cur []byte // the line so far
		switch {
		case overlong:
		case len(line)+len(chunk) > l.set.MaxLineBytes+1 ||
			(len(line)+len(chunk) == l.set.MaxLineBytes+1 && chunk[len(chunk)-1] != '\n'):
			overlong = true
			l.lines.resize(int64(cap(line)), 0)
			line = nil // nothing is held while the line is skipped
		case len(line) == 0 && !errors.Is(err, bufio.ErrBufferFull):
			cur = chunk // the whole line is in the read buffer
		default:
			grown, ok := l.lines.appendLine(line, chunk, l.set.MaxLineBytes+1)
			if !ok {
				l.st.tcpLineBudgetClosed.Add(1)
				l.connLog.Warn().Stringer("from", c.RemoteAddr()).Int("line_bytes", len(line)+len(chunk)).
					Int64("share_bytes", l.lines.share).Int64("budget_bytes", l.set.LineBudgetBytes).
					Msg("plog tcp connection closed: its line is past its share of the line budget, and the rest is taken")
				return
			}
			line, cur = grown, grown
		}
		switch {
		case err == nil:
			if overlong {
				l.st.tcpOverlongLines.Add(1)
				overlong = false
			} else if !l.line(ctx, &ext, cur[:len(cur)-1]) {
				return
			}
			line = line[:0]
			if int64(cap(line)) > l.lines.share {
				l.lines.resize(int64(cap(line)), 0)
				line = nil // do not keep borrowed bytes for the next line
			}
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		default:
			if !overlong && len(cur) > 0 && errors.Is(err, io.EOF) {
				l.line(ctx, &ext, cur)
			}
			if overlong {
				l.st.tcpOverlongLines.Add(1)
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				l.st.tcpTimeouts.Add(1)
			}
			return
		}
	}
}

// tcpExt is what a connection needs for lines of the \0 protocol: the
// connection, to answer commands, and its own command bucket.
type tcpExt struct {
	c   net.Conn
	lim *commandLimiter
}

// line handles one line: a message, or a line of the \0 protocol. It
// reports false when the connection must be closed (an answer could not be
// written).
func (l *listener) line(ctx context.Context, ext *tcpExt, b []byte) bool {
	if len(b) == 0 {
		return true
	}
	var tags []string
	if b[0] == 0 {
		switch {
		case len(b) >= 2 && b[1] == 0:
			return l.tcpCommand(ext, b[2:])
		default:
			// \0 tags \0\0 message: the tags, \0-separated as in a
			// fragment, end at the first \0\0.
			end := bytes.Index(b[1:], []byte{0, 0})
			if end < 0 {
				l.st.tcpReservedLines.Add(1)
				return true
			}
			tags = splitTags(b[1 : 1+end])
			b = b[1+end+2:]
			if len(b) == 0 {
				l.st.tcpReservedLines.Add(1)
				return true
			}
		}
	}
	l.st.tcpLines.Add(1)
	body := make([]byte, len(b))
	copy(body, b)
	if !l.enqueue(ctx, item{body: body, tags: tags}) {
		l.st.failedToSend.Add(1)
	}
	return true
}

// tcpCommand runs a command line (\0\0 then the command, as in a UDP
// command packet) and writes its answer, if any, followed by a newline. The
// same commands, switches, trusted sources and rate as over UDP; a TCP
// source cannot be forged, but one rule for both keeps them alike. An
// answer that cannot be written within IdleTimeout closes the connection.
func (l *listener) tcpCommand(ext *tcpExt, body []byte) bool {
	now := time.Now()
	from := remoteAddr(ext.c)
	if !ext.lim.allow(from.Addr(), now) {
		l.st.v0RateLimited.Add(1)
		l.cmdLog.Warn().Stringer("from", ext.c.RemoteAddr()).Msg("plog command dropped: more than 10 a second from this connection")
		return true
	}
	env := commandEnv{
		allowEnvi: *l.set.AllowENVI,
		allowKill: *l.set.AllowKILL,
		canStop:   l.srv.opts.Stop != nil,
		trusted:   trusted(l.srv.trusted, from.Addr()),
		snapshot:  l.snapshot,
		environ:   l.srv.opts.Environ,
	}
	cmd, _ := runCommand(&l.st, env, body)
	if cmd.kill {
		l.srv.kill()
	}
	switch {
	case cmd.untrusted:
		l.cmdLog.Warn().Str("command", cmd.refused).Stringer("from", ext.c.RemoteAddr()).
			Msg("plog command refused: answered to trusted (loopback) sources only")
	case cmd.refused != "":
		l.cmdLog.Warn().Str("command", cmd.refused).Stringer("from", ext.c.RemoteAddr()).
			Msg("plog command refused: not enabled on this listener")
	}
	if cmd.reply == nil {
		return true
	}
	_ = ext.c.SetWriteDeadline(now.Add(max(l.set.IdleTimeout, time.Second)))
	if _, err := ext.c.Write(append(cmd.reply, '\n')); err != nil {
		l.log.Debug().Err(err).Msg("plog tcp command answer not written; connection closed")
		return false
	}
	return true
}

// remoteAddr is a connection's peer as an address and port (zero when it
// is not a TCP address).
func remoteAddr(c net.Conn) netip.AddrPort {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		ap := a.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	return netip.AddrPort{}
}
