package cli

// The local message channel's commands: publish and tap, clients of a
// running daemon's channel socket (docs/channel.md).

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/tally-billing/tally-openstack-collector/cmd/tally-openstack-collector/internal/settings"
	"github.com/tally-billing/tally-openstack-collector/runtime/input/channel/client"
	"github.com/tally-billing/tally-openstack-collector/runtime/input/channel/wire"
)

const publishUsage = `Usage: tally-openstack-collector publish [--channel SOCKET] [--type STRING|JSON] [--perm 0440] [--no-wait] TAG [FILE...]

Hands messages to the running daemon over its local message channel
(docs/channel.md): one message per line of the FILEs, or of stdin without
any; empty lines are skipped. The TAG routes them to a mapper module (the
built-in one takes usage and usage.*). Waits for the daemon when it is not
there yet, and sends again what a restarting daemon did not answer.

Exit 0 once the daemon has committed every message; 1 when a message was
refused, skipped or dead-lettered (each is reported on stderr with its line),
or the command was interrupted first; 2 on a usage or I/O error. With
--no-wait it returns once every message is written to the socket, without
waiting for the answers.

Flags:
`

const tapUsage = `Usage: tally-openstack-collector tap [--channel SOCKET] [--raw] REGEX

Prints, one JSON line each, the events the running daemon commits whose
event_type matches REGEX (Go syntax, unanchored), from the bus and from the
channel, as long as the caller's credentials may see them. With --raw, the
notifications (or channel messages) they were made of instead, redacted as
--dump redacts them. Waits for the daemon when it is not there, follows it
across restarts, runs until interrupted. A tap that does not keep up loses
events; how many is reported on stderr.

Flags:
`

// channelFlags are --channel and the channel settings; the other settings
// are hidden.
func channelFlags(name string) *pflag.FlagSet {
	return shortFlags(name, settings.ModeChannel, "channel", "channel_socket", "the daemon's channel socket (TALLY_OSC_CHANNEL_SOCKET)")
}

// channelSetup parses the command line and the settings; code >= 0 means
// exit with it.
func channelSetup(fs *pflag.FlagSet, usage string, args, environ []string, stdout, stderr io.Writer) (*settings.Config, int) {
	if code := parseFlags(fs, usage, args, stdout, stderr); code >= 0 {
		return nil, code
	}
	takeShortFlag(fs, "channel", "channel_socket")
	cfg, err := settings.Load(fs, environ, settings.ModeChannel)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return nil, 2
	}
	if cfg.ChannelSocket == "" {
		fmt.Fprintf(stderr, "%s: no channel socket: give --channel or set %sCHANNEL_SOCKET as the daemon has it\n", fs.Name(), settings.EnvPrefix)
		return nil, 2
	}
	return cfg, -1
}

// noticeWaiting tells the user, once, when the daemon has not answered after
// a few seconds.
func noticeWaiting(ctx context.Context, c *client.Client, name, sock string, stderr io.Writer) {
	t := time.NewTimer(3 * time.Second)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
		if st := c.State(); st != client.StateConnected && st != client.StateClosed {
			why := ""
			if err := c.LastError(); err != nil {
				why = " (" + err.Error() + ")"
			}
			fmt.Fprintf(stderr, "%s: waiting for the daemon at %s%s\n", name, sock, why)
		}
	}
}

// position is where a published message came from.
type position struct {
	file string
	line int
}

func runPublish(args, environ []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := channelFlags("publish")
	fs.String("type", "JSON", "message type: STRING or JSON")
	fs.String("perm", "0440", "who may see the messages and their events on a tap: octal read bits, as a file's")
	fs.Bool("no-wait", false, "return once the messages are written to the socket; do not wait for the daemon's answers")
	cfg, code := channelSetup(fs, publishUsage, args, environ, stdout, stderr)
	if code >= 0 {
		return code
	}
	if fs.NArg() < 1 {
		fmt.Fprintf(stderr, "publish: a TAG is required (try --help)\n")
		return 2
	}
	tag := fs.Arg(0)
	typeName, _ := fs.GetString("type")
	typ, ok := wire.ParseType(typeName)
	if !ok {
		fmt.Fprintf(stderr, "publish: --type %q is neither STRING nor JSON\n", typeName)
		return 2
	}
	permText, _ := fs.GetString("perm")
	perm, err := strconv.ParseUint(permText, 8, 32)
	if err != nil || perm > 0o777 || perm == 0 {
		fmt.Fprintf(stderr, "publish: --perm %q is not an octal mode between 0001 and 0777\n", permText)
		return 2
	}
	noWait, _ := fs.GetBool("no-wait")

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var mu sync.Mutex
	var failures []client.Settlement
	c, err := client.New(client.Options{
		Socket: cfg.ChannelSocket, Mode: client.ModePublish, Name: "publish",
		QueueLimitBytes: int(cfg.ChannelQueueLimitBytes),
		OnSettled: func(s client.Settlement) {
			if s.Status != wire.Committed {
				mu.Lock()
				failures = append(failures, s)
				mu.Unlock()
			}
		},
	})
	if err != nil {
		fmt.Fprintf(stderr, "publish: %v\n", err)
		return 2
	}
	waitCtx, stopNotice := context.WithCancel(ctx)
	defer stopNotice()
	go noticeWaiting(waitCtx, c, "publish", cfg.ChannelSocket, stderr)

	at := map[uint64]position{}
	published, local := 0, 0
	publishFile := func(name string, r io.Reader) error {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), wire.MaxData+2)
		n := 0
		for sc.Scan() {
			n++
			line := sc.Bytes()
			if len(line) > 0 && line[len(line)-1] == '\r' {
				line = line[:len(line)-1]
			}
			if len(line) == 0 {
				continue
			}
			seq, err := c.PublishWait(ctx, client.Message{Tag: tag, Type: typ, Data: line, Perm: uint32(perm)}) //nolint:gosec // G115: perm was parsed with bitSize 32
			switch {
			case errors.Is(err, client.ErrInvalid), errors.Is(err, client.ErrTooLarge):
				// Refused before sending, as the daemon would refuse it.
				fmt.Fprintf(stderr, "publish: %s:%d: %v\n", name, n, err)
				local++
				continue
			case err != nil:
				return err
			}
			at[seq] = position{name, n}
			published++
		}
		if errors.Is(sc.Err(), bufio.ErrTooLong) {
			return fmt.Errorf("%s:%d: a line longer than %d bytes", name, n+1, wire.MaxData)
		}
		return sc.Err()
	}
	var readErr error
	if fs.NArg() == 1 {
		readErr = publishFile("stdin", stdin)
	}
	for _, name := range fs.Args()[1:] {
		if readErr != nil {
			break
		}
		f, err := os.Open(name)
		if err != nil {
			readErr = err
			break
		}
		readErr = publishFile(name, f)
		_ = f.Close() // read only: everything read is published or failed already
	}
	if readErr != nil && ctx.Err() == nil {
		_ = c.Close(context.Background(), true)
		fmt.Fprintf(stderr, "publish: %v\n", readErr)
		return 2
	}

	if noWait {
		err := c.WaitSent(ctx)
		_ = c.Close(context.Background(), true)
		if err != nil {
			fmt.Fprintf(stderr, "publish: interrupted before every message was written to the socket\n")
			return 1
		}
		fmt.Fprintf(stderr, "publish: %d messages written to the socket (not waiting for the daemon's answers)\n", published)
		if local > 0 {
			return 1
		}
		return 0
	}
	// Flush waits for OnSettled too, so that every failure is listed below.
	if err := errors.Join(c.Flush(ctx), c.Close(ctx, false)); err != nil {
		st := c.Stats()
		fmt.Fprintf(stderr, "publish: interrupted: %d of %d messages not answered by the daemon\n", st.Dropped, published)
		return 1
	}
	mu.Lock()
	defer mu.Unlock()
	sort.Slice(failures, func(i, j int) bool { return failures[i].Seq < failures[j].Seq })
	for _, f := range failures {
		p := at[f.Seq]
		fmt.Fprintf(stderr, "publish: %s:%d: %s %s\n", p.file, p.line, f.Status, f.Reason)
	}
	fmt.Fprintf(stderr, "publish: %d messages, %d committed\n", published+local, published-len(failures))
	if len(failures) > 0 || local > 0 {
		return 1
	}
	return 0
}

func runTap(args, environ []string, stdout, stderr io.Writer) int {
	fs := channelFlags("tap")
	fs.Bool("raw", false, "the redacted notifications the events came from, instead of the events")
	cfg, code := channelSetup(fs, tapUsage, args, environ, stdout, stderr)
	if code >= 0 {
		return code
	}
	if fs.NArg() != 1 {
		fmt.Fprintf(stderr, "tap: one REGEX is required (try --help)\n")
		return 2
	}
	raw, _ := fs.GetBool("raw")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// An output that cannot be written ends the tap, the write's error its
	// cause: it does not go on taking events it cannot show.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	c, err := client.New(client.Options{
		Socket: cfg.ChannelSocket, Mode: client.ModeSubscribe, Name: "tap",
	})
	if err != nil {
		fmt.Fprintf(stderr, "tap: %v\n", err)
		return 2
	}
	defer func() { _ = c.Close(context.Background(), true) }() // a tap sends nothing: nothing to lose
	out := bufio.NewWriter(stdout)
	var last, lastMissed uint64
	sub, err := c.Subscribe(fs.Arg(0), raw, func(d client.Delivery) {
		// The daemon's count is per connection: it starts again after a
		// reconnect. Missed counts what the client itself dropped.
		if d.Dropped < last {
			last = 0
		}
		if d.Dropped > last || d.Missed > lastMissed {
			fmt.Fprintf(stderr, "tap: %d events missed: the tap did not keep up\n", d.Dropped-last+d.Missed-lastMissed)
			last, lastMissed = d.Dropped, d.Missed
		}
		if ctx.Err() != nil {
			return
		}
		out.Write(d.Data)
		out.WriteByte('\n')
		if err := out.Flush(); err != nil {
			cancel(fmt.Errorf("write: %w", err))
		}
	})
	if err != nil {
		fmt.Fprintf(stderr, "tap: %v\n", err)
		return 2
	}
	go noticeWaiting(ctx, c, "tap", cfg.ChannelSocket, stderr)
	if err := sub.Wait(ctx); err != nil && ctx.Err() == nil {
		fmt.Fprintf(stderr, "tap: %v\n", err)
		return 2
	}
	<-ctx.Done()
	if cause := context.Cause(ctx); !errors.Is(cause, context.Canceled) {
		fmt.Fprintf(stderr, "tap: %v\n", cause)
		return 1
	}
	return 0
}
