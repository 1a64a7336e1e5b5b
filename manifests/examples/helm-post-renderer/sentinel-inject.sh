#!/bin/sh
# A Helm post-renderer: Helm writes the release's rendered manifests to stdin and
# applies what this writes to stdout. `sentinel inject` adds sentinel to every pod
# whose container runs vLLM and refuses (non-zero, nothing written) what it cannot
# handle, which fails the Helm command instead of installing a half-injected release.
#
#   Helm 3: helm install RELEASE CHART --post-renderer ./sentinel-inject.sh
#   Helm 4: helm plugin install manifests/examples/helm-post-renderer
#           helm install RELEASE CHART --post-renderer sentinel-inject
#
# Flags for inject (--image, --enforce false, --container NAME) go after
# --post-renderer-args, one per occurrence. SENTINEL overrides the command's path.
exec "${SENTINEL:-sentinel}" inject "$@"
