// Package kubernetes holds the Kubernetes example; its test holds the
// example against what docs/operations.md says of it.
package kubernetes

import (
	"bytes"
	"errors"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

type object struct {
	Kind string `yaml:"kind"`
	Spec struct {
		Replicas       *int `yaml:"replicas"`
		UpdateStrategy struct {
			Type string `yaml:"type"`
		} `yaml:"updateStrategy"` // StatefulSet
		Strategy struct {
			Type string `yaml:"type"`
		} `yaml:"strategy"` // Deployment
		VolumeClaimTemplates []struct {
			Metadata struct {
				Name string `yaml:"name"`
			} `yaml:"metadata"`
		} `yaml:"volumeClaimTemplates"`
	} `yaml:"spec"`
}

// The workload of the example is what docs/operations.md ("Packaging")
// calls it: its kind, its replicas, its update strategy.
func TestDocsDescribeTheExample(t *testing.T) {
	raw, err := os.ReadFile("tally-openstack-collector.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var workloads []object
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	for {
		var o object
		err := dec.Decode(&o)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if o.Kind == "StatefulSet" || o.Kind == "Deployment" || o.Kind == "DaemonSet" {
			workloads = append(workloads, o)
		}
	}
	if len(workloads) != 1 {
		t.Fatalf("%d workloads in the example, want 1", len(workloads))
	}
	w := workloads[0]
	replicas := 1
	if w.Spec.Replicas != nil {
		replicas = *w.Spec.Replicas
	}
	strategy := w.Spec.UpdateStrategy.Type + w.Spec.Strategy.Type

	docs, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	item := regexp.MustCompile("(?s)\n- `examples/kubernetes/tally-openstack-collector.yaml`: (.*?)\n(- |\n)").FindSubmatch(docs)
	if item == nil {
		t.Fatal("docs/operations.md has no item for the Kubernetes example")
	}
	text := strings.Join(strings.Fields(string(item[1])), " ")
	if !strings.HasPrefix(text, "a "+w.Kind) {
		t.Errorf("docs/operations.md calls the example %q; it is a %s", text[:min(len(text), 40)], w.Kind)
	}
	if replicas > 1 && !strings.Contains(text, strconv.Itoa(replicas)+" replicas") {
		t.Errorf("docs/operations.md does not say the example's %d replicas: %s", replicas, text)
	}
	for _, other := range []string{"StatefulSet", "Deployment", "DaemonSet"} {
		if other != w.Kind && strings.Contains(text, other) {
			t.Errorf("docs/operations.md speaks of a %s for a %s: %s", other, w.Kind, text)
		}
	}
	// The paragraph on one process per outbox names the example's own way.
	para := regexp.MustCompile("(?s)One process per outbox:.*?\n\n").Find(docs)
	if para == nil {
		t.Fatal(`docs/operations.md has no "One process per outbox" paragraph`)
	}
	if strings.Contains(string(para), "example uses the `Recreate`") && strategy != "Recreate" {
		t.Errorf("docs/operations.md says the example uses Recreate; its strategy is %q", strategy)
	}
	if w.Kind == "StatefulSet" && replicas > 1 {
		if len(w.Spec.VolumeClaimTemplates) == 0 {
			t.Error("a StatefulSet of several replicas without a claim per replica: they would share one outbox")
		}
		if !strings.Contains(string(para), "claim of its own") {
			t.Errorf("docs/operations.md does not say each replica has its own claim: %s", para)
		}
	}
	// The example's comments speak of its own kind.
	for _, other := range []string{"a Deployment", "Deployment's", "Recreate"} {
		if w.Kind != "Deployment" && bytes.Contains(raw, []byte(other)) {
			t.Errorf("the example's comments speak of %q; it is a %s", other, w.Kind)
		}
	}
}
