// The framework floor: k8s.io/cloud-provider's own controllers over its fake cloud (main.go).
// bench/peers.py copies this module into polyccm's cache and builds it there (go.sum is made
// at build time from the Go module proxy, so nothing fetched is kept in the repository).
module polyccm.local/fake-cloud-controller-manager

go 1.26.0

godebug default=go1.26

require (
	k8s.io/api v0.37.0
	k8s.io/apimachinery v0.37.0
	k8s.io/cloud-provider v0.37.0
	k8s.io/component-base v0.37.0
	k8s.io/klog/v2 v2.140.0
)
