#!/usr/bin/env bash
# Build Toxiproxy (the fault proxy of the fault scenario tests), when missing.
#
# Builds, from the pinned Go module next to this script, github.com/Shopify/toxiproxy/v2's
# server and CLI as bin/toxiproxy-server and bin/toxiproxy-cli, into
#   ${PANDO_TOXIPROXY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pando-runtime/toxiproxy}/<key>/bin
# (<key>: the version and a hash of go.mod, go.sum and the build scripts; see
# tools/lib/go-tool.sh). Idempotent; the last line on stdout is the bin directory.
#
# Usage: tools/toxiproxy/build.sh [--force] [--print-dir]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib/go-tool.sh"

tool=toxiproxy
module=github.com/Shopify/toxiproxy/v2
cache_env=PANDO_TOXIPROXY_CACHE
binaries=(toxiproxy-server toxiproxy-cli)

build_into() {
    local b
    for b in server cli; do
        # Toxiproxy reports the version stamped here (its default is "git").
        go build -mod=readonly -trimpath -ldflags "-s -w -X ${module}.Version=${2#v}" \
            -o "$1/toxiproxy-$b" "${module}/cmd/${b}" || return 1
    done
}

go_tool_main "$@"
