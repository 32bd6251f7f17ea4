package channel

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/internal/backoff"
	"github.com/tally-billing/tally-openstack-collector/runtime/input"
	"github.com/tally-billing/tally-openstack-collector/runtime/input/channel/wire"
)

// Server is the daemon's end of the local message channel: it accepts
// connections on a Unix socket, maps what is published through the shared
// pipeline, commits the events to the outbox and only then acknowledges,
// and serves the tap (Hub) to subscribers.
type Server struct {
	opts Options
	log  zerolog.Logger
	ln   *net.UnixListener
	hub  *Hub
	m    *metrics

	work    chan *item
	commits chan *item
	budget  budget

	connMu sync.Mutex
	conns  map[*conn]struct{}
	perUID map[uint32]int // connections of each uid
	closed bool

	life      *input.Serving
	closeOnce sync.Once
}

// New validates opts and binds the socket, so that a path in use stops
// start-up. Nothing is read until Run.
func New(opts Options) (*Server, error) {
	opts.setDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	ln, err := listen(opts.Socket, opts.SocketMode)
	if err != nil {
		return nil, err
	}
	s := &Server{
		opts:    opts,
		log:     opts.Logger,
		ln:      ln,
		hub:     newHub(opts.Hub),
		work:    make(chan *item, queueSlots),
		commits: make(chan *item, queueSlots),
		conns:   make(map[*conn]struct{}),
		perUID:  make(map[uint32]int),
	}
	s.life = input.NewServing("channel", ErrClosed, s.closeListener)
	s.budget.init(opts.QueueBytes)
	m, err := newMetrics(s, opts.Registerer)
	if err != nil {
		ln.Close()
		return nil, err
	}
	s.m = m
	return s, nil
}

// queueSlots is the capacity of the work and commit queues; received bytes
// are bounded by Options.QueueBytes as well.
const queueSlots = 1 << 16

// listen binds the socket path. A socket file left by a daemon that is gone
// is removed first; one that answers is in use.
func listen(path string, mode os.FileMode) (*net.UnixListener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil { //nolint:gosec // G301: the socket's own mode (Options) guards who connects; the directory only has to be passable
		return nil, fmt.Errorf("channel: socket directory: %w", err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("channel: %s exists and is not a socket", path)
		}
		c, err := net.DialTimeout("unix", path, time.Second)
		if err == nil {
			c.Close()
			return nil, fmt.Errorf("%w: %s", ErrSocketInUse, path)
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("channel: probe %s: %w", path, err)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("channel: remove stale socket: %w", err)
		}
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("channel: listen %s: %w", path, err)
	}
	ln.SetUnlinkOnClose(true)
	if err := os.Chmod(path, mode); err != nil {
		ln.Close()
		return nil, fmt.Errorf("channel: chmod %s: %w", path, err)
	}
	return ln, nil
}

// Socket is the path the server listens on.
func (s *Server) Socket() string { return s.opts.Socket }

// Tap is the hub that fans committed messages out to subscribers; the AMQP
// input offers what it commits to it too.
func (s *Server) Tap() *Hub { return s.hub }

// Run serves until ctx is done or Close is called. It then stops reading,
// settles what was received (mapping, committing, acknowledging), bounded
// by Options.DrainTimeout, and returns nil. It may be called once.
func (s *Server) Run(ctx context.Context) error {
	return s.life.Run(func() error { return s.serve(ctx) })
}

func (s *Server) serve(ctx context.Context) error {
	work, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	hubCtx, stopHub := context.WithCancel(context.Background())
	defer stopHub()
	go s.hub.Run(hubCtx)

	var readers, workers, committer sync.WaitGroup
	committer.Add(1)
	go func() { defer committer.Done(); s.commitLoop(work) }()
	for range s.opts.Workers {
		workers.Add(1)
		go func() { defer workers.Done(); s.workLoop(work) }()
	}
	readers.Add(1)
	go func() { defer readers.Done(); s.accept(work, &readers) }()
	s.log.Info().Str("socket", s.opts.Socket).Str("mode", fmt.Sprintf("%04o", s.opts.SocketMode)).Msg("channel listening")

	defer s.life.Wait(ctx, s.opts.DrainTimeout, cancelWork)()
	s.closeListener()
	s.stopReading()
	readers.Wait()
	close(s.work)
	workers.Wait()
	close(s.commits)
	committer.Wait()
	s.closeConns()
	return nil
}

// Close stops the server. When Run is serving, Close waits for it to drain,
// bounded by ctx. It is safe to call more than once and without Run.
func (s *Server) Close(ctx context.Context) error { return s.life.Close(ctx) }

func (s *Server) closeListener() {
	s.closeOnce.Do(func() { _ = s.ln.Close() })
}

func (s *Server) accept(ctx context.Context, readers *sync.WaitGroup) {
	backoff.Accepting(s.ln.AcceptUnix, func(err error, _ time.Duration) {
		s.m.exceptions.Inc()
		s.log.Warn().Err(err).Msg("channel accept failed")
	}, func(nc *net.UnixConn) bool {
		c, ok := s.newConn(nc)
		if !ok {
			return true
		}
		readers.Add(1)
		go func() {
			defer readers.Done()
			c.serve(ctx)
		}()
		return true
	})
}

// stopReading makes every connection's reader return at its next read;
// writers go on until closeConns, so that the last acknowledgements leave.
func (s *Server) stopReading() {
	s.connMu.Lock()
	defer s.connMu.Unlock()
	s.closed = true
	for c := range s.conns {
		_ = c.nc.CloseRead()
	}
}

func (s *Server) closeConns() {
	s.connMu.Lock()
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.connMu.Unlock()
	for _, c := range conns {
		c.finish()
	}
}

func (s *Server) newConn(nc *net.UnixConn) (*conn, bool) {
	cred, err := readPeerCred(nc)
	if err != nil {
		s.m.exceptions.Inc()
		s.log.Warn().Err(err).Msg("channel connection refused: no peer credentials")
		_ = nc.Close()
		return nil, false
	}
	c := newConn(s, nc, cred)
	s.connMu.Lock()
	if s.closed {
		s.connMu.Unlock()
		_ = nc.Close()
		return nil, false
	}
	refuse := ""
	switch {
	case len(s.conns) >= s.opts.MaxConnections:
		refuse = fmt.Sprintf("too many connections (at most %d)", s.opts.MaxConnections)
	case s.perUID[cred.uid] >= s.opts.MaxConnectionsPerUID:
		refuse = fmt.Sprintf("too many connections for uid %d (at most %d)", cred.uid, s.opts.MaxConnectionsPerUID)
	}
	if refuse != "" {
		s.connMu.Unlock()
		s.m.refusedConns.Inc()
		s.log.Warn().Uint32("uid", cred.uid).Int32("pid", cred.pid).Str("reason", refuse).Msg("channel connection refused")
		_ = nc.SetWriteDeadline(time.Now().Add(time.Second))
		_, _ = nc.Write(wire.AppendError(nil, refuse))
		_ = nc.Close()
		return nil, false
	}
	s.conns[c] = struct{}{}
	s.perUID[cred.uid]++
	s.connMu.Unlock()
	s.m.connections.Inc()
	return c, true
}

func (s *Server) dropConn(c *conn) {
	s.connMu.Lock()
	_, ok := s.conns[c]
	if ok {
		delete(s.conns, c)
		if s.perUID[c.cred.uid]--; s.perUID[c.cred.uid] <= 0 {
			delete(s.perUID, c.cred.uid)
		}
	}
	s.connMu.Unlock()
	if ok {
		s.m.connections.Dec()
	}
}

// budget bounds the bytes received and not yet settled across connections.
type budget struct {
	mu    sync.Mutex
	limit int64
	used  int64
	freed chan struct{}
}

func (b *budget) init(limit int64) {
	b.limit = limit
	b.freed = make(chan struct{})
}

// take reserves n bytes, waiting while the budget is spent (a message larger
// than the whole budget passes when nothing else is held).
func (b *budget) take(ctx context.Context, n int64) bool {
	for {
		b.mu.Lock()
		if b.used == 0 || b.used+n <= b.limit {
			b.used += n
			b.mu.Unlock()
			return true
		}
		ch := b.freed
		b.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
	}
}

func (b *budget) give(n int64) {
	b.mu.Lock()
	b.used -= n
	close(b.freed)
	b.freed = make(chan struct{})
	b.mu.Unlock()
}

func (b *budget) inUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// stopping reports whether Run has begun its stop.
func (s *Server) stopping() bool {
	s.connMu.Lock()
	defer s.connMu.Unlock()
	return s.closed
}
