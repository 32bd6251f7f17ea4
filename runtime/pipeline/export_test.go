package pipeline

// The bound below is what the decoders' fuzz test holds each Decompress to;
// the product needs no function for it: each decoder is built within it.

// DecoderMemory is the memory one Decompress of codec may allocate with
// the given output limit, decoder state and output buffer together (docs/broker.md,
// section 4, gives the same figures):
//
//	gzip, zlib  128 KiB     a 32 KiB window and Huffman tables
//	bzip2       4 MiB       the block (900 kB at most, as 32-bit entries)
//	xz, lzma    limit + 128 KiB  the dictionary cut to the output, literal tables (lc+lp <= 4)
//	zstd        10 MiB      the window (maxZstdWindow) and block buffers
//	brotli      17 MiB      the ring buffer (1 << maxBrotliWindowBits) and tables
//
// plus 4 × (limit+1) for the output as it grows. An unknown codec allocates
// nothing.
func DecoderMemory(codec string, limit int) int64 {
	c, ok := codecOf(codec)
	if !ok {
		return 0
	}
	var state int64
	switch c {
	case CodecGzip:
		state = 128 << 10
	case CodecBzip2:
		state = 4 << 20
	case CodecLZMA:
		state = int64(limit) + 1 + 128<<10
	case CodecZstd:
		state = maxZstdWindow + 2<<20
	case CodecBrotli:
		state = 1<<maxBrotliWindowBits + 1<<20
	}
	return state + 4*(int64(limit)+1)
}

// MaxLZMADict is maxLZMADict, for the test that builds a bomb just past it.
const MaxLZMADict = maxLZMADict
