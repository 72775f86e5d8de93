// Package helm holds no code: its tests render the Helm chart in pacer/
// in-process with Helm's Go library (helm template and helm lint) and check
// the objects: the defaults render deploy/k8s object by object, every
// object decodes strictly into its Kubernetes, Prometheus Operator or KEDA
// type, and bad values are refused with a message naming the value. It is a
// Go module of its own so that Helm's dependencies stay out of Pacer's.
package helm
