// Package input declares what the inputs (broker, plog, channel) need from
// the rest of the daemon: a Processor that maps a message and an Outbox that
// commits the result. The inputs are the users of these interfaces, so they
// are declared here, once, beside the inputs, rather than in the packages
// that implement them (*pipeline.Pipeline, *outbox.Outbox); the checks below
// keep the implementations in step.
//
// It also holds the one piece of code the servers of the channel and plog
// inputs share: Serving, their start and stop (Run serves once; Close may
// come before, during or after it). Each input package documents its own
// flow (commit, then acknowledge).
package input

import (
	"context"
	"time"

	"github.com/tally-billing/tally-openstack-collector/outbox"
	"github.com/tally-billing/tally-openstack-collector/outbox/ledger"
	"github.com/tally-billing/tally-openstack-collector/runtime/pipeline"
)

// Processor maps one received message into events; *pipeline.Pipeline
// implements it. Every input calls one shared Processor from several
// goroutines.
type Processor interface {
	Process(ctx context.Context, msg pipeline.Message) pipeline.Result
}

// Outbox is the durable store a batch is committed to before its messages
// are acknowledged; *outbox.Outbox implements it. Each call must be one
// synced transaction, and answers an error wrapping outbox.ErrFull at the
// bound (nothing written) and outbox.ErrRefused when the store cannot write.
//
// Each call carries the messages' counts for the completeness ledger,
// committed in the same transaction (ledger.Delta; AppendKeyed with no
// events commits the counts alone), and each event's ledger keys as the
// pipeline has them (pipeline.Result.AppendKeyed), so that the outbox need
// not parse the events again to count them.
type Outbox interface {
	AppendKeyed(ctx context.Context, events []ledger.Keyed, taken time.Time, tally *ledger.Delta) error
	AppendDeadLettersCounted(ctx context.Context, letters []outbox.DeadLetter, tally *ledger.Delta) error
}

// PipelinedOutbox is an Outbox that takes the next batch while the
// previous one syncs (*outbox.Outbox: BeginAppendKeyed). The returned
// Pending settles in the order the appends were begun; an input may
// acknowledge a batch only once its Pending reports it durable. The broker
// input uses it when its Outbox has it and its CommitPipeline is above 1.
type PipelinedOutbox interface {
	BeginAppendKeyed(ctx context.Context, events []ledger.Keyed, taken time.Time, tally *ledger.Delta) *outbox.Pending
}

var (
	_ Processor       = (*pipeline.Pipeline)(nil)
	_ Outbox          = (*outbox.Outbox)(nil)
	_ PipelinedOutbox = (*outbox.Outbox)(nil)
)
