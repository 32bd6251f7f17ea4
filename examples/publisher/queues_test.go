package main

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
)

// `publisher queues` names the queues that exist with their messages, and
// with --delete removes them; a queue that does not exist is left out.
func TestQueuesListsAndDeletes(t *testing.T) {
	testkit.RequireBroker(t)
	v := testkit.VhostByName("/")
	url := v.URL()
	ch, err := v.Conn(t).Channel()
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("tally-publisher-queues-%d.info", time.Now().UnixNano())
	missing := name + ".missing"
	if _, err := ch.QueueDeclare(name, false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = ch.QueueDelete(name, false, false, false) })
	v.Publish(t, "", name, []byte("{}"), []byte("{}"))
	var out bytes.Buffer
	if err := runQueues([]string{"--url", url, missing, name}, &out); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != name+" 2\n" {
		t.Fatalf("queues printed %q, want %q", got, name+" 2\n")
	}
	out.Reset()
	if err := runQueues([]string{"--url", url, "--delete", name, missing}, &out); err != nil || out.String() != name+" 2\n" {
		t.Fatalf("queues --delete: %q, %v", out.String(), err)
	}
	out.Reset()
	if err := runQueues([]string{"--url", url, name}, &out); err != nil || out.Len() != 0 {
		t.Fatalf("after --delete: %q, %v", out.String(), err)
	}
}
