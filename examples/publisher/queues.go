package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

	amqp "github.com/rabbitmq/amqp091-go"
)

// runQueues is `publisher queues [--url URL] [--delete] NAME...`: of the
// queues named, it prints those that exist, one line each with the messages
// they hold; with --delete it removes them too. `make run` uses it for the
// default queues oslo's Notifier and this publisher declare (<topic>.<priority>),
// which nothing consumes there: it removes those the run created.
func runQueues(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("publisher queues", flag.ContinueOnError)
	rawURL := fs.String("url", "amqp://guest:guest@127.0.0.1:5672/", "broker URL (amqp://, amqps:// or oslo's rabbit://; the first host is used)")
	del := fs.Bool("delete", false, "remove the queues that exist, with their messages")
	if err := fs.Parse(args); err != nil {
		return err
	}
	conn, err := dial(*rawURL)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }() // it only read the queues
	for _, name := range fs.Args() {
		// A passive declare of a missing queue closes the channel: one each.
		ch, err := conn.Channel()
		if err != nil {
			return err
		}
		q, err := ch.QueueDeclarePassive(name, false, false, false, false, nil)
		var ae *amqp.Error
		if errors.As(err, &ae) && ae.Code == amqp.NotFound {
			continue
		}
		if err != nil {
			return fmt.Errorf("queue %s: %w", name, err)
		}
		if *del {
			if _, err := ch.QueueDelete(name, false, false, false); err != nil {
				return fmt.Errorf("delete queue %s: %w", name, err)
			}
		}
		fmt.Fprintf(stdout, "%s %d\n", q.Name, q.Messages)
		_ = ch.Close()
	}
	return nil
}
