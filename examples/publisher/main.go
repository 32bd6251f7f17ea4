// Command publisher publishes OpenStack notifications on RabbitMQ in oslo's
// messagingv2 wire format, byte for byte as oslo.messaging's Notifier does
// (see docs/broker.md). It stands in for the services in `make run` and in
// tests where python3-oslo.messaging is not installed; oslo_notify.py beside
// it drives the real Notifier with the same flags.
//
//	go run ./examples/publisher --url amqp://guest:guest@127.0.0.1:5672/ \
//	    --exchange nova --publisher-id compute.host1 --count 3 notification.json
//
// Each FILE holds one notification in the inner oslo shape. Like oslo, the
// publisher declares the exchange (topic, not durable), declares and binds
// the default queue named after the routing key (<topic>.<priority>) unless
// --default-queue=false, and publishes with content type application/json,
// encoding utf-8, delivery mode 2 and empty headers. message_id (a fresh
// uuid4 unless --file-ids), timestamp (UTC now) and _unique_id are set as
// oslo sets them. One JSON line per notification on stdout names the
// message_id used.
//
// `publisher queues [--url URL] [--delete] NAME...` prints which of the named
// queues exist, with their messages, and with --delete removes them.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/tally-billing/tally-openstack-collector/runtime/input/broker"
)

var priorities = []string{"audit", "debug", "info", "warn", "error", "critical", "sample"}

type topics []string

func (t *topics) String() string     { return strings.Join(*t, ",") }
func (t *topics) Set(s string) error { *t = append(*t, s); return nil }

func main() {
	var err error
	if len(os.Args) > 1 && os.Args[1] == "queues" {
		err = runQueues(os.Args[2:], os.Stdout)
	} else {
		err = run(os.Args[1:])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "publisher:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("publisher", flag.ContinueOnError)
	rawURL := fs.String("url", "amqp://guest:guest@127.0.0.1:5672/", "broker URL (amqp://, amqps:// or oslo's rabbit://; the first host is used)")
	exchange := fs.String("exchange", "nova", "exchange (the service's control_exchange)")
	publisherID := fs.String("publisher-id", "compute.host1", "publisher_id")
	priority := fs.String("priority", "", "override the priority of every file")
	count := fs.Int("count", 1, "publish each file this many times")
	fileIDs := fs.Bool("file-ids", false, "use each file's message_id instead of a fresh uuid4")
	defaultQueue := fs.Bool("default-queue", true, "declare and bind oslo's default queue <topic>.<priority>")
	var tops topics
	fs.Var(&tops, "topic", "notification topic (repeatable; default notifications)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if len(tops) == 0 {
		tops = topics{"notifications"}
	}
	if fs.NArg() == 0 {
		return fmt.Errorf("no notification files given")
	}
	conn, err := dial(*rawURL)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }() // every publish was confirmed or failed before
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	if err := ch.Confirm(false); err != nil {
		return err
	}
	if err := ch.ExchangeDeclare(*exchange, amqp.ExchangeTopic, false, false, false, false, nil); err != nil {
		return fmt.Errorf("declare exchange %s: %w", *exchange, err)
	}
	declared := map[string]bool{}
	enc := json.NewEncoder(os.Stdout)
	ctx := context.Background()
	for _, path := range fs.Args() {
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		note, err := parseOrdered(b)
		if err != nil || note.kind != 'o' {
			return fmt.Errorf("%s: not a JSON object: %w", path, err)
		}
		prio := strings.ToLower(*priority)
		if prio == "" {
			if p, ok := note.get("priority"); ok && p.kind == 's' {
				prio = strings.ToLower(p.str)
			}
		}
		if !validPriority(prio) {
			prio = "info"
		}
		eventType := "unknown"
		if et, ok := note.get("event_type"); ok && et.kind == 's' {
			eventType = et.str
		}
		for i := 0; i < *count; i++ {
			id := uuid4()
			if mid, ok := note.get("message_id"); *fileIDs && ok && mid.kind == 's' {
				id = mid.str
			}
			body := envelope(inner(note, id, *publisherID, eventType, prio))
			for _, t := range tops {
				key := t + "." + prio
				if *defaultQueue && !declared[key] {
					if _, err := ch.QueueDeclare(key, false, false, false, false, nil); err != nil {
						return fmt.Errorf("declare default queue %s: %w", key, err)
					}
					if err := ch.QueueBind(key, key, *exchange, false, nil); err != nil {
						return fmt.Errorf("bind default queue %s: %w", key, err)
					}
					declared[key] = true
				}
				dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, *exchange, key, false, false, amqp.Publishing{
					ContentType:     "application/json",
					ContentEncoding: "utf-8",
					DeliveryMode:    amqp.Persistent,
					Headers:         amqp.Table{},
					Body:            body,
				})
				if err != nil {
					return fmt.Errorf("publish: %w", err)
				}
				if ok, err := dc.WaitContext(ctx); err != nil || !ok {
					return fmt.Errorf("publish of %s not confirmed: %w", id, err)
				}
			}
			_ = enc.Encode(map[string]string{"message_id": id, "event_type": eventType, "exchange": *exchange, "priority": prio})
		}
	}
	return nil
}

func validPriority(p string) bool {
	for _, x := range priorities {
		if p == x {
			return true
		}
	}
	return false
}

// inner builds the message oslo's Notifier sends: message_id, publisher_id,
// event_type, priority (upper case), payload, timestamp, _unique_id, then the
// request context as _context_* members.
func inner(note value, id, publisherID, eventType, prio string) value {
	payload, ok := note.get("payload")
	if !ok {
		payload = value{kind: 'o'}
	}
	v := value{kind: 'o', members: []member{
		{"message_id", str(id)},
		{"publisher_id", str(publisherID)},
		{"event_type", str(eventType)},
		{"priority", str(strings.ToUpper(prio))},
		{"payload", payload},
		{"timestamp", str(osloTimestamp(time.Now()))},
		{"_unique_id", str(uniqueID())},
	}}
	for _, m := range note.members {
		if strings.HasPrefix(m.name, "_context_") {
			v.members = append(v.members, m)
		}
	}
	return v
}

// osloTimestamp is str(datetime.utcnow()): microseconds, left out when zero.
func osloTimestamp(t time.Time) string {
	t = t.UTC()
	if t.Nanosecond()/1000 == 0 {
		return t.Format("2006-01-02 15:04:05")
	}
	return t.Format("2006-01-02 15:04:05.000000")
}

func uuid4() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

func uniqueID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return hex.EncodeToString(b[:])
}

// dial connects to the broker at the URL raw (see amqpURL).
func dial(raw string) (*amqp.Connection, error) {
	u, err := amqpURL(raw)
	if err != nil {
		return nil, err
	}
	conn, err := amqp.Dial(u)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	return conn, nil
}

// amqpURL turns a transport URL (amqp://, amqps:// or oslo's rabbit://) into
// the URL of its first host, parsed by the collector's own rules.
func amqpURL(raw string) (string, error) {
	u, err := broker.ParseTransportURL(raw)
	if err != nil {
		return "", err
	}
	return u.AMQPURLs()[0], nil
}
