package pipeline_test

import (
	"compress/gzip"
	"compress/zlib"
	"io"
	"testing"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/runtime/pipeline"
)

// Each codec's fuzz target decodes arbitrary bodies with a 64 KiB output
// limit and asserts what Decompress promises: no panic, never more output
// than the limit, and never more allocated than the codec's stated bound
// (pipeline.DecoderMemory) plus a slack for the runtime's own small
// allocations. The seeds are ordinary streams and header bombs; the
// committed corpus is under testdata/fuzz/<target>.

const (
	fuzzLimit = 64 << 10
	fuzzSlack = 256 << 10
)

func fuzzDecoder(f *testing.F, codec string, seeds ...[]byte) {
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var out []byte
		var err error
		alloc := allocated(func() { out, err = pipeline.Decompress(nil, codec, body, fuzzLimit) })
		if err == nil && len(out) > fuzzLimit {
			t.Fatalf("%d bytes of output past the %d-byte limit", len(out), fuzzLimit)
		}
		if bound := pipeline.DecoderMemory(codec, fuzzLimit) + fuzzSlack; int64(alloc) > bound {
			t.Fatalf("%s: %d bytes allocated decoding %d bytes (%v), over the bound %d", codec, alloc, len(body), err, bound)
		}
	})
}

// fuzzPlain is an ordinary body to compress, a bomb's worth of zeros, and
// their compressed forms by the Go encoders.
var (
	fuzzPlain = []byte(`{"oslo.version":"2.0","oslo.message":"{\"event_type\":\"compute.instance.exists\",\"payload\":{}}"}`)
	fuzzZeros = make([]byte, 256<<10)
)

func gzipOf(tb testing.TB, b []byte) []byte {
	return testkit.CompressWith(tb, b, func(w io.Writer) (io.WriteCloser, error) { return gzip.NewWriter(w), nil })
}

func zlibOf(tb testing.TB, b []byte) []byte {
	return testkit.CompressWith(tb, b, func(w io.Writer) (io.WriteCloser, error) { return zlib.NewWriter(w), nil })
}

// xzOf and lzmaOf are ordinary streams: an 8 MiB dictionary announced, as
// Python's lzma module writes.
func xzOf(t testing.TB, b []byte) []byte   { return testkit.XZDictBomb(t, b, 22) }
func lzmaOf(t testing.TB, b []byte) []byte { return testkit.LZMADictBomb(t, b, 8<<20) }

func FuzzDecompressGzip(f *testing.F) {
	fuzzDecoder(f, pipeline.CodecGzip, gzipOf(f, fuzzPlain), zlibOf(f, fuzzPlain), zlibOf(f, fuzzZeros))
}

func FuzzDecompressBzip2(f *testing.F) {
	// bzip2 -9 of a short text and of 1 MiB of zeros (committed corpus).
	fuzzDecoder(f, pipeline.CodecBzip2, []byte("BZh91AY&SY"))
}

func FuzzDecompressXZ(f *testing.F) {
	fuzzDecoder(f, pipeline.CodecLZMA, xzOf(f, fuzzPlain), xzOf(f, fuzzZeros), xzBomb(f))
}

func FuzzDecompressLZMA(f *testing.F) {
	fuzzDecoder(f, pipeline.CodecLZMA, lzmaOf(f, fuzzPlain), lzmaOf(f, fuzzZeros), lzmaBomb(f))
}

func FuzzDecompressZstd(f *testing.F) {
	fuzzDecoder(f, pipeline.CodecZstd, zstdCompress(f, fuzzPlain), zstdCompress(f, fuzzZeros), zstdBomb())
}

func FuzzDecompressBrotli(f *testing.F) {
	fuzzDecoder(f, pipeline.CodecBrotli, brotliCompress(f, fuzzPlain), brotliCompress(f, fuzzZeros),
		testkit.BrotliLargeWindow())
}
