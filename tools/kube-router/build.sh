#!/usr/bin/env bash
# Build kube-router (NetworkPolicy enforcement on the real test nodes), when missing.
#
# Builds `kube-router` (github.com/cloudnativelabs/kube-router/v2/cmd/kube-router, pinned with
# its whole dependency graph in the go.mod/go.sum next to this script) into
#   ${PANDO_KUBE_ROUTER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pando-runtime/kube-router}/<key>/bin
# (<key>: the version and a hash of go.mod, go.sum and the build scripts; see
# tools/lib/go-tool.sh). The harness runs it as the firewall only (iptables and ipset).
# Idempotent; the last line on stdout is the bin directory.
#
# go.mod replaces github.com/vishvananda/netlink: kube-router v2.10.0 requires a pseudo-version
# the Go module proxy does not serve; v1.3.1, the newest release, builds and serves the
# firewall alike.
#
# Usage: tools/kube-router/build.sh [--force] [--print-dir]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib/go-tool.sh"

tool=kube-router
module=github.com/cloudnativelabs/kube-router/v2
cache_env=PANDO_KUBE_ROUTER_CACHE
binaries=(kube-router)

build_into() {
    go build -mod=readonly -trimpath -ldflags "-s -w" -o "$1/kube-router" "${module}/cmd/kube-router"
}

go_tool_main "$@"
