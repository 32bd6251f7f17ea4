package plog

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"time"

	"github.com/tally-billing/tally-openstack-collector/internal/backoff"
)

// acceptRetry is the wait after a failed accept (out of file descriptors, say):
// 5 ms doubling to 1 s, no jitter, back to 5 ms after a success.
var acceptRetry = backoff.Policy{Min: 5 * time.Millisecond, Max: time.Second}

// acceptTCP accepts connections up to MaxConnections, and up to
// MaxConnectionsPerSource from one source address; one over either cap is
// closed at once (counted in tcp_refused_connections or
// tcp_refused_per_source) rather than left waiting.
func (l *listener) acceptTCP(ctx context.Context) {
	retry := backoff.New(acceptRetry)
	defer func() {
		l.closeConns()
		for l.st.tcpConnections.Load() > 0 {
			time.Sleep(time.Millisecond)
		}
	}()
	for {
		c, err := l.tcp.Accept()
		if err != nil {
			if isClosed(err) {
				return
			}
			l.st.exceptions.Add(1)
			l.log.Warn().Err(err).Msg("plog tcp accept failed")
			time.Sleep(retry.Next())
			continue
		}
		retry.Reset()
		if l.st.tcpConnections.Load() >= int64(l.set.MaxConnections) {
			l.st.tcpRefused.Add(1)
			_ = c.Close()
			continue
		}
		closed, overSource := l.trackConn(c)
		if closed {
			_ = c.Close()
			return
		}
		if overSource {
			l.st.tcpRefusedPerSource.Add(1)
			l.cmdLog.Warn().Stringer("from", c.RemoteAddr()).Int("cap", l.set.MaxConnectionsPerSource).
				Msg("plog tcp connection refused: too many from this source")
			_ = c.Close()
			continue
		}
		l.st.tcpConnections.Add(1)
		go func() {
			defer l.st.tcpConnections.Add(-1)
			defer l.untrackConn(c)
			defer c.Close()
			l.serveConn(ctx, c)
		}()
	}
}

// serveConn reads newline-separated messages. Each line must arrive in full
// within IdleTimeout of the previous one, so a client trickling bytes holds its
// connection no longer than one honest idle client. A line longer than
// MaxLineBytes is skipped up to its newline and counted; the connection stays
// open. A last line without a newline at end of stream is a message too.
func (l *listener) serveConn(ctx context.Context, c net.Conn) {
	r := bufio.NewReaderSize(c, 64<<10)
	var line []byte
	overlong := false
	for {
		if l.set.IdleTimeout > 0 && len(line) == 0 && !overlong {
			_ = c.SetReadDeadline(time.Now().Add(l.set.IdleTimeout))
		}
		chunk, err := r.ReadSlice('\n')
		if !overlong {
			if len(line)+len(chunk) > l.set.MaxLineBytes+1 ||
				(len(line)+len(chunk) == l.set.MaxLineBytes+1 && chunk[len(chunk)-1] != '\n') {
				overlong = true
				line = line[:0]
			} else {
				line = append(line, chunk...)
			}
		}
		switch {
		case err == nil:
			if overlong {
				l.st.tcpOverlongLines.Add(1)
				overlong = false
			} else {
				l.line(ctx, line[:len(line)-1])
			}
			line = line[:0]
			if cap(line) > 64<<10 {
				line = nil // do not keep a large buffer for the next line
			}
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		default:
			if !overlong && len(line) > 0 && errors.Is(err, io.EOF) {
				l.line(ctx, line)
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

func (l *listener) line(ctx context.Context, b []byte) {
	if len(b) == 0 {
		return
	}
	if b[0] == 0 {
		l.st.tcpReservedLines.Add(1)
		return
	}
	l.st.tcpLines.Add(1)
	body := make([]byte, len(b))
	copy(body, b)
	if !l.enqueue(ctx, item{body: body}) {
		l.st.failedToSend.Add(1)
	}
}
