package pipeline

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"hash/crc64"
	"io"
	"slices"

	"github.com/ulikunitz/xz/lzma"
)

// The .xz container (xz-file-format 1.0.4) is read here rather than by
// github.com/ulikunitz/xz's Reader, because that Reader sizes each block's
// dictionary from the LZMA2 filter's properties whatever its ReaderConfig
// says (ReaderConfig.DictCap is only a floor there): a 144-byte stream
// announcing 4 GiB is given 4 GiB. This reader checks the announced
// dictionary against maxLZMADict first, and then gives the LZMA2 decoder no
// more than the output that will be read: every match distance of a stream
// that inflates to at most limit bytes lies within those bytes, so a smaller
// dictionary decodes it identically.

var (
	xzMagic    = []byte{0xfd, '7', 'z', 'X', 'Z', 0x00}
	crc64Table = crc64.MakeTable(crc64.ECMA)
)

const (
	xzStreamHeaderLen = 12
	xzFilterLZMA2     = 0x21
)

// xzReader inflates the one block of a single .xz stream. The block's
// compressed data is read byte by byte from the body (lzma.Reader2 stops at
// the LZMA2 end marker), so what follows it (padding, check, index) is
// where the reader left off.
type xzReader struct {
	src    *bytes.Reader
	lz     *lzma.Reader2
	check  hash.Hash
	sum    int // size of the check field
	n      int64
	unSize int64 // uncompressed size the block header states; -1: none
	done   bool
}

// newXZReader reads the stream header and the block header, checks the
// announced dictionary against maxLZMADict and returns a reader of the
// block's data with a dictionary of at most limit+1 bytes.
func newXZReader(body []byte, limit int) (io.Reader, error) {
	if len(body) < xzStreamHeaderLen || !bytes.HasPrefix(body, xzMagic) {
		return nil, fmt.Errorf("xz: %w: stream header", errXZFormat)
	}
	flags := body[6:8]
	if flags[0] != 0 || flags[1] > 0x0f || crc32.ChecksumIEEE(flags) != binary.LittleEndian.Uint32(body[8:12]) {
		return nil, fmt.Errorf("xz: %w: stream flags", errXZFormat)
	}
	r := &xzReader{unSize: -1}
	switch ct := flags[1]; ct {
	case 0x00:
	case 0x01:
		r.check, r.sum = crc32.NewIEEE(), 4
	case 0x04:
		r.check, r.sum = crc64.New(crc64Table), 8
	case 0x0a:
		r.check, r.sum = sha256.New(), 32
	default:
		return nil, fmt.Errorf("xz: %w: check type %#x not supported", errXZFormat, ct)
	}
	rest := body[xzStreamHeaderLen:]
	if len(rest) == 0 || rest[0] == 0 {
		// An index right away: a stream of no block, no bytes.
		r.done = true
		return r, nil
	}
	hlen := (int(rest[0]) + 1) * 4
	if len(rest) < hlen {
		return nil, fmt.Errorf("xz: %w: block header cut", errXZFormat)
	}
	hdr := rest[:hlen]
	if crc32.ChecksumIEEE(hdr[:hlen-4]) != binary.LittleEndian.Uint32(hdr[hlen-4:]) {
		return nil, fmt.Errorf("xz: %w: block header checksum", errXZFormat)
	}
	dict, err := r.parseBlockHeader(hdr[1 : hlen-4])
	if err != nil {
		return nil, err
	}
	if dict > maxLZMADict {
		return nil, fmt.Errorf("%w: xz: the LZMA2 filter asks for a %s dictionary, over the %s cap",
			ErrDecoderLimit, sizeText(dict), sizeText(maxLZMADict))
	}
	if err := scanLZMA2(rest[hlen:], limit); err != nil {
		return nil, err
	}
	r.src = bytes.NewReader(rest[hlen:])
	r.lz, err = lzma.Reader2Config{DictCap: lzmaDictFor(dict, limit)}.NewReader2(r.src)
	if err != nil {
		return nil, fmt.Errorf("xz: %w", err)
	}
	return r, nil
}

// parseBlockHeader reads the block flags, the optional sizes and the filter
// flags of a block header (without its size byte and CRC32), and returns
// the dictionary size the LZMA2 filter announces. Only a lone LZMA2 filter
// is read, as Python's lzma module writes by default.
func (r *xzReader) parseBlockHeader(h []byte) (int64, error) {
	if len(h) < 1 {
		return 0, fmt.Errorf("xz: %w: block header", errXZFormat)
	}
	flags := h[0]
	h = h[1:]
	if flags&0x3c != 0 {
		return 0, fmt.Errorf("xz: %w: reserved block flags", errXZFormat)
	}
	if nf := int(flags&0x03) + 1; nf != 1 {
		return 0, fmt.Errorf("xz: %w: %d filters (only a lone LZMA2 filter is read)", errXZFormat, nf)
	}
	var err error
	if flags&0x40 != 0 {
		if _, h, err = uvarint(h); err != nil {
			return 0, err
		}
	}
	if flags&0x80 != 0 {
		var u uint64
		if u, h, err = uvarint(h); err != nil {
			return 0, err
		}
		r.unSize = int64(min(u, 1<<62))
	}
	id, h, err := uvarint(h)
	if err != nil {
		return 0, err
	}
	size, h, err := uvarint(h)
	if err != nil {
		return 0, err
	}
	if id != xzFilterLZMA2 || size != 1 || len(h) < 1 {
		return 0, fmt.Errorf("xz: %w: filter %#x not supported (only LZMA2 is read)", errXZFormat, id)
	}
	for _, b := range h[1:] {
		if b != 0 {
			return 0, fmt.Errorf("xz: %w: block header padding", errXZFormat)
		}
	}
	dict, err := lzma.DecodeDictCap(h[0])
	if err != nil {
		return 0, fmt.Errorf("xz: %w: %w", errXZFormat, err)
	}
	return dict, nil
}

// maxLZMAPropResets bounds the LZMA2 chunks of a block that reset the
// properties: each sizes new probability tables. liblzma writes one.
const maxLZMAPropResets = 4

// scanLZMA2 walks the chunk headers of an LZMA2 sequence without decoding
// it (each header states its sizes) and refuses, before the decoder sizes
// anything, properties whose literal tables exceed LZMA2's lc+lp <= 4, more
// than maxLZMAPropResets property resets, and a sequence whose chunks
// inflate past limit.
func scanLZMA2(b []byte, limit int) error {
	var out int64
	resets := 0
	for {
		if len(b) == 0 {
			return fmt.Errorf("xz: %w: LZMA2 data cut", errXZFormat)
		}
		c := b[0]
		switch {
		case c == 0x00:
			return nil
		case c == 0x01 || c == 0x02:
			if len(b) < 3 {
				return fmt.Errorf("xz: %w: LZMA2 chunk header cut", errXZFormat)
			}
			n := int(binary.BigEndian.Uint16(b[1:3])) + 1
			out += int64(n)
			if len(b) < 3+n {
				return fmt.Errorf("xz: %w: LZMA2 chunk cut", errXZFormat)
			}
			b = b[3+n:]
		case c >= 0x80:
			if len(b) < 5 {
				return fmt.Errorf("xz: %w: LZMA2 chunk header cut", errXZFormat)
			}
			out += int64(c&0x1f)<<16 + int64(binary.BigEndian.Uint16(b[1:3])) + 1
			n := int(binary.BigEndian.Uint16(b[3:5])) + 1
			hl := 5
			if c >= 0xc0 { // new properties
				if len(b) < 6 {
					return fmt.Errorf("xz: %w: LZMA2 chunk header cut", errXZFormat)
				}
				if err := lzmaLiteralCap(b[5]); err != nil {
					return err
				}
				if resets++; resets > maxLZMAPropResets {
					return fmt.Errorf("%w: xz: more than %d LZMA2 property resets in a block", ErrDecoderLimit, maxLZMAPropResets)
				}
				hl = 6
			}
			if len(b) < hl+n {
				return fmt.Errorf("xz: %w: LZMA2 chunk cut", errXZFormat)
			}
			b = b[hl+n:]
		default:
			return fmt.Errorf("xz: %w: LZMA2 chunk type %#x", errXZFormat, c)
		}
		if out > int64(limit) {
			return ErrDecompressedTooLarge
		}
	}
}

// lzmaLiteralCap refuses LZMA properties (the lc, lp, pb byte) whose
// literal probability tables, 0x300 << (lc+lp) entries, would exceed
// LZMA2's bound lc+lp <= 4 (24 KiB); lc=3, lp=0 is what xz and Python
// write. An invalid byte is left to the decoder to refuse.
func lzmaLiteralCap(props byte) error {
	lc, lp := int(props%9), int(props/9%5)
	if props < 9*5*5 && lc+lp > 4 {
		return fmt.Errorf("%w: lzma: properties lc=%d lp=%d ask for literal tables over the lc+lp<=4 cap", ErrDecoderLimit, lc, lp)
	}
	return nil
}

func uvarint(b []byte) (uint64, []byte, error) {
	v, n := binary.Uvarint(b)
	if n <= 0 || n > 9 {
		return 0, nil, fmt.Errorf("xz: %w: bad integer", errXZFormat)
	}
	return v, b[n:], nil
}

func (r *xzReader) Read(p []byte) (int, error) {
	if r.done {
		return 0, io.EOF
	}
	n, err := r.lz.Read(p)
	if n > 0 {
		r.n += int64(n)
		if r.check != nil {
			r.check.Write(p[:n])
		}
	}
	if errors.Is(err, io.EOF) {
		if err := r.finish(); err != nil {
			return n, err
		}
		r.done = true
		return n, io.EOF
	}
	if err != nil {
		return n, fmt.Errorf("xz: %w", err)
	}
	return n, nil
}

// finish checks what follows the block's data: its padding, its check, and
// then that the index comes next (one block per stream is read; a second
// block is refused, since each would size a dictionary of its own).
func (r *xzReader) finish() error {
	if r.unSize >= 0 && r.unSize != r.n {
		return fmt.Errorf("xz: %w: block size", errXZFormat)
	}
	used := int(r.src.Size()) - r.src.Len()
	for used%4 != 0 {
		b, err := r.src.ReadByte()
		if err != nil || b != 0 {
			return fmt.Errorf("xz: %w: block padding", errXZFormat)
		}
		used++
	}
	if r.sum > 0 {
		want := make([]byte, r.sum)
		if _, err := io.ReadFull(r.src, want); err != nil {
			return fmt.Errorf("xz: %w: block check cut", errXZFormat)
		}
		got := r.check.Sum(nil)
		if r.sum <= 8 { // CRC32 and CRC64 are stored little-endian; Sum is big-endian
			slices.Reverse(got)
		}
		if !bytes.Equal(got, want) {
			return fmt.Errorf("xz: %w", errXZChecksum)
		}
	}
	next, err := r.src.ReadByte()
	if err != nil {
		return fmt.Errorf("xz: %w: index missing", errXZFormat)
	}
	if next != 0 {
		return fmt.Errorf("%w: xz: more than one block in the stream", ErrDecoderLimit)
	}
	return nil
}

// lzmaDictFor is the dictionary given to an LZMA decoder whose stream
// announces dict bytes when at most limit bytes of output are read:
// nothing is kept further back than the output itself.
func lzmaDictFor(dict int64, limit int) int {
	n := min(dict, int64(limit)+1)
	return int(max(n, lzma.MinDictCap))
}

// newLZMAAloneReader reads the .lzma ("alone") header, checks the
// announced dictionary against maxLZMADict, and hands the decoder a copy of
// the header whose dictionary is cut to the output that will be read.
func newLZMAAloneReader(body []byte, limit int) (io.Reader, error) {
	if len(body) < lzma.HeaderLen {
		return nil, fmt.Errorf("lzma: header cut (%d bytes)", len(body))
	}
	// The format has no magic: what is not a plausible header (invalid
	// properties, a size past the decoder's pebibyte) is no .lzma stream,
	// before any cap is read from it.
	if size := binary.LittleEndian.Uint64(body[5:13]); body[0] >= 9*5*5 || (size != ^uint64(0) && size > 1<<50) {
		return nil, fmt.Errorf("lzma: not an .lzma header")
	}
	if err := lzmaLiteralCap(body[0]); err != nil {
		return nil, err
	}
	dict := int64(binary.LittleEndian.Uint32(body[1:5]))
	if dict > maxLZMADict {
		return nil, fmt.Errorf("%w: lzma: the header asks for a %s dictionary, over the %s cap",
			ErrDecoderLimit, sizeText(dict), sizeText(maxLZMADict))
	}
	hdr := make([]byte, lzma.HeaderLen)
	copy(hdr, body)
	binary.LittleEndian.PutUint32(hdr[1:5], uint32(lzmaDictFor(dict, limit))) //nolint:gosec // G115: at most the limit + 1, itself below maxLZMADict (a uint32)
	src := io.MultiReader(bytes.NewReader(hdr), bytes.NewReader(body[lzma.HeaderLen:]))
	r, err := lzma.ReaderConfig{DictCap: maxLZMADict}.NewReader(src)
	if err != nil {
		return nil, fmt.Errorf("lzma: %w", err)
	}
	return r, nil
}

// sizeText writes a byte count for an error message: in MiB or GiB when it
// is a whole number of them.
func sizeText(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d-byte", n)
}
