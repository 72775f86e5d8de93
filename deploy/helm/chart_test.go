package helm

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

const chartDir = "pacer"

// render is `helm template pacer deploy/helm/pacer --namespace pacer` with
// vals over the chart's values.yaml: the rendered files by name, or the
// error a `fail` or `required` in a template gives.
func render(t *testing.T, vals map[string]any) (map[string]string, error) {
	t.Helper()
	return renderSchema(t, vals, false)
}

// renderSchema is render, with values.schema.json skipped if skipSchema
// (helm template --skip-schema-validation).
func renderSchema(t *testing.T, vals map[string]any, skipSchema bool) (map[string]string, error) {
	t.Helper()
	ch, err := loader.LoadDir(chartDir)
	if err != nil {
		t.Fatalf("load %s: %v", chartDir, err)
	}
	v, err := util.ToRenderValuesWithSchemaValidation(ch, vals,
		common.ReleaseOptions{Name: "pacer", Namespace: "pacer", IsInstall: true, Revision: 1}, common.DefaultCapabilities, skipSchema)
	if err != nil {
		return nil, err
	}
	return engine.Render(ch, v)
}

// object is one rendered or deploy/k8s document, decoded into its type.
type object struct {
	kind, name string
	obj        any
}

func (o object) String() string { return o.kind + "/" + o.name }

// scaledObject is the part of KEDA's ScaledObject (keda.sh/v1alpha1) the
// chart writes, after KEDA's API (apis/keda/v1alpha1/scaledobject_types.go):
// decoded strictly, a field KEDA does not have, or a misspelt one, fails.
type scaledObject struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name   string            `json:"name"`
		Labels map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		ScaleTargetRef struct {
			Name       string `json:"name"`
			Kind       string `json:"kind,omitempty"`
			APIVersion string `json:"apiVersion,omitempty"`
		} `json:"scaleTargetRef"`
		MinReplicaCount *int32 `json:"minReplicaCount"`
		MaxReplicaCount *int32 `json:"maxReplicaCount"`
		PollingInterval *int32 `json:"pollingInterval"`
		CooldownPeriod  *int32 `json:"cooldownPeriod"`
		Triggers        []struct {
			Type              string            `json:"type"`
			Metadata          map[string]string `json:"metadata"`
			AuthenticationRef *struct {
				Name string `json:"name"`
				Kind string `json:"kind,omitempty"`
			} `json:"authenticationRef,omitempty"`
		} `json:"triggers"`
	} `json:"spec"`
}

var docSep = regexp.MustCompile(`(?m)^---\s*$`)

// decode splits src (the YAML of file) into documents and decodes each
// strictly into its type: unknown and duplicate fields are errors.
func decode(t *testing.T, file, src string) []object {
	t.Helper()
	var out []object
	for i, doc := range docSep.Split(src, -1) {
		if strings.TrimSpace(regexp.MustCompile(`(?m)^\s*#.*$`).ReplaceAllString(doc, "")) == "" {
			continue
		}
		var u unstructured.Unstructured
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			t.Fatalf("%s document %d: %v\n%s", file, i+1, err, doc)
		}
		var obj any
		switch gvk := u.GroupVersionKind(); gvk.GroupVersion().String() + "/" + gvk.Kind {
		case "apps/v1/Deployment":
			obj = &appsv1.Deployment{}
		case "policy/v1/PodDisruptionBudget":
			obj = &policyv1.PodDisruptionBudget{}
		case "v1/Service":
			obj = &corev1.Service{}
		case "v1/ConfigMap":
			obj = &corev1.ConfigMap{}
		case "networking.k8s.io/v1/NetworkPolicy":
			obj = &networkingv1.NetworkPolicy{}
		case "monitoring.coreos.com/v1/ServiceMonitor":
			obj = &monitoringv1.ServiceMonitor{}
		case "monitoring.coreos.com/v1/PrometheusRule":
			obj = &monitoringv1.PrometheusRule{}
		case "keda.sh/v1alpha1/ScaledObject":
			obj = &scaledObject{}
		default:
			t.Fatalf("%s document %d: kind %v not checked here", file, i+1, gvk)
		}
		if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
			t.Fatalf("%s document %d (%s %s): %v\n%s", file, i+1, u.GetKind(), u.GetName(), err, doc)
		}
		if u.GetName() == "" {
			t.Fatalf("%s document %d: no metadata.name", file, i+1)
		}
		out = append(out, object{u.GetKind(), u.GetName(), obj})
	}
	return out
}

// objects renders the chart with vals and decodes every object, sorted
// by kind and name.
func objects(t *testing.T, vals map[string]any) []object {
	t.Helper()
	files, err := render(t, vals)
	if err != nil {
		t.Fatalf("render with %v: %v", vals, err)
	}
	var out []object
	for name, src := range files {
		if strings.HasSuffix(name, ".tpl") || strings.HasSuffix(name, "NOTES.txt") {
			continue
		}
		out = append(out, decode(t, name, src)...)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// k8sObjects decodes deploy/k8s as kustomization.yaml lists it.
func k8sObjects(t *testing.T) []object {
	t.Helper()
	b, err := os.ReadFile("../k8s/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Resources []string `json:"resources"`
	}
	if err := yaml.Unmarshal(b, &k); err != nil {
		t.Fatal(err)
	}
	var out []object
	for _, r := range k.Resources {
		src, err := os.ReadFile(filepath.Join("../k8s", r))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, decode(t, r, string(src))...)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// TestDefaultsRenderDeployK8s: `helm template` of the default values is
// deploy/k8s (the resources of its kustomization.yaml), object by object,
// compared as decoded API objects.
func TestDefaultsRenderDeployK8s(t *testing.T) {
	got, want := objects(t, nil), k8sObjects(t)
	names := func(os []object) []string {
		var s []string
		for _, o := range os {
			s = append(s, o.String())
		}
		return s
	}
	if !slices.Equal(names(got), names(want)) {
		t.Fatalf("the chart's defaults render\n  %v\nwant deploy/k8s's\n  %v", names(got), names(want))
	}
	for i := range got {
		if !equality.Semantic.DeepEqual(got[i].obj, want[i].obj) {
			g, _ := yaml.Marshal(got[i].obj)
			w, _ := yaml.Marshal(want[i].obj)
			t.Errorf("%s: the chart renders\n%s\ndeploy/k8s has\n%s", got[i], g, w)
		}
	}
}

// TestLint is `helm lint` of the chart, with the default values and with
// every optional template on: no message at warning level or above.
func TestLint(t *testing.T) {
	for _, vals := range []map[string]any{nil, allOn()} {
		l := lint.RunAll(chartDir, vals, "pacer")
		for _, m := range l.Messages {
			t.Logf("lint: %s", m)
		}
		if l.HighestSeverity >= support.WarningSev {
			t.Errorf("helm lint with %v: highest severity %d", vals, l.HighestSeverity)
		}
	}
}

// allOn returns values that turn on every optional template, with the
// Kafka and Redis TLS and SASL settings.
func allOn() map[string]any {
	return map[string]any{
		"serviceMonitor": map[string]any{"enabled": true, "labels": map[string]any{"release": "prometheus"}},
		"prometheusRule": map[string]any{"enabled": true},
		"keda":           map[string]any{"enabled": true, "authenticationRef": "pacer-kafka"},
		"networkPolicy":  map[string]any{"enabled": true},
		"kafka": map[string]any{
			"tls":  map[string]any{"enabled": true, "secret": "kafka-ca"},
			"sasl": map[string]any{"mechanism": "SCRAM-SHA-512", "username": "pacer", "passwordSecret": map[string]any{"name": "kafka-sasl"}},
		},
		"redis": map[string]any{
			"username":       "pacer",
			"passwordSecret": map[string]any{"name": "redis-auth", "key": "pw"},
			"tls":            map[string]any{"enabled": true, "secret": "redis-tls", "certKey": "tls.crt", "keyKey": "tls.key"},
		},
	}
}

func find[T any](objs []object) []T {
	var out []T
	for _, o := range objs {
		if v, ok := o.obj.(T); ok {
			out = append(out, v)
		}
	}
	return out
}

// deployments returns the rendered Deployments by name.
func deployments(objs []object) map[string]*appsv1.Deployment {
	out := map[string]*appsv1.Deployment{}
	for _, d := range find[*appsv1.Deployment](objs) {
		out[d.Name] = d
	}
	return out
}

func envOf(c corev1.Container, name string) (corev1.EnvVar, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e, true
		}
	}
	return corev1.EnvVar{}, false
}

// hasPort reports whether p names or numbers a port of c.
func hasPort(c corev1.Container, p intstr.IntOrString) bool {
	for _, cp := range c.Ports {
		if (p.Type == intstr.String && p.StrVal == cp.Name) || (p.Type == intstr.Int && p.IntVal == cp.ContainerPort) {
			return true
		}
	}
	return false
}

// secretVolume reports whether volume name of spec is made of Secrets only.
func secretVolume(spec corev1.PodSpec, name string) bool {
	for _, v := range spec.Volumes {
		if v.Name != name {
			continue
		}
		if v.Secret != nil {
			return true
		}
		if v.Projected != nil && len(v.Projected.Sources) > 0 {
			for _, s := range v.Projected.Sources {
				if s.Secret == nil {
					return false
				}
			}
			return true
		}
	}
	return false
}

// checkPods checks what every rendered pacer container must have: a
// startup probe on /healthz at a port of the container (before the
// liveness probe's), PACER_EXPECTED_REPLICAS equal to want[deployment],
// and every PACER_*_FILE naming a file of a mounted Secret (or the
// ConfigMap's: those of the Kafka and Redis Secrets).
func checkPods(t *testing.T, objs []object, want map[string]int) {
	t.Helper()
	cm := find[*corev1.ConfigMap](objs)
	if len(cm) != 1 {
		t.Fatalf("%d ConfigMaps, want 1", len(cm))
	}
	deps := deployments(objs)
	if len(deps) != len(want) {
		t.Errorf("Deployments %v, want %v", slices.Sorted(mapsKeys(deps)), slices.Sorted(mapsKeys(want)))
	}
	for name, d := range deps {
		spec := d.Spec.Template.Spec
		c := spec.Containers[0]
		p := c.StartupProbe
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" || !hasPort(c, p.HTTPGet.Port) ||
			p.PeriodSeconds*p.FailureThreshold < 65 {
			t.Errorf("%s: startup probe %+v, want /healthz at a port of the container, allowing more than PACER_KAFKA_STARTUP_TIMEOUT (1m)", name, p)
		}
		e, ok := envOf(c, "PACER_EXPECTED_REPLICAS")
		if !ok || e.Value != fmt.Sprint(want[name]) {
			t.Errorf("%s: PACER_EXPECTED_REPLICAS %q, want %d", name, e.Value, want[name])
		}
		files := map[string]string{}
		for _, e := range c.Env {
			files[e.Name] = e.Value
		}
		for k, v := range cm[0].Data {
			files[k] = v
		}
		for k, path := range files {
			if !strings.HasSuffix(k, "_FILE") && k != "PACER_INGEST_TENANTS" && k != "PACER_CREDENTIALS_DIR" {
				continue
			}
			mounted := false
			for _, m := range c.VolumeMounts {
				if (path == m.MountPath || strings.HasPrefix(path, m.MountPath+"/")) && m.ReadOnly && secretVolume(spec, m.Name) {
					mounted = true
				}
			}
			if !mounted {
				t.Errorf("%s: %s=%s is not in a Secret mounted read-only", name, k, path)
			}
		}
	}
}

func mapsKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// TestDefaultsPods: the default Deployments (deploy/k8s) have startup
// probes and PACER_EXPECTED_REPLICAS equal to their replicas.
func TestDefaultsPods(t *testing.T) {
	checkPods(t, objects(t, nil), map[string]int{"pacer-whatsapp": 2, "pacer-apns": 2, "pacer-fcm": 2, "pacer-sendgrid": 2, "pacer-ingest": 2})
}

// TestValues: the replicas, the channels chosen, credentials from several
// Secrets, a credentials directory and the image follow the values.
func TestValues(t *testing.T) {
	objs := objects(t, map[string]any{
		"image": map[string]any{"repository": "registry.example.com/pacer", "tag": "v1.2.3", "pullPolicy": "IfNotPresent"},
		"channels": map[string]any{
			"whatsapp": map[string]any{"replicas": 5, "credentialsSecrets": []any{"wa-main", "wa-extra"},
				"credentialsDirSecrets": []any{"wa-per-number"}, "env": map[string]any{"PACER_WHATSAPP_RATE": 250}},
			"apns":     map[string]any{"enabled": false},
			"fcm":      map[string]any{"enabled": false},
			"sendgrid": map[string]any{"replicas": 3, "partitions": 3},
		},
		"ingest": map[string]any{"replicas": 4},
	})
	checkPods(t, objs, map[string]int{"pacer-whatsapp": 5, "pacer-sendgrid": 3, "pacer-ingest": 4})
	deps := deployments(objs)
	wa := deps["pacer-whatsapp"]
	c := wa.Spec.Template.Spec.Containers[0]
	if *wa.Spec.Replicas != 5 || c.Image != "registry.example.com/pacer:v1.2.3" || c.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("pacer-whatsapp: replicas %d, image %s %s", *wa.Spec.Replicas, c.Image, c.ImagePullPolicy)
	}
	if e, _ := envOf(c, "PACER_WHATSAPP_RATE"); e.Value != "250" {
		t.Errorf("PACER_WHATSAPP_RATE %q, want 250", e.Value)
	}
	if e, _ := envOf(c, "PACER_CREDENTIALS_DIR"); e.Value != "/etc/pacer/credentials-dir" {
		t.Errorf("PACER_CREDENTIALS_DIR %q", e.Value)
	}
	var secrets []string
	for _, v := range wa.Spec.Template.Spec.Volumes {
		if v.Projected != nil {
			for _, s := range v.Projected.Sources {
				secrets = append(secrets, v.Name+":"+s.Secret.Name)
			}
		}
	}
	if want := []string{"credentials:wa-main", "credentials:wa-extra", "credentials-dir:wa-per-number"}; !slices.Equal(secrets, want) {
		t.Errorf("projected Secrets %v, want %v", secrets, want)
	}
	if *deps["pacer-ingest"].Spec.Replicas != 4 {
		t.Errorf("pacer-ingest replicas %d, want 4", *deps["pacer-ingest"].Spec.Replicas)
	}
}

// TestOptionalTemplates renders the ServiceMonitor, the PrometheusRule,
// the ScaledObjects and the NetworkPolicies (all off by default) with the
// Kafka and Redis TLS and SASL settings, and checks what each must say.
func TestOptionalTemplates(t *testing.T) {
	off := objects(t, nil)
	for _, o := range off {
		switch o.kind {
		case "ServiceMonitor", "PrometheusRule", "ScaledObject", "NetworkPolicy":
			t.Errorf("%s rendered by default", o)
		}
	}
	objs := objects(t, allOn())
	channels := []string{"apns", "fcm", "sendgrid", "whatsapp"}
	// With KEDA on, replicas are KEDA's and PACER_EXPECTED_REPLICAS is
	// the most KEDA may run: the local failure mode never over-sends.
	checkPods(t, objs, map[string]int{"pacer-whatsapp": 12, "pacer-apns": 12, "pacer-fcm": 12, "pacer-sendgrid": 12, "pacer-ingest": 2})
	deps := deployments(objs)
	for _, ch := range channels {
		if r := deps["pacer-"+ch].Spec.Replicas; r != nil {
			t.Errorf("pacer-%s: replicas %d set beside KEDA's ScaledObject (each upgrade would reset them)", ch, *r)
		}
	}

	// The PrometheusRule carries exactly deploy/prometheus/alerts.yaml's rules.
	src, err := os.ReadFile("../prometheus/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if inChart, err := os.ReadFile(filepath.Join(chartDir, "files/alerts.yaml")); err != nil || string(inChart) != string(src) {
		t.Errorf("%s/files/alerts.yaml is not deploy/prometheus/alerts.yaml (a link to it): %v", chartDir, err)
	}
	var want monitoringv1.PrometheusRuleSpec
	if err := yaml.UnmarshalStrict(src, &want); err != nil {
		t.Fatalf("deploy/prometheus/alerts.yaml as a PrometheusRule's spec: %v", err)
	}
	rules := find[*monitoringv1.PrometheusRule](objs)
	if len(rules) != 1 {
		t.Fatalf("%d PrometheusRules, want 1", len(rules))
	}
	if n := len(want.Groups); n < 2 || len(want.Groups[0].Rules) < 10 {
		t.Fatalf("deploy/prometheus/alerts.yaml: %d groups; the decoding lost them", n)
	}
	if !equality.Semantic.DeepEqual(rules[0].Spec, want) {
		t.Errorf("the PrometheusRule's groups differ from deploy/prometheus/alerts.yaml's")
	}
	if a := rules[0].Spec.Groups[0].Rules[0].Annotations["summary"]; !strings.Contains(a, "{{ $value }}") {
		t.Errorf("summary %q: want the Prometheus template {{ $value }} kept as is", a)
	}

	// A ScaledObject per channel on its Deployment, the consumer group's
	// lag on the channel's topic, at most the topic's partitions.
	sos := find[*scaledObject](objs)
	if len(sos) != len(channels) {
		t.Errorf("%d ScaledObjects, want %d", len(sos), len(channels))
	}
	for _, so := range sos {
		ch := strings.TrimPrefix(so.Spec.ScaleTargetRef.Name, "pacer-")
		if deps[so.Spec.ScaleTargetRef.Name] == nil || !slices.Contains(channels, ch) {
			t.Errorf("ScaledObject %s scales %q, no channel's Deployment", so.Metadata.Name, so.Spec.ScaleTargetRef.Name)
			continue
		}
		if *so.Spec.MinReplicaCount != 1 || *so.Spec.MaxReplicaCount != 12 || len(so.Spec.Triggers) != 1 {
			t.Errorf("ScaledObject %s: min %d max %d, %d triggers", so.Metadata.Name, *so.Spec.MinReplicaCount, *so.Spec.MaxReplicaCount, len(so.Spec.Triggers))
			continue
		}
		tr := so.Spec.Triggers[0]
		m := tr.Metadata
		if tr.Type != "kafka" || m["consumerGroup"] != "pacer-"+ch || m["topic"] != "pacer."+ch || m["lagThreshold"] != "1000" ||
			m["bootstrapServers"] != "kafka-0.kafka:9092,kafka-1.kafka:9092,kafka-2.kafka:9092" || m["allowIdleConsumers"] != "false" || m["offsetResetPolicy"] != "earliest" ||
			tr.AuthenticationRef == nil || tr.AuthenticationRef.Name != "pacer-kafka" {
			t.Errorf("ScaledObject %s: trigger %s %v auth %+v", so.Metadata.Name, tr.Type, m, tr.AuthenticationRef)
		}
	}

	// A NetworkPolicy per Deployment: ingress to its container's ports
	// only; egress to DNS, Kafka, Redis, and HTTPS for the channels only.
	nps := find[*networkingv1.NetworkPolicy](objs)
	if len(nps) != len(deps) {
		t.Errorf("%d NetworkPolicies, want one per Deployment (%d)", len(nps), len(deps))
	}
	for _, np := range nps {
		d := deps[np.Name]
		if d == nil || !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{"Ingress", "Egress"}) {
			t.Errorf("NetworkPolicy %s: no Deployment of that name, or policy types %v", np.Name, np.Spec.PolicyTypes)
			continue
		}
		sel := np.Spec.PodSelector.MatchLabels
		for k, v := range sel {
			if d.Spec.Template.Labels[k] != v {
				t.Errorf("NetworkPolicy %s selects %v, not the pods of its Deployment %v", np.Name, sel, d.Spec.Template.Labels)
			}
		}
		c := d.Spec.Template.Spec.Containers[0]
		var in []string
		for _, r := range np.Spec.Ingress {
			for _, p := range r.Ports {
				in = append(in, p.Port.String())
				if !hasPort(c, *p.Port) {
					t.Errorf("NetworkPolicy %s lets in port %s, which its container does not serve", np.Name, p.Port)
				}
			}
		}
		var out []string
		for _, r := range np.Spec.Egress {
			for _, p := range r.Ports {
				out = append(out, fmt.Sprintf("%s/%s", p.Port, *p.Protocol))
			}
		}
		want := []string{"53/UDP", "53/TCP", "9092/TCP", "6379/TCP", "443/TCP"}
		if np.Name == "pacer-ingest" {
			want = want[:4] // the ingest API talks to no provider
		}
		if len(in) != 1 || !slices.Equal(out, want) {
			t.Errorf("NetworkPolicy %s: ingress ports %v, egress %v; want one port in, %v out", np.Name, in, out, want)
		}
	}

	// The ServiceMonitor selects every metrics Service, on its ports.
	sms := find[*monitoringv1.ServiceMonitor](objs)
	if len(sms) != 1 || sms[0].Labels["release"] != "prometheus" {
		t.Fatalf("%d ServiceMonitors (labels %v), want 1 with the labels of the values", len(sms), sms)
	}
	sel, err := metav1LabelSelector(sms[0].Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	ports := map[string]bool{}
	for _, e := range sms[0].Spec.Endpoints {
		ports[e.Port] = e.Path == "/metrics"
	}
	for _, svc := range find[*corev1.Service](objs) {
		if !sel.Matches(labelsSet(svc.Labels)) {
			t.Errorf("the ServiceMonitor does not select Service %s", svc.Name)
		}
		scraped := false
		for _, p := range svc.Spec.Ports {
			scraped = scraped || ports[p.Name]
		}
		if !scraped {
			t.Errorf("no ServiceMonitor endpoint scrapes /metrics on a port of Service %s", svc.Name)
		}
	}
}

// TestBadValues: values that cannot work are refused at `helm template`
// (and so at install) with a message naming the value.
func TestBadValues(t *testing.T) {
	for _, tc := range []struct {
		name string
		vals map[string]any
		want string
	}{
		{"replicas above partitions",
			map[string]any{"channels": map[string]any{"whatsapp": map[string]any{"replicas": 13}}},
			"channels.whatsapp.replicas 13 is above the topic's 12 partitions (channels.whatsapp.partitions)"},
		{"KEDA max above partitions",
			map[string]any{"keda": map[string]any{"enabled": true, "maxReplicaCount": 24}},
			"keda.maxReplicaCount 24 is above the topic's 12 partitions (channels.apns.partitions)"},
		{"a channel's KEDA max above its partitions",
			map[string]any{"keda": map[string]any{"enabled": true}, "channels": map[string]any{"fcm": map[string]any{"partitions": 6}}},
			"channels.fcm: keda.maxReplicaCount 12 is above the topic's 6 partitions (channels.fcm.partitions)"},
		{"KEDA min above max",
			map[string]any{"keda": map[string]any{"enabled": true, "minReplicaCount": 5, "maxReplicaCount": 4}},
			"keda.minReplicaCount 5 and maxReplicaCount 4"},
		{"no replicas",
			map[string]any{"channels": map[string]any{"sendgrid": map[string]any{"replicas": 0}}},
			"at '/channels/sendgrid/replicas': minimum: got 0, want 1"},
		{"unknown channel",
			map[string]any{"channels": map[string]any{"telegram": map[string]any{"enabled": true}}},
			"at '/channels': additional properties 'telegram' not allowed"},
		{"SASL mechanism",
			map[string]any{"kafka": map[string]any{"sasl": map[string]any{"mechanism": "GSSAPI"}}},
			"at '/kafka/sasl/mechanism': value must be one of '', 'PLAIN', 'SCRAM-SHA-256', 'SCRAM-SHA-512'"},
		{"a misspelt value",
			map[string]any{"channels": map[string]any{"fcm": map[string]any{"replica": 3}}},
			"at '/channels/fcm': additional properties 'replica' not allowed"},
		{"a port that is no number",
			map[string]any{"metricsPort": "9464"},
			"at '/metricsPort': got string, want integer"},
		{"SASL without a user",
			map[string]any{"kafka": map[string]any{"sasl": map[string]any{"mechanism": "PLAIN"}}},
			"kafka.sasl.username is required with kafka.sasl.mechanism"},
		{"a setting the values own",
			map[string]any{"config": map[string]any{"PACER_EXPECTED_REPLICAS": "3"}},
			"config.PACER_EXPECTED_REPLICAS: set the replicas values (each Deployment sets its own) instead"},
		{"no credentials",
			map[string]any{"channels": map[string]any{"fcm": map[string]any{"credentialsSecrets": []any{}}}},
			"channels.fcm.credentialsSecrets: name at least one Secret"},
	} {
		_, err := render(t, tc.vals)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v\nwant an error saying %q", tc.name, err, tc.want)
		}
	}
	// The templates refuse what the schema refuses too, for
	// helm template --skip-schema-validation.
	for _, tc := range []struct {
		vals map[string]any
		want string
	}{
		{map[string]any{"channels": map[string]any{"sendgrid": map[string]any{"replicas": 0}}},
			"channels.sendgrid.replicas 0: want at least 1"},
		{map[string]any{"channels": map[string]any{"telegram": map[string]any{"enabled": true}}},
			`channels.telegram: Pacer has no channel "telegram"`},
		{map[string]any{"kafka": map[string]any{"sasl": map[string]any{"mechanism": "GSSAPI"}}},
			`kafka.sasl.mechanism "GSSAPI": want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512`},
	} {
		_, err := renderSchema(t, tc.vals, true)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("without the schema, %v: %v\nwant an error saying %q", tc.vals, err, tc.want)
		}
	}
}

func metav1LabelSelector(s metav1.LabelSelector) (labels.Selector, error) {
	return metav1.LabelSelectorAsSelector(&s)
}

func labelsSet(m map[string]string) labels.Set { return labels.Set(m) }

// valuePaths returns the dotted paths of values.yaml's values, as
// docs/kubernetes.md's table names them: a channel's as
// channels.<name>.X, and maps that hold settings, resources, labels or a
// Secret's name and key as one value.
func valuePaths(prefix string, m map[string]any) []string {
	var out []string
	for k, v := range m {
		p := prefix + k
		if prefix == "channels." {
			p = "channels.<name>"
		}
		sub, isMap := v.(map[string]any)
		switch {
		case !isMap || k == "config" || k == "env" || k == "resources" || k == "labels" || strings.HasSuffix(k, "Secret"):
			out = append(out, p)
		default:
			out = append(out, valuePaths(p+".", sub)...)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// TestValuesDocumented: docs/kubernetes.md's table has a row for every
// value of values.yaml, and no row for a value the chart does not have.
func TestValuesDocumented(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var vals map[string]any
	if err := yaml.Unmarshal(b, &vals); err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../../docs/kubernetes.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-zA-Z.<>]+)` \\|").FindAllStringSubmatch(string(doc), -1) {
		rows[m[1]] = true
	}
	paths := valuePaths("", vals)
	if len(paths) < 50 {
		t.Fatalf("%d values found in values.yaml", len(paths))
	}
	for _, p := range paths {
		if !rows[p] {
			t.Errorf("value %s has no row in docs/kubernetes.md's values table", p)
		}
		delete(rows, p)
	}
	delete(rows, "channels.<name>.keda") // set per channel only, not in values.yaml
	for r := range rows {
		t.Errorf("docs/kubernetes.md documents %s, which values.yaml does not have", r)
	}
}

// TestKedaPerChannel: a channel's own keda values override keda's, and
// its PACER_EXPECTED_REPLICAS follows its own maxReplicaCount.
func TestKedaPerChannel(t *testing.T) {
	objs := objects(t, map[string]any{
		"keda": map[string]any{"enabled": true, "maxReplicaCount": 8},
		"channels": map[string]any{
			"fcm":      map[string]any{"partitions": 6, "keda": map[string]any{"maxReplicaCount": 6, "lagThreshold": 50}},
			"apns":     map[string]any{"enabled": false},
			"sendgrid": map[string]any{"enabled": false},
		},
		"ingest": map[string]any{"enabled": false},
	})
	checkPods(t, objs, map[string]int{"pacer-fcm": 6, "pacer-whatsapp": 8})
	got := map[string]string{}
	for _, so := range find[*scaledObject](objs) {
		got[so.Metadata.Name] = fmt.Sprintf("%d-%d lag %s", *so.Spec.MinReplicaCount, *so.Spec.MaxReplicaCount, so.Spec.Triggers[0].Metadata["lagThreshold"])
	}
	want := map[string]string{"pacer-fcm": "1-6 lag 50", "pacer-whatsapp": "1-8 lag 1000"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("ScaledObjects %v, want %v", got, want)
	}
}

// TestKedaChannelZero: a channel's own keda value wins even when it is 0
// (sprig's merge would take the 0 for unset and keep keda's 1).
func TestKedaChannelZero(t *testing.T) {
	objs := objects(t, map[string]any{
		"keda": map[string]any{"enabled": true},
		"channels": map[string]any{
			"fcm": map[string]any{"keda": map[string]any{"minReplicaCount": 0, "cooldownPeriod": 0}},
		},
	})
	for _, so := range find[*scaledObject](objs) {
		wantMin, wantCool := int32(1), int32(300)
		if so.Metadata.Name == "pacer-fcm" {
			wantMin, wantCool = 0, 0
		}
		if *so.Spec.MinReplicaCount != wantMin || *so.Spec.CooldownPeriod != wantCool {
			t.Errorf("ScaledObject %s: minReplicaCount %d cooldownPeriod %d, want %d and %d",
				so.Metadata.Name, *so.Spec.MinReplicaCount, *so.Spec.CooldownPeriod, wantMin, wantCool)
		}
	}
}

// TestSettingsOwnedOrSecret: every setting a value of the chart sets, and
// every secret of docs/configuration.md, is refused in config and in each
// env, naming the value to use (else it is written twice, or a secret
// lands in a ConfigMap or a pod's spec).
func TestSettingsOwnedOrSecret(t *testing.T) {
	owned := map[string]string{
		"PACER_KAFKA_BROKERS": "kafka.brokers", "PACER_KAFKA_TLS": "kafka.tls.enabled",
		"PACER_KAFKA_TLS_CA_FILE": "kafka.tls.caKey", "PACER_KAFKA_TLS_CERT_FILE": "kafka.tls.certKey",
		"PACER_KAFKA_TLS_KEY_FILE": "kafka.tls.keyKey", "PACER_KAFKA_TLS_SERVER_NAME": "kafka.tls.serverName",
		"PACER_KAFKA_SASL_MECHANISM": "kafka.sasl.mechanism", "PACER_KAFKA_SASL_USERNAME": "kafka.sasl.username",
		"PACER_KAFKA_SASL_PASSWORD_FILE": "kafka.sasl.passwordSecret", "PACER_METRICS_ADDR": "metricsPort",
		"PACER_REDIS_URL": "redis.urlSecret", "PACER_REDIS_USERNAME": "redis.username",
		"PACER_REDIS_PASSWORD_FILE": "redis.passwordSecret", "PACER_REDIS_TLS": "redis.tls.enabled",
		"PACER_REDIS_TLS_CA_FILE": "redis.tls.caKey", "PACER_REDIS_TLS_CERT_FILE": "redis.tls.certKey",
		"PACER_REDIS_TLS_KEY_FILE": "redis.tls.keyKey", "PACER_REDIS_TLS_SERVER_NAME": "redis.tls.serverName",
		"PACER_DRAIN": "drain", "PACER_EXPECTED_REPLICAS": "replicas", "PACER_CREDENTIALS_DIR": "credentialsDirSecrets",
		"PACER_INGEST_ADDR": "ingest.port", "PACER_INGEST_TENANTS": "ingest.tenantsSecret",
		"PACER_INGEST_TOPIC_PREFIX": "topicPrefix",
	}
	// The secrets: the rows of docs/configuration.md of type secret(s).
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	secrets := regexp.MustCompile("(?m)^\\| `(PACER_[A-Z0-9_]+)` \\| secrets? \\|").FindAllStringSubmatch(string(doc), -1)
	if len(secrets) < 7 {
		t.Fatalf("%d secret rows in docs/configuration.md", len(secrets))
	}
	want := map[string]string{}
	for k, v := range owned {
		want[k] = v
	}
	for _, m := range secrets {
		want[m[1]] = m[1] + " is a secret"
	}
	// Each value the chart sets, on, so that a duplicate would show.
	base := allOn()
	base["kafka"].(map[string]any)["tls"].(map[string]any)["certKey"] = "tls.crt"
	base["kafka"].(map[string]any)["tls"].(map[string]any)["keyKey"] = "tls.key"
	base["kafka"].(map[string]any)["tls"].(map[string]any)["serverName"] = "kafka"
	base["redis"].(map[string]any)["tls"].(map[string]any)["serverName"] = "redis"
	base["topicPrefix"] = "acme."
	if _, err := render(t, base); err != nil {
		t.Fatalf("every value on: %v", err)
	}
	for key, says := range want {
		for _, where := range []string{"config", "ingest.env", "channels.whatsapp.env"} {
			vals := maps.Clone(base)
			set := map[string]any{key: "x"}
			switch where {
			case "config":
				vals["config"] = set
			case "ingest.env":
				vals["ingest"] = map[string]any{"env": set}
			default:
				vals["channels"] = map[string]any{"whatsapp": map[string]any{"env": set}}
			}
			_, err := render(t, vals)
			if err == nil || !strings.Contains(err.Error(), where+"."+key) || !strings.Contains(err.Error(), says) {
				t.Errorf("%s.%s: %v\nwant an error naming it and saying %q", where, key, err, says)
			}
		}
	}
	// The outcomes topic is shared by pacer run (writes) and pacer ingest
	// (reads): fine in config, refused in a single component's env.
	if _, err := render(t, map[string]any{"config": map[string]any{"PACER_CALLBACK_TOPIC": "acme.outcomes"}}); err != nil {
		t.Errorf("config.PACER_CALLBACK_TOPIC: %v", err)
	}
	_, err = render(t, map[string]any{"ingest": map[string]any{"env": map[string]any{"PACER_CALLBACK_TOPIC": "acme.outcomes"}}})
	if err == nil || !strings.Contains(err.Error(), "ingest.env.PACER_CALLBACK_TOPIC: set config.PACER_CALLBACK_TOPIC") {
		t.Errorf("ingest.env.PACER_CALLBACK_TOPIC: %v", err)
	}
}

// TestTopicPrefix: topicPrefix names the topic ingest writes, each
// channel runs on and KEDA watches alike.
func TestTopicPrefix(t *testing.T) {
	objs := objects(t, map[string]any{"topicPrefix": "acme.", "keda": map[string]any{"enabled": true}})
	deps := deployments(objs)
	if e, ok := envOf(deps["pacer-ingest"].Spec.Template.Spec.Containers[0], "PACER_INGEST_TOPIC_PREFIX"); !ok || e.Value != "acme." {
		t.Errorf("pacer-ingest: PACER_INGEST_TOPIC_PREFIX %q, want acme.", e.Value)
	}
	for _, ch := range []string{"apns", "fcm", "sendgrid", "whatsapp"} {
		args := deps["pacer-"+ch].Spec.Template.Spec.Containers[0].Args
		if want := []string{"run", "--channel", ch, "--topic", "acme." + ch}; !slices.Equal(args, want) {
			t.Errorf("pacer-%s: args %q, want %q", ch, args, want)
		}
	}
	for _, so := range find[*scaledObject](objs) {
		ch := strings.TrimPrefix(so.Metadata.Name, "pacer-")
		if got := so.Spec.Triggers[0].Metadata["topic"]; got != "acme."+ch {
			t.Errorf("ScaledObject %s: topic %q, want acme.%s", so.Metadata.Name, got, ch)
		}
	}
}

// TestDisruptionBudgets: a PodDisruptionBudget never blocks a node drain:
// 1 replica gets none (minAvailable 1 would forbid every eviction), KEDA
// (which may scale to 1) maxUnavailable 1, 2 or more minAvailable 1.
func TestDisruptionBudgets(t *testing.T) {
	pdbs := func(vals map[string]any) map[string]string {
		out := map[string]string{}
		for _, p := range find[*policyv1.PodDisruptionBudget](objects(t, vals)) {
			switch {
			case p.Spec.MinAvailable != nil && p.Spec.MaxUnavailable == nil:
				out[p.Name] = "minAvailable " + p.Spec.MinAvailable.String()
			case p.Spec.MaxUnavailable != nil && p.Spec.MinAvailable == nil:
				out[p.Name] = "maxUnavailable " + p.Spec.MaxUnavailable.String()
			default:
				out[p.Name] = fmt.Sprintf("%+v", p.Spec)
			}
		}
		return out
	}
	got := pdbs(map[string]any{
		"channels": map[string]any{"fcm": map[string]any{"replicas": 1}, "apns": map[string]any{"enabled": false}, "sendgrid": map[string]any{"enabled": false}},
		"ingest":   map[string]any{"replicas": 1},
	})
	if want := map[string]string{"pacer-whatsapp": "minAvailable 1"}; !maps.Equal(got, want) {
		t.Errorf("PodDisruptionBudgets %v, want %v", got, want)
	}
	got = pdbs(map[string]any{"keda": map[string]any{"enabled": true, "minReplicaCount": 1},
		"channels": map[string]any{"apns": map[string]any{"enabled": false}, "sendgrid": map[string]any{"enabled": false}, "whatsapp": map[string]any{"enabled": false}}})
	if want := map[string]string{"pacer-fcm": "maxUnavailable 1", "pacer-ingest": "minAvailable 1"}; !maps.Equal(got, want) {
		t.Errorf("with KEDA, PodDisruptionBudgets %v, want %v", got, want)
	}
}

// TestBadTypes: null, strings and fractions where a whole number belongs,
// and a drain that is no duration, are refused by the schema and, without
// it (--skip-schema-validation), by the templates.
func TestBadTypes(t *testing.T) {
	for _, tc := range []struct {
		vals             map[string]any
		schema, template string
	}{
		{map[string]any{"channels": map[string]any{"fcm": map[string]any{"partitions": nil}}},
			"at '/channels/fcm': missing property 'partitions'", "channels.fcm.partitions: got invalid <nil>, want a whole number"},
		{map[string]any{"channels": map[string]any{"fcm": map[string]any{"partitions": "12"}}},
			"at '/channels/fcm/partitions': got string, want integer", "channels.fcm.partitions: got string 12, want a whole number"},
		{map[string]any{"channels": map[string]any{"fcm": map[string]any{"partitions": 0}}},
			"at '/channels/fcm/partitions': minimum: got 0, want 1", "channels.fcm.partitions 0: want at least 1"},
		{map[string]any{"channels": map[string]any{"apns": map[string]any{"replicas": 2.5}}},
			"at '/channels/apns/replicas': got number, want integer", "channels.apns.replicas: got float64 2.5, want a whole number"},
		{map[string]any{"ingest": map[string]any{"replicas": "2"}},
			"at '/ingest/replicas': got string, want integer", "ingest.replicas: got string 2, want a whole number"},
		{map[string]any{"drain": 30},
			"at '/drain': got number, want string", "drain: got int 30, want a duration such as 30s"},
		{map[string]any{"drain": "30 seconds"},
			"at '/drain': '30 seconds' does not match pattern", "drain: got string 30 seconds, want a duration"},
		{map[string]any{"keda": map[string]any{"enabled": true, "maxReplicaCount": "12"}},
			"at '/keda/maxReplicaCount': got string, want integer", "keda.maxReplicaCount: got string 12, want a whole number"},
		{map[string]any{"keda": map[string]any{"enabled": true}, "channels": map[string]any{"sendgrid": map[string]any{"keda": map[string]any{"minReplicaCount": "0"}}}},
			"at '/channels/sendgrid/keda/minReplicaCount': got string, want integer", "channels.sendgrid.keda.minReplicaCount: got string 0, want a whole number"},
		{map[string]any{"channels": map[string]any{"fcm": map[string]any{"replica": 3}}},
			"at '/channels/fcm': additional properties 'replica' not allowed", `channels.fcm.replica: a channel has no value "replica"`},
		{map[string]any{"topicPrefix": "acme/"},
			"at '/topicPrefix': 'acme/' does not match pattern", "topicPrefix acme/: want 1 to 200 of"},
	} {
		_, err := render(t, tc.vals)
		if err == nil || !strings.Contains(err.Error(), tc.schema) {
			t.Errorf("%v: %v\nwant an error saying %q", tc.vals, err, tc.schema)
		}
		_, err = renderSchema(t, tc.vals, true)
		if err == nil || !strings.Contains(err.Error(), tc.template) {
			t.Errorf("without the schema, %v: %v\nwant an error saying %q", tc.vals, err, tc.template)
		}
	}
}
