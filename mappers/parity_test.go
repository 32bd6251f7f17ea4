package mappers

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/tally-billing/tally-openstack-collector/runtime"
)

var updateParity = flag.Bool("update", false, "rewrite docs/ceilometer-parity.md from Ceilometer's definitions and the compiled modules")

// parityDoc is the generated page; ceilometerDefs its source.
var (
	parityDoc      = filepath.Join("..", "docs", "ceilometer-parity.md")
	ceilometerDefs = filepath.Join("testdata", "ceilometer", "event_definitions.yaml")
)

// probe is one concrete event type standing for (part of) a Ceilometer
// pattern, and what the collector must do with it: module "" means that no
// module may claim it.
type probe struct {
	eventType string
	module    string
	resource  string
}

// decision is what the collector does with one Ceilometer event type
// pattern: the probes that stand for it, and a note (for a skipped type, the
// reason).
type decision struct {
	probes []probe
	note   string
}

func mapped(module, resource, note string, eventTypes ...string) decision {
	d := decision{note: note}
	for _, et := range eventTypes {
		d.probes = append(d.probes, probe{et, module, resource})
	}
	return d
}

func skipped(reason string, eventTypes ...string) decision {
	d := decision{note: reason}
	for _, et := range eventTypes {
		d.probes = append(d.probes, probe{eventType: et})
	}
	return d
}

// Reasons shared by several patterns.
const (
	notBillableIdentity = "not billable: keystone's identity changes and authentications"
	notBillableConfig   = "not billable: configuration of a billed resource, not a resource"
)

// decisions holds, for every event type pattern of Ceilometer's definitions
// (as written there), what this collector does. The test fails when a
// pattern has no decision, a decision no pattern, or a module claims other
// than decided.
var decisions = map[string]decision{
	"compute.instance.*": {probes: []probe{
		{"compute.instance.create.start", "nova", "instance"},
		{"compute.instance.resize.confirm.end", "nova", "instance"},
		{"compute.instance.delete.samples", "", ""},
	}, note: "every compute.instance type but Ceilometer's own compute.instance.*.samples"},
	"compute.instance.create.end": mapped("nova", "instance", "", "compute.instance.create.end"),
	"compute.instance.update":     mapped("nova", "instance", "", "compute.instance.update"),
	"compute.instance.exists":     mapped("nova", "instance", "with the audit period", "compute.instance.exists"),

	"volume.exists":              mapped("cinder", "volume", "with the audit period", "volume.exists"),
	"volume.retype":              mapped("cinder", "volume", "", "volume.retype"),
	"volume.create.*":            mapped("cinder", "volume", "", "volume.create.start", "volume.create.end"),
	"volume.delete.*":            mapped("cinder", "volume", "", "volume.delete.end"),
	"volume.resize.*":            mapped("cinder", "volume", "", "volume.resize.end"),
	"volume.attach.*":            mapped("cinder", "volume", "", "volume.attach.end"),
	"volume.detach.*":            mapped("cinder", "volume", "", "volume.detach.end"),
	"volume.update.*":            mapped("cinder", "volume", "", "volume.update.end"),
	"volume.transfer.*":          mapped("cinder", "volume", "", "volume.transfer.create.end", "volume.transfer.accept.end"),
	"volume.transfer.accept.end": mapped("cinder", "volume", "", "volume.transfer.accept.end"),
	"snapshot.exists":            mapped("cinder", "snapshot", "with the audit period", "snapshot.exists"),
	"snapshot.create.*":          mapped("cinder", "snapshot", "", "snapshot.create.end"),
	"snapshot.delete.*":          mapped("cinder", "snapshot", "", "snapshot.delete.end"),
	"snapshot.update.*":          mapped("cinder", "snapshot", "", "snapshot.update.end"),
	"snapshot.transfer.accept.end": mapped("cinder", "snapshot", "Ceilometer files it with the volumes; here it is a snapshot event",
		"snapshot.transfer.accept.end"),
	"image_volume_cache.*": skipped("not billable: hits and misses of cinder's image cache", "image_volume_cache.hit", "image_volume_cache.miss"),

	"share.create.*": mapped("manila", "share", "", "share.create.end"),
	"share.delete.*": mapped("manila", "share", "", "share.delete.end"),
	"share.extend.*": mapped("manila", "share", "", "share.extend.end"),
	"share.shrink.*": mapped("manila", "share", "", "share.shrink.end"),

	"image.create": mapped("glance", "image", "", "image.create"),
	"image.update": mapped("glance", "image", "", "image.update"),
	"image.upload": mapped("glance", "image", "", "image.upload"),
	"image.delete": mapped("glance", "image", "", "image.delete"),
	"image.send":   mapped("glance", "image", "a download, billed to the receiving project", "image.send"),

	"orchestration.stack.*": skipped("not billable: a heat stack is billed through the resources it creates",
		"orchestration.stack.create.end"),
	"sahara.cluster.*": skipped("not billable: sahara's clusters are nova instances and volumes, billed as such (sahara is retired)",
		"sahara.cluster.create"),
	"sahara.cluster.health": skipped("not billable: a health check", "sahara.cluster.health"),

	"identity.user.*":              skipped(notBillableIdentity, "identity.user.created"),
	"identity.project.*":           skipped(notBillableIdentity, "identity.project.created"),
	"identity.group.*":             skipped(notBillableIdentity, "identity.group.created"),
	"identity.role.*":              skipped(notBillableIdentity, "identity.role.created"),
	"identity.OS-TRUST:trust.*":    skipped(notBillableIdentity, "identity.OS-TRUST:trust.created"),
	"identity.region.*":            skipped(notBillableIdentity, "identity.region.created"),
	"identity.service.*":           skipped(notBillableIdentity, "identity.service.created"),
	"identity.endpoint.*":          skipped(notBillableIdentity, "identity.endpoint.created"),
	"identity.policy.*":            skipped(notBillableIdentity, "identity.policy.created"),
	"identity.role_assignment.*":   skipped(notBillableIdentity, "identity.role_assignment.created"),
	"identity.authenticate":        skipped(notBillableIdentity, "identity.authenticate"),
	"objectstore.http.request":     mapped("swift", "object_storage", "ceilometermiddleware's CADF event, one per request", "objectstore.http.request"),
	"network.*":                    mapped("neutron", "network", "", "network.create.end", "network.exists"),
	"subnet.*":                     mapped("neutron", "subnet", "", "subnet.create.end"),
	"port.*":                       mapped("neutron", "port", "", "port.create.end"),
	"router.*":                     mapped("neutron", "router", "", "router.update.end"),
	"floatingip.*":                 mapped("neutron", "floatingip", "", "floatingip.create.end"),
	"firewall.*":                   mapped("neutron", "firewall", "FWaaS v1; v2's firewall_group.* gives the same resource type", "firewall.create.end"),
	"firewall_policy.*":            skipped(notBillableConfig+" (a firewall's rule set)", "firewall_policy.create.end"),
	"firewall_rule.*":              skipped(notBillableConfig+" (a firewall's rule)", "firewall_rule.create.end"),
	"vpnservice.*":                 mapped("neutron", "vpnservice", "", "vpnservice.create.end"),
	"ipsecpolicy.*":                skipped(notBillableConfig+" (of an IPsec site connection)", "ipsecpolicy.create.end"),
	"ikepolicy.*":                  skipped(notBillableConfig+" (of an IPsec site connection)", "ikepolicy.create.end"),
	"ipsec_site_connection.*":      mapped("neutron", "ipsec_site_connection", "", "ipsec_site_connection.create.end"),
	"dns.domain.create":            mapped("designate", "dns_zone", "", "dns.domain.create"),
	"dns.domain.update":            mapped("designate", "dns_zone", "", "dns.domain.update"),
	"dns.domain.delete":            mapped("designate", "dns_zone", "", "dns.domain.delete"),
	"dns.domain.exists":            mapped("designate", "dns_zone", "with the audit period", "dns.domain.exists"),
	"trove.instance.create":        mapped("trove", "database_instance", "", "trove.instance.create"),
	"trove.instance.modify_volume": mapped("trove", "database_instance", "", "trove.instance.modify_volume"),
	"trove.instance.modify_flavor": mapped("trove", "database_instance", "", "trove.instance.modify_flavor"),
	"trove.instance.delete":        mapped("trove", "database_instance", "", "trove.instance.delete"),
	"trove.instance.exists":        mapped("trove", "database_instance", "with the audit period", "trove.instance.exists"),
	"trove.*":                      mapped("trove", "database_instance", "trove sends trove.instance.* only", "trove.instance.create"),
	"*http.*": {probes: []probe{
		{"objectstore.http.request", "swift", "object_storage"},
		{"audit.http.request", "", ""},
	}, note: "swift's requests are mapped; keystonemiddleware's API audit (audit.http.*) is not billable"},
	"*http.response":   skipped("not billable: keystonemiddleware's API audit", "audit.http.response"),
	"profiler.*":       skipped("not billable: osprofiler traces", "profiler.nova"),
	"magnum.cluster.*": skipped("not billable here: a magnum cluster is billed through its nova instances, volumes and load balancers", "magnum.cluster.create"),
	"alarm.*":          skipped("not billable: aodh alarm changes", "alarm.creation"),
}

// TestCeilometerParity checks, through the compiled modules, what the
// collector does with every event type of Ceilometer's definitions, and that
// docs/ceilometer-parity.md says the same; -update rewrites the page.
func TestCeilometerParity(t *testing.T) {
	mods := loadBuiltin(t)
	patterns := ceilometerPatterns(t)
	for p := range decisions {
		if !slices.Contains(patterns, p) {
			t.Errorf("decision for %q, which Ceilometer's definitions do not have", p)
		}
	}
	for _, p := range patterns {
		d, ok := decisions[p]
		if !ok {
			t.Errorf("Ceilometer event type %q has no decision in parity_test.go", p)
			continue
		}
		for _, pr := range d.probes {
			checkProbe(t, mods, p, pr)
		}
	}
	if t.Failed() {
		return
	}
	page := parityPage(patterns, mods)
	if *updateParity {
		if err := os.WriteFile(parityDoc, page, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	have, err := os.ReadFile(parityDoc)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(have, page) {
		t.Errorf("%s differs from what the modules and Ceilometer's definitions give: run go test ./mappers -run TestCeilometerParity -update", parityDoc)
	}
}

// ceilometerPatterns returns every event_type pattern of the definitions, in
// the order of first appearance, each once.
func ceilometerPatterns(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(ceilometerDefs)
	if err != nil {
		t.Fatal(err)
	}
	var defs []struct {
		EventType any `yaml:"event_type"`
	}
	if err := yaml.Unmarshal(b, &defs); err != nil {
		t.Fatal(err)
	}
	var out []string
	add := func(v any) {
		s, ok := v.(string)
		if !ok || s == "" {
			t.Fatalf("event_type %v is not a string", v)
		}
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	for _, d := range defs {
		switch v := d.EventType.(type) {
		case []any:
			for _, e := range v {
				add(e)
			}
		default:
			add(v)
		}
	}
	if len(out) < 50 {
		t.Fatalf("only %d event types read from %s", len(out), ceilometerDefs)
	}
	return out
}

// checkProbe asserts that exactly the decided module claims the probe's type
// (none for a skipped one) and that it maps a bare notification of it to the
// decided resource type.
func checkProbe(t *testing.T, mods map[string]*runtime.Module, pattern string, pr probe) {
	t.Helper()
	var claimers []string
	for name, m := range mods {
		if ok, _ := m.Manifest().Match(pr.eventType); ok {
			claimers = append(claimers, name)
		}
	}
	slices.Sort(claimers)
	var want []string
	if pr.module != "" {
		want = []string{pr.module}
	}
	if !slices.Equal(claimers, want) {
		t.Errorf("%s (for Ceilometer's %q): claimed by %v, want %v", pr.eventType, pattern, claimers, want)
		return
	}
	if pr.module == "" {
		return
	}
	// The ids each module reads, so that the event keeps the contract.
	const res = `{"id":"r","project_id":"p"}`
	in := fmt.Appendf(nil, `{"message_id":"parity","timestamp":"2024-01-01 00:00:00","event_type":%q,`+
		`"_context_project_id":"p","payload":{"id":"r","instance_id":"r","volume_id":"r","snapshot_id":"r",`+
		`"backup_id":"r","share_id":"r","tenant_id":"p","target":{"id":"r"},"initiator":{"project_id":"p"},`+
		`"network":%s,"subnet":%s,"port":%s,"router":%s,"floatingip":%s,"firewall":%s,"vpnservice":%s,`+
		`"ipsec_site_connection":%s}}`, pr.eventType, res, res, res, res, res, res, res, res)
	doc, err := mapWith(mods[pr.module])(in)
	if err != nil {
		t.Errorf("%s: %v", pr.eventType, err)
		return
	}
	var out struct {
		Events []struct {
			ResourceType string `json:"resource_type"`
		} `json:"events"`
	}
	if err := json.Unmarshal(doc, &out); err != nil || len(out.Events) == 0 || out.Events[0].ResourceType != pr.resource {
		t.Errorf("%s through %s: %s (%v), want a %s event", pr.eventType, pr.module, doc, err, pr.resource)
	}
}

// parityPage writes docs/ceilometer-parity.md.
func parityPage(patterns []string, mods map[string]*runtime.Module) []byte {
	var b bytes.Buffer
	b.WriteString(`# Parity with Ceilometer's event definitions

<!-- Generated by TestCeilometerParity (mappers/parity_test.go): do not edit. After a
change to a module's claims or to the decisions in that test, regenerate with
    go test ./mappers -run TestCeilometerParity -update -->

An operator replacing Ceilometer asks first whether the collector bills everything
Ceilometer records. This page answers for every event type of the definitions
Ceilometer 19.0.0 ships (` + "`event_definitions.yaml`" + `, copied into
` + "`mappers/testdata/ceilometer`" + `): mapped, to which resource type by which built-in
module, or skipped, and why. A test builds the page from that file and from the
compiled modules: it maps a notification of each type listed in the last column through
the module that claims it, and fails when a module claims more, less or otherwise than
the page says.

To check a cloud's own traffic rather than this list, capture it with ` + "`--dump`" + ` and run
` + "`tally-openstack-collector map`" + ` over the capture: its summary counts, per service, what
was mapped and what was skipped and why ([operations.md](operations.md)).

| Ceilometer event type | this collector | resource type | module | checked with | notes |
| --- | --- | --- | --- | --- | --- |
`)
	for _, p := range patterns {
		d := decisions[p]
		var modsUsed, resources, checked []string
		someMapped, someSkipped := false, false
		for _, pr := range d.probes {
			checked = append(checked, "`"+pr.eventType+"`")
			if pr.module == "" {
				someSkipped = true
				continue
			}
			someMapped = true
			if !slices.Contains(modsUsed, pr.module) {
				modsUsed = append(modsUsed, pr.module)
			}
			if r := "`" + pr.resource + "`"; !slices.Contains(resources, r) {
				resources = append(resources, r)
			}
		}
		verdict := "mapped"
		switch {
		case someMapped && someSkipped:
			verdict = "partly mapped"
		case !someMapped:
			verdict = "skipped"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s | %s |\n", p, verdict,
			strings.Join(resources, ", "), strings.Join(modsUsed, ", "), strings.Join(checked, ", "), d.note)
	}
	b.WriteString(`
## What the modules claim

Ceilometer's definitions are not the whole of what the collector maps. The built-in
modules claim these event types (globs as in their manifests; ` + "`!`" + ` excludes), among
them types Ceilometer's definitions leave out: nova's versioned ` + "`instance.*`" + `, cinder's
backups, manila's share snapshots, FWaaS v2 firewall groups, designate's
` + "`dns.domain.*`" + ` beyond create, update, delete and exists, octavia's load balancers and
ironic's nodes. What each reads is in [events.md](events.md).

| module | version | claims |
| --- | --- | --- |
`)
	for _, s := range services {
		m := mods[s]
		if m == nil {
			continue
		}
		mf := m.Manifest()
		var globs []string
		for _, g := range mf.EventTypes {
			globs = append(globs, "`"+g+"`")
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", mf.Name, mf.Version, strings.Join(globs, ", "))
	}
	return b.Bytes()
}
