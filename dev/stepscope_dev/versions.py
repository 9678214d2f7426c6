"""Pinned versions of every binary the local control plane builds.

Changing a version here changes the cache directory name, so a bump never mixes
binaries of two versions.
"""

from __future__ import annotations

KUBERNETES = "v1.37.2"
# k8s.io/kubernetes pins its staging modules at v0.0.0 and replaces them with
# in-tree paths; a module that depends on it must replace each with the
# published staging release of the same minor.
KUBERNETES_STAGING = "v0.37.2"
ETCD = "v3.6.16"
HELM = "v3.22.0"
VERSITYGW = "v1.8.0"
TRAINING_OPERATOR = "v1.9.4"
# Kubeflow Trainer v2 runs TrainJobs as JobSets; JOBSET is the version its go.mod requires.
TRAINER = "v2.0.0"
JOBSET = "v0.8.2"
# Cluster DNS of the real node (Apache-2.0); its binary's name carries the version.
COREDNS = "v1.14.7"

# One cache directory per set of versions, so upgrading any pin rebuilds only
# into a fresh directory and never reuses a stale binary.
BIN_SET = f"k8s-{KUBERNETES}_etcd-{ETCD}_helm-{HELM}_vgw-{VERSITYGW}"
