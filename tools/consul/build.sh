#!/usr/bin/env bash
# Build the Consul binary used by the catalog sync tests, when missing.
#
# Builds `consul` (github.com/hashicorp/consul, pinned with its whole dependency graph in the
# go.mod/go.sum next to this script) into
#   ${PANDO_CONSUL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pando-runtime/consul}/<key>/bin
# where <key> names the Consul version plus a hash of go.mod, go.sum and this script.
#
# The script is idempotent: when the binary is already there it only prints the directory.
# On success the last line on stdout is the bin directory; progress goes to stderr.
#
# Usage: tools/consul/build.sh [--force] [--print-dir]
#   --force      rebuild even if the binary exists
#   --print-dir  print the bin directory that would be used, build nothing
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

die() {
    echo "consul/build.sh: error: $*" >&2
    exit 1
}
log() {
    echo "consul/build.sh: $*" >&2
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

# The version is read from the committed go.mod, so the key cannot drift from what is built.
version="$(awk '$1 == "github.com/hashicorp/consul" && $2 ~ /^v/ {print $2; exit}' "$here/go.mod")"
[[ -n "$version" ]] || die "github.com/hashicorp/consul is not required in $here/go.mod"
digest="$(cat "$here/go.mod" "$here/go.sum" "${BASH_SOURCE[0]}" | sha256sum | cut -c1-10)"
cache_root="${PANDO_CONSUL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pando-runtime/consul}"
out="$cache_root/consul-${version}_${digest}"
bin="$out/bin"

complete() { [[ -f "$bin/.complete" && -x "$bin/consul" ]]; }

if ((print_dir)); then
    echo "$bin"
    exit 0
fi

if ((!force)) && complete; then
    log "consul ${version} present"
    echo "$bin"
    exit 0
fi

command -v go >/dev/null 2>&1 ||
    die "'go' not found on PATH; Go >= 1.26 is needed to build consul
(or set PANDO_CONSUL_BIN to a directory holding a consul binary)"

mkdir -p "$out" || die "cannot create $out"

# One build at a time per key (pytest-xdist workers, parallel CI steps).
if command -v flock >/dev/null 2>&1; then
    exec 9>"$out/.lock"
    flock 9
    if ((!force)) && complete; then
        log "consul built by a concurrent run"
        echo "$bin"
        exit 0
    fi
fi

tmp="$(mktemp -d "$out/bin.tmp.XXXXXX")"
chmod 755 "$tmp"
trap 'rm -rf "$tmp"' EXIT

export CGO_ENABLED=0
start=$SECONDS
log "building github.com/hashicorp/consul ${version} ..."
(cd "$here" && go build -mod=readonly -trimpath -ldflags "-s -w" -o "$tmp/consul" github.com/hashicorp/consul) ||
    die "go build failed in tools/consul
(a module refused by the Go proxy shows up above as a 'reading ... 404/410' error)"
[[ -x "$tmp/consul" ]] || die "build produced no consul"
echo "consul ${version}" >"$tmp/VERSIONS"
touch "$tmp/.complete"

rm -rf "$bin"
mv "$tmp" "$bin"
trap - EXIT
log "built in $((SECONDS - start)) s into $bin"
echo "$bin"
