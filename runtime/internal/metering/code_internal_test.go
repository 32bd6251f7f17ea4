package metering

import "testing"

// The entry's charge is folded into a loop that a straight prologue runs
// into, and kept wherever anything could run before that loop's charge.
func TestScanFoldsTheEntryIntoAPrologueLoop(t *testing.T) {
	const (
		noLocals = 0x00
		empty    = 0x40
	)
	for _, c := range []struct {
		name   string
		body   []byte
		points int
		instrs int64
	}{
		{"prologue then loop (Go's shape)", []byte{noLocals,
			opGlobalGet, 0, 0x21, 1, // global.get 0; local.set 1
			opBlock, empty, opLoop, empty, opEnd, opEnd, opEnd}, 1, 7},
		{"loop first", []byte{noLocals, opLoop, empty, opEnd, opEnd}, 1, 3},
		{"a branch before the loop", []byte{noLocals,
			opBlock, empty, opBr, 0, opEnd, opLoop, empty, opEnd, opEnd}, 2, 6},
		{"an if before the loop", []byte{noLocals,
			0x41, 0, opIf, empty, opEnd, opLoop, empty, opEnd, opEnd}, 2, 6},
		{"a call before the loop", []byte{noLocals,
			0x10, 0, opLoop, empty, opEnd, opEnd}, 2, 4},
		{"no loop", []byte{noLocals, 0x41, 1, opDrop, opEnd}, 1, 3},
	} {
		points, _, err := scan(reader{b: c.body}, 1, nil, nil)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if len(points) != c.points {
			t.Errorf("%s: %d charges, want %d", c.name, len(points), c.points)
		}
		var total int64
		for _, p := range points {
			total += p.cost
		}
		// Every instruction is paid for once, and each charge (10).
		if want := c.instrs + chargeCost*int64(len(points)); total != want {
			t.Errorf("%s: charged %d in all, want %d", c.name, total, want)
		}
	}
}
