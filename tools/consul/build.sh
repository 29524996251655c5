#!/usr/bin/env bash
# Build the Consul binary used by the catalog sync tests, when missing.
#
# Builds `consul` (github.com/hashicorp/consul, pinned with its whole dependency graph in the
# go.mod/go.sum next to this script) into
#   ${PANDO_CONSUL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pando-runtime/consul}/<key>/bin
# (<key>: the version and a hash of go.mod, go.sum and the build scripts; see
# tools/lib/go-tool.sh). Idempotent; the last line on stdout is the bin directory.
#
# Usage: tools/consul/build.sh [--force] [--print-dir]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib/go-tool.sh"

tool=consul
module=github.com/hashicorp/consul
cache_env=PANDO_CONSUL_CACHE
binaries=(consul)

build_into() {
    go build -mod=readonly -trimpath -ldflags "-s -w" -o "$1/consul" "$module"
}

go_tool_main "$@"
