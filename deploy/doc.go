// Package deploy owns rolter's deployment files: the Kubernetes manifests
// (kustomize base and example overlay), the container build, the systemd
// units and the Grafana dashboard. Its tests render the kustomizations,
// decode every object strictly into Kubernetes API types, check the
// cross-references between them, and run every rolter command line they
// contain through the real binary's flag parser.
//
// It is a nested module so that the Kubernetes libraries never reach the
// main go.mod; run its tests with `cd deploy && go test ./...`.
package deploy
