package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// promtool returns the promtool to run: $PACER_PROMTOOL, else the one on
// PATH (scripts/test-env.sh installs Debian's). Without one the test fails:
// a check that cannot run must not pass.
func promtool(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("PACER_PROMTOOL"); p != "" {
		return p
	}
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("no promtool on PATH (scripts/test-env.sh installs it; or set PACER_PROMTOOL): the alert rules cannot be checked")
	}
	return p
}

func run(t *testing.T, dir, bin string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(bin), strings.Join(args, " "), err, out)
	}
	t.Logf("%s %s:\n%s", filepath.Base(bin), strings.Join(args, " "), bytes.TrimSpace(out))
}

// TestAlertRules runs `promtool check rules` and the rules' unit tests.
func TestAlertRules(t *testing.T) {
	bin := promtool(t)
	run(t, "prometheus", bin, "check", "rules", "alerts.yaml")
	run(t, "prometheus", bin, "test", "rules", "alerts_test.yaml")
}

// documentedMetrics returns the metric names of the metrics tables of
// docs/operations.md.
func documentedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]bool{}
	for _, n := range regexp.MustCompile("(?m)^\\| `(pacer_[a-z_]+)").FindAllStringSubmatch(string(b), -1) {
		m[n[1]] = true
	}
	if len(m) < 20 {
		t.Fatalf("found %d metrics in docs/operations.md's tables; the pattern no longer matches them", len(m))
	}
	return m
}

// usedMetrics returns the pacer_ metrics an expression names, histogram
// suffixes removed.
func usedMetrics(expr string) []string {
	var out []string
	for _, n := range regexp.MustCompile(`\bpacer_[a-z_]+`).FindAllString(expr, -1) {
		for _, suf := range []string{"_bucket", "_count", "_sum"} {
			if strings.HasSuffix(n, "_seconds"+suf) {
				n = strings.TrimSuffix(n, suf)
			}
		}
		out = append(out, n)
	}
	return out
}

// TestAlertsUseDocumentedMetrics fails when a rule names a metric that
// docs/operations.md does not list (a renamed or removed metric silently
// never fires).
func TestAlertsUseDocumentedMetrics(t *testing.T) {
	doc := documentedMetrics(t)
	b, err := os.ReadFile("prometheus/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Rules []struct {
				Alert       string            `json:"alert"`
				Expr        string            `json:"expr"`
				Annotations map[string]string `json:"annotations"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	var alerts []string
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			for _, m := range usedMetrics(r.Expr) {
				if !doc[m] {
					t.Errorf("alert %s uses %s, which docs/operations.md's metrics tables do not list", r.Alert, m)
				}
			}
			if len(r.Annotations["runbook"]) < 100 || r.Annotations["summary"] == "" {
				t.Errorf("alert %s: want a summary and a runbook", r.Alert)
			}
		}
	}
	for _, want := range []string{"PacerKeysAtFloor", "PacerBreakerOpen", "PacerDLQGrowing", "PacerConsumerLagETA",
		"PacerUnderutilized", "PacerRedisFallback", "PacerNoReplicaReady", "PacerPortfolioNearLimit",
		"PacerIngestServerErrors", "PacerIngestSlow", "PacerIngestRedisFallback", "PacerIngestChannelQuota"} {
		if !slices.Contains(alerts, want) {
			t.Errorf("no alert %s", want)
		}
	}
	ops, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range alerts {
		if !strings.Contains(string(ops), "| `"+a+"` |") {
			t.Errorf("alert %s has no row in docs/operations.md's alerts table", a)
		}
	}
}

// TestGrafanaDashboard checks that the dashboard imports as is: valid JSON,
// the data source a template variable that every panel and query uses,
// unique panel ids, and only documented metrics.
func TestGrafanaDashboard(t *testing.T) {
	b, err := os.ReadFile("grafana/pacer.json")
	if err != nil {
		t.Fatal(err)
	}
	type ds struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	}
	var d struct {
		UID        string `json:"uid"`
		Title      string `json:"title"`
		Schema     int    `json:"schemaVersion"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Type  string `json:"type"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
		Panels []struct {
			ID         int    `json:"id"`
			Type       string `json:"type"`
			Title      string `json:"title"`
			Datasource *ds    `json:"datasource"`
			Targets    []struct {
				Expr       string `json:"expr"`
				Datasource *ds    `json:"datasource"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("grafana/pacer.json: %v", err)
	}
	if d.UID == "" || d.Title == "" || d.Schema < 36 {
		t.Errorf("uid %q, title %q, schemaVersion %d", d.UID, d.Title, d.Schema)
	}
	if bytes.Contains(b, []byte("${DS_")) || bytes.Contains(b, []byte(`"__inputs": [`+"\n    {")) {
		t.Errorf("the dashboard asks for inputs at import; use the datasource variable")
	}
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
	}
	if vars["datasource"] != "datasource" || vars["channel"] != "query" {
		t.Fatalf("template variables %v: want datasource (type datasource) and channel (query)", vars)
	}
	doc := documentedMetrics(t)
	ids := map[int]bool{}
	used := map[string]bool{}
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d twice", p.ID)
		}
		ids[p.ID] = true
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" || len(p.Targets) == 0 {
			t.Errorf("panel %q: datasource %+v, %d queries; want ${datasource} and a query", p.Title, p.Datasource, len(p.Targets))
		}
		for _, q := range p.Targets {
			if q.Datasource == nil || q.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q: a query's datasource is %+v", p.Title, q.Datasource)
			}
			// The ingest API's metrics (pacer_ingest_*) have no channel
			// label: a filter on it would hide them once a channel is picked.
			ingest := strings.HasPrefix(p.Title, "Ingest ")
			if !ingest && !strings.Contains(q.Expr, `channel=~"$channel"`) {
				t.Errorf("panel %q: %s does not filter on $channel", p.Title, q.Expr)
			}
			for _, m := range usedMetrics(q.Expr) {
				if ingest != strings.HasPrefix(m, "pacer_ingest_") {
					t.Errorf("panel %q: %s; want the ingest panels (titled \"Ingest ...\") to show pacer_ingest_* only, and only they", p.Title, m)
				}
				used[m] = true
				if !doc[m] {
					t.Errorf("panel %q uses %s, which docs/operations.md's metrics tables do not list", p.Title, m)
				}
			}
		}
	}
	// What the dashboard must show (issue: throughput, utilization, keys at
	// floor / in cooldown / breaker open, throttles, DLQ, lag, latency, Redis).
	for _, m := range []string{"pacer_delivered_total", "pacer_rate_current", "pacer_keys_at_floor", "pacer_keys_cooldown",
		"pacer_breakers_open", "pacer_sends_total", "pacer_dlq_total", "pacer_consumer_lag_records", "pacer_bucket_wait_seconds",
		"pacer_send_duration_seconds", "pacer_redis_errors_total", "pacer_redis_fallback",
		// and the ingest API's (pacer ingest)
		"pacer_ingest_requests_total", "pacer_ingest_messages_total", "pacer_ingest_quota_refusals_total",
		"pacer_ingest_request_duration_seconds", "pacer_ingest_redis_calls_total", "pacer_ingest_redis_errors_total",
		"pacer_ingest_redis_fallback"} {
		if !used[m] {
			t.Errorf("no panel shows %s", m)
		}
	}
}

// channelNames returns the channels Pacer has: the adapter packages under
// channels/ (as internal/deptest finds them), which cmd/pacer's
// TestChannelPackages checks against the channel table (this package may
// not import Pacer's code).
func channelNames(t *testing.T) []string {
	t.Helper()
	es, err := os.ReadDir("../channels")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		if e.IsDir() && e.Name() != "internal" {
			out = append(out, e.Name())
		}
	}
	if len(out) < 4 {
		t.Fatalf("channels %v: want at least 4", out)
	}
	return out
}

// manifests decodes every document of deploy/k8s/*.yaml (kustomization.yaml
// apart) into its Kubernetes API type, refusing unknown and duplicate
// fields: the schema check, offline (kubeconform fetches its schemas from
// the network).
func manifests(t *testing.T) map[string][]any {
	t.Helper()
	files, err := filepath.Glob("k8s/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in k8s/: %v", err)
	}
	out := map[string][]any{}
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(b), -1) {
			if strings.TrimSpace(regexp.MustCompile(`(?m)^#.*$`).ReplaceAllString(doc, "")) == "" {
				continue
			}
			var u unstructured.Unstructured
			if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
				t.Fatalf("%s document %d: %v", f, i+1, err)
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
			case "v1/Secret":
				obj = &corev1.Secret{}
			default:
				t.Fatalf("%s document %d: kind %v not checked here", f, i+1, gvk)
			}
			if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
				t.Errorf("%s document %d (%s %s): %v", f, i+1, u.GetKind(), u.GetName(), err)
				continue
			}
			if u.GetName() == "" {
				t.Errorf("%s document %d: no metadata.name", f, i+1)
			}
			out[f] = append(out[f], obj)
		}
	}
	return out
}

func find[T any](all map[string][]any) []T {
	var out []T
	for _, objs := range all {
		for _, o := range objs {
			if v, ok := o.(T); ok {
				out = append(out, v)
			}
		}
	}
	return out
}

// TestKubernetesManifests checks the manifests against the API types and
// the deployment rules: one Deployment per channel and one for ingest, each
// non-root with a read-only root filesystem, resources, /healthz and
// /readyz probes, a grace period longer than PACER_DRAIN, credentials from
// a Secret mounted read-only as the credentials directory, a
// PodDisruptionBudget and a Service selecting its pods.
func TestKubernetesManifests(t *testing.T) {
	all := manifests(t)
	deps := find[*appsv1.Deployment](all)
	pdbs := find[*policyv1.PodDisruptionBudget](all)
	svcs := find[*corev1.Service](all)
	cms := find[*corev1.ConfigMap](all)
	secrets := find[*corev1.Secret](all)
	byArgs := map[string]*appsv1.Deployment{}
	for _, d := range deps {
		name := d.Name
		spec := d.Spec.Template.Spec
		if len(spec.Containers) != 1 {
			t.Fatalf("%s: %d containers, want 1", name, len(spec.Containers))
		}
		c := spec.Containers[0]
		byArgs[strings.Join(c.Args, " ")] = d
		sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
		if err != nil || sel.Empty() || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
			t.Errorf("%s: selector %v does not select its pod template's labels %v", name, d.Spec.Selector, d.Spec.Template.Labels)
		}
		psc, csc := spec.SecurityContext, c.SecurityContext
		if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
			t.Errorf("%s: want runAsNonRoot and a non-zero runAsUser", name)
		}
		if csc == nil || csc.ReadOnlyRootFilesystem == nil || !*csc.ReadOnlyRootFilesystem ||
			csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation || csc.Capabilities == nil ||
			!slices.Contains(csc.Capabilities.Drop, "ALL") {
			t.Errorf("%s: want a read-only root filesystem, no privilege escalation, all capabilities dropped", name)
		}
		if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
			t.Errorf("%s: want cpu and memory requests and a memory limit", name)
		}
		probe := func(p *corev1.Probe, path string) {
			if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != path || !hasPort(c, p.HTTPGet.Port) {
				t.Errorf("%s: want an HTTP probe on %s at a port of the container, got %+v", name, path, p)
			}
		}
		probe(c.LivenessProbe, "/healthz")
		probe(c.ReadinessProbe, "/readyz")
		// Before /healthz answers, `pacer run` may wait up to
		// PACER_KAFKA_STARTUP_TIMEOUT (1m) for a seed broker: the startup
		// probe holds the liveness probe back longer than that.
		probe(c.StartupProbe, "/healthz")
		if p := c.StartupProbe; p != nil && p.PeriodSeconds*p.FailureThreshold <= 60 {
			t.Errorf("%s: the startup probe allows %d s, want more than PACER_KAFKA_STARTUP_TIMEOUT (60 s)", name, p.PeriodSeconds*p.FailureThreshold)
		}
		// The local failure mode's share of a rate is 1/PACER_EXPECTED_REPLICAS:
		// each Deployment sets its own, equal to its replicas.
		expected := ""
		for _, e := range c.Env {
			if e.Name == "PACER_EXPECTED_REPLICAS" {
				expected = e.Value
			}
		}
		if d.Spec.Replicas == nil {
			t.Errorf("%s: no replicas", name)
		} else if expected != fmt.Sprint(*d.Spec.Replicas) {
			t.Errorf("%s: PACER_EXPECTED_REPLICAS %q, want its replicas %d", name, expected, *d.Spec.Replicas)
		}
		drain := 30 * time.Second // PACER_DRAIN's default
		for _, e := range c.Env {
			if e.Name == "PACER_DRAIN" {
				if drain, err = time.ParseDuration(e.Value); err != nil {
					t.Errorf("%s: PACER_DRAIN %q: %v", name, e.Value, err)
				}
			}
			secret := strings.Contains(e.Name, "TOKEN") || strings.Contains(e.Name, "API_KEYS") || e.Name == "PACER_REDIS_URL"
			switch {
			case secret && strings.HasSuffix(e.Name, "_FILE"):
				// A secret read from a file: the file of a mounted Secret.
				if !inSecretMount(spec, c, e.Value) {
					t.Errorf("%s: %s=%q must name a file of a mounted Secret", name, e.Name, e.Value)
				}
			case secret:
				if e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
					t.Errorf("%s: %s must come from a Secret", name, e.Name)
				}
			}
		}
		if g := spec.TerminationGracePeriodSeconds; g == nil || time.Duration(*g)*time.Second <= drain {
			t.Errorf("%s: terminationGracePeriodSeconds %v, want longer than PACER_DRAIN %v", name, spec.TerminationGracePeriodSeconds, drain)
		}
		var credVol string
		for _, m := range c.VolumeMounts {
			if m.MountPath == "/etc/pacer/credentials" && m.ReadOnly {
				credVol = m.Name
			}
		}
		secretMounted := false
		for _, v := range spec.Volumes {
			if v.Name == credVol && v.Secret != nil && v.Secret.SecretName != "" {
				secretMounted = true
			}
		}
		if !secretMounted {
			t.Errorf("%s: want a Secret mounted read-only at /etc/pacer/credentials", name)
		}
		podLabels := labels.Set(d.Spec.Template.Labels)
		hasPDB := false
		for _, p := range pdbs {
			s, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
			if err == nil && !s.Empty() && s.Matches(podLabels) && p.Spec.MinAvailable != nil {
				hasPDB = true
			}
		}
		if !hasPDB {
			t.Errorf("%s: no PodDisruptionBudget with minAvailable selects its pods", name)
		}
		hasSvc := false
		for _, s := range svcs {
			if len(s.Spec.Selector) > 0 && labels.SelectorFromSet(s.Spec.Selector).Matches(podLabels) {
				for _, p := range s.Spec.Ports {
					hasSvc = hasSvc || hasPort(c, p.TargetPort)
				}
			}
		}
		if !hasSvc {
			t.Errorf("%s: no Service selects its pods on a port of the container", name)
		}
		for _, ef := range c.EnvFrom {
			if ef.ConfigMapRef != nil && !slices.ContainsFunc(cms, func(cm *corev1.ConfigMap) bool { return cm.Name == ef.ConfigMapRef.Name }) {
				t.Errorf("%s: ConfigMap %s is not among the manifests", name, ef.ConfigMapRef.Name)
			}
		}
	}
	for _, cm := range cms {
		if _, ok := cm.Data["PACER_EXPECTED_REPLICAS"]; ok {
			t.Errorf("ConfigMap %s sets PACER_EXPECTED_REPLICAS for every Deployment; each Deployment sets its own", cm.Name)
		}
	}
	for _, ch := range channelNames(t) {
		d := byArgs["run --channel "+ch]
		if d == nil {
			t.Errorf("no Deployment runs `pacer run --channel %s`", ch)
			continue
		}
		// Its Secret is in the example, with the keys the pod reads.
		sec := d.Spec.Template.Spec.Volumes[0].Secret
		if sec == nil || !slices.ContainsFunc(secrets, func(s *corev1.Secret) bool { return s.Name == sec.SecretName }) {
			t.Errorf("%s: its credentials Secret is not in secret.example.yaml", d.Name)
		}
	}
	if d := byArgs["ingest"]; d == nil || !hasPort(d.Spec.Template.Spec.Containers[0], intstr.FromInt32(8080)) {
		t.Errorf("no Deployment runs `pacer ingest` on port 8080")
	}
	kust, err := os.ReadFile("k8s/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Resources []string `json:"resources"`
	}
	if err := yaml.Unmarshal(kust, &k); err != nil {
		t.Fatal(err)
	}
	for f := range all {
		if base := filepath.Base(f); base != "secret.example.yaml" && !slices.Contains(k.Resources, base) {
			t.Errorf("kustomization.yaml does not list %s", base)
		}
	}
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

// TestComposeFile loads deploy/compose.yaml as `docker compose config`
// does (compose-go, the library docker compose is built on: schema,
// interpolation, consistency), with every profile on and each variable it
// requires (${NAME:?...}) set.
func TestComposeFile(t *testing.T) {
	wd, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	env := types.Mapping{}
	var required []string
	for _, m := range regexp.MustCompile(`\$\{([A-Z0-9_]+):?\?`).FindAllStringSubmatch(string(b), -1) {
		if _, dup := env[m[1]]; !dup {
			required = append(required, m[1])
		}
		env[m[1]] = "x"
	}
	if len(required) < 4 {
		t.Fatalf("compose.yaml requires %v; want the credentials of every channel", required)
	}
	load := func(env types.Mapping, profiles ...string) (*types.Project, error) {
		return loader.LoadWithContext(context.Background(), types.ConfigDetails{
			WorkingDir: wd, ConfigFiles: []types.ConfigFile{{Filename: filepath.Join(wd, "compose.yaml")}}, Environment: env,
		}, func(o *loader.Options) { o.SetProjectName("pacer", true); o.Profiles = profiles })
	}
	p, err := load(env, "*")
	if err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	var names []string
	for n := range p.Services {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, ch := range channelNames(t) {
		if !slices.Contains(names, "pacer-"+ch) {
			t.Errorf("compose.yaml has no service pacer-%s (services %v)", ch, names)
		}
	}
	checkComposeIngest(t, p)
	// A required variable left unset is an error naming it, as docker
	// compose says.
	for _, v := range required {
		without := types.Mapping{}
		for k, val := range env {
			if k != v {
				without[k] = val
			}
		}
		if _, err := load(without); err == nil || !strings.Contains(err.Error(), v) {
			t.Errorf("compose.yaml without %s: %v, want an error naming it", v, err)
		}
	}
}

// inSecretMount reports whether path is under a volume mount of c whose
// volume in spec is a Secret.
func inSecretMount(spec corev1.PodSpec, c corev1.Container, path string) bool {
	for _, m := range c.VolumeMounts {
		if !strings.HasPrefix(path, strings.TrimSuffix(m.MountPath, "/")+"/") {
			continue
		}
		for _, v := range spec.Volumes {
			if v.Name == m.Name && v.Secret != nil {
				return true
			}
		}
	}
	return false
}

// checkComposeIngest checks compose's pacer-ingest against
// deploy/k8s/ingest.yaml's container (command, port, address, drain) and
// against what pacer ingest needs to start: Kafka and Redis as the channels'
// pacers reach them, healthy first, and its tenants file, a secret mounted
// where PACER_INGEST_TENANTS points.
func checkComposeIngest(t *testing.T, p *types.Project) {
	t.Helper()
	svc, ok := p.Services["pacer-ingest"]
	if !ok {
		t.Fatal("compose.yaml has no service pacer-ingest (pacer ingest)")
	}
	var k8s *corev1.Container
	for _, d := range find[*appsv1.Deployment](manifests(t)) {
		if d.Name == "pacer-ingest" {
			k8s = &d.Spec.Template.Spec.Containers[0]
		}
	}
	if k8s == nil {
		t.Fatal("deploy/k8s has no Deployment pacer-ingest")
	}
	env := func(s types.ServiceConfig, name string) string {
		if v := s.Environment[name]; v != nil {
			return *v
		}
		return ""
	}
	k8sEnv := map[string]string{}
	for _, e := range k8s.Env {
		k8sEnv[e.Name] = e.Value
	}
	if !slices.Equal([]string(svc.Command), k8s.Args) {
		t.Errorf("pacer-ingest command %q, want %q as in k8s/ingest.yaml", svc.Command, k8s.Args)
	}
	for _, name := range []string{"PACER_INGEST_ADDR", "PACER_DRAIN"} {
		if got, want := env(svc, name), k8sEnv[name]; got != want || want == "" {
			t.Errorf("pacer-ingest %s = %q, want %q as in k8s/ingest.yaml", name, got, want)
		}
	}
	pacer := p.Services["pacer-whatsapp"]
	for _, name := range []string{"PACER_KAFKA_BROKERS", "PACER_REDIS_URL"} {
		if got, want := env(svc, name), env(pacer, name); got != want || want == "" {
			t.Errorf("pacer-ingest %s = %q, want %q as pacer-whatsapp's", name, got, want)
		}
	}
	published := false
	for _, port := range svc.Ports {
		published = published || (hasPort(*k8s, intstr.FromInt32(int32(port.Target))) && port.Published != "" &&
			strings.HasSuffix(env(svc, "PACER_INGEST_ADDR"), fmt.Sprintf(":%d", port.Target)))
	}
	if !published {
		t.Errorf("pacer-ingest ports %+v: want the container port of k8s/ingest.yaml, where PACER_INGEST_ADDR listens, published", svc.Ports)
	}
	for _, dep := range []string{"kafka", "redis"} {
		if svc.DependsOn[dep].Condition != types.ServiceConditionHealthy {
			t.Errorf("pacer-ingest depends on %s with %+v, want it healthy first", dep, svc.DependsOn[dep])
		}
	}
	tenants, mounted := env(svc, "PACER_INGEST_TENANTS"), false
	for _, sec := range svc.Secrets {
		target := sec.Target
		if target == "" {
			target = sec.Source
		}
		if !strings.HasPrefix(target, "/") {
			target = "/run/secrets/" + target
		}
		_, defined := p.Secrets[sec.Source]
		mounted = mounted || (target == tenants && defined)
	}
	if !mounted {
		t.Errorf("pacer-ingest PACER_INGEST_TENANTS = %q, want the file of a secret it mounts (secrets %+v)", tenants, svc.Secrets)
	}
}
