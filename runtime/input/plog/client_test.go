package plog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"time"
)

// DefaultFragmentSize is the payload a Client puts in each UDP fragment: small
// enough that a fragment plus headers fits an Ethernet frame.
const DefaultFragmentSize = 1400

// Client sends messages to a plog listener. It is written from the protocol
// description and lives in the tests, which send with it: a sender needs no
// library of this repository (docs/plog.md, "A client"). It is safe for
// concurrent use.
type Client struct {
	conn net.Conn
	udp  bool
	// FragmentSize is the payload of each UDP fragment; set before the first
	// Send. Default DefaultFragmentSize.
	FragmentSize int

	mu  sync.Mutex
	id  uint32
	buf []byte
}

// Dial connects a client to a listener: network is "udp" or "tcp".
func Dial(network, address string) (*Client, error) {
	if network != UDP && network != TCP {
		return nil, fmt.Errorf("%w: network %q", ErrInvalidOptions, network)
	}
	c, err := net.Dial(network, address)
	if err != nil {
		return nil, fmt.Errorf("plog: dial: %w", err)
	}
	return &Client{conn: c, udp: network == UDP, id: rand.Uint32()}, nil //nolint:gosec // G404: a client id tells concurrent senders apart, it guards nothing
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// LocalAddr is the client's address (its port is half of each message id).
func (c *Client) LocalAddr() net.Addr { return c.conn.LocalAddr() }

// Send sends one message. Over UDP it is a version 0 fragmented message (one
// fragment when it fits) with its tags on the last fragment; over TCP it is one
// line, so it must hold no newline, and with tags a line of the \0 protocol
// (\0 tags \0\0 message).
func (c *Client) Send(payload []byte, tags ...string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.udp {
		if bytes.IndexByte(payload, '\n') >= 0 {
			return fmt.Errorf("%w: a tcp message cannot hold a newline", ErrInvalidOptions)
		}
		c.buf = c.buf[:0]
		if len(tags) > 0 {
			// The \0 protocol: \0 tags \0\0 message.
			if len(payload) == 0 {
				return fmt.Errorf("%w: a tagged tcp message cannot be empty", ErrInvalidOptions)
			}
			c.buf = append(c.buf, 0)
			for i, t := range tags {
				if t == "" || strings.ContainsAny(t, "\x00\n") {
					return fmt.Errorf("%w: tag %q", ErrInvalidOptions, t)
				}
				if i > 0 {
					c.buf = append(c.buf, 0)
				}
				c.buf = append(c.buf, t...)
			}
			c.buf = append(c.buf, 0, 0)
		} else if len(payload) > 0 && payload[0] == 0 {
			return fmt.Errorf("%w: a tcp message cannot start with \\0", ErrInvalidOptions)
		}
		c.buf = append(append(c.buf, payload...), '\n')
		_, err := c.conn.Write(c.buf)
		return err
	}
	size := c.FragmentSize
	if size <= 0 {
		size = DefaultFragmentSize
	}
	c.id++
	frags, err := Fragments(c.id, payload, tags, size)
	if err != nil {
		return err
	}
	for _, f := range frags {
		if _, err := c.conn.Write(f); err != nil {
			return fmt.Errorf("plog: send: %w", err)
		}
	}
	return nil
}

// SendUnboxed sends payload as one unboxed datagram (UDP only). Its first byte
// must be outside 0-31.
func (c *Client) SendUnboxed(payload []byte) error {
	if !c.udp || len(payload) == 0 || payload[0] <= 31 {
		return fmt.Errorf("%w: unboxed needs udp and a first byte above 31", ErrInvalidOptions)
	}
	_, err := c.conn.Write(payload)
	return err
}

// Command sends a version 0 command (four letters, e.g. "PING", "STAT") with an
// optional payload and returns the answer, waiting until ctx is done (UDP only).
func (c *Client) Command(ctx context.Context, name string, payload []byte) ([]byte, error) {
	if !c.udp || len(name) != 4 {
		return nil, fmt.Errorf("%w: a command is four letters over udp", ErrInvalidOptions)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	pkt := append(append([]byte{0, packetCommand}, name...), payload...)
	if _, err := c.conn.Write(pkt); err != nil {
		return nil, fmt.Errorf("plog: command: %w", err)
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(5 * time.Second)
	}
	_ = c.conn.SetReadDeadline(deadline)
	defer func() { _ = c.conn.SetReadDeadline(time.Time{}) }() // the next call sets its own
	buf := make([]byte, maxDatagram)
	n, err := c.conn.Read(buf)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil, fmt.Errorf("plog: command %s: no answer: %w", name, context.DeadlineExceeded)
		}
		return nil, fmt.Errorf("plog: command %s: %w", name, err)
	}
	return buf[:n], nil
}
