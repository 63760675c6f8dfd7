// Built by tools/build-go as build.txt says; go.sum is the provenance of what it builds.
module ballast.dev/go/pause

go 1.26.0

require k8s.io/kubernetes v1.35.0
