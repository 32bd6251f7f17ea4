package pipeline_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"hash/crc32"
	"runtime"
	"testing"

	"github.com/ulikunitz/xz"
	"github.com/ulikunitz/xz/lzma"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/runtime/pipeline"
)

// bombPayload is what the bombs below inflate to: a short, ordinary
// notification, so that only their headers are hostile.
var bombPayload = []byte(`{"event_type":"compute.instance.exists","payload":{"instance_id":"x"}}`)

// xzBomb is a valid .xz stream (one block, CRC64) whose LZMA2 filter
// announces the largest dictionary the format encodes, 4 GiB.
func xzBomb(t testing.TB) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := xz.WriterConfig{DictCap: lzma.MinDictCap}.NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	w.Write(bombPayload)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	// The block header follows the 12-byte stream header: its size byte,
	// flags, then the filter flags 0x21 0x01 <dictionary code>, padding and
	// a CRC32 of what precedes it.
	hlen := (int(b[12]) + 1) * 4
	hdr := b[12 : 12+hlen]
	i := bytes.Index(hdr, []byte{0x21, 0x01})
	if i < 0 {
		t.Fatalf("no LZMA2 filter in the block header % x", hdr)
	}
	hdr[i+2] = 40 // 4 GiB - 1
	binary.LittleEndian.PutUint32(hdr[hlen-4:], crc32.ChecksumIEEE(hdr[:hlen-4]))
	return b
}

// lzmaBomb is a valid .lzma ("alone") stream of unknown size whose header
// announces a 4 GiB dictionary.
func lzmaBomb(t testing.TB) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := lzma.WriterConfig{DictCap: lzma.MinDictCap, SizeInHeader: false, EOSMarker: true}.NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	w.Write(bombPayload)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	binary.LittleEndian.PutUint32(b[1:5], 0xffffffff)
	return b
}

// zstdBomb is a zstd frame of one raw block whose single-segment header
// announces a 4 GiB content size, which stands for the window.
func zstdBomb() []byte {
	b := []byte{0x28, 0xb5, 0x2f, 0xfd, 0xe0} // magic; single segment, 8-byte content size
	b = binary.LittleEndian.AppendUint64(b, 4<<30)
	n := len(bombPayload)
	b = append(b, byte(n<<3|1), byte(n>>5), byte(n>>13)) // last, raw
	return append(b, bombPayload...)
}

// allocated runs f and returns the bytes the heap allocated meanwhile
// (TotalAlloc counts every allocation, whether collected since or not).
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// A body of a few dozen bytes whose header announces gigabytes of
// decoder state is refused from its header, before anything is sized:
// reason decoder_limit, counted, and a few kilobytes allocated.
func TestDecoderHeaderBombsAreRefusedBeforeTheyAllocate(t *testing.T) {
	f := newFixture(t, pipeline.Options{})
	bombs := []struct {
		name, codec string
		body        []byte
	}{
		{"xz, LZMA2 dictionary 4 GiB", pipeline.CodecLZMA, xzBomb(t)},
		{"lzma alone, dictionary 4 GiB", pipeline.CodecLZMA, lzmaBomb(t)},
		{"zstd, single segment of 4 GiB", pipeline.CodecZstd, zstdBomb()},
		{"brotli, large window", pipeline.CodecBrotli, []byte{0x11, 0x3e, 0x00, 0x00}},
	}
	for _, b := range bombs {
		var got pipeline.Result
		alloc := allocated(func() {
			got = f.p.Process(context.Background(), pipeline.Message{Body: b.body, Compression: b.codec,
				Exchange: "nova", RoutingKey: "notifications.info"})
		})
		t.Logf("%s: %d bytes, %d bytes allocated, %v %q %v", b.name, len(b.body), alloc, got.Outcome, got.Reason, got.Err)
		if got.Outcome != pipeline.Unparseable || got.Reason != pipeline.ReasonDecoderLimit {
			t.Errorf("%s: %v %q %v, want unparseable %q", b.name, got.Outcome, got.Reason, got.Err, pipeline.ReasonDecoderLimit)
		}
		if alloc > 1<<20 {
			t.Errorf("%s: %d MiB allocated to refuse a %d-byte body", b.name, alloc>>20, len(b.body))
		}
	}
	if got := testkit.Metric(t, f.reg, "tally_collector_unparseable_total", pipeline.ReasonDecoderLimit); got != float64(len(bombs)) {
		t.Errorf(`unparseable_total{reason="decoder_limit"} = %v, want %d`, got, len(bombs))
	}
}

// A header within the caps still decodes with a dictionary no larger than
// the output read: an .xz or .lzma stream announcing 64 MiB (xz's preset 9)
// maps like the plain body and allocates about the body limit, not 64 MiB.
func TestLZMADictionaryIsCutToTheOutput(t *testing.T) {
	for _, name := range []string{"xz", "lzma"} {
		var body []byte
		if name == "xz" {
			body = xzBomb(t)
			hlen := (int(body[12]) + 1) * 4
			hdr := body[12 : 12+hlen]
			i := bytes.Index(hdr, []byte{0x21, 0x01})
			hdr[i+2] = 28 // 64 MiB
			binary.LittleEndian.PutUint32(hdr[hlen-4:], crc32.ChecksumIEEE(hdr[:hlen-4]))
		} else {
			body = lzmaBomb(t)
			binary.LittleEndian.PutUint32(body[1:5], pipeline.MaxLZMADict)
		}
		var out []byte
		var err error
		alloc := allocated(func() { out, err = pipeline.Decompress(nil, pipeline.CodecLZMA, body, 1<<20) })
		if err != nil || !bytes.Equal(out, bombPayload) {
			t.Errorf("%s: %q %v", name, out, err)
		}
		if alloc > 2<<20 {
			t.Errorf("%s: %d MiB allocated for a 64 MiB dictionary, want about the 1 MiB limit", name, alloc>>20)
		}
	}
}
