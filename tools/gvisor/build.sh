#!/usr/bin/env bash
# Build gVisor's runtime for the sandboxed-app tests, when missing.
#
# Builds `runsc` (gvisor.dev/gvisor/runsc, the OCI runtime Docker runs sandboxed containers
# with) and `containerd-shim-runsc-v1` (gvisor.dev/gvisor/shim, the shim containerd runs a
# RuntimeClass handler with on the real node), pinned with their whole dependency graph in the
# go.mod/go.sum next to this script (a pseudo-version of gVisor's `go` branch: gVisor tags no
# Go module releases), into
#   ${PANDO_GVISOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pando-runtime/gvisor}/<key>/bin
# (<key>: the version and a hash of go.mod, go.sum and the build scripts; see
# tools/lib/go-tool.sh). Debian's runsc (2022) cannot run a container with its own network stack
# on a current kernel, so the tests use this one. Idempotent; the last line on stdout is the bin
# directory.
#
# Usage: tools/gvisor/build.sh [--force] [--print-dir]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib/go-tool.sh"

tool=gvisor
module=gvisor.dev/gvisor
cache_env=PANDO_GVISOR_CACHE
binaries=(runsc containerd-shim-runsc-v1)

build_into() {
    go build -mod=readonly -trimpath -ldflags "-s -w -X ${module}/runsc/version.version=$2" \
        -o "$1/runsc" "${module}/runsc"
    go build -mod=readonly -trimpath -ldflags "-s -w" -o "$1/containerd-shim-runsc-v1" \
        "${module}/shim"
}

go_tool_main "$@"
