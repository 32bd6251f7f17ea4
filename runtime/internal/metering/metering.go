package metering

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
)

// Version identifies the pass: it changes whenever the output for some input
// changes, so that what was compiled from an older output is not reused.
const Version = 1

// Export is the name under which the budget global is exported.
const Export = "tally_budget"

// VersionSection names the custom section, added at the end of a metered
// module, that holds Version in decimal.
const VersionSection = "tally.metering"

// ErrUnsupported is wrapped by the error of a module the pass refuses to
// meter (an *UnsupportedError says which instruction and where).
var ErrUnsupported = errors.New("cannot meter module")

// Options tune the pass.
type Options struct {
	// Initial is the budget's value when an instance starts: it pays for
	// the module's start function, which runs before the host can set the
	// budget.
	Initial int64
}

// Section ids of the binary format.
const (
	secCustom   = 0
	secImport   = 2
	secGlobal   = 6
	secExport   = 7
	secCode     = 10
	importGlob  = 3
	exportGlob  = 3
	valI64      = 0x7e
	globalMut   = 1
	maxSections = 13
)

// order is each known section's place in a module (the tag section, 13,
// comes between memory and global; data count, 12, between element and code).
var order = map[byte]int{1: 1, 2: 2, 3: 3, 4: 4, 5: 5, 13: 6, 6: 7, 7: 8, 8: 9, 9: 10, 12: 11, 10: 12, 11: 13}

type section struct {
	id   byte
	name string // custom sections
	body []byte
	off  int // of body in the module
}

// Meter returns a copy of wasm with a budget: a mutable i64 global, exported
// as Export, that every function entry and every loop header decrements by
// the static cost of what follows (doc.go), trapping (unreachable) once it is
// below zero. It refuses a module it cannot meter, or cannot decode, with an
// error wrapping ErrUnsupported (and an *UnsupportedError for an
// instruction).
func Meter(wasm []byte, opts Options) ([]byte, error) {
	out, err := meter(wasm, opts)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnsupported, err)
	}
	return out, nil
}

func meter(wasm []byte, opts Options) ([]byte, error) {
	if len(wasm) < 8 || !bytes.Equal(wasm[:4], []byte("\x00asm")) {
		return nil, errors.New("not a WebAssembly module (no \\0asm magic)")
	}
	if !bytes.Equal(wasm[4:8], []byte{1, 0, 0, 0}) {
		return nil, fmt.Errorf("binary format version %x: only version 1 (core modules) is metered", wasm[4:8])
	}
	secs, err := sections(wasm)
	if err != nil {
		return nil, err
	}
	var importedGlobals, definedGlobals uint32
	var hasGlobal, hasExport bool
	for _, s := range secs {
		switch s.id {
		case secImport:
			if importedGlobals, err = countImportedGlobals(s); err != nil {
				return nil, fmt.Errorf("import section: %w", err)
			}
		case secGlobal:
			hasGlobal = true
			r := reader{b: s.body, base: s.off}
			if definedGlobals, err = r.u32(); err != nil {
				return nil, fmt.Errorf("global section: %w", err)
			}
		case secExport:
			hasExport = true
			if err := checkExportName(s); err != nil {
				return nil, fmt.Errorf("export section: %w", err)
			}
		}
	}
	globals := uint64(importedGlobals) + uint64(definedGlobals)
	if globals >= 1<<32-1 {
		return nil, errors.New("too many globals")
	}
	budget := uint32(globals)

	out := make([]byte, 0, len(wasm)+len(wasm)/8+64)
	out = append(out, wasm[:8]...)
	emit := func(id byte, body []byte) {
		out = append(out, id)
		out = appendULEB(out, uint64(len(body)))
		out = append(out, body...)
	}
	newGlobal := func(body []byte) []byte { // appends the budget to a global section's entries
		body = append(body, valI64, globalMut, opI64Const)
		body = appendSLEB(body, opts.Initial)
		return append(body, opEnd)
	}
	newExport := func(body []byte) []byte {
		body = appendULEB(body, uint64(len(Export)))
		body = append(body, Export...)
		body = append(body, exportGlob)
		return appendULEB(body, uint64(budget))
	}
	placedGlobal, placedExport := hasGlobal, hasExport
	place := func(rank int) { // adds the missing sections that come before rank
		if !placedGlobal && rank > order[secGlobal] {
			emit(secGlobal, newGlobal(appendULEB(nil, 1)))
			placedGlobal = true
		}
		if !placedExport && rank > order[secExport] {
			emit(secExport, newExport(appendULEB(nil, 1)))
			placedExport = true
		}
	}
	for _, s := range secs {
		if s.id == secCustom {
			if strings.HasPrefix(s.name, ".debug_") {
				continue // DWARF: its code offsets would be stale
			}
			emit(s.id, s.body)
			continue
		}
		place(order[s.id])
		switch s.id {
		case secGlobal:
			emit(s.id, newGlobal(appendVecCount(s.body, definedGlobals)))
		case secExport:
			r := reader{b: s.body, base: s.off}
			n, _ := r.u32() // read by checkExportName already
			emit(s.id, newExport(append(appendULEB(nil, uint64(n)+1), s.body[r.pos:]...)))
		case secCode:
			body, err := meterCode(s, budget, uint32(globals))
			if err != nil {
				return nil, err
			}
			emit(s.id, body)
		default:
			emit(s.id, s.body)
		}
	}
	place(maxSections + 1)
	// The pass's version, in the bytes wazero's compilation cache is keyed
	// by: code compiled from one version's output is never reused for
	// another's.
	mark := appendULEB(nil, uint64(len(VersionSection)))
	mark = append(mark, VersionSection...)
	emit(secCustom, fmt.Appendf(mark, "%d", Version))
	return out, nil
}

// appendVecCount re-encodes a vector's count as n+1 and keeps its entries.
func appendVecCount(body []byte, n uint32) []byte {
	r := reader{b: body}
	_, _ = r.u32() // read before
	out := appendULEB(make([]byte, 0, len(body)+16), uint64(n)+1)
	return append(out, body[r.pos:]...)
}

// sections splits a module into its sections, checking their order.
func sections(wasm []byte) ([]section, error) {
	r := reader{b: wasm, pos: 8}
	var secs []section
	last := 0
	for !r.done() {
		at := r.off()
		id, err := r.byte()
		if err != nil {
			return nil, err
		}
		size, err := r.u32()
		if err != nil {
			return nil, fmt.Errorf("section at offset %d: %w", at, err)
		}
		off := r.off()
		body, err := r.bytes(int(size))
		if err != nil {
			return nil, fmt.Errorf("section %d at offset %d: %w", id, at, err)
		}
		s := section{id: id, body: body, off: off}
		if id == secCustom {
			cr := reader{b: body, base: off}
			n, err := cr.u32()
			if err != nil {
				return nil, fmt.Errorf("custom section at offset %d: %w", at, err)
			}
			name, err := cr.bytes(int(n))
			if err != nil {
				return nil, fmt.Errorf("custom section at offset %d: %w", at, err)
			}
			s.name = string(name)
		} else {
			rank, ok := order[id]
			if !ok {
				return nil, fmt.Errorf("offset %d: unknown section id %d", at, id)
			}
			if rank <= last {
				return nil, fmt.Errorf("offset %d: section id %d out of order or repeated", at, id)
			}
			last = rank
		}
		secs = append(secs, s)
	}
	return secs, nil
}

// countImportedGlobals walks the import section.
func countImportedGlobals(s section) (uint32, error) {
	r := reader{b: s.body, base: s.off}
	n, err := r.u32()
	if err != nil {
		return 0, err
	}
	var globals uint32
	for range n {
		for range 2 { // module and name
			l, err := r.u32()
			if err != nil {
				return 0, err
			}
			if _, err := r.bytes(int(l)); err != nil {
				return 0, err
			}
		}
		kind, err := r.byte()
		if err != nil {
			return 0, err
		}
		switch kind {
		case 0: // function: type index
			_, err = r.u32()
		case 1: // table: reference type, limits
			if _, err = r.byte(); err == nil {
				err = r.limits()
			}
		case 2: // memory: limits
			err = r.limits()
		case importGlob: // global: value type, mutability
			globals++
			_, err = r.bytes(2)
		case 4: // tag: attribute, type index
			if _, err = r.byte(); err == nil {
				_, err = r.u32()
			}
		default:
			return 0, fmt.Errorf("offset %d: unknown import kind %d", r.off()-1, kind)
		}
		if err != nil {
			return 0, err
		}
	}
	if !r.done() {
		return 0, fmt.Errorf("offset %d: bytes after the last import", r.off())
	}
	return globals, nil
}

// limits steps over table or memory limits (flags: bit 0 a maximum follows,
// bit 1 shared, bit 2 64-bit indexes).
func (r *reader) limits() error {
	flags, err := r.byte()
	if err != nil {
		return err
	}
	if flags > 7 {
		return fmt.Errorf("offset %d: limits flags 0x%x", r.off()-1, flags)
	}
	for range 1 + int(flags&1) {
		if _, err := r.uleb(64); err != nil {
			return err
		}
	}
	return nil
}

// checkExportName refuses a module that already exports Export.
func checkExportName(s section) error {
	r := reader{b: s.body, base: s.off}
	n, err := r.u32()
	if err != nil {
		return err
	}
	for range n {
		l, err := r.u32()
		if err != nil {
			return err
		}
		name, err := r.bytes(int(l))
		if err != nil {
			return err
		}
		if string(name) == Export {
			return fmt.Errorf("the module already exports %q", Export)
		}
		if _, err := r.byte(); err != nil {
			return err
		}
		if _, err := r.u32(); err != nil {
			return err
		}
	}
	if !r.done() {
		return fmt.Errorf("offset %d: bytes after the last export", r.off())
	}
	return nil
}
