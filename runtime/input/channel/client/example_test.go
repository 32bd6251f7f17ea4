package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/tally-billing/tally-openstack-collector/runtime/input/channel/client"
)

// A meter publishes a usage message and closes, waiting until the daemon has
// committed what it queued. Publish never blocks: at the queue's bound it
// answers ErrNoBufs, and the meter decides whether to wait or to drop.
func Example_publish() {
	c, err := client.New(client.Options{
		Socket: "/run/tally-openstack-collector/channel.sock",
		Mode:   client.ModePublish,
		OnSettled: func(s client.Settlement) {
			if s.Status != client.Committed {
				log.Printf("message %d: %s %s", s.Seq, s.Status, s.Reason)
			}
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	msg := []byte(`{"type":"license.checkout","resource_type":"license","resource_id":"matlab-7","project_id":"p-42","attributes":{"seats":3}}`)
	_, err = c.Publish(client.Message{Tag: "usage.license", Type: client.JSON, Data: msg, Perm: 0o440})
	if errors.Is(err, client.ErrNoBufs) {
		log.Print("the daemon is behind or away, and the queue is full")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.Close(ctx, false); err != nil { // drain; true would cancel
		log.Printf("not everything was acknowledged: %v (%d dropped)", err, c.Stats().Dropped)
	}
}

// A watcher prints the instance events the daemon commits, as long as its
// credentials may see them.
func Example_subscribe() {
	c, err := client.New(client.Options{Socket: "/run/tally-openstack-collector/channel.sock", Mode: client.ModeSubscribe})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(context.Background(), true)
	sub, err := c.Subscribe(`^compute\.instance\.`, false, func(d client.Delivery) {
		fmt.Printf("%s\n", d.Data)
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := sub.Wait(context.Background()); err != nil {
		log.Fatal(err) // the expression was refused
	}
	time.Sleep(time.Minute)
}

// A script polls the checkouts of one license type instead of taking a
// callback, then unsubscribes and waits for the daemon's answer.
func Example_poll() {
	c, err := client.New(client.Options{Socket: "/run/tally-openstack-collector/channel.sock", Mode: client.ModeSubscribe, Name: "checkout-poller"})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(context.Background(), true)
	sub, err := c.SubscribeWith("license.checkout", client.SubscribeOptions{Exact: true})
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		d, err := sub.Next(ctx)
		if err != nil {
			break // the minute is over
		}
		fmt.Printf("pid %d: %s\n", d.PID, d.Data)
	}
	if err := sub.Close(context.Background()); err != nil {
		log.Print(err)
	}
}
