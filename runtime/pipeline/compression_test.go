package pipeline_test

import (
	"bytes"
	"compress/zlib"
	"context"
	"errors"
	"io"
	"os/exec"
	"runtime"
	"testing"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/zstd"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/runtime/pipeline"
)

// kombuCompress compresses body with the real kombu.compression.compress, as
// oslo.messaging does with kombu_compression set, and returns the bytes and
// the content type kombu puts into the "compression" header.
func kombuCompress(t testing.TB, alias string, body []byte) ([]byte, string) {
	t.Helper()
	const prog = `import sys, kombu.compression as c
body = sys.stdin.buffer.read()
out, ctype = c.compress(body, sys.argv[1])
sys.stderr.write(ctype)
sys.stdout.buffer.write(out)`
	cmd := exec.Command("/usr/bin/python3", "-c", prog, alias)
	cmd.Stdin = bytes.NewReader(body)
	var ctype bytes.Buffer
	cmd.Stderr = &ctype
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kombu %s: %v %s (needs the Debian package python3-kombu)", alias, err, ctype.String())
	}
	return out, ctype.String()
}

func zstdCompress(t testing.TB, b []byte) []byte {
	t.Helper()
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	return enc.EncodeAll(b, nil)
}

func brotliCompress(t testing.TB, b []byte) []byte {
	t.Helper()
	return testkit.CompressWith(t, b, func(w io.Writer) (io.WriteCloser, error) { return brotli.NewWriter(w), nil })
}

// Every codec Debian's kombu offers to kombu_compression maps like the plain
// body: gzip (kombu's zlib stream), bzip2 and lzma through kombu itself; zstd
// and brotli, which kombu offers once their Python modules are installed,
// through the same libraries' Go encoders.
func TestCompressedBodiesMapLikePlainOnes(t *testing.T) {
	f := newFixture(t, pipeline.Options{})
	plain := body(t, "v2_nova_exists.body")
	want := f.p.Process(context.Background(), pipeline.Message{Body: plain, Exchange: "nova", RoutingKey: "notifications.info"})
	if want.Outcome != pipeline.Mapped || len(want.Events) != 1 {
		t.Fatalf("plain body: %v %q %v", want.Outcome, want.Reason, want.Err)
	}
	type tc struct {
		name, header string
		body         []byte
	}
	var cases []tc
	for _, alias := range []string{"gzip", "zlib", "bzip2", "lzma", "xz"} {
		b, ctype := kombuCompress(t, alias, plain)
		cases = append(cases, tc{"kombu " + alias, ctype, b})
	}
	cases = append(cases,
		tc{"zstd", pipeline.CodecZstd, zstdCompress(t, plain)},
		tc{"brotli", pipeline.CodecBrotli, brotliCompress(t, plain)},
		tc{"alias gzip", "gzip", func() []byte { b, _ := kombuCompress(t, "gzip", plain); return b }()},
	)
	for _, c := range cases {
		got := f.p.Process(context.Background(), pipeline.Message{Body: c.body, Compression: c.header,
			Exchange: "nova", RoutingKey: "notifications.info"})
		if got.Outcome != pipeline.Mapped || len(got.Events) != 1 {
			t.Errorf("%s (%s): %v %q %v", c.name, c.header, got.Outcome, got.Reason, got.Err)
			continue
		}
		if !bytes.Equal(got.Events[0], want.Events[0]) {
			t.Errorf("%s: event differs from the plain body's:\n%s\n%s", c.name, got.Events[0], want.Events[0])
		}
	}
}

// A body that does not inflate, or names a codec nobody registered, is
// Unparseable with its own reason (the broker dead-letters it).
func TestBadCompressionIsUnparseable(t *testing.T) {
	f := newFixture(t, pipeline.Options{})
	plain := body(t, "v2_nova_exists.body")
	for _, c := range []struct{ header, reason string }{
		{pipeline.CodecGzip, pipeline.ReasonBadCompression},
		{pipeline.CodecBzip2, pipeline.ReasonBadCompression},
		{pipeline.CodecLZMA, pipeline.ReasonBadCompression},
		{pipeline.CodecZstd, pipeline.ReasonBadCompression},
		{pipeline.CodecBrotli, pipeline.ReasonBadCompression},
		{"application/x-snappy", pipeline.ReasonBadCompression},
	} {
		got := f.p.Process(context.Background(), pipeline.Message{Body: plain, Compression: c.header})
		if got.Outcome != pipeline.Unparseable || got.Reason != c.reason || got.Err == nil {
			t.Errorf("%s over a plain body: %v %q %v", c.header, got.Outcome, got.Reason, got.Err)
		}
		if got.Err != nil && bytes.Contains([]byte(got.Err.Error()), plain[:40]) {
			t.Errorf("%s: the error quotes the body: %v", c.header, got.Err)
		}
	}
	if got := testkit.Metric(t, f.reg, "tally_collector_unparseable_total", pipeline.ReasonBadCompression); got != 6 {
		t.Errorf(`unparseable_total{reason="bad_compression"} = %v, want 6`, got)
	}
	_, err := pipeline.Decompress(nil, "application/x-snappy", []byte("x"), 10)
	if !errors.Is(err, pipeline.ErrUnknownCompression) {
		t.Errorf("unknown codec: %v", err)
	}
}

// A compression bomb (64 MiB of zeros in about 64 KiB) is refused once the
// output passes the body limit: reason decompressed_too_large, and the memory
// it costs stays near the limit, not the bomb's size.
func TestCompressionBombIsBounded(t *testing.T) {
	const inflated = 64 << 20
	var zb bytes.Buffer
	w, _ := zlib.NewWriterLevel(&zb, zlib.BestCompression)
	zero := make([]byte, 1<<20)
	for range inflated >> 20 {
		w.Write(zero)
	}
	w.Close()
	bombs := map[string][]byte{
		pipeline.CodecGzip: zb.Bytes(),
		pipeline.CodecZstd: zstdCompress(t, make([]byte, inflated)),
	}
	bz, ctype := kombuCompress(t, "bzip2", make([]byte, 16<<20))
	bombs[ctype] = bz

	f := newFixture(t, pipeline.Options{})
	for codec, b := range bombs {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		got := f.p.Process(context.Background(), pipeline.Message{Body: b, Compression: codec})
		runtime.ReadMemStats(&after)
		if got.Outcome != pipeline.Unparseable || got.Reason != pipeline.ReasonDecompressedTooLarge {
			t.Errorf("%s bomb of %d bytes: %v %q %v", codec, len(b), got.Outcome, got.Reason, got.Err)
		}
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 24<<20 {
			t.Errorf("%s bomb: %d MiB allocated to refuse it, want it bounded near the 1 MiB limit", codec, alloc>>20)
		}
	}
}
