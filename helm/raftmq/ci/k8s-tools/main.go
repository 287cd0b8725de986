// Command k8s-tools is one multi-call binary holding what raftmq's Kubernetes test tier runs: etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler and kwok. The program to run is chosen by the name it
// is called by (symlinks made by build.sh), or by its first argument ("k8s-tools kwok --help").
// One binary shares the Kubernetes libraries between the programs: about 150 MB instead of about 380 MB.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/pflag"
	"go.etcd.io/etcd/server/v3/etcdmain"
	"k8s.io/component-base/cli"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kwokconfig "sigs.k8s.io/kwok/pkg/config"
	kwokcmd "sigs.k8s.io/kwok/pkg/kwok/cmd"
	kwoklog "sigs.k8s.io/kwok/pkg/log"
	"sigs.k8s.io/kwok/pkg/utils/signals"
)

func main() {
	name := filepath.Base(os.Args[0])
	if name == "k8s-tools" {
		if len(os.Args) < 2 {
			fmt.Fprintln(os.Stderr, "usage: k8s-tools etcd|kube-apiserver|kube-controller-manager|kube-scheduler|kwok [args]")
			os.Exit(2)
		}
		os.Args = os.Args[1:]
		name = os.Args[0]
	}
	switch name {
	case "etcd":
		etcdmain.Main(os.Args)
	case "kube-apiserver":
		os.Exit(cli.Run(apiserver.NewAPIServerCommand()))
	case "kube-controller-manager":
		os.Exit(cli.Run(controllermanager.NewControllerManagerCommand()))
	case "kube-scheduler":
		os.Exit(cli.Run(scheduler.NewSchedulerCommand()))
	case "kwok":
		os.Exit(runKwok())
	default:
		fmt.Fprintf(os.Stderr, "k8s-tools: unknown program %q\n", name)
		os.Exit(2)
	}
}

// runKwok starts kwok the way its own main does: global logging and config flags first, then its command.
func runKwok() int {
	// The Kubernetes packages linked in register a global --version flag of their own type at init; cobra adds
	// pflag.CommandLine to every command, which would clash with kwok's boolean --version. kwok needs none of them.
	pflag.CommandLine = pflag.NewFlagSet("kwok", pflag.ExitOnError)
	flags := pflag.NewFlagSet("global", pflag.ContinueOnError)
	flags.ParseErrorsAllowlist.UnknownFlags = true
	flags.Usage = func() {}
	ctx := signals.SetupSignalContext()
	ctx, logger := kwoklog.InitFlags(ctx, flags)
	ctx, err := kwokconfig.InitFlags(ctx, flags)
	if err != nil {
		logger.Error("kwok config flags", "err", err)
		return 1
	}
	command := kwokcmd.NewCommand(ctx)
	command.PersistentFlags().AddFlagSet(flags)
	if err := command.ExecuteContext(ctx); err != nil {
		logger.Error("kwok", "err", err)
		return 1
	}
	return 0
}
