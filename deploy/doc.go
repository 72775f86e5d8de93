// Package deploy holds no code: its tests check the deployment files
// beside them (Prometheus alert rules with promtool, the Grafana dashboard,
// the Kubernetes manifests against the Kubernetes API types, the compose
// file against the Compose specification), so `go test ./...` fails when
// one of them breaks.
package deploy
