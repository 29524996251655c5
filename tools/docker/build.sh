#!/usr/bin/env bash
# Build a current Docker Engine (dockerd and docker-proxy) for the tests that run on more than
# Debian's 20.10, when missing.
#
# github.com/docker/docker has no go.mod (its requirements are in its vendor.mod), so the go.mod
# next to this script is a wrapper: the engine's release plus every requirement and exclusion
# of that release's vendor.mod, at the versions the release is built with (`go mod tidy`
# changes none of them). Built with CGO_ENABLED=0 and the tags of the engine's static build
# (no btrfs, no devicemapper), the release and its commit stamped as the daemon's version
# (else it calls itself "library-import"), into
#   ${PANDO_DOCKER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pando-runtime/docker}/<key>/bin
# (<key>: the version and a hash of go.mod, go.sum and the build scripts; see
# tools/lib/go-tool.sh). It runs on Debian's containerd and runc. Idempotent; the last line on
# stdout is the bin directory.
#
# Usage: tools/docker/build.sh [--force] [--print-dir]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib/go-tool.sh"

tool=docker
module=github.com/docker/docker
cache_env=PANDO_DOCKER_CACHE
binaries=(dockerd docker-proxy)
# The release's commit (moby's tag), which the daemon reports beside its version: kept with
# the version it belongs to, so a bump of go.mod alone stops here instead of lying.
release_tag=v28.5.2+incompatible
release_commit=89c5e8f

build_into() {
    [[ "$2" == "$release_tag" ]] ||
        go_tool_die "go.mod requires ${module} $2: set release_tag and release_commit for it"
    local release="${2#v}"
    release="${release%+incompatible}"
    local tags="netgo osusergo static_build no_btrfs exclude_graphdriver_btrfs exclude_graphdriver_devicemapper"
    go build -mod=readonly -trimpath -tags "$tags" \
        -ldflags "-s -w -X ${module}/dockerversion.Version=${release} -X ${module}/dockerversion.GitCommit=${release_commit}" \
        -o "$1/dockerd" "${module}/cmd/dockerd" || return 1
    go build -mod=readonly -trimpath -tags "$tags" -ldflags "-s -w" \
        -o "$1/docker-proxy" "${module}/cmd/docker-proxy"
}

go_tool_main "$@"
