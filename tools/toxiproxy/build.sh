#!/usr/bin/env bash
# Build Toxiproxy (the fault proxy of the fault scenario tests), when missing.
#
# Builds, from the pinned Go module next to this script, github.com/Shopify/toxiproxy/v2's
# server and CLI as bin/toxiproxy-server and bin/toxiproxy-cli.
#
# Output directory (outside the repository, keyed by the pinned version and a hash of the
# go.mod/go.sum files and this script):
#   ${PANDO_TOXIPROXY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pando-runtime/toxiproxy}/<key>/bin
#
# The script is idempotent: when both binaries are there it only prints the directory.
# On success the last line on stdout is the bin directory; progress goes to stderr.
#
# Usage: tools/toxiproxy/build.sh [--force] [--print-dir]
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
module=github.com/Shopify/toxiproxy/v2

die() {
    echo "toxiproxy/build.sh: error: $*" >&2
    exit 1
}
log() {
    echo "toxiproxy/build.sh: $*" >&2
}

force=0
print_dir=0
for arg in "$@"; do
    case "$arg" in
        --force) force=1 ;;
        --print-dir) print_dir=1 ;;
        -h | --help)
            sed -n '2,14p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
            exit 0
            ;;
        *) die "unknown argument: $arg (see --help)" ;;
    esac
done

# The version is read from the committed go.mod, so it cannot drift from what is built.
version="$(awk -v m="$module" '$1 == m && $2 ~ /^v/ {print $2; exit}' "$here/go.mod")"
[[ -n "$version" ]] || die "$module is not required in $here/go.mod"
digest="$(cat "$here/go.mod" "$here/go.sum" "${BASH_SOURCE[0]}" | sha256sum | cut -c1-10)"
key="toxiproxy-${version}_${digest}"
cache_root="${PANDO_TOXIPROXY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pando-runtime/toxiproxy}"
out="$cache_root/$key"
bin="$out/bin"
binaries=(toxiproxy-server toxiproxy-cli)

complete() {
    [[ -f "$bin/.complete" ]] || return 1
    local b
    for b in "${binaries[@]}"; do [[ -x "$bin/$b" ]] || return 1; done
}

if ((print_dir)); then
    echo "$bin"
    exit 0
fi
if ((!force)) && complete; then
    log "binaries present (${version})"
    echo "$bin"
    exit 0
fi

command -v go >/dev/null 2>&1 ||
    die "'go' not found on PATH; Go >= 1.26 is needed to build Toxiproxy
(or set PANDO_TOXIPROXY_BIN to a directory holding ${binaries[*]})"

mkdir -p "$out" || die "cannot create $out"

# One build at a time per key (pytest-xdist workers, parallel CI steps).
if command -v flock >/dev/null 2>&1; then
    exec 9>"$out/.lock"
    flock 9
    if ((!force)) && complete; then
        log "binaries built by a concurrent run"
        echo "$bin"
        exit 0
    fi
fi

tmp="$(mktemp -d "$out/bin.tmp.XXXXXX")"
chmod 755 "$tmp"
trap 'rm -rf "$tmp"' EXIT

export CGO_ENABLED=0
start=$SECONDS
# Toxiproxy reports the version stamped here (its default is "git").
ldflags="-s -w -X ${module}.Version=${version#v}"
for b in server cli; do
    log "building ${module}/cmd/${b} ${version} ..."
    (cd "$here" && go build -mod=readonly -trimpath -ldflags "$ldflags" \
        -o "$tmp/toxiproxy-$b" "${module}/cmd/${b}") ||
        die "go build failed in tools/toxiproxy for ${module}/cmd/${b}"
done
echo "toxiproxy ${version}" >"$tmp/VERSIONS"
touch "$tmp/.complete"

rm -rf "$bin"
mv "$tmp" "$bin"
trap - EXIT
log "built in $((SECONDS - start)) s into $bin"
echo "$bin"
