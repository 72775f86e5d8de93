// Package deploy holds no code: its tests check the deployment files
// beside them (Prometheus alert rules with promtool, the Grafana dashboard,
// the Kubernetes manifests against the Kubernetes API types, the compose
// file against the Compose specification), so `go test ./...` fails when
// one of them breaks. The Helm chart's tests are in deploy/helm, a Go
// module of its own (`make test-helm`; `make test` runs them).
package deploy
