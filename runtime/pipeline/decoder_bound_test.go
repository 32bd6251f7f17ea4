package pipeline_test

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"runtime"
	"testing"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/runtime/pipeline"
)

// bombPayload is what the bombs below inflate to: a short, ordinary
// notification, so that only their headers are hostile.
var bombPayload = []byte(`{"event_type":"compute.instance.exists","payload":{"instance_id":"x"}}`)

func xzBomb(t testing.TB) []byte   { return testkit.XZDictBomb(t, bombPayload, 40) }
func lzmaBomb(t testing.TB) []byte { return testkit.LZMADictBomb(t, bombPayload, 0xffffffff) }
func zstdBomb() []byte             { return testkit.ZstdSegmentBomb(bombPayload) }

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
		{"brotli, large window", pipeline.CodecBrotli, testkit.BrotliLargeWindow()},
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
			body = testkit.XZDictBomb(t, bombPayload, 28) // 64 MiB
		} else {
			body = testkit.LZMADictBomb(t, bombPayload, pipeline.MaxLZMADict)
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

// The .xz container read by the collector itself decodes what xz writes,
// with every check type, verifies the check, and refuses a second block
// (each would size a dictionary of its own) as over the decoder's cap.
func TestXZContainer(t *testing.T) {
	xzBin := testkit.LookPath(t, "xz", "xz-utils")
	plain := body(t, "v2_nova_exists.body")
	xzc := func(args ...string) []byte {
		cmd := exec.Command(xzBin, append([]string{"-c"}, args...)...)
		cmd.Stdin = bytes.NewReader(plain)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("xz %v: %v", args, err)
		}
		return out
	}
	for _, check := range []string{"none", "crc32", "crc64", "sha256"} {
		out, err := pipeline.Decompress(nil, pipeline.CodecLZMA, xzc("--check="+check), 1<<20)
		if err != nil || !bytes.Equal(out, plain) {
			t.Errorf("check %s: %d bytes, %v", check, len(out), err)
		}
	}
	bad := xzc("--check=crc64")
	bad[len(bad)/2] ^= 0x01 // in the compressed data: an error, or a check that does not match
	if _, err := pipeline.Decompress(nil, pipeline.CodecLZMA, bad, 1<<20); err == nil {
		t.Error("a damaged stream decoded")
	}
	if _, err := pipeline.Decompress(nil, pipeline.CodecLZMA, xzc("--block-size=512"), 1<<20); !errors.Is(err, pipeline.ErrDecoderLimit) {
		t.Errorf("two blocks: %v, want ErrDecoderLimit", err)
	}
}
