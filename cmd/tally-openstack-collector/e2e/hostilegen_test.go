package e2e

// The hostile publisher's generator: notifications along every dimension a
// publisher controls, seeded so that a run can be replayed.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/tally-billing/tally-openstack-collector/runtime"
	"github.com/tally-billing/tally-openstack-collector/runtime/pipeline"
)

// hostileNote is one notification of the generator, before it is written
// as a body: oslo's envelope around an inner message whose members the
// publisher chose. payload is raw JSON text, which need not be what
// encoding/json would accept (nesting deeper than its limit, numbers no
// float64 holds).
type hostileNote struct {
	dim         string // the dimension it stresses, named in logs and failures
	exchange    string
	messageID   string
	publisherID string
	eventType   string
	payload     []byte
}

// body is the note as oslo's messagingv2 driver writes it: the inner
// message as a JSON string inside the envelope.
func (h hostileNote) body() []byte {
	var in bytes.Buffer
	in.WriteString(`{"message_id":`)
	in.Write(jsonString(h.messageID))
	in.WriteString(`,"publisher_id":`)
	in.Write(jsonString(h.publisherID))
	in.WriteString(`,"event_type":`)
	in.Write(jsonString(h.eventType))
	in.WriteString(`,"priority":"INFO","timestamp":"2026-01-01 00:00:00.000000","payload":`)
	in.Write(h.payload)
	in.WriteString(`}`)
	var out bytes.Buffer
	out.WriteString(`{"oslo.version":"2.0","oslo.message":`)
	out.Write(jsonString(in.String()))
	out.WriteString(`}`)
	return out.Bytes()
}

// jsonString is s as a JSON string, without HTML escaping, so that a
// string of n plain letters is n+2 bytes at each level of quoting.
func jsonString(s string) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// withMember is the JSON object obj with member key set to raw, appended
// last: a member named twice counts last, so the hostile value is the one
// the collector sees, and the duplicate is exercised too.
func withMember(obj []byte, key string, raw []byte) []byte {
	obj = bytes.TrimSpace(obj)
	var b bytes.Buffer
	b.Write(obj[:len(obj)-1])
	if len(bytes.TrimSpace(obj[1:len(obj)-1])) > 0 {
		b.WriteByte(',')
	}
	b.Write(jsonString(key))
	b.WriteByte(':')
	b.Write(raw)
	b.WriteByte('}')
	return b.Bytes()
}

// hostileGen makes the notifications of one run. Every choice comes from
// its seed: the same seed, corpus and counts give the same notifications.
type hostileGen struct {
	rng    *rand.Rand
	corpus *corpus
	prefix string // of every message_id, so that no id meets an ordinary one
	seq    int    // notes made
	dim    int    // notes made along the dimensions, which take turns
	types  int    // distinct event types made
}

func newHostileGen(seed uint64, c *corpus) *hostileGen {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	return &hostileGen{rng: rng, corpus: c, prefix: fmt.Sprintf("hostile-%08x", rng.Uint32())}
}

// hostileDims are the generator's dimensions, each a function that makes
// one note from a claimed notification of the corpus (ordinary but for the
// dimension), with parameters drawn from the generator.
var hostileDims = []struct {
	name string
	make func(g *hostileGen, n *hostileNote)
}{
	{"event_type length", func(g *hostileGen, n *hostileNote) { n.eventType = g.claimedLong(n.eventType) }},
	{"message_id length", func(g *hostileGen, n *hostileNote) { n.messageID = n.messageID + "-" + g.str(g.length()) }},
	{"publisher_id length", func(g *hostileGen, n *hostileNote) { n.publisherID = g.str(g.length()) }},
	{"tenant_id length", func(g *hostileGen, n *hostileNote) {
		v := jsonString(g.str(g.length()))
		n.payload = withMember(withMember(n.payload, "tenant_id", v), "project_id", v)
	}},
	{"payload string length", func(g *hostileGen, n *hostileNote) {
		n.payload = withMember(n.payload, "display_name", jsonString(g.str(g.length())))
	}},
	{"event size near the event limit", func(g *hostileGen, n *hostileNote) {
		l := []int{runtime.DefaultMaxEventBytes - 2048, runtime.DefaultMaxEventBytes - 600, runtime.DefaultMaxEventBytes,
			runtime.DefaultMaxEventBytes + 1, 2 * runtime.DefaultMaxEventBytes}[g.rng.IntN(5)]
		n.payload = withMember(n.payload, "host", jsonString(strings.Repeat("h", l)))
	}},
	{"body size near the body limit", func(g *hostileGen, n *hostileNote) {
		target := pipeline.DefaultMaxBodyBytes + []int{-1, 0, 1, 4096}[g.rng.IntN(4)]
		base := n.payload
		pad := target - len(n.body())
		for range 3 { // a letter is one byte at both levels of quoting
			n.payload = withMember(base, "display_name", jsonString(strings.Repeat("x", max(pad, 0))))
			pad += target - len(n.body())
		}
	}},
	{"nesting depth", func(g *hostileGen, n *hostileNote) {
		d := []int{64, 1000, 10001, 100000, 400000}[g.rng.IntN(5)]
		open, closing := "[", "]"
		if g.rng.IntN(2) == 0 {
			open, closing = `{"a":`, "}"
			d /= 5
		}
		n.payload = withMember(n.payload, "image_meta", []byte(strings.Repeat(open, d)+"1"+strings.Repeat(closing, d)))
	}},
	{"array length times members", func(g *hostileGen, n *hostileNote) {
		shape := [][2]int{{1, 60000}, {60000, 1}, {300, 200}, {2000, 30}, {100000, 0}}[g.rng.IntN(5)]
		var b bytes.Buffer
		b.WriteByte('[')
		for i := range shape[0] {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteByte('{')
			for j := range shape[1] {
				if j > 0 {
					b.WriteByte(',')
				}
				fmt.Fprintf(&b, `"m%d":%d`, j, j)
			}
			b.WriteByte('}')
		}
		b.WriteByte(']')
		n.payload = withMember(n.payload, []string{"fixed_ips", "metadata", "image_meta"}[g.rng.IntN(3)], b.Bytes())
	}},
	{"number range", func(g *hostileGen, n *hostileNote) {
		nums := []string{"-1", "0", "-0", "1e999", "-1e999", "1e-999", "18446744073709551616", "-9223372036854775809",
			"1.7976931348623157e309", "0.000000000000000000000000000001", strings.Repeat("9", 100000), "4E+400"}
		for _, k := range []string{"memory_mb", "disk_gb", "vcpus", "root_gb", "size", "ephemeral_gb"} {
			n.payload = withMember(n.payload, k, []byte(nums[g.rng.IntN(len(nums))]))
		}
	}},
}

// length is a string length a publisher might choose: empty, at the usual
// column widths and their neighbours, or far past them.
func (g *hostileGen) length() int {
	return []int{0, 1, 36, 255, 256, 4096, 65535, 65537, 300000}[g.rng.IntN(9)]
}

// str is a string of about n bytes: letters, or now and then characters that
// need escaping or are not ASCII.
func (g *hostileGen) str(n int) string {
	switch g.rng.IntN(4) {
	case 0:
		var b strings.Builder
		for b.Len() < n {
			b.WriteString([]string{`"`, `\`, "é", "\u2028", "</"}[b.Len()%5])
		}
		return b.String()
	case 1:
		return strings.Repeat("\x01", n)
	default:
		return strings.Repeat("a", n)
	}
}

// claimedLong is an event type of a chosen length: the claimed type padded,
// or cut, so that a prefix match would still see the real type.
func (g *hostileGen) claimedLong(t string) string {
	l := g.length()
	if l <= len(t) {
		return t[:l]
	}
	return t + "." + strings.Repeat("z", l-len(t)-1)
}

// base is a claimed notification of the corpus with a fresh message_id.
func (g *hostileGen) base(dim string) hostileNote {
	it := g.corpus.items[g.rng.IntN(len(g.corpus.items))]
	g.seq++
	return hostileNote{
		dim:         dim,
		exchange:    it.Exchange,
		messageID:   fmt.Sprintf("%s-%08d", g.prefix, g.seq),
		publisherID: it.PublisherID,
		eventType:   it.EventType,
		payload:     append([]byte(nil), it.Payload...),
	}
}

// notes is n notes along the dimensions (each dimension in turn, carried
// on from the last call, its parameters drawn), then distinct notes of as
// many new event types (no module claims them) and as many of new projects
// (claimed), all shuffled together. A run calls it once a round, so that
// only a round's bodies are in memory.
func (g *hostileGen) notes(n, distinct int) []hostileNote {
	out := make([]hostileNote, 0, n+2*distinct)
	for range n {
		d := hostileDims[g.dim%len(hostileDims)]
		g.dim++
		note := g.base(d.name)
		d.make(g, &note)
		out = append(out, note)
	}
	for range distinct {
		note := g.base("distinct event types")
		note.eventType = fmt.Sprintf("hostile.%s.type%d", g.prefix, g.types)
		g.types++
		out = append(out, note)
		note = g.base("distinct projects")
		p := jsonString(fmt.Sprintf("%016x%016x", g.rng.Uint64(), g.rng.Uint64()))
		note.payload = withMember(withMember(note.payload, "tenant_id", p), "project_id", p)
		out = append(out, note)
	}
	g.rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}
