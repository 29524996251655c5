#!/usr/bin/env bash
# Build CoreDNS (the cluster DNS of the real test nodes), when missing.
#
# Builds `coredns` (github.com/coredns/coredns with its default plugins, pinned with its whole
# dependency graph in the go.mod/go.sum next to this script) into
#   ${PANDO_COREDNS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pando-runtime/coredns}/<key>/bin
# (<key>: the version and a hash of go.mod, go.sum and the build scripts; see
# tools/lib/go-tool.sh). The harness puts the binary in an image of its own and runs it as a
# pod on a real node. Idempotent; the last line on stdout is the bin directory.
#
# Usage: tools/coredns/build.sh [--force] [--print-dir]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib/go-tool.sh"

tool=coredns
module=github.com/coredns/coredns
cache_env=PANDO_COREDNS_CACHE
binaries=(coredns)

build_into() {
    go build -mod=readonly -trimpath -ldflags "-s -w" -o "$1/coredns" "$module"
}

go_tool_main "$@"
