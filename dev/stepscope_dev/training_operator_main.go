// Entry point for the Kubeflow training operator v1 in the stepscope local control plane.
//
// It runs the upstream PyTorchJob reconciler (github.com/kubeflow/training-operator
// v1.9.4, pkg/controller.v1) unchanged. It differs from upstream cmd/training-operator.v1
// only where the harness cannot serve what that binary expects; see
// docs/contributing/local-control-plane.md, section "Training operator":
//   - no validating-webhook server and no certificate rotator: upstream always listens for
//     webhooks on all interfaces and needs a Secret, a Service and a
//     ValidatingWebhookConfiguration reachable through cluster DNS;
//   - metrics and health probes listen on 127.0.0.1 (or are turned off with "0");
//   - no gang scheduler (no Volcano or scheduler-plugins on a local cluster).
// Stepscope builds this file in a wrapper module under ~/.cache/stepscope/src/
// (stepscope_dev.training_operator.ensure_training_operator); it is never built in the repo.
package main

import (
	"flag"
	"os"

	"go.uber.org/zap/zapcore"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/util/flowcontrol"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	schedulerpluginsv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"
	"volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	kubeflowv1 "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
	"github.com/kubeflow/training-operator/pkg/config"
	controllerv1 "github.com/kubeflow/training-operator/pkg/controller.v1"
	"github.com/kubeflow/training-operator/pkg/controller.v1/common"
)

var (
	scheme   = runtime.NewScheme()
	setupLog = ctrl.Log.WithName("setup")
)

func init() {
	// The same scheme as upstream, so the reconcilers find every type they expect.
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(kubeflowv1.AddToScheme(scheme))
	utilruntime.Must(v1beta1.AddToScheme(scheme))
	utilruntime.Must(schedulerpluginsv1alpha1.AddToScheme(scheme))
}

func main() {
	var metricsAddr, probeAddr, namespace string
	var enabledSchemes controllerv1.EnabledSchemes
	var controllerThreads, clientQps, clientBurst int

	flag.StringVar(&metricsAddr, "metrics-bind-address", "0", "Metrics address (host:port), or 0 for none.")
	flag.StringVar(&probeAddr, "health-probe-bind-address", "0", "Health probe address (host:port), or 0 for none.")
	flag.Var(&enabledSchemes, "enable-scheme", "Enable scheme(s), e.g. --enable-scheme=pytorchjob; all if unset.")
	flag.StringVar(&namespace, "namespace", "", "Namespace to watch; all namespaces if unset.")
	flag.IntVar(&controllerThreads, "controller-threads", 1, "Worker threads per controller.")
	flag.IntVar(&clientQps, "kube-api-qps", 20, "Maximum QPS to the API server.")
	flag.IntVar(&clientBurst, "kube-api-burst", 30, "Maximum burst to the API server.")
	flag.StringVar(&config.Config.PyTorchInitContainerImage, "pytorch-init-container-image",
		config.PyTorchInitContainerImageDefault, "The image for the pytorch init container.")
	flag.StringVar(&config.Config.PyTorchInitContainerTemplateFile, "pytorch-init-container-template-file",
		config.PyTorchInitContainerTemplateFileDefault, "The template file for the pytorch init container.")
	flag.IntVar(&config.Config.PyTorchInitContainerMaxTries, "pytorch-init-container-max-tries",
		config.PyTorchInitContainerMaxTriesDefault, "The number of tries for the pytorch init container.")
	flag.StringVar(&config.Config.MPIKubectlDeliveryImage, "mpi-kubectl-delivery-image",
		config.MPIKubectlDeliveryImageDefault, "The image for the mpi launcher init container.")
	opts := zap.Options{Development: true, StacktraceLevel: zapcore.DPanicLevel}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))

	cfg := ctrl.GetConfigOrDie()
	cfg.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(float32(clientQps), clientBurst)
	managerOptions := ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress: probeAddr,
	}
	if namespace != "" {
		managerOptions.Cache.DefaultNamespaces = map[string]cache.Config{namespace: {}}
	}
	mgr, err := ctrl.NewManager(cfg, managerOptions)
	if err != nil {
		setupLog.Error(err, "unable to start manager")
		os.Exit(1)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		setupLog.Error(err, "unable to set up health check")
		os.Exit(1)
	}

	if enabledSchemes.Empty() {
		enabledSchemes.FillAll()
	}
	gangSchedulingSetupFunc := common.GenNonGangSchedulerSetupFunc()
	for _, s := range enabledSchemes {
		if err := controllerv1.SupportedSchemeReconciler[s](mgr, gangSchedulingSetupFunc, controllerThreads); err != nil {
			setupLog.Error(err, "unable to create controller", "scheme", s)
			os.Exit(1)
		}
	}

	setupLog.Info("starting manager", "schemes", enabledSchemes.String())
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		setupLog.Error(err, "problem running manager")
		os.Exit(1)
	}
}
