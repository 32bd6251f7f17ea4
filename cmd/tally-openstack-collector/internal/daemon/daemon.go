// Package daemon is the collector's daemon: it builds every part from the
// settings (wire.go), starts them in order, serves the probes, the metrics
// and the control routes, feeds the watchdog process and systemd, and stops
// the parts in reverse on a signal or a failure, through one shutdown path.
// The command parses the command line and the settings and calls Run; a test
// calls Run in its own process and stops it with a value on Options.Signals.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/cmd/tally-openstack-collector/internal/settings"
	"github.com/tally-billing/tally-openstack-collector/runtime/input/channel"
)

// What the daemon needs of each part. The parts are built in wire.go; these
// small interfaces keep the lifecycle independent of their concrete types.
type (
	// outboxPart is the durable store between an acknowledgement and delivery.
	outboxPart interface {
		Healthy() error
		Depth() int64
		Close() error
	}
	// inputPart is an input: the AMQP consumer or a plog listener. Run returns
	// once ctx is cancelled and every message taken in is committed and
	// acknowledged (for AMQP: basic.cancel, then commit, then ack).
	inputPart interface {
		Run(ctx context.Context) error
	}
	// readyPart answers readiness.
	readyPart interface {
		Ready() error
	}
	// senderPart drains the outbox to the Reporting API.
	senderPart interface {
		Run(ctx context.Context) error
		Flush(ctx context.Context) error
		Ready() error
	}
	// closerPart is released after every input stopped (the mapper engine).
	closerPart interface {
		Close(ctx context.Context) error
	}
)

// parts are the running pieces of a daemon, built in start-up order.
type parts struct {
	outbox   outboxPart
	mappers  closerPart
	consumer inputPart // also a readyPart
	inputs   []inputPart
	sender   senderPart
}

// BuildInfo names the running build.
type BuildInfo struct {
	Version string
	Commit  string
}

// Options are what a daemon takes beside its settings.
type Options struct {
	// Build names the running build: tally_collector_build_info, the
	// start-up log, the version plog's clients are told.
	Build BuildInfo
	// Signals starts the graceful stop with its first value (SIGTERM or
	// SIGINT for the process); a second value ends the process at once
	// through Exit. Closing it starts the graceful stop too, and, after
	// Run returned, ends the goroutine that waits for the second signal.
	Signals <-chan os.Signal
	// Exit ends the process: on a second signal (status 1), and when a
	// watched built-in mapper call overruns its deadline (ExitRunaway; only
	// with MAPPER_METERED=false).
	// nil: os.Exit.
	Exit func(code int)
}

// daemon owns the lifecycle: start in order (outbox, mappers, HTTP, broker and
// sender and plog listeners), stop in reverse on the first signal, exit at once
// on the second. Every way out of run, a part that failed to start included,
// goes through shutdown, which releases what was started and nothing else.
type daemon struct {
	cfg     *settings.Config
	base    zerolog.Logger
	log     zerolog.Logger
	reg     *prometheus.Registry
	metrics *daemonMetrics
	build   BuildInfo

	// signals delivers SIGTERM/SIGINT; exit ends the process on the second one.
	signals <-chan os.Signal
	exit    func(code int)

	stopping atomic.Bool
	notify   *notifier
	p        parts
	probes   *probes
	ln       net.Listener
	srv      *http.Server
	pprofSrv *http.Server

	// What shutdown stops; each is set once its part runs.
	stopHeartbeat  func()             // the heartbeat and the watchdog process
	stopBackground context.CancelFunc // samplers, the drop-in watch
	background     sync.WaitGroup
	channel        *channel.Server    // bound; closed by shutdown unless it ran as an input
	stopInputs     context.CancelFunc // the inputs and the control link
	inputs         sync.WaitGroup
	stopSender     context.CancelFunc
	senderDone     chan struct{}
	failed         chan failure // a part that stopped for good
}

// failure is a part that stopped for good while the daemon ran.
type failure struct {
	name string
	err  error
}

// Run runs the daemon with the settings cfg until the first value on
// opts.Signals or a part that fails for good, then stops it within
// STOP_TIMEOUT: the inputs first (what they took in is committed and
// acknowledged), then the sender's flush, then the rest. base is the logger
// every part tags with its component. A part that fails to start stops the
// daemon the same way, and Run returns why.
func Run(cfg *settings.Config, base zerolog.Logger, opts Options) error {
	reg, err := newRegistry(opts.Build)
	if err != nil {
		return err
	}
	m, err := newDaemonMetrics(reg)
	if err != nil {
		return err
	}
	exit := opts.Exit
	if exit == nil {
		exit = os.Exit
	}
	d := &daemon{
		cfg: cfg, base: base, log: component(base, "main"), reg: reg,
		metrics: m, build: opts.Build, signals: opts.Signals, exit: exit,
		notify: newNotifier(component(base, "main")),
	}
	return d.run(context.Background())
}

func (d *daemon) run(ctx context.Context) error {
	d.log.Info().Str("version", d.build.Version).Str("commit", d.build.Commit).
		Interface("settings", d.cfg.EffectiveMap()).Msg("starting")
	if err := d.start(ctx); err != nil {
		return d.shutdown(err)
	}
	return d.shutdown(d.wait())
}

// start starts the parts in order; what it started before an error is
// released by shutdown.
func (d *daemon) start(ctx context.Context) error {
	// 1. The outbox: nothing may be consumed without it.
	ob, err := openOutbox(d.cfg, component(d.base, "outbox"), d.reg)
	if err != nil {
		return fmt.Errorf("open outbox %s: %w", d.cfg.BufferPath, err)
	}
	d.p.outbox = ob
	d.log.Info().Int64("depth", ob.Depth()).Str("path", d.cfg.BufferPath).Msg("outbox open")

	// 2. The mappers: engine, built-in modules, drop-ins, and the decisions
	// of the last run kept in the outbox; the control link shares promote
	// and abort decisions with the other replicas (nil when turned off).
	link, err := newControl(d.cfg, d.base, d.reg, ob)
	if err != nil {
		return fmt.Errorf("control link: %w", err)
	}
	proc, err := loadMappers(ctx, d.cfg, d.base, d.reg, ob, link,
		runawayExit(component(d.base, "runtime"), d.cfg.MapperCallTimeout, d.exit))
	if err != nil {
		return fmt.Errorf("load mappers: %w", err)
	}
	d.p.mappers = proc

	// 3. The probes: "not ready" until the broker session is up; HTTP serves
	// them from the end of step 4.
	d.probes = &probes{
		outbox: ob.Healthy,
		ready: map[string]func() error{
			"stopping":    d.stoppingCheck,
			"broker":      nil,
			"sender":      nil,
			"deadletters": ob.DeadLettersFull,
		},
		live: newLivenessTracker(d.cfg.UnhealthyThreshold, nil),
		log:  component(d.base, "probes"),
	}
	// The heartbeat, to the end of the shutdown: the watchdog process kills
	// the daemon when it stops (watchdog.go), and it carries systemd's pings.
	hbCtx, stopHeartbeat := context.WithCancel(context.Background())
	hbDone := make(chan struct{})
	go func() {
		defer close(hbDone)
		heartbeat(hbCtx, component(d.base, "watchdog"), d.cfg.WatchdogTimeout, d.cfg.LogFormat, d.notify, d.probes.live.check)
	}()
	d.stopHeartbeat = func() {
		stopHeartbeat()
		<-hbDone
	}
	// 4. The local channel (its socket bound now, so a path in use stops
	// start-up), the broker consumer, the sender and the plog listeners,
	// built and their metrics registered, not running yet. The channel comes
	// before the consumer, which offers its tap what it commits; the
	// consumer before the sender, which holds back while it drains a
	// backlog. The broker package tags its logger itself.
	ch, err := newChannel(d.cfg, component(d.base, "channel"), d.reg, ob, proc)
	if err != nil {
		return fmt.Errorf("channel: %w", err)
	}
	d.channel = ch
	cons, err := newConsumer(d.cfg, d.base, d.reg, ob, proc, ch)
	if err != nil {
		return fmt.Errorf("broker: %w", err)
	}
	d.p.consumer = cons
	if r, ok := cons.(readyPart); ok {
		d.probes.setReady("broker", r.Ready)
	}
	snd, err := newSender(d.cfg, component(d.base, "sender"), d.reg, ob, cons)
	if err != nil {
		return fmt.Errorf("sender: %w", err)
	}
	d.p.sender = snd
	d.probes.setReady("sender", snd.Ready)
	inputs, err := newPlogInputs(d.cfg, component(d.base, "plog"), d.reg, ob, proc, d.build.Version)
	if err != nil {
		return fmt.Errorf("plog: %w", err)
	}
	d.p.inputs = inputs

	// HTTP, once every metric is registered: the first scrape holds every
	// series an alert or a dashboard reads, each label value of a known set
	// at 0, so that increase() sees the first event after a start.
	if err := d.listen(proc.controlHandler(ob, component(d.base, "catalog"))); err != nil {
		// The plog listeners are bound and never ran: release their sockets
		// (the channel's is released by shutdown).
		for _, in := range inputs {
			if c, ok := in.(closerPart); ok {
				_ = c.Close(ctx)
			}
		}
		return err
	}
	bgCtx, stopBackground := context.WithCancel(ctx)
	d.stopBackground = stopBackground
	d.goBackground(func() { d.probes.sample(bgCtx, time.Second) })
	d.goBackground(func() { d.sampleReady(bgCtx) })
	// Hot reload of the drop-in directory, for the daemon's whole life.
	d.goBackground(func() {
		if err := proc.Run(bgCtx); err != nil {
			d.log.Error().Err(err).Msg("mapper directory watch stopped; restart to pick up drop-in changes")
		}
	})

	// 5. Run: the sender, then every input.
	d.failed = make(chan failure, 3+len(inputs))
	sendCtx, stopSender := context.WithCancel(ctx)
	d.stopSender, d.senderDone = stopSender, make(chan struct{})
	go func() {
		defer close(d.senderDone)
		if err := snd.Run(sendCtx); err != nil && !errors.Is(err, context.Canceled) {
			d.failed <- failure{"sender", err}
		}
	}()
	inCtx, stopInputs := context.WithCancel(ctx)
	d.stopInputs = stopInputs
	// The control link, until the stop: decisions taken on other replicas
	// while this one was down are applied now. It stops with the inputs, so
	// that its close, which a blocked broker may leave unanswered for its
	// whole bound, fits in their budget (a decision taken while stopping is
	// kept and sent after the next start).
	if link != nil {
		d.inputs.Add(1)
		go func() {
			defer d.inputs.Done()
			_ = link.Run(inCtx) // nil once inCtx ends
		}()
	}
	d.runInput(inCtx, "broker", cons)
	for i, in := range inputs {
		d.runInput(inCtx, fmt.Sprintf("plog[%d] %s", i, d.cfg.Plog[i].Address), in)
	}
	if ch != nil {
		d.channel = nil // stopped with the inputs from now on
		d.runInput(inCtx, "channel "+d.cfg.ChannelSocket, ch)
	}
	d.log.Info().Str("http_addr", d.ln.Addr().String()).Msg("started")
	// systemd (Type=notify): READY=1 once the broker session consumes (the
	// outbox is open since step 1); WATCHDOG=1 while /livez would pass, sent
	// by the heartbeat (started with the probes).
	d.goBackground(func() {
		d.notify.ready(bgCtx, func() error {
			if err := ob.Healthy(); err != nil {
				return err
			}
			if r, ok := cons.(readyPart); ok {
				return r.Ready()
			}
			return nil
		})
	})
	return nil
}

// goBackground runs f until the background context ends; shutdown waits for it.
func (d *daemon) goBackground(f func()) {
	d.background.Add(1)
	go func() {
		defer d.background.Done()
		f()
	}()
}

// runInput runs an input until ctx ends; an input that returns before is a
// failure.
func (d *daemon) runInput(ctx context.Context, name string, in inputPart) {
	d.inputs.Add(1)
	go func() {
		defer d.inputs.Done()
		err := in.Run(ctx)
		if ctx.Err() == nil {
			if err == nil {
				err = errors.New("stopped unexpectedly")
			}
			d.failed <- failure{name, err}
		}
	}()
}

// wait runs until a signal or a part that failed for good, and answers the
// failure (nil after a signal). From then on the daemon is not ready, and a
// second signal ends the process at once.
func (d *daemon) wait() error {
	var runErr error
	select {
	case s, ok := <-d.signals:
		// Not ready from the first signal on: a load balancer or Kubernetes
		// stops sending before the inputs are even cancelled.
		d.stopping.Store(true)
		d.notify.stopping()
		name := "none (the signal channel was closed)"
		if ok {
			name = s.String()
		}
		d.log.Info().Str("signal", name).Dur("budget", d.cfg.StopTimeout).
			Msg("stopping: no new deliveries; finishing in-flight ones, then flushing the outbox (a second signal exits at once)")
	case f := <-d.failed:
		runErr = fmt.Errorf("%s: %w", f.name, f.err)
		d.log.Error().Err(runErr).Msg("stopping after a failure")
		d.stopping.Store(true)
		d.notify.stopping()
	}
	d.metrics.stopping.Set(1)
	go func() {
		if s, ok := <-d.signals; ok {
			d.log.Warn().Str("signal", s.String()).Msg("second signal: exiting at once")
			d.exit(1)
		}
	}()
	return runErr
}

// shutdown is the one way out of run: it stops, in reverse order of the
// start, whatever runs, within STOP_TIMEOUT, and answers runErr, or the
// first error of the stop itself. Every wait is bounded by the stop's
// deadline but the outbox's close, which must finish for what the outbox
// holds to be kept: the inputs get STOP_TIMEOUT - FLUSH_TIMEOUT (their
// broker connections' closes included, stopBounds), the sender's flush
// FLUSH_TIMEOUT, and what remains of the budget the rest; a part that does
// not stop in time is logged and left behind, with nothing acknowledged
// that is not committed.
func (d *daemon) shutdown(runErr error) error {
	stopCtx, cancelStop := context.WithTimeout(context.Background(), d.cfg.StopTimeout)
	defer cancelStop()

	// Stop the inputs (basic.cancel, in-flight deliveries committed then
	// acked) and the control link.
	if d.stopInputs != nil {
		d.stopInputs()
		inputsBudget := d.cfg.StopTimeout - d.cfg.FlushTimeout
		if !waitGroupWithin(stopCtx, &d.inputs, inputsBudget) {
			d.log.Error().Dur("waited", inputsBudget).Msg("inputs did not stop in time; unacknowledged deliveries return to the queue")
			if runErr == nil {
				runErr = errors.New("inputs did not stop within the stop budget")
			}
		} else {
			d.log.Info().Msg("inputs stopped; every delivery taken was committed and acknowledged")
		}
	}
	if d.channel != nil { // bound, never run
		_ = d.channel.Close(stopCtx)
	}

	// Let the sender flush what the outbox holds, for a bounded time.
	if d.stopSender != nil {
		d.stopSender()
		select {
		case <-d.senderDone:
		case <-stopCtx.Done():
			// Never seen: Run returns once its request in flight ends,
			// which its context bounds. Flushing beside it would send twice.
			d.log.Error().Msg("the sender did not stop within the stop budget; the outbox is not flushed")
			if runErr == nil {
				runErr = errors.New("the sender did not stop within the stop budget")
			}
			d.stopSender = nil
		}
	}
	if d.stopSender != nil {
		flushCtx, cancelFlush := context.WithTimeout(stopCtx, d.cfg.FlushTimeout)
		if err := d.p.sender.Flush(flushCtx); err != nil {
			d.log.Warn().Err(err).Int64("left_in_outbox", d.p.outbox.Depth()).Msg("flush incomplete; the rest is sent after the next start")
		} else {
			d.log.Info().Int64("left_in_outbox", d.p.outbox.Depth()).Msg("flushed")
		}
		cancelFlush()
	}

	if d.stopBackground != nil {
		d.stopBackground()
		if !waitGroupWithin(stopCtx, &d.background, d.cfg.StopTimeout) {
			d.log.Error().Msg("background work (samplers, the drop-in watch) did not stop within the stop budget")
		}
	}
	d.shutdownHTTP(stopCtx)
	d.closeMappers(stopCtx)
	if err := d.closeOutbox(); err != nil && runErr == nil {
		runErr = err
	}
	if d.stopHeartbeat != nil {
		d.stopHeartbeat()
	}
	if runErr == nil {
		d.log.Info().Msg("stopped")
	}
	return runErr
}

func (d *daemon) stoppingCheck() error {
	if d.stopping.Load() {
		return errors.New("stopping")
	}
	return nil
}

// sampleReady keeps tally_collector_ready current between probes.
func (d *daemon) sampleReady(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		if _, err := d.probes.readyErr(); err == nil {
			d.metrics.ready.Set(1)
		} else {
			d.metrics.ready.Set(0)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// listen starts the HTTP server on HTTP_ADDR, within HTTP_MAX_CONNECTIONS
// (httplimit.go), and, with DEBUG_PPROF, the profiler's on DEBUG_PPROF_ADDR
// (loopback only, checked with the settings). Both put every route but the
// probes and the metrics behind one controlAuth.
func (d *daemon) listen(control http.Handler) error {
	tok, err := controlToken(d.cfg, component(d.base, "http"))
	if err != nil {
		return fmt.Errorf("control token: %w", err)
	}
	loopback := settings.IsLoopbackAddr(d.cfg.HTTPAddr)
	guard, err := newControlAuth(tok, loopback, component(d.base, "http"), d.reg)
	if err != nil {
		return err
	}
	switch {
	case tok == nil && loopback:
		d.log.Warn().Str("http_addr", d.cfg.HTTPAddr).
			Msg("no control token: the mapper, dead-letter and replay routes are open to every process of this host; set TALLY_OSC_CONTROL_TOKEN_FILE where other users or containers share it")
	case tok == nil:
		d.log.Warn().Str("http_addr", d.cfg.HTTPAddr).
			Msg("no control token and a listener beyond loopback: only /livez, /readyz and /metrics answer; set TALLY_OSC_CONTROL_TOKEN_FILE to use the control commands")
	}
	ln, err := net.Listen("tcp", d.cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", d.cfg.HTTPAddr, err)
	}
	lim, err := newConnLimit(ln, d.cfg.HTTPMaxConnections, component(d.base, "http"), d.reg)
	if err != nil {
		_ = ln.Close()
		return err
	}
	d.ln = lim
	d.srv = newHTTPServer(lim.serveLimited(newMux(d.probes, d.reg, guard, control)), 60*time.Second)
	d.srv.ConnState = lim.connState
	d.serve(d.srv, lim)
	if d.cfg.DebugPprof {
		pln, err := net.Listen("tcp", d.cfg.DebugPprofAddr)
		if err != nil {
			d.shutdownHTTP(context.Background())
			return fmt.Errorf("listen on %s (DEBUG_PPROF_ADDR): %w", d.cfg.DebugPprofAddr, err)
		}
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		d.pprofSrv = newHTTPServer(guard.wrap(mux), 90*time.Second) // a CPU profile takes 30 s
		d.serve(d.pprofSrv, pln)
		d.log.Info().Str("addr", pln.Addr().String()).Msg("profiler listening")
	}
	return nil
}

func newHTTPServer(h http.Handler, write time.Duration) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      write,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
}

func (d *daemon) serve(srv *http.Server, ln net.Listener) {
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			d.log.Error().Err(err).Msg("http server")
		}
	}()
}

// shutdownHTTP closes the listeners and waits, for at most 2s and not past
// ctx's deadline, for the requests being answered.
func (d *daemon) shutdownHTTP(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	for _, srv := range []*http.Server{d.srv, d.pprofSrv} {
		if srv != nil {
			_ = srv.Shutdown(ctx)
		}
	}
}

func (d *daemon) closeMappers(ctx context.Context) {
	if d.p.mappers == nil {
		return
	}
	if err := d.p.mappers.Close(ctx); err != nil {
		d.log.Warn().Err(err).Msg("close mappers")
	}
}

func (d *daemon) closeOutbox() error {
	if d.p.outbox == nil {
		return nil
	}
	if err := d.p.outbox.Close(); err != nil {
		d.log.Error().Err(err).Msg("close outbox")
		return fmt.Errorf("close outbox: %w", err)
	}
	d.log.Info().Msg("outbox closed")
	return nil
}

// waitGroupWithin waits for wg for at most d and not past ctx's end, and
// answers whether it finished.
func waitGroupWithin(ctx context.Context, wg *sync.WaitGroup, d time.Duration) bool {
	c := make(chan struct{})
	go func() { wg.Wait(); close(c) }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-c:
		return true
	case <-t.C:
		return false
	case <-ctx.Done():
		return false
	}
}

func (p *probes) setReady(name string, f func() error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ready[name] = f
}

func sortedKeys(m map[string]func() error) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
