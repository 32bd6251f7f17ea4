package broker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/tally-billing/tally-openstack-collector/internal/redact"
	"github.com/tally-billing/tally-openstack-collector/runtime/pipeline"
)

// unparseableCut is how many bytes of a body the dump prints under
// "unparseable", after redaction.
const unparseableCut = 512

// Dump prints what the broker carries on the listed exchanges, one JSON line
// per delivery on w, until ctx is done (then it returns nil) or the connection
// is lost (then it returns the error). It uses only the AMQP fields of opts.
//
// It consumes through a server-named, exclusive, auto-deleting queue with
// automatic acknowledgement, bound with the same keys as the collector's queue,
// so it sees a copy and takes nothing from the durable queue or from any other
// consumer; an interrupted dump leaves no queue behind.
//
// A line is the notification itself, with "exchange" and "routing_key" first,
// then message_id, event_type, timestamp, publisher_id, priority, payload and
// the other members as they arrived; the value of every member named like a
// credential (internal/redact: password, token, secret, connection_info and
// the like, any case, any depth, also inside JSON held in a string) is
// "[redacted]". A line is therefore a bare messaging-v1 body that `map` reads
// back. A body that looks like JSON but does not parse is printed redacted
// and cut to 512 bytes under "unparseable"; a body that is not JSON (msgpack,
// compressed) is reported by its size alone.
func Dump(ctx context.Context, opts Options, w io.Writer) error {
	opts.setDefaults()
	eps, err := opts.validate()
	if err != nil {
		return err
	}
	log := componentLogger(opts.Logger)
	cn, err := dial(&opts, eps, connectionName("dump"), log)
	if err != nil {
		return err
	}
	defer cn.closeWithin(opts.CloseTimeout, log)
	log = log.With().Str("broker", cn.ep.redact).Logger()
	connClosed := cn.NotifyClose(make(chan *amqp.Error, 1))

	ch, err := cn.Channel()
	if err != nil {
		return fmt.Errorf("open channel: %w", err)
	}
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		return fmt.Errorf("declare dump queue: %w", err)
	}
	present, missing, err := probeAll(cn, opts.Exchanges)
	if err != nil {
		return err
	}
	if len(present) == 0 {
		return fmt.Errorf("%w: %s on vhost %q", ErrNoExchanges, strings.Join(missing, ","), cn.ep.vhost)
	}
	b := &binder{c: cn, queue: q.Name, keys: opts.bindingKeys(), log: log}
	defer b.close()
	for _, e := range present {
		if err := b.bindExchange(e); err != nil {
			return err
		}
	}
	if len(missing) > 0 {
		log.Warn().Strs("missing", missing).Msg("exchanges missing; probing them again while the dump runs")
	}
	log.Info().Strs("exchanges", present).Str("queue", q.Name).Msg("dump bound; printing deliveries")
	deliveries, err := ch.Consume(q.Name, "", true, true, false, false, nil)
	if err != nil {
		return fmt.Errorf("consume dump queue: %w", err)
	}

	probes := make(map[string]*probeState, len(missing))
	for _, m := range missing {
		st := &probeState{bo: opts.probeBackoff()}
		st.next = time.Now().Add(st.bo.Next())
		probes[m] = st
	}
	tick := time.NewTicker(opts.ProbeMin)
	defer tick.Stop()
	var line []byte
	for {
		select {
		case <-ctx.Done():
			return nil
		case e := <-connClosed:
			return fmt.Errorf("%w: connection closed: %w", errSessionLost, e)
		case <-tick.C:
			for name, st := range probes {
				if time.Now().Before(st.next) {
					continue
				}
				ok, err := probeExchange(cn, name)
				if err != nil {
					return err
				}
				if !ok {
					st.next = time.Now().Add(st.bo.Next())
					continue
				}
				if err := b.bindExchange(name); err != nil {
					return err
				}
				delete(probes, name)
				log.Info().Str("exchange", name).Msg("exchange appeared and is bound")
			}
		case d, ok := <-deliveries:
			if !ok {
				return fmt.Errorf("%w: dump consumer cancelled", errSessionLost)
			}
			body := d.Body
			if c := compressionOf(d.Headers); c != "" {
				// Shown inflated, so it is redacted like any other body; one
				// that does not inflate within the limit shows as not JSON.
				if b, err := pipeline.Decompress(nil, c, d.Body, pipeline.DefaultMaxBodyBytes); err == nil {
					body = b
				}
			}
			line = DumpLine(line[:0], d.Exchange, d.RoutingKey, body)
			if _, err := w.Write(line); err != nil {
				return fmt.Errorf("write dump: %w", err)
			}
		}
	}
}

// dumpFirst is the order of the leading members of a dump line.
var dumpFirst = []string{"message_id", "event_type", "timestamp", "publisher_id", "priority", "payload"}

// DumpLine appends the dump's line for one delivery (with its newline) to dst.
// It is what Dump prints, exported so the redaction can be checked offline.
func DumpLine(dst []byte, exchange, routingKey string, body []byte) []byte {
	head := func(dst []byte) []byte {
		dst = append(dst, `{"exchange":`...)
		dst = appendJSONString(dst, exchange)
		dst = append(dst, `,"routing_key":`...)
		dst = appendJSONString(dst, routingKey)
		return dst
	}
	notJSON := func(dst []byte) []byte {
		dst = head(dst)
		dst = append(dst, fmt.Sprintf(`,"size":%d,"not_json":true}`+"\n", len(body))...)
		return dst
	}
	unparseable := func(dst []byte, text []byte) []byte {
		red := cutUTF8(redact.JSON(nil, text), unparseableCut)
		dst = head(dst)
		dst = append(dst, fmt.Sprintf(`,"size":%d,"unparseable":`, len(body))...)
		dst = appendJSONString(dst, string(bytes.ToValidUTF8(red, []byte("\uFFFD"))))
		return append(dst, "}\n"...)
	}

	if !looksLikeJSON(body) {
		return notJSON(dst)
	}
	msg := body
	if !json.Valid(body) {
		if inner, ok := redact.EnvelopeText(body); ok {
			if !looksLikeJSON([]byte(inner)) {
				return notJSON(dst)
			}
			return unparseable(dst, []byte(inner))
		}
		return unparseable(dst, body)
	}
	members, ok := objectMembers(body)
	if !ok {
		return unparseable(dst, body)
	}
	if raw, isEnv := members.m["oslo.message"]; isEnv {
		var inner string
		if err := json.Unmarshal(raw.val, &inner); err != nil || !looksLikeJSON([]byte(inner)) {
			return notJSON(dst)
		}
		msg = []byte(inner)
		if !json.Valid(msg) {
			return unparseable(dst, msg)
		}
		if _, ok = objectMembers(msg); !ok {
			return unparseable(dst, msg)
		}
	}
	red := redact.JSON(nil, msg)
	redMembers, ok := objectMembers(red)
	if !ok {
		// Cannot happen for valid JSON; stay on the safe side.
		return unparseable(dst, msg)
	}
	dst = head(dst)
	write := func(name string, m member) {
		dst = append(dst, ',')
		dst = appendJSONString(dst, name)
		dst = append(dst, ':')
		var buf bytes.Buffer
		if json.Compact(&buf, m.val) == nil {
			dst = append(dst, buf.Bytes()...)
		} else {
			dst = append(dst, m.val...)
		}
	}
	for _, name := range dumpFirst {
		if m, ok := redMembers.m[name]; ok {
			write(name, m)
		}
	}
	for _, name := range redMembers.order {
		if name == "exchange" || name == "routing_key" || contains(dumpFirst, name) {
			continue
		}
		write(name, redMembers.m[name])
	}
	return append(dst, "}\n"...)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// looksLikeJSON: the first non-space byte opens an object or an array, and
// the bytes are text. Anything else (msgpack, zlib, gzip) is not JSON.
func looksLikeJSON(b []byte) bool {
	b = bytes.TrimLeft(b, " \t\r\n")
	if len(b) == 0 || (b[0] != '{' && b[0] != '[') {
		return false
	}
	for _, c := range b[:min(len(b), 64)] {
		if c < 0x20 && c != '\t' && c != '\n' && c != '\r' {
			return false
		}
	}
	return true
}

type member struct{ val json.RawMessage }

// orderedMembersMap is a JSON object's members with their order. The last of
// duplicate names wins, as in most decoders.
type orderedMembersMap struct {
	m     map[string]member
	order []string
}

// objectMembers splits a valid JSON object into its members.
func objectMembers(b []byte) (orderedMembersMap, bool) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	t, err := dec.Token()
	if err != nil || t != json.Delim('{') {
		return orderedMembersMap{}, false
	}
	out := orderedMembersMap{m: map[string]member{}}
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return orderedMembersMap{}, false
		}
		k, _ := kt.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return orderedMembersMap{}, false
		}
		if _, dup := out.m[k]; !dup {
			out.order = append(out.order, k)
		}
		out.m[k] = member{val: raw}
	}
	return out, true
}

func appendJSONString(dst []byte, s string) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	return append(dst, bytes.TrimRight(buf.Bytes(), "\n")...)
}
