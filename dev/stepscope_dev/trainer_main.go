// Entry point for the Kubeflow Trainer v2 controller manager in the stepscope local control plane.
//
// It runs upstream's runtimes, controllers and validating webhooks unchanged
// (github.com/kubeflow/trainer/v2 v2.0.0: pkg/runtime/core, pkg/controller, pkg/webhooks). It
// differs from upstream cmd/trainer-controller-manager only where the harness cannot give what
// that binary expects; see docs/contributing/local-control-plane.md, section "JobSet and Kubeflow Trainer":
//   - no certificate rotator: upstream always starts one, which keeps the Secret
//     kubeflow-trainer-webhook-cert in kubeflow-system and the webhook configuration's caBundle
//     up to date for a Service DNS name that nothing here resolves, and holds the controllers
//     back until it has written certificates. Here the webhook server reads a certificate the
//     harness issued (--webhook-cert-dir) and listens on --webhook-host; the harness registers
//     the webhooks by URL;
//   - metrics and health probes are off unless an address is given, and there is no leader
//     election (one replica, started and stopped by the harness).
// Stepscope builds this file in a wrapper module under ~/.cache/stepscope/src/
// (stepscope_dev.trainer_controller.ensure_trainer_controller); it is never built in the repo.
package main

import (
	"crypto/tls"
	"flag"
	"os"

	"go.uber.org/zap/zapcore"
	apiruntime "k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlpkg "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	schedulerpluginsv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	"github.com/kubeflow/trainer/v2/pkg/controller"
	runtimecore "github.com/kubeflow/trainer/v2/pkg/runtime/core"
	"github.com/kubeflow/trainer/v2/pkg/webhooks"
)

var (
	scheme   = apiruntime.NewScheme()
	setupLog = ctrl.Log.WithName("setup")
)

func init() {
	// Upstream's scheme: the reconcilers read TrainJobs, runtimes, JobSets and PodGroups.
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(trainer.AddToScheme(scheme))
	utilruntime.Must(jobsetv1alpha2.AddToScheme(scheme))
	utilruntime.Must(schedulerpluginsv1alpha1.AddToScheme(scheme))
}

func exitOn(err error, message string, keysAndValues ...any) {
	if err != nil {
		setupLog.Error(err, message, keysAndValues...)
		os.Exit(1)
	}
}

func main() {
	var metricsAddr, probeAddr, webhookHost, webhookCertDir string
	var webhookPort int
	flag.StringVar(&metricsAddr, "metrics-bind-address", "0", "Metrics address (host:port), or 0 for none.")
	flag.StringVar(&probeAddr, "health-probe-bind-address", "0", "Health probe address (host:port), or 0 for none.")
	flag.StringVar(&webhookHost, "webhook-host", "127.0.0.1", "Address the webhook server listens on.")
	flag.IntVar(&webhookPort, "webhook-port", 0, "Port of the webhook server; 0 serves no webhooks.")
	flag.StringVar(&webhookCertDir, "webhook-cert-dir", "", "Directory with tls.crt and tls.key for the webhook server.")
	opts := zap.Options{TimeEncoder: zapcore.RFC3339NanoTimeEncoder}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))

	options := ctrl.Options{
		Scheme: scheme,
		// As upstream: unstructured objects are read through the cache too.
		Client:                 client.Options{Cache: &client.CacheOptions{Unstructured: true}},
		Metrics:                metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress: probeAddr,
	}
	if webhookPort != 0 {
		options.WebhookServer = webhook.NewServer(webhook.Options{
			Host:    webhookHost,
			Port:    webhookPort,
			CertDir: webhookCertDir,
			// As upstream: no HTTP/2 (the Stream Cancellation and Rapid Reset CVEs).
			TLSOpts: []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }},
		})
	}
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), options)
	exitOn(err, "unable to create manager")
	exitOn(mgr.AddHealthzCheck("healthz", healthz.Ping), "unable to set up health check")

	ctx := ctrl.SetupSignalHandler()
	runtimes, err := runtimecore.New(ctx, mgr.GetClient(), mgr.GetFieldIndexer())
	exitOn(err, "could not initialize runtimes")
	// Upstream sets these up only once its rotator has written certificates; here the
	// certificate exists before the process starts, so they are set up at once.
	failed, err := controller.SetupControllers(mgr, runtimes, ctrlpkg.Options{})
	exitOn(err, "could not create controller", "controller", failed)
	if webhookPort != 0 {
		failed, err = webhooks.Setup(mgr, runtimes)
		exitOn(err, "could not create webhook", "webhook", failed)
	}

	setupLog.Info("starting manager", "webhookPort", webhookPort)
	exitOn(mgr.Start(ctx), "could not run manager")
}
