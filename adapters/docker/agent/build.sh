#!/usr/bin/env bash
# Build the Docker adapter's agent (pando-agent, this folder's Go program: standard library
# only), static (CGO off), when missing; its Go tests run first.
#
# Output, keyed by a hash of this folder's Go files, go.mod and this script:
#   ${PANDO_AGENT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pando-runtime/agent}/agent-<hash>/bin/pando-agent
# Idempotent (an existing build only prints its directory), one build at a time per key
# (flock), installed atomically. The last line on stdout is the bin directory; progress
# goes to stderr. An image is this binary alone (docs/docker.md, "The agent").
#
# Usage: adapters/docker/agent/build.sh [--force] [--print-dir]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
log() { echo "agent/build.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

force=0
print_dir=0
for arg in "$@"; do
    case "$arg" in
        --force) force=1 ;;
        --print-dir) print_dir=1 ;;
        -h | --help) sed -n '2,12p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument: $arg (see --help)" ;;
    esac
done

digest="$(cd "$here" && cat go.mod ./*.go build.sh | sha256sum | cut -c1-10)"
root="${PANDO_AGENT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pando-runtime/agent}"
out="$root/agent-$digest"
bin="$out/bin"
if ((print_dir)); then
    echo "$bin"
    exit 0
fi
complete() { [[ -f "$bin/.complete" && -x "$bin/pando-agent" ]]; }
if ((!force)) && complete; then
    log "present"
    echo "$bin"
    exit 0
fi
[ -x /usr/local/go/bin/go ] && export PATH="/usr/local/go/bin:$PATH"
command -v go >/dev/null 2>&1 || die "'go' not found on PATH; Go >= 1.22 is needed"
mkdir -p "$out"
exec 9>"$out/.lock"
flock 9
if ((!force)) && complete; then
    log "built by a concurrent run"
    echo "$bin"
    exit 0
fi
tmp="$(mktemp -d "$out/bin.tmp.XXXXXX")"
chmod 755 "$tmp"
trap 'rm -rf "$tmp"' EXIT
export CGO_ENABLED=0 GOTOOLCHAIN=local
(cd "$here" && go vet ./... && go test -count=1 ./... >&2) || die "the agent's Go tests failed"
(cd "$here" && go build -trimpath -ldflags "-s -w" -o "$tmp/pando-agent" .) || die "go build failed"
touch "$tmp/.complete"
rm -rf "$bin"
mv "$tmp" "$bin"
trap - EXIT
log "built into $bin"
echo "$bin"
