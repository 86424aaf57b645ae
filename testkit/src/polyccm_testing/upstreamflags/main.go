// Command ccm-flags prints, as JSON, every flag of the cloud-controller-manager command that
// k8s.io/cloud-provider builds (app.NewCloudControllerManagerCommand, as its sample main calls
// it) and every feature gate its --feature-gates flag knows. polyccm's tests read the output to
// check that a command line copied from an upstream Deployment parses. Nothing is started: the
// command is built, never executed, and its cloud initializer is never called.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"

	"github.com/spf13/pflag"

	"k8s.io/apimachinery/pkg/util/wait"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/app"
	"k8s.io/cloud-provider/app/config"
	"k8s.io/cloud-provider/names"
	"k8s.io/cloud-provider/options"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/featuregate"
	_ "k8s.io/component-base/logs/json/register" // the sample main registers the json format too
)

type flagInfo struct {
	Name       string `json:"name"`
	Shorthand  string `json:"shorthand,omitempty"`
	Type       string `json:"type"`
	Default    string `json:"default"`
	NoOptValue string `json:"noOptValue,omitempty"`
	Deprecated string `json:"deprecated,omitempty"`
	Hidden     bool   `json:"hidden,omitempty"`
}

type gateInfo struct {
	Name          string   `json:"name"`
	Default       bool     `json:"default"`
	LockToDefault bool     `json:"lockToDefault"`
	PreRelease    string   `json:"preRelease"`
	DependsOn     []string `json:"dependsOn,omitempty"`
}

type listing struct {
	Module           string     `json:"module"`
	EmulationVersion string     `json:"emulationVersion"`
	Flags            []flagInfo `json:"flags"`
	FeatureGates     []gateInfo `json:"featureGates"`
	// What --tls-cipher-suites and --tls-min-version accept (cliflag, from this Go's crypto/tls).
	TLSCipherSuites         []string `json:"tlsCipherSuites"`
	InsecureTLSCipherSuites []string `json:"insecureTlsCipherSuites"`
	TLSVersions             []string `json:"tlsVersions"`
}

func cloudInitializer(*config.CompletedConfig) cloudprovider.Interface {
	panic("ccm-flags never runs the command")
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: ccm-flags MODULE_VERSION")
		os.Exit(2)
	}
	opts, err := options.NewCloudControllerManagerOptions()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	cmd := app.NewCloudControllerManagerCommand(opts, cloudInitializer, app.DefaultInitFuncConstructors,
		names.CCMControllerAliases(), cliflag.NamedFlagSets{}, wait.NeverStop)
	cmd.InitDefaultHelpFlag() // cobra adds --help when the command runs
	out := listing{Module: "k8s.io/cloud-provider@" + os.Args[1]}
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		out.Flags = append(out.Flags, flagInfo{
			Name: f.Name, Shorthand: f.Shorthand, Type: f.Value.Type(), Default: f.DefValue,
			NoOptValue: f.NoOptDefVal, Deprecated: f.Deprecated, Hidden: f.Hidden,
		})
	})
	sort.Slice(out.Flags, func(i, j int) bool { return out.Flags[i].Name < out.Flags[j].Name })

	gate := utilfeature.DefaultMutableFeatureGate
	out.EmulationVersion = gate.EmulationVersion().String()
	dependencies := gate.Dependencies()
	// GetAll gives each gate's spec in force at the emulated version, as featureGate.Set checks
	// it, and leaves out the gates registered only for a later release (PRE-ALPHA now), which
	// Set refuses: those are listed from GetAllVersioned.
	current := gate.GetAll()
	for name := range gate.GetAllVersioned() {
		spec, available := current[name]
		if !available {
			spec = featuregate.FeatureSpec{PreRelease: featuregate.PreAlpha}
		}
		info := gateInfo{Name: string(name), Default: spec.Default, LockToDefault: spec.LockToDefault,
			PreRelease: string(spec.PreRelease)}
		if spec.PreRelease == featuregate.GA {
			info.PreRelease = "GA" // an empty string in featuregate
		}
		for _, dependency := range dependencies[name] {
			info.DependsOn = append(info.DependsOn, string(dependency))
		}
		sort.Strings(info.DependsOn)
		out.FeatureGates = append(out.FeatureGates, info)
	}
	sort.Slice(out.FeatureGates, func(i, j int) bool { return out.FeatureGates[i].Name < out.FeatureGates[j].Name })

	out.TLSCipherSuites = cliflag.TLSCipherPossibleValues()
	out.InsecureTLSCipherSuites = cliflag.InsecureTLSCipherNames()
	out.TLSVersions = cliflag.TLSPossibleVersions()

	encoder := json.NewEncoder(os.Stdout)
	encoder.SetIndent("", "  ")
	if err := encoder.Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
