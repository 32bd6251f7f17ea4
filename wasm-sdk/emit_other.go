//go:build !wasip1

package sdk

// Natively (go test) the Event builder writes the tally_map document itself
// (output.go); the tally.emit operations exist only in a guest
// (emit_wasip1.go).
const emitOps = false

type opTable struct{}

func (t *opTable) reset() {}

func (o *Output) op(uint32, string, uint32, uint32) {}
func (o *Output) opBytes(uint32, string, []byte)    {}
func (o *Output) emitText(string, string)           {}
func (o *Output) emitInt(string, int64)             {}
func (o *Output) emitBool(string, bool)             {}
func (o *Output) emitTimestamp(string, Value) bool  { return false }
func (o *Output) emitFinish() []byte                { return nil }
