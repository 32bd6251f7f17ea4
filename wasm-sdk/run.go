package sdk

import "github.com/tally-billing/tally-openstack-collector/wasm-sdk/internal/abi"

// runner is the per-instance state of tally_map: the message and the output
// builder, both reused across calls.
type runner struct {
	msg      Message
	out      Output
	panicked bool // the last run's f panicked
}

// run maps input with f and returns the tally_map document, which stays
// valid until the next run. A panic in f is answered as {"error":"panic: ..."}
// so the instance stays usable; it is logged as an error too.
func (r *runner) run(f MapFunc, input []byte, host abi.Host) []byte {
	r.msg.raw, r.msg.host = input, host
	r.out.reset()
	r.panicked = false
	r.call(f)
	r.msg.raw = nil
	return r.out.finish()
}

func (r *runner) call(f MapFunc) {
	defer func() {
		if p := recover(); p != nil {
			reason := "panic"
			switch v := p.(type) {
			case string:
				reason += ": " + v
			case error:
				reason += ": " + v.Error()
			}
			Log(LevelError, reason)
			r.out.Error(reason)
			r.panicked = true
		}
	}()
	f(&r.msg, &r.out)
}
