package pipeline

import (
	"bytes"
	"compress/bzip2"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/zstd"
)

// Codecs of kombu's compression registry (kombu/compression.py), which
// oslo.messaging's kombu_compression option names. kombu writes the content
// type into the message's "compression" header; the aliases are accepted too,
// in case a publisher writes them.
//
//	content type           aliases            what kombu calls
//	application/x-gzip     gzip, zlib         zlib.compress (a zlib stream, despite the name)
//	application/x-bz2      bzip2, bzip        bz2.compress
//	application/x-lzma     lzma, xz           lzma.compress (the .xz container)
//	application/x-brotli   brotli             brotli.compress (when python3-brotli is installed)
//	application/zstd       zstd, zstandard    zstandard (when python3-zstandard is installed)
const (
	CodecGzip   = "application/x-gzip"
	CodecBzip2  = "application/x-bz2"
	CodecLZMA   = "application/x-lzma"
	CodecBrotli = "application/x-brotli"
	CodecZstd   = "application/zstd"
)

// Memory caps of the decoders, enforced on what a body's header announces
// before any buffer is sized. A header asking for more is refused with
// ErrDecoderLimit. docs/broker.md, section 4, states them for operators.
const (
	// maxLZMADict is the largest dictionary an .xz LZMA2 filter or an .lzma
	// header may announce: xz's preset 9 (Python's lzma.compress writes
	// preset 6, 8 MiB). The dictionary actually allocated is at most the
	// body limit plus one byte (see lzmaDictFor).
	maxLZMADict = 64 << 20
	// maxZstdWindow is the largest zstd window a frame may announce, its
	// content size included for a single-segment frame (the 8 MiB the zstd
	// format recommends decoders to support).
	maxZstdWindow = 8 << 20
	// maxBrotliWindowBits is the largest brotli window (16 MiB, the
	// standard's largest); the large-window extension is refused.
	maxBrotliWindowBits = 24
)

// codecOf returns the canonical content type of a compression header value.
func codecOf(header string) (string, bool) {
	switch strings.ToLower(strings.TrimSpace(header)) {
	case CodecGzip, "gzip", "zlib":
		return CodecGzip, true
	case CodecBzip2, "bzip2", "bzip", "bz2":
		return CodecBzip2, true
	case CodecLZMA, "lzma", "xz":
		return CodecLZMA, true
	case CodecBrotli, "brotli":
		return CodecBrotli, true
	case CodecZstd, "zstd", "zstandard":
		return CodecZstd, true
	}
	return "", false
}

// zstdDecoders are reused: a decoder's setup is costly. Each is a streaming
// reader, so its output is bounded by the caller's limit whatever size the
// frame header claims.
var zstdDecoders = sync.Pool{New: func() any {
	d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
		zstd.WithDecoderMaxWindow(maxZstdWindow), zstd.WithDecoderMaxMemory(maxZstdWindow))
	if err != nil {
		return err
	}
	return d
}}

// Decompress appends to dst the body inflated by the codec its compression
// header names, reading at most limit bytes of output: a body that inflates
// further returns ErrDecompressedTooLarge without reading the rest, so a
// compression bomb costs at most limit bytes of memory and the codec's own
// bounded state. A body whose header asks the decoder for more memory than
// its cap (maxLZMADict, maxZstdWindow, maxBrotliWindowBits) returns
// ErrDecoderLimit before any buffer is sized. Errors never quote the body.
func Decompress(dst []byte, header string, body []byte, limit int) ([]byte, error) {
	codec, ok := codecOf(header)
	if !ok {
		return dst, fmt.Errorf("%w %q", ErrUnknownCompression, cut(header, 64))
	}
	if codec == CodecZstd {
		v := zstdDecoders.Get()
		d, ok := v.(*zstd.Decoder)
		if !ok {
			return dst, fmt.Errorf("zstd: %w", v.(error))
		}
		defer zstdDecoders.Put(d)
		if err := d.Reset(bytes.NewReader(body)); err != nil {
			return dst, zstdError(err)
		}
		out, err := readLimited(dst, codec, d, limit)
		if err != nil && !errors.Is(err, ErrDecompressedTooLarge) {
			return out, zstdError(err)
		}
		return out, err
	}
	r, err := reader(codec, body, limit)
	if err != nil {
		return dst, err
	}
	return readLimited(dst, codec, r, limit)
}

// readLimited appends what r yields to dst, reading at most limit+1 bytes.
func readLimited(dst []byte, codec string, r io.Reader, limit int) ([]byte, error) {
	buf := bytes.NewBuffer(dst)
	n, err := buf.ReadFrom(io.LimitReader(r, int64(limit)+1))
	switch {
	case n > int64(limit):
		return dst, ErrDecompressedTooLarge
	case errors.Is(err, ErrDecoderLimit):
		return dst, err
	case err != nil:
		return dst, fmt.Errorf("%s: %w", codec, err)
	}
	return buf.Bytes(), nil
}

// zstdError names a frame refused at the window cap as ErrDecoderLimit.
func zstdError(err error) error {
	if errors.Is(err, zstd.ErrWindowSizeExceeded) || errors.Is(err, zstd.ErrDecoderSizeExceeded) {
		return fmt.Errorf("%w: zstd: the frame asks for a window over the %s cap (%w)",
			ErrDecoderLimit, sizeText(maxZstdWindow), err)
	}
	return fmt.Errorf("zstd: %w", err)
}

// brotliWindowBits reads the window size (WBITS) from the first bits of a
// brotli stream, as RFC 7932 section 9.1 encodes it; large reports the
// large-window extension's marker.
func brotliWindowBits(body []byte) (bits int, large bool, err error) {
	if len(body) == 0 {
		return 0, false, errors.New("brotli: empty body")
	}
	v := uint16(body[0])
	if len(body) > 1 {
		v |= uint16(body[1]) << 8
	}
	if v&1 == 0 {
		return 16, false, nil
	}
	if n := (v >> 1) & 7; n != 0 {
		return 17 + int(n), false, nil
	}
	switch n := (v >> 4) & 7; n {
	case 0:
		return 17, false, nil
	case 1:
		return 0, true, nil
	default:
		return 8 + int(n), false, nil
	}
}

func reader(codec string, body []byte, limit int) (io.Reader, error) {
	src := bytes.NewReader(body)
	switch codec {
	case CodecGzip:
		// kombu's "gzip" is a zlib stream; a real gzip member is read too.
		if len(body) >= 2 && body[0] == 0x1f && body[1] == 0x8b {
			r, err := gzip.NewReader(src)
			if err != nil {
				return nil, fmt.Errorf("gzip: %w", err)
			}
			return r, nil
		}
		r, err := zlib.NewReader(src)
		if err != nil {
			return nil, fmt.Errorf("zlib: %w", err)
		}
		return r, nil
	case CodecBzip2:
		return bzip2.NewReader(src), nil
	case CodecLZMA:
		// Python's lzma.compress writes the .xz container; the older .lzma
		// ("alone") format is read too.
		if bytes.HasPrefix(body, xzMagic) {
			return newXZReader(body, limit)
		}
		return newLZMAAloneReader(body, limit)
	case CodecBrotli:
		bits, large, err := brotliWindowBits(body)
		switch {
		case err != nil:
			return nil, err
		case large || bits > maxBrotliWindowBits:
			return nil, fmt.Errorf("%w: brotli: the stream asks for a large window, over the %s cap",
				ErrDecoderLimit, sizeText(1<<maxBrotliWindowBits))
		}
		return brotli.NewReader(src), nil
	}
	return nil, fmt.Errorf("%w %q", ErrUnknownCompression, codec)
}

func cut(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
