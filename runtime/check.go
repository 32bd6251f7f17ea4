package runtime

import (
	"fmt"

	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/jsonindex"
)

// CheckOutput applies to out, a tally_map output document produced without a
// module (a mapper run natively under go test), the check Module.Map applies
// to what a guest answers, with the default limits: at most
// DefaultMaxOutputBytes, a JSON object with an "events" array (or an
// "error"), every event an object that keeps the event contract (see
// event.go: an event that breaks it in a required member fails the call
// with ReasonInvalidEvent, what breaks it elsewhere is left out and counted
// in Result.Dropped). It returns the events as the host would commit them,
// "source" filled in from src (in, the input, may be nil; mapper is the
// name@version written into source), and those larger than
// DefaultMaxEventBytes counted in Result.Oversize. A failure is a *MapError
// with its Reason, as Module.Map gives it. Tests and fuzz targets of mappers
// use it so that they hold a native run to exactly what the collector
// accepts.
func CheckOutput(out []byte, in *jsonindex.Index, mapper string, src Source) (Result, error) {
	cfg := Config{}.withDefaults()
	if len(out) > cfg.MaxOutputBytes {
		return Result{}, &MapError{Reason: ReasonInvalidOutput, Module: mapper,
			Err: fmt.Errorf("output of %d bytes over the limit of %d", len(out), cfg.MaxOutputBytes)}
	}
	inst := &instance{m: &Module{e: &Engine{cfg: cfg}, id: mapper}}
	res, reason, err := inst.buildResult(in, out, src)
	if err != nil {
		return Result{}, &MapError{Reason: reason, Module: mapper, Err: err}
	}
	return res, nil
}
