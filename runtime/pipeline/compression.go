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
	"github.com/ulikunitz/xz"
	"github.com/ulikunitz/xz/lzma"
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

// ErrUnknownCompression: the compression header names no codec this
// collector reads.
var ErrUnknownCompression = errors.New("unknown compression")

// ErrDecompressedTooLarge: the body inflates past the body limit (a
// compression bomb, or a notification larger than any real one).
var ErrDecompressedTooLarge = errors.New("decompressed body over the limit")

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
		zstd.WithDecoderMaxWindow(8<<20))
	if err != nil {
		return err
	}
	return d
}}

// Decompress appends to dst the body inflated by the codec its compression
// header names, reading at most limit bytes of output: a body that inflates
// further returns ErrDecompressedTooLarge without reading the rest, so a
// compression bomb costs at most limit bytes of memory and the codec's own
// bounded state. Errors never quote the body.
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
			return dst, fmt.Errorf("zstd: %w", err)
		}
		return readLimited(dst, codec, d, limit)
	}
	r, err := reader(codec, body)
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
	case err != nil:
		return dst, fmt.Errorf("%s: %w", codec, err)
	}
	return buf.Bytes(), nil
}

func reader(codec string, body []byte) (io.Reader, error) {
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
		if bytes.HasPrefix(body, []byte{0xfd, '7', 'z', 'X', 'Z', 0x00}) {
			r, err := xz.ReaderConfig{SingleStream: true}.NewReader(src)
			if err != nil {
				return nil, fmt.Errorf("xz: %w", err)
			}
			return r, nil
		}
		r, err := lzma.ReaderConfig{DictCap: 8 << 20}.NewReader(src)
		if err != nil {
			return nil, fmt.Errorf("lzma: %w", err)
		}
		return r, nil
	case CodecBrotli:
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
