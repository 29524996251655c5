#!/usr/bin/env bash
# Build the image registry of the real test nodes (CNCF Distribution), when missing.
#
# Builds `registry` (github.com/distribution/distribution/v3/cmd/registry, pinned with its
# whole dependency graph in the go.mod/go.sum next to this script) into
#   ${PANDO_REGISTRY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pando-runtime/registry}/<key>/bin
# (<key>: the version and a hash of go.mod, go.sum and the build scripts; see
# tools/lib/go-tool.sh). The harness serves it on loopback, with TLS and a password.
# Idempotent; the last line on stdout is the bin directory.
#
# Usage: tools/registry/build.sh [--force] [--print-dir]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib/go-tool.sh"

tool=registry
module=github.com/distribution/distribution/v3
cache_env=PANDO_REGISTRY_CACHE
binaries=(registry)

build_into() {
    go build -mod=readonly -trimpath -ldflags "-s -w -X ${module}/version.version=$2" \
        -o "$1/registry" "${module}/cmd/registry"
}

go_tool_main "$@"
