package wire

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Version is the protocol version this codec speaks, carried by every frame.
const Version = 1

// Limits of the protocol. MaxData leaves room under the collector's 1 MiB
// body bound for the envelope the daemon wraps a message in.
const (
	MaxData       = 1<<20 - 4<<10 // bytes of one message's data
	MaxTag        = 255           // bytes of a tag
	MaxRegex      = 1024          // bytes of a subscription's expression
	MaxName       = 255           // bytes of a client's name
	MaxFrame      = MaxData + 4<<10
	headerLen     = 4 + 2 // length, version, type
	ackEntryFixed = 8 + 1 + 1
)

// FrameType says what a frame carries.
type FrameType uint8

// Frame types. C→S: client to daemon; S→C: daemon to client.
const (
	FrameHello       FrameType = 1  // C→S, first frame of a connection
	FrameWelcome     FrameType = 2  // S→C, answer to Hello
	FramePublish     FrameType = 3  // C→S, one message
	FrameAck         FrameType = 4  // S→C, settles published messages
	FrameSubscribe   FrameType = 5  // C→S
	FrameUnsubscribe FrameType = 6  // C→S
	FrameSubStatus   FrameType = 7  // S→C, answer to Subscribe
	FrameDeliver     FrameType = 8  // S→C, one message for the subscriptions it matches
	FrameError       FrameType = 9  // S→C, fatal; the daemon closes the connection after it
	FrameUnsubStatus FrameType = 10 // S→C, answer to Unsubscribe
	FramePing        FrameType = 11 // C→S, keeps an idle connection open; not answered
)

var frameNames = [...]string{
	FrameHello: "HELLO", FrameWelcome: "WELCOME", FramePublish: "PUBLISH", FrameAck: "ACK",
	FrameSubscribe: "SUBSCRIBE", FrameUnsubscribe: "UNSUBSCRIBE", FrameSubStatus: "SUB_STATUS",
	FrameDeliver: "DELIVER", FrameError: "ERROR", FrameUnsubStatus: "UNSUB_STATUS", FramePing: "PING",
}

func (f FrameType) String() string { return spell(frameNames[:], f, "frame") }

// spell is the name of an enumeration's value v in names, or kind(v) for a
// value names does not spell.
func spell[T ~uint8](names []string, v T, kind string) string {
	if int(v) < len(names) && names[v] != "" {
		return names[v]
	}
	return fmt.Sprintf("%s(%d)", kind, uint8(v))
}

// Type is the type of a message's data.
type Type uint8

const (
	// String data: any bytes (UTF-8 text by convention).
	String Type = 1
	// JSON data: one JSON value; the daemon refuses data that does not parse.
	JSON Type = 2
)

var typeNames = [...]string{String: "STRING", JSON: "JSON"}

func (t Type) String() string { return spell(typeNames[:], t, "type") }

// ParseType reads "STRING" or "JSON" (any letter case).
func ParseType(s string) (Type, bool) {
	switch {
	case equalFold(s, "STRING"):
		return String, true
	case equalFold(s, "JSON"):
		return JSON, true
	}
	return 0, false
}

func equalFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		c := a[i]
		if c >= 'a' && c <= 'z' {
			c -= 'a' - 'A'
		}
		if c != b[i] {
			return false
		}
	}
	return true
}

// Modes a client announces in Hello (bits).
const (
	ModePublish   uint8 = 1
	ModeSubscribe uint8 = 2
)

// Status settles a published message (Ack). Every status is final: the
// client never sends the message again.
type Status uint8

const (
	// Committed: the message's events (zero or more) are durably in the
	// daemon's outbox.
	Committed Status = 0
	// DeadLettered: the mapper failed on the message; it is durably in the
	// dead-letter area, from where it can be replayed.
	DeadLettered Status = 1
	// Skipped: there was nothing to commit; the reason says why (unclaimed:
	// no module claims the tag, event_too_large, body_too_large ...).
	Skipped Status = 2
	// Refused: the channel dropped the message; the reason says why
	// (credentials, invalid_type, invalid_json, invalid_tag, too_large).
	Refused Status = 3
)

var statusNames = [...]string{Committed: "committed", DeadLettered: "dead_lettered", Skipped: "skipped", Refused: "refused"}

func (s Status) String() string { return spell(statusNames[:], s, "status") }

// Hello opens a connection.
type Hello struct {
	Modes uint8  // ModePublish | ModeSubscribe
	Name  string // the client's name, for the daemon's log; at most MaxName bytes
}

// Welcome answers Hello.
type Welcome struct {
	MaxData uint32 // the largest message data the daemon accepts
	// UID and GID are the credentials the daemon read from the socket
	// (SO_PEERCRED): what a message published without impersonation carries.
	UID, GID uint32
	// IdleTimeoutMillis is how long the daemon waits for the next frame
	// before it closes the connection; a client sends PING when it has had
	// nothing to send for part of it. 0: no bound (a daemon of an earlier
	// revision, which does not send the field).
	IdleTimeoutMillis uint32
}

// Publish is one message.
type Publish struct {
	Seq uint64 // chosen by the client, unique on the connection; echoed in the Ack
	// PublishedAt is the time of the publish call, Unix nanoseconds, kept
	// across resends (0: unknown, the daemon uses the time of receipt).
	PublishedAt int64
	UID, GID    uint32
	Perm        uint32 // permission bits, as a file's: 0440 = owner and group may read
	Type        Type
	Tag         []byte // routes the message; 1..MaxTag bytes
	Data        []byte // at most MaxData bytes
}

// AckEntry settles one message.
type AckEntry struct {
	Seq    uint64
	Status Status
	Reason string // at most 255 bytes; empty for Committed
}

// Subscribe asks for the messages whose tag matches Regex (Go regular
// expression syntax, unanchored), or equals it when Exact is set.
type Subscribe struct {
	ID    uint32 // chosen by the client; Deliver names the subscriptions it matches
	Raw   bool   // raw notifications instead of mapped events
	Regex string
	Exact bool // Regex is a name compared byte for byte, not an expression
}

// SubStatus answers Subscribe (FrameSubStatus) and Unsubscribe
// (FrameUnsubStatus, where OK false means the id was not subscribed).
type SubStatus struct {
	ID   uint32
	OK   bool
	Text string // why a subscription was refused
}

// Deliver carries one message to a subscriber.
type Deliver struct {
	// Dropped counts the messages this connection missed so far because it
	// did not read fast enough.
	Dropped  uint64
	Raw      bool
	Type     Type
	UID, GID uint32
	Perm     uint32
	Origin   string   // "amqp" or "channel"
	Tag      []byte   // the event type (of the mapped event, or of the notification)
	Subs     []uint32 // the subscriptions it matched
	Data     []byte
	// PID is the publisher's process id as the kernel reported it on its
	// connection (SO_PEERCRED); 0 for what came from the bus, or from a
	// daemon of an earlier revision (which does not send the field).
	PID uint32
}

// --- encoding ---------------------------------------------------------------

func begin(dst []byte, t FrameType) ([]byte, int) {
	at := len(dst)
	dst = append(dst, 0, 0, 0, 0, Version, byte(t))
	return dst, at
}

func end(dst []byte, at int) []byte {
	binary.BigEndian.PutUint32(dst[at:], uint32(len(dst)-at-4)) //nolint:gosec // G115: a frame is bounded by the reader's maximum, below 4 GiB
	return dst
}

func appendStr8(dst []byte, s string) []byte {
	if len(s) > 255 {
		s = s[:255]
	}
	dst = append(dst, byte(len(s))) //nolint:gosec // G115: cut to 255 above
	return append(dst, s...)
}

func appendStr16(dst []byte, s []byte) []byte {
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(s))) //nolint:gosec // G115: the callers trim names and tags to MaxName and MaxTag, below 65536
	return append(dst, s...)
}

// AppendHello appends a Hello frame.
func AppendHello(dst []byte, h Hello) []byte {
	dst, at := begin(dst, FrameHello)
	dst = append(dst, h.Modes)
	dst = appendStr16(dst, []byte(trim(h.Name, MaxName)))
	return end(dst, at)
}

// AppendWelcome appends a Welcome frame.
func AppendWelcome(dst []byte, w Welcome) []byte {
	dst, at := begin(dst, FrameWelcome)
	dst = binary.BigEndian.AppendUint32(dst, w.MaxData)
	dst = binary.BigEndian.AppendUint32(dst, w.UID)
	dst = binary.BigEndian.AppendUint32(dst, w.GID)
	dst = binary.BigEndian.AppendUint32(dst, w.IdleTimeoutMillis)
	return end(dst, at)
}

// AppendPublish appends a Publish frame. The caller keeps Tag and Data
// within their bounds (the daemon refuses the message otherwise).
func AppendPublish(dst []byte, p *Publish) []byte {
	dst, at := begin(dst, FramePublish)
	dst = binary.BigEndian.AppendUint64(dst, p.Seq)
	dst = binary.BigEndian.AppendUint64(dst, uint64(p.PublishedAt))
	dst = binary.BigEndian.AppendUint32(dst, p.UID)
	dst = binary.BigEndian.AppendUint32(dst, p.GID)
	dst = binary.BigEndian.AppendUint32(dst, p.Perm)
	dst = append(dst, byte(p.Type))
	dst = appendStr16(dst, p.Tag)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(p.Data))) //nolint:gosec // G115: Data is kept within MaxData by the caller (documented above)
	dst = append(dst, p.Data...)
	return end(dst, at)
}

// AppendAck appends one Ack frame settling every entry.
func AppendAck(dst []byte, entries []AckEntry) []byte {
	dst, at := begin(dst, FrameAck)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(entries))) //nolint:gosec // G115: one Ack settles at most a window of entries, far below 4 G
	for _, e := range entries {
		dst = binary.BigEndian.AppendUint64(dst, e.Seq)
		dst = append(dst, byte(e.Status))
		dst = appendStr8(dst, e.Reason)
	}
	return end(dst, at)
}

// AppendSubscribe appends a Subscribe frame.
func AppendSubscribe(dst []byte, s Subscribe) []byte {
	dst, at := begin(dst, FrameSubscribe)
	dst = binary.BigEndian.AppendUint32(dst, s.ID)
	var flags byte
	if s.Raw {
		flags |= 1
	}
	if s.Exact {
		flags |= 2
	}
	dst = append(dst, flags)
	dst = appendStr16(dst, []byte(s.Regex))
	return end(dst, at)
}

// AppendUnsubscribe appends an Unsubscribe frame.
func AppendUnsubscribe(dst []byte, id uint32) []byte {
	dst, at := begin(dst, FrameUnsubscribe)
	dst = binary.BigEndian.AppendUint32(dst, id)
	return end(dst, at)
}

// AppendSubStatus appends a SubStatus frame.
func AppendSubStatus(dst []byte, s SubStatus) []byte {
	return appendStatus(dst, FrameSubStatus, s)
}

// AppendUnsubStatus appends an UnsubStatus frame (the layout of SubStatus).
func AppendUnsubStatus(dst []byte, s SubStatus) []byte {
	return appendStatus(dst, FrameUnsubStatus, s)
}

// AppendPing appends a Ping frame (no payload).
func AppendPing(dst []byte) []byte {
	dst, at := begin(dst, FramePing)
	return end(dst, at)
}

func appendStatus(dst []byte, t FrameType, s SubStatus) []byte {
	dst, at := begin(dst, t)
	dst = binary.BigEndian.AppendUint32(dst, s.ID)
	if s.OK {
		dst = append(dst, 0)
	} else {
		dst = append(dst, 1)
	}
	dst = appendStr16(dst, []byte(trim(s.Text, 4096)))
	return end(dst, at)
}

// AppendDeliver appends a Deliver frame.
func AppendDeliver(dst []byte, d *Deliver) []byte {
	dst, at := begin(dst, FrameDeliver)
	dst = binary.BigEndian.AppendUint64(dst, d.Dropped)
	var flags byte
	if d.Raw {
		flags |= 1
	}
	dst = append(dst, flags, byte(d.Type))
	dst = binary.BigEndian.AppendUint32(dst, d.UID)
	dst = binary.BigEndian.AppendUint32(dst, d.GID)
	dst = binary.BigEndian.AppendUint32(dst, d.Perm)
	dst = appendStr8(dst, d.Origin)
	dst = appendStr16(dst, d.Tag)
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(d.Subs))) //nolint:gosec // G115: a subscriber's subscriptions are bounded by the protocol's uint16 count
	for _, s := range d.Subs {
		dst = binary.BigEndian.AppendUint32(dst, s)
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(d.Data))) //nolint:gosec // G115: Data within MaxData, as for Publish
	dst = append(dst, d.Data...)
	dst = binary.BigEndian.AppendUint32(dst, d.PID)
	return end(dst, at)
}

// AppendError appends an Error frame.
func AppendError(dst []byte, text string) []byte {
	dst, at := begin(dst, FrameError)
	dst = appendStr16(dst, []byte(trim(text, 4096)))
	return end(dst, at)
}

func trim(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// --- decoding ---------------------------------------------------------------

// Reader reads frames from a stream. A frame's buffer grows with the bytes
// that arrive, never to the size its length field announces before they
// do; a buffer grown past keepBuffer is let go at the next call.
type Reader struct {
	r   *bufio.Reader
	max int
	buf []byte
}

const (
	// firstChunk is the buffer a frame starts with; it doubles as bytes
	// arrive, up to the frame's length.
	firstChunk = 4 << 10
	// keepBuffer is the largest buffer kept between frames.
	keepBuffer = 64 << 10
)

// NewReader reads frames of at most max bytes (MaxFrame when max <= 0).
func NewReader(r io.Reader, max int) *Reader {
	if max <= 0 {
		max = MaxFrame
	}
	return &Reader{r: bufio.NewReaderSize(r, 64<<10), max: max}
}

// Next reads one frame. The payload is valid until the next call. A frame of
// another version is answered with ErrVersion (and the frame type and
// payload as read, so the caller may report it); io.EOF at a frame boundary
// is returned as it is, a frame cut short as io.ErrUnexpectedEOF.
func (r *Reader) Next() (FrameType, []byte, error) {
	var hdr [headerLen]byte
	if _, err := io.ReadFull(r.r, hdr[:4]); err != nil {
		return 0, nil, err
	}
	n := int(binary.BigEndian.Uint32(hdr[:4]))
	if n < 2 {
		return 0, nil, fmt.Errorf("%w: length %d", ErrMalformed, n)
	}
	if n > r.max {
		return 0, nil, fmt.Errorf("%w: %d bytes, bound %d", ErrFrameTooLarge, n, r.max)
	}
	b, err := r.fill(n)
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, err
	}
	t := FrameType(b[1])
	if b[0] != Version {
		return t, b[2:], fmt.Errorf("%w: %d (this side speaks %d)", ErrVersion, b[0], Version)
	}
	return t, b[2:], nil
}

// fill reads n bytes into r.buf, growing it (doubling, from firstChunk) only
// as the bytes arrive: an announced length alone costs no memory.
func (r *Reader) fill(n int) ([]byte, error) {
	if cap(r.buf) > keepBuffer {
		r.buf = nil
	}
	b := r.buf[:0]
	for len(b) < n {
		if len(b) == cap(b) {
			grown := make([]byte, len(b), min(n, max(2*cap(b), firstChunk)))
			copy(grown, b)
			b = grown
			r.buf = b
		}
		m, err := io.ReadFull(r.r, b[len(b):min(n, cap(b))])
		b = b[:len(b)+m]
		if err != nil {
			if err == io.EOF && len(b) > 0 {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	return b, nil
}

// Buffered reports whether bytes are waiting in the reader's buffer: the
// next frame may be read without a system call.
func (r *Reader) Buffered() int { return r.r.Buffered() }

type dec struct {
	b   []byte
	bad bool
}

func (d *dec) take(n int) []byte {
	if d.bad || n > len(d.b) {
		d.bad = true
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *dec) u8() uint8 {
	if b := d.take(1); b != nil {
		return b[0]
	}
	return 0
}

func (d *dec) u16() uint16 {
	if b := d.take(2); b != nil {
		return binary.BigEndian.Uint16(b)
	}
	return 0
}

func (d *dec) u32() uint32 {
	if b := d.take(4); b != nil {
		return binary.BigEndian.Uint32(b)
	}
	return 0
}

func (d *dec) u64() uint64 {
	if b := d.take(8); b != nil {
		return binary.BigEndian.Uint64(b)
	}
	return 0
}

func (d *dec) bytes8() []byte  { return d.take(int(d.u8())) }
func (d *dec) bytes16() []byte { return d.take(int(d.u16())) }
func (d *dec) bytes32() []byte { return d.take(int(d.u32())) }

func (d *dec) err(t FrameType) error {
	if d.bad {
		return fmt.Errorf("%w: %s shorter than its fields", ErrMalformed, t)
	}
	return nil
}

// ParseHello decodes a Hello payload.
func ParseHello(p []byte) (Hello, error) {
	d := dec{b: p}
	h := Hello{Modes: d.u8(), Name: string(d.bytes16())}
	return h, d.err(FrameHello)
}

// ParseWelcome decodes a Welcome payload.
func ParseWelcome(p []byte) (Welcome, error) {
	d := dec{b: p}
	w := Welcome{MaxData: d.u32(), UID: d.u32(), GID: d.u32()}
	if len(d.b) > 0 { // absent in the earlier layout
		w.IdleTimeoutMillis = d.u32()
	}
	return w, d.err(FrameWelcome)
}

// ParsePublish decodes a Publish payload into p; Tag and Data alias the
// payload.
func ParsePublish(b []byte, p *Publish) error {
	d := dec{b: b}
	p.Seq = d.u64()
	p.PublishedAt = int64(d.u64())
	p.UID = d.u32()
	p.GID = d.u32()
	p.Perm = d.u32()
	p.Type = Type(d.u8())
	p.Tag = d.bytes16()
	p.Data = d.bytes32()
	return d.err(FramePublish)
}

// ParseAck decodes an Ack payload, appending its entries to dst.
func ParseAck(b []byte, dst []AckEntry) ([]AckEntry, error) {
	d := dec{b: b}
	n := int(d.u32())
	if n > len(b)/ackEntryFixed {
		return dst, fmt.Errorf("%w: ack of %d entries in %d bytes", ErrMalformed, n, len(b))
	}
	for range n {
		e := AckEntry{Seq: d.u64(), Status: Status(d.u8())}
		r := d.bytes8()
		if len(r) > 0 {
			e.Reason = string(r)
		}
		if d.bad {
			break
		}
		dst = append(dst, e)
	}
	return dst, d.err(FrameAck)
}

// ParseSubscribe decodes a Subscribe payload.
func ParseSubscribe(b []byte) (Subscribe, error) {
	d := dec{b: b}
	id := d.u32()
	flags := d.u8()
	s := Subscribe{ID: id, Raw: flags&1 != 0, Exact: flags&2 != 0, Regex: string(d.bytes16())}
	return s, d.err(FrameSubscribe)
}

// ParseUnsubscribe decodes an Unsubscribe payload.
func ParseUnsubscribe(b []byte) (uint32, error) {
	d := dec{b: b}
	id := d.u32()
	return id, d.err(FrameUnsubscribe)
}

// ParseSubStatus decodes a SubStatus or UnsubStatus payload.
func ParseSubStatus(b []byte) (SubStatus, error) {
	d := dec{b: b}
	s := SubStatus{ID: d.u32(), OK: d.u8() == 0, Text: string(d.bytes16())}
	return s, d.err(FrameSubStatus)
}

// ParseDeliver decodes a Deliver payload into dl; Tag and Data alias the
// payload, Subs is reused.
func ParseDeliver(b []byte, dl *Deliver) error {
	d := dec{b: b}
	dl.Dropped = d.u64()
	dl.Raw = d.u8()&1 != 0
	dl.Type = Type(d.u8())
	dl.UID = d.u32()
	dl.GID = d.u32()
	dl.Perm = d.u32()
	dl.Origin = string(d.bytes8())
	dl.Tag = d.bytes16()
	n := int(d.u16())
	dl.Subs = dl.Subs[:0]
	for i := 0; i < n && !d.bad; i++ {
		dl.Subs = append(dl.Subs, d.u32())
	}
	dl.Data = d.bytes32()
	dl.PID = 0
	if len(d.b) > 0 { // absent in the earlier layout; cut short is malformed
		dl.PID = d.u32()
	}
	return d.err(FrameDeliver)
}

// ParseError decodes an Error payload.
func ParseError(b []byte) (string, error) {
	d := dec{b: b}
	s := string(d.bytes16())
	return s, d.err(FrameError)
}
