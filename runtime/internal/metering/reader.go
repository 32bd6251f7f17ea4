package metering

import "fmt"

// reader decodes the primitive encodings of the binary format from a slice,
// keeping the offset of what it reads next relative to the whole module.
type reader struct {
	b    []byte
	pos  int // index into b
	base int // offset of b[0] in the module, for errors
}

func (r *reader) off() int { return r.base + r.pos }

func (r *reader) done() bool { return r.pos >= len(r.b) }

func (r *reader) byte() (byte, error) {
	if r.pos >= len(r.b) {
		return 0, fmt.Errorf("offset %d: %w", r.off(), errTruncated)
	}
	c := r.b[r.pos]
	r.pos++
	return c, nil
}

func (r *reader) bytes(n int) ([]byte, error) {
	if n < 0 || n > len(r.b)-r.pos {
		return nil, fmt.Errorf("offset %d: %w (%d bytes wanted, %d left)", r.off(), errTruncated, n, len(r.b)-r.pos)
	}
	s := r.b[r.pos : r.pos+n]
	r.pos += n
	return s, nil
}

// sized reads a u32 size and answers a reader of the bytes it counts: a
// section's or a function body's contents, a name, a vector of bytes.
func (r *reader) sized() (reader, error) {
	n, err := r.u32()
	if err != nil {
		return reader{}, err
	}
	at := r.off()
	b, err := r.bytes(int(n))
	return reader{b: b, base: at}, err
}

// name reads a name: its size, then its bytes.
func (r *reader) name() ([]byte, error) {
	s, err := r.sized()
	return s.b, err
}

// uleb reads an unsigned LEB128 of at most bits bits.
func (r *reader) uleb(bits uint) (uint64, error) {
	start := r.off()
	var v uint64
	var shift uint
	for {
		c, err := r.byte()
		if err != nil {
			return 0, err
		}
		if shift >= bits {
			return 0, fmt.Errorf("offset %d: LEB128 longer than %d bits", start, bits)
		}
		v |= uint64(c&0x7f) << shift
		if shift+7 > bits && c>>(bits-shift) > 0 && c&0x80 == 0 {
			return 0, fmt.Errorf("offset %d: LEB128 overflows %d bits", start, bits)
		}
		shift += 7
		if c&0x80 == 0 {
			return v, nil
		}
	}
}

func (r *reader) u32() (uint32, error) {
	v, err := r.uleb(32)
	return uint32(v), err //nolint:gosec // G115: uleb(32) refuses a value of more than 32 bits
}

// sleb skips a signed LEB128 of at most bits bits (the pass never needs the
// value of a signed immediate).
func (r *reader) sleb(bits uint) error {
	start := r.off()
	for n := uint(0); ; n += 7 {
		c, err := r.byte()
		if err != nil {
			return err
		}
		if n >= bits {
			return fmt.Errorf("offset %d: LEB128 longer than %d bits", start, bits)
		}
		if c&0x80 == 0 {
			return nil
		}
	}
}

// appendULEB appends v as an unsigned LEB128.
func appendULEB(b []byte, v uint64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v != 0 {
			b = append(b, c|0x80)
			continue
		}
		return append(b, c)
	}
}

// appendSLEB appends v as a signed LEB128.
func appendSLEB(b []byte, v int64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}
