package helm

import (
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// TestKustomize builds deploy/k8s as `kubectl apply -k deploy/k8s` does
// (kustomize's library, in-process): it builds, and gives the chart's
// default objects in namespace pacer with the image of its images entry.
func TestKustomize(t *testing.T) {
	rm, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), "../k8s")
	if err != nil {
		t.Fatalf("kustomize build deploy/k8s: %v", err)
	}
	b, err := rm.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	built := decode(t, "kustomize build deploy/k8s", string(b))
	chart := objects(t, map[string]any{"image": map[string]any{"tag": "latest"}})
	if len(built) != len(chart) {
		t.Fatalf("kustomize builds %d objects, the chart renders %d", len(built), len(chart))
	}
	byName := map[string]object{}
	for _, o := range chart {
		byName[o.String()] = o
	}
	for _, o := range built {
		c, ok := byName[o.String()]
		if !ok {
			t.Errorf("kustomize builds %s, which the chart does not render", o)
			continue
		}
		// The chart leaves the namespace to helm install --namespace.
		setNamespace(c.obj, "")
		setNamespace(o.obj, "")
		if !equality.Semantic.DeepEqual(o.obj, c.obj) {
			t.Errorf("%s: kustomize's differs from the chart's with image.tag latest", o)
		}
	}
	for _, d := range find[*appsv1.Deployment](built) {
		if img := d.Spec.Template.Spec.Containers[0].Image; img != "pacer:latest" {
			t.Errorf("%s: image %s, want kustomization.yaml's pacer:latest", d.Name, img)
		}
	}
	var namespaces []string
	for _, r := range rm.Resources() {
		namespaces = append(namespaces, r.GetNamespace())
	}
	if slices.ContainsFunc(namespaces, func(ns string) bool { return ns != "pacer" }) {
		t.Errorf("namespaces %v, want pacer for every object", namespaces)
	}
}

// setNamespace sets the namespace of a decoded API object.
func setNamespace(obj any, ns string) {
	if o, ok := obj.(interface{ SetNamespace(string) }); ok {
		o.SetNamespace(ns)
	}
}
