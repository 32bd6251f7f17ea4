//go:build !wasip1

package sdkguests_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"strconv"

	"github.com/tetratelabs/wazero/api"

	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/jsonstr"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/timestamp"
)

// emit answers tally.emit for the minimal host, written from docs/abi.md
// ("emit") on its own: it writes the {"events":[...]} document the
// operations describe into h.emitted, which call returns in place of
// tally_map's document. (The collector's own writer, runtime/emit.go, also
// checks every operation; this one trusts the SDK and panics on what it
// does not expect.)
func (h *miniHost) emit(_ context.Context, m api.Module, stack []uint64) {
	mem, _ := m.Memory().Read(0, m.Memory().Size())
	ptr, count := uint32(stack[0]), uint32(stack[1])
	doc := []byte(`{"events":[`)
	first := []bool{false}
	nEv := 0
	str := func(p, n uint32) []byte { return mem[p : p+n] }
	for i := range count {
		r := mem[ptr+20*i : ptr+20*i+20]
		code := binary.LittleEndian.Uint32(r)
		key := str(binary.LittleEndian.Uint32(r[4:]), binary.LittleEndian.Uint32(r[8:]))
		a, b := binary.LittleEndian.Uint32(r[12:]), binary.LittleEndian.Uint32(r[16:])
		var val []byte
		if code&0x100 != 0 {
			val = h.input[a : a+b]
		} else if code&0xff != 7 && code&0xff != 8 {
			val = str(a, b)
		}
		code &= 0xff
		switch code {
		case 1:
			if nEv > 0 {
				doc = append(doc, ',')
			}
			nEv++
			doc = append(doc, '{')
			first = append(first[:1], true)
			continue
		case 3:
			doc = append(doc, '}')
			first = first[:len(first)-1]
			continue
		case 9:
			t, ok := timestamp.Append(nil, val)
			if !ok {
				continue
			}
			val = t
		}
		if !first[len(first)-1] {
			doc = append(doc, ',')
		}
		first[len(first)-1] = false
		doc = jsonstr.AppendQuotedBytes(doc, key)
		doc = append(doc, ':')
		switch code {
		case 2:
			doc = append(doc, '{')
			first = append(first, true)
		case 4:
			doc = jsonstr.AppendQuotedBytes(doc, val)
		case 5, 9:
			doc = append(doc, '"')
			if jsonstr.CleanRaw(val) {
				doc = append(doc, val...)
			} else {
				doc = jsonstr.AppendEscapedBytes(doc, jsonstr.AppendUnescaped(nil, val))
			}
			doc = append(doc, '"')
		case 6:
			doc = append(doc, val...)
		case 7:
			doc = strconv.AppendInt(doc, int64(uint64(b)<<32|uint64(a)), 10)
		case 8:
			doc = strconv.AppendBool(doc, a == 1)
		default:
			panic(fmt.Sprintf("emit: operation %d: code %d", i, code))
		}
	}
	for range len(first) - 1 {
		doc = append(doc, '}')
	}
	h.emitted = append(doc, "]}"...)
	stack[0] = 0
}
