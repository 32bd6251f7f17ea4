package testkit

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"io"
	"testing"

	"github.com/ulikunitz/xz"
	"github.com/ulikunitz/xz/lzma"
)

// Compressed bodies whose headers ask the decoder for gigabytes while the
// data inflates to payload: what a hostile publisher sends with kombu's
// "compression" header.

// XZDictBomb is a valid .xz stream (one block, CRC64) of payload whose
// LZMA2 filter announces dictCode's dictionary (xz-file-format's encoding:
// 40 is 4 GiB - 1, 28 is 64 MiB).
func XZDictBomb(tb testing.TB, payload []byte, dictCode byte) []byte {
	tb.Helper()
	b := CompressWith(tb, payload, func(w io.Writer) (io.WriteCloser, error) {
		return xz.WriterConfig{DictCap: lzma.MinDictCap}.NewWriter(w)
	})
	// The block header follows the 12-byte stream header: its size byte,
	// flags, the filter flags 0x21 0x01 <dictionary code>, padding, and a
	// CRC32 of what precedes it.
	hlen := (int(b[12]) + 1) * 4
	hdr := b[12 : 12+hlen]
	i := bytes.Index(hdr, []byte{0x21, 0x01})
	if i < 0 {
		tb.Fatalf("no LZMA2 filter in the block header % x", hdr)
	}
	hdr[i+2] = dictCode
	binary.LittleEndian.PutUint32(hdr[hlen-4:], crc32.ChecksumIEEE(hdr[:hlen-4]))
	return b
}

// LZMADictBomb is a valid .lzma ("alone") stream of payload, of unknown
// size, whose header announces a dictionary of dict bytes.
func LZMADictBomb(tb testing.TB, payload []byte, dict uint32) []byte {
	tb.Helper()
	b := CompressWith(tb, payload, func(w io.Writer) (io.WriteCloser, error) {
		return lzma.WriterConfig{DictCap: lzma.MinDictCap, EOSMarker: true}.NewWriter(w)
	})
	binary.LittleEndian.PutUint32(b[1:5], dict)
	return b
}

// compressWith writes payload through the writer newWriter makes.
func CompressWith(tb testing.TB, payload []byte, newWriter func(io.Writer) (io.WriteCloser, error)) []byte {
	tb.Helper()
	var buf bytes.Buffer
	w, err := newWriter(&buf)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := w.Write(payload); err != nil {
		tb.Fatal(err)
	}
	if err := w.Close(); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

// ZstdSegmentBomb is a zstd frame of payload in one raw block whose
// single-segment header announces a content size of 4 GiB, which stands for
// the window.
func ZstdSegmentBomb(payload []byte) []byte {
	b := []byte{0x28, 0xb5, 0x2f, 0xfd, 0xe0} // magic; single segment, 8-byte content size
	b = binary.LittleEndian.AppendUint64(b, 4<<30)
	n := len(payload)
	b = append(b, byte(n<<3|1), byte(n>>5), byte(n>>13)) // last, raw
	return append(b, payload...)
}

// BrotliLargeWindow is the start of a brotli stream that asks for the
// large-window extension (RFC 7932 leaves it out; windows up to 1 GiB).
func BrotliLargeWindow() []byte { return []byte{0x11, 0x3e, 0x00, 0x00} }
