package plog

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"time"
)

// maxDatagram is the largest UDP payload over IPv4.
const maxDatagram = 65535

// readUDP is the listener's only reader: it owns the defragmenter and the hole
// detector, so neither needs a lock.
func (l *listener) readUDP(ctx context.Context) {
	df := newDefrag(l.set.DefragMaxBytes, l.set.DefragMaxAge, &l.st)
	var hd *holes
	if *l.set.HoleDetection {
		hd = newHoles(max(l.set.DefragMaxAge, 10*time.Second), &l.st)
	}
	defer df.drop()
	lim := newCommandLimiter(commandSources, commandRate, commandBurst)
	env := commandEnv{
		allowEnvi: *l.set.AllowENVI,
		allowKill: *l.set.AllowKILL,
		canStop:   l.srv.opts.Stop != nil,
		snapshot:  l.snapshot,
		environ:   l.srv.opts.Environ,
	}
	buf := make([]byte, maxDatagram)
	oob := make([]byte, 128)
	// Housekeeping runs at least once a second, and often enough that an entry
	// is evicted no later than half its max age after expiring.
	every := min(time.Second, max(l.set.DefragMaxAge/2, 10*time.Millisecond))
	var tick time.Time
	for {
		now := time.Now()
		if now.Sub(tick) >= every {
			tick = now
			df.expire(now)
			if hd != nil {
				hd.sweep(now)
			}
			// Wake up to expire entries on a quiet socket too.
			_ = l.udp.SetReadDeadline(now.Add(every))
		}
		n, oobn, _, from, err := l.udp.ReadMsgUDPAddrPort(buf, oob)
		if err != nil {
			var ne net.Error
			switch {
			case isClosed(err):
				return
			case errors.As(err, &ne) && ne.Timeout():
				continue
			}
			l.st.exceptions.Add(1)
			l.log.Warn().Err(err).Msg("plog udp read failed")
			continue
		}
		if oobn > 0 {
			if drops, ok := parseDropCount(oob[:oobn]); ok {
				l.st.socketDrops.Store(uint64(drops))
			}
		}
		l.datagram(ctx, time.Now(), buf[:n], from, df, hd, lim, env)
	}
}

// datagram dispatches one datagram by its first two bytes.
func (l *listener) datagram(ctx context.Context, now time.Time, d []byte, from netip.AddrPort, df *defrag, hd *holes, lim *commandLimiter, env commandEnv) {
	if len(d) == 0 {
		l.st.udpEmpty.Add(1)
		return
	}
	if d[0] > 31 {
		l.st.udpSimpleMessages.Add(1)
		body := make([]byte, len(d))
		copy(body, d)
		if !l.enqueue(ctx, item{body: body}) {
			l.st.failedToSend.Add(1)
		}
		return
	}
	if d[0] != 0 {
		l.st.udpInvalidVersion.Add(1)
		return
	}
	if len(d) < 2 {
		l.st.v0InvalidType.Add(1)
		return
	}
	switch d[1] {
	case packetCommand:
		if !lim.allow(from.Addr().Unmap(), now) {
			l.st.v0RateLimited.Add(1)
			l.cmdLog.Warn().Stringer("from", from).Msg("plog command dropped: more than 10 a second from this source")
			return
		}
		env.trusted = trusted(l.srv.trusted, from.Addr())
		cmd, _ := runCommand(&l.st, env, d[2:])
		if cmd.reply != nil {
			if _, err := l.udp.WriteToUDPAddrPort(cmd.reply, from); err != nil {
				l.log.Debug().Err(err).Msg("plog command reply not sent")
			}
		}
		if cmd.kill {
			l.srv.kill()
		}
		switch {
		case cmd.untrusted:
			l.cmdLog.Warn().Str("command", cmd.refused).Stringer("from", from).
				Msg("plog command refused: answered to trusted (loopback) sources only")
		case cmd.refused != "":
			l.cmdLog.Warn().Str("command", cmd.refused).Stringer("from", from).
				Msg("plog command refused: not enabled on this listener")
		}
	case packetFragment:
		h, tags, payload, err := parseHeader(d)
		if err == nil && h.count > 1 && h.maxCost() > l.set.DefragMaxBytes {
			err = ErrTooLarge
		}
		if err != nil {
			l.st.v0InvalidHeader.Add(1)
			return
		}
		if hd != nil {
			hd.observe(now, from, h.id)
		}
		msg, ok := df.add(now, from, h, tags, payload)
		if ok && !l.enqueue(ctx, item{body: msg.body, tags: msg.tags}) {
			l.st.failedToSend.Add(1)
		}
	default:
		l.st.v0InvalidType.Add(1)
	}
}
