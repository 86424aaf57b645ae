// Command fake-cloud-controller-manager is the floor of what the Go framework costs: the
// standard cloud-provider controllers (cloud-node, cloud-node-lifecycle, service, route) of
// k8s.io/cloud-provider, run by its own command, over the package's fake cloud. No cloud is
// called, so every second and every byte it spends is the framework's.
//
// The fake cloud is made safe for concurrent workers and answers for any node name:
//
//   - each node gets providerID fake://<name>, an InternalIP derived from its name, zone
//     fake-zone-a in region fake-region, instance type fake.large;
//   - an instance "exists" unless its Node carries the annotation
//     bench.polyccm.dev/terminated (the harness's way of terminating a fake instance);
//   - every load balancer is ensured at once with ingress IP 192.0.2.1.
package main

import (
	"context"
	"hash/fnv"
	"io"
	"net"
	"os"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/app"
	"k8s.io/cloud-provider/app/config"
	"k8s.io/cloud-provider/fake"
	"k8s.io/cloud-provider/names"
	"k8s.io/cloud-provider/options"
	"k8s.io/component-base/cli"
	cliflag "k8s.io/component-base/cli/flag"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	"k8s.io/klog/v2"
)

const (
	providerName       = "fake"
	terminatedAnnotate = "bench.polyccm.dev/terminated"
)

// benchCloud is the fake cloud with per-node answers, and without the fake's unguarded maps and
// call log (4 service workers would write them at once).
type benchCloud struct {
	*fake.Cloud
}

func newBenchCloud() *benchCloud {
	c := &benchCloud{Cloud: &fake.Cloud{
		Provider:          providerName,
		EnableInstancesV2: true,
		DisableRoutes:     true,
		ExternalIP:        net.ParseIP("192.0.2.1"),
		Zone:              cloudprovider.Zone{FailureDomain: "fake-zone-a", Region: "fake-region"},
	}}
	c.Cloud.OverrideInstanceMetadata = c.instanceMetadata
	return c
}

func internalIP(name string) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(name))
	sum := h.Sum32()
	return net.IPv4(10, byte(sum>>16), byte(sum>>8), byte(sum)).String()
}

func (c *benchCloud) instanceMetadata(_ context.Context, node *v1.Node) (*cloudprovider.InstanceMetadata, error) {
	return &cloudprovider.InstanceMetadata{
		ProviderID:    "fake://" + node.Name,
		InstanceType:  "fake.large",
		NodeAddresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: internalIP(node.Name)}},
		Zone:          "fake-zone-a",
		Region:        "fake-region",
	}, nil
}

func (c *benchCloud) InstancesV2() (cloudprovider.InstancesV2, bool) { return c, true }

func (c *benchCloud) Instances() (cloudprovider.Instances, bool) { return nil, false }

func (c *benchCloud) LoadBalancer() (cloudprovider.LoadBalancer, bool) { return c, true }

func (c *benchCloud) Routes() (cloudprovider.Routes, bool) { return nil, false }

func (c *benchCloud) HasClusterID() bool { return true }

func (c *benchCloud) InstanceExists(_ context.Context, node *v1.Node) (bool, error) {
	_, gone := node.Annotations[terminatedAnnotate]
	return !gone, nil
}

func (c *benchCloud) InstanceShutdown(context.Context, *v1.Node) (bool, error) {
	return false, nil
}

func (c *benchCloud) InstanceMetadata(ctx context.Context, node *v1.Node) (*cloudprovider.InstanceMetadata, error) {
	return c.instanceMetadata(ctx, node)
}

func (c *benchCloud) status() *v1.LoadBalancerStatus {
	return &v1.LoadBalancerStatus{Ingress: []v1.LoadBalancerIngress{{IP: c.ExternalIP.String()}}}
}

func (c *benchCloud) GetLoadBalancer(context.Context, string, *v1.Service) (*v1.LoadBalancerStatus, bool, error) {
	return c.status(), true, nil
}

func (c *benchCloud) EnsureLoadBalancer(context.Context, string, *v1.Service, []*v1.Node) (*v1.LoadBalancerStatus, error) {
	return c.status(), nil
}

func (c *benchCloud) UpdateLoadBalancer(context.Context, string, *v1.Service, []*v1.Node) error {
	return nil
}

func (c *benchCloud) EnsureLoadBalancerDeleted(context.Context, string, *v1.Service) error {
	return nil
}

func main() {
	cloudprovider.RegisterCloudProvider(providerName, func(io.Reader) (cloudprovider.Interface, error) {
		return newBenchCloud(), nil
	})
	ccmOptions, err := options.NewCloudControllerManagerOptions()
	if err != nil {
		klog.Fatalf("unable to initialize command options: %v", err)
	}
	command := app.NewCloudControllerManagerCommand(ccmOptions, initCloud, app.DefaultInitFuncConstructors,
		names.CCMControllerAliases(), cliflag.NamedFlagSets{}, wait.NeverStop)
	os.Exit(cli.Run(command))
}

func initCloud(completed *config.CompletedConfig) cloudprovider.Interface {
	shared := completed.ComponentConfig.KubeCloudShared.CloudProvider
	cloud, err := cloudprovider.InitCloudProvider(shared.Name, shared.CloudConfigFile)
	if err != nil || cloud == nil {
		klog.Fatalf("cloud provider %q could not be initialized: %v", shared.Name, err)
	}
	return cloud
}
