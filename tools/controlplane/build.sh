#!/usr/bin/env bash
# Build the local Kubernetes control plane used by the test suite, when missing.
#
# Builds, from the pinned Go modules next to this script:
#   kubernetes/  kube-apiserver, kube-controller-manager, kube-scheduler, and the real test
#                node's kubelet and kube-proxy (k8s.io/kubernetes)
#   etcd/        etcd (go.etcd.io/etcd/server/v3)
#   kwok/        kwok (sigs.k8s.io/kwok/cmd/kwok)
#   metrics-server/  metrics-server (sigs.k8s.io/metrics-server/cmd/metrics-server)
# and copies kwok's default stage YAMLs, and its Metric and ResourceUsage documents (the
# kubelet-like metrics that metrics-server scrapes), from the kwok module into bin/kwok-stages/.
#
# Output directory (outside the repository, keyed by the pinned versions and a hash of the
# go.mod/go.sum files and this script):
#   ${PANDO_CONTROLPLANE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pando-runtime/controlplane}/<key>/bin
#
# The script is idempotent: when every binary is already there it only prints the directory.
# On success the last line on stdout is the bin directory; progress goes to stderr.
#
# An older Kubernetes minor (PANDO_K8S_MINOR=1.33 or --minor 1.33; its module is kubernetes-1.33/)
# builds only kube-apiserver, kube-controller-manager and kube-scheduler, into a key of its own;
# its bin directory links etcd, kwok, metrics-server and kwok-stages/ from the default build
# (PANDO_CONTROLPLANE_BIN when set, else this script's default output). No kubelet or kube-proxy:
# the real node stays on the newest minor (a kubelet newer than its API server is out of skew).
#
# Usage: tools/controlplane/build.sh [--minor 1.N] [--force] [--print-dir] [--clean-gocache]
#   --minor 1.N      build that Kubernetes minor (default: PANDO_K8S_MINOR, else kubernetes/)
#   --force          rebuild even if the binaries exist
#   --print-dir      print the bin directory that would be used, build nothing
#   --clean-gocache  run `go clean -cache` after a successful build (also done automatically
#                    when less than PANDO_CONTROLPLANE_MIN_FREE_GB, default 4, GiB are free)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

die() {
    echo "controlplane/build.sh: error: $*" >&2
    exit 1
}
log() {
    echo "controlplane/build.sh: $*" >&2
}

force=0
print_dir=0
clean_gocache=0
minor="${PANDO_K8S_MINOR:-}"
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
    arg="${args[i]}"
    case "$arg" in
        --minor)
            ((i + 1 < ${#args[@]})) || die "--minor needs a value such as 1.33"
            minor="${args[++i]}"
            ;;
        --minor=*) minor="${arg#--minor=}" ;;
        --force) force=1 ;;
        --print-dir) print_dir=1 ;;
        --clean-gocache) clean_gocache=1 ;;
        -h | --help)
            sed -n '2,31p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
            exit 0
            ;;
        *) die "unknown argument: $arg (see --help)" ;;
    esac
done

# An older minor: its three control-plane programs, built into their own key, plus links to the
# default build's shared programs (etcd, kwok, metrics-server, kwok's stages and documents).
older_minor() { # <minor>
    local m="$1" dir="kubernetes-$1"
    [[ "$m" =~ ^1\.[0-9]+$ ]] || die "--minor: expected 1.N, got '$m'"
    [[ -f "$here/$dir/go.mod" ]] || die "no module for Kubernetes $m (expected tools/controlplane/$dir/go.mod)"
    local v digest root shared kbin bin link b
    v="$(modversion "$dir" k8s.io/kubernetes)"
    digest="$(cat "$here/$dir"/go.{mod,sum} "${BASH_SOURCE[0]}" | sha256sum | cut -c1-10)"
    root="${PANDO_CONTROLPLANE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pando-runtime/controlplane}/k8s-${v}_${digest}"
    kbin="$root/k8s"
    if ((print_dir)); then
        shared="${PANDO_CONTROLPLANE_BIN:-$(bash "${BASH_SOURCE[0]}" --minor "$default_minor" --print-dir | tail -n 1)}"
    else
        shared="${PANDO_CONTROLPLANE_BIN:-$(bash "${BASH_SOURCE[0]}" --minor "$default_minor" | tail -n 1)}"
    fi
    shared="$(cd "$shared" 2>/dev/null && pwd -P)" || shared="${shared}"
    # One assembled directory per shared build, so that checkouts with different shared builds
    # never relink each other's.
    bin="$root/with-$(echo -n "$shared" | sha256sum | cut -c1-10)/bin"
    if ((print_dir)); then
        echo "$bin"
        exit 0
    fi
    local programs=(kube-apiserver kube-controller-manager kube-scheduler)
    k8s_complete() {
        [[ -f "$kbin/.complete" ]] || return 1
        for b in "${programs[@]}"; do [[ -x "$kbin/$b" ]] || return 1; done
    }
    mkdir -p "$root" || die "cannot create $root"
    if command -v flock >/dev/null 2>&1; then
        exec 9>"$root/.lock"
        flock 9
    fi
    if ((force)) || ! k8s_complete; then
        command -v go >/dev/null 2>&1 || die "'go' not found on PATH; Go >= 1.26 is needed to build Kubernetes $m"
        local tmp ldflags="-s -w" kv start=$SECONDS
        tmp="$(mktemp -d "$root/k8s.tmp.XXXXXX")"
        chmod 755 "$tmp"
        trap 'rm -rf "$tmp"' EXIT
        for kv in "gitVersion=${v}" gitMajor=1 "gitMinor=${m#1.}" gitTreeState=clean; do
            ldflags+=" -X k8s.io/component-base/version.${kv}"
        done
        log "building Kubernetes ${v}: ${programs[*]} ..."
        (cd "$here/$dir" && CGO_ENABLED=0 go build -mod=readonly -trimpath -ldflags "$ldflags" -o "$tmp/" \
            "${programs[@]/#/k8s.io/kubernetes/cmd/}") ||
            die "go build failed in tools/controlplane/$dir"
        echo "kubernetes $v" >"$tmp/VERSIONS"
        touch "$tmp/.complete"
        rm -rf "$kbin"
        mv "$tmp" "$kbin"
        trap - EXIT
        log "built Kubernetes ${v} in $((SECONDS - start)) s into $kbin"
    fi
    for b in etcd kwok metrics-server kwok-stages; do
        [[ -e "$shared/$b" ]] || die "$shared holds no $b (the default build's directory)"
    done
    mkdir -p "$bin"
    for link in "${programs[@]/#/$kbin/}" "$shared/etcd" "$shared/kwok" "$shared/metrics-server" "$shared/kwok-stages"; do
        ln -sfn "$link" "$bin/${link##*/}"
    done
    printf 'kubernetes %s\nshared %s\n' "$v" "$shared" >"$bin/VERSIONS"
    log "Kubernetes $v in $bin (shared programs from $shared)"
    echo "$bin"
    exit 0
}

# The pinned versions are read from the committed go.mod files, so they cannot drift apart.
modversion() { # <module dir> <module path>
    local v
    v="$(awk -v m="$2" '$1 == m && $2 ~ /^v/ {print $2; exit}' "$here/$1/go.mod")"
    [[ -n "$v" ]] || die "$2 is not required in $here/$1/go.mod"
    echo "$v"
}
k8s_version="$(modversion kubernetes k8s.io/kubernetes)"
default_minor="$(echo "$k8s_version" | cut -d. -f1-2 | tr -d v)"
if [[ -n "$minor" && "$minor" != "$default_minor" ]]; then
    older_minor "$minor" # exits
fi
etcd_version="$(modversion etcd go.etcd.io/etcd/server/v3)"
kwok_version="$(modversion kwok sigs.k8s.io/kwok)"
metrics_server_version="$(modversion metrics-server sigs.k8s.io/metrics-server)"

modules=(kubernetes etcd kwok metrics-server)
digest="$(for m in "${modules[@]}"; do cat "$here/$m"/go.{mod,sum}; done |
    cat - "${BASH_SOURCE[0]}" | sha256sum | cut -c1-10)"
key="k8s-${k8s_version}_etcd-${etcd_version}_kwok-${kwok_version}_ms-${metrics_server_version}_${digest}"
cache_root="${PANDO_CONTROLPLANE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pando-runtime/controlplane}"
out="$cache_root/$key"
bin="$out/bin"

binaries=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy etcd kwok metrics-server)
stages=(
    node/fast/node-initialize.yaml
    node/heartbeat-with-lease/node-heartbeat-with-lease.yaml
    pod/fast/pod-ready.yaml
    pod/fast/pod-complete.yaml
    pod/fast/pod-delete.yaml
)
kwok_documents=( # the metrics that kwok serves per node, and how much each pod uses
    metrics/resource/metrics-resource.yaml
    metrics/usage/usage-from-annotation.yaml
)

complete() {
    [[ -f "$bin/.complete" ]] || return 1
    local b s
    for b in "${binaries[@]}"; do [[ -x "$bin/$b" ]] || return 1; done
    for s in "${stages[@]}" "${kwok_documents[@]}"; do [[ -f "$bin/kwok-stages/${s##*/}" ]] || return 1; done
    return 0
}

if ((print_dir)); then
    echo "$bin"
    exit 0
fi

if ((!force)) && complete; then
    log "binaries present (${k8s_version}, etcd ${etcd_version}, kwok ${kwok_version}, metrics-server ${metrics_server_version})"
    echo "$bin"
    exit 0
fi

command -v go >/dev/null 2>&1 ||
    die "'go' not found on PATH; Go >= 1.26 is needed to build the control plane
(or set PANDO_CONTROLPLANE_BIN to a directory holding ${binaries[*]} and kwok-stages/)"

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

k8s_minor="$(echo "$k8s_version" | cut -d. -f2)"
k8s_ldflags="-s -w"
for kv in "gitVersion=${k8s_version}" gitMajor=1 "gitMinor=${k8s_minor}" gitTreeState=clean; do
    k8s_ldflags+=" -X k8s.io/component-base/version.${kv}"
done

build() { # <module dir> <ldflags> <output> <package>...
    local dir="$1" ldflags="$2" output="$3"
    shift 3
    log "building $* ..."
    (cd "$here/$dir" && go build -mod=readonly -trimpath -ldflags "$ldflags" -o "$output" "$@") ||
        die "go build failed in tools/controlplane/$dir for: $*
(a module refused by the Go proxy shows up above as a 'reading ... 404/410' error)"
}

build kwok "-s -w" "$tmp/kwok" sigs.k8s.io/kwok/cmd/kwok
build metrics-server "-s -w" "$tmp/metrics-server" sigs.k8s.io/metrics-server/cmd/metrics-server
build etcd "-s -w" "$tmp/etcd" go.etcd.io/etcd/server/v3 # etcd's main is its server module root
build kubernetes "$k8s_ldflags" "$tmp/" \
    k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler \
    k8s.io/kubernetes/cmd/kubelet \
    k8s.io/kubernetes/cmd/kube-proxy

kwok_src="$(cd "$here/kwok" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)" ||
    die "cannot locate sigs.k8s.io/kwok in the module cache"
mkdir -p "$tmp/kwok-stages"
for s in "${stages[@]}"; do
    cp "$kwok_src/kustomize/stage/$s" "$tmp/kwok-stages/" || die "kwok stage $s missing in $kwok_src"
done
for s in "${kwok_documents[@]}"; do
    cp "$kwok_src/kustomize/$s" "$tmp/kwok-stages/" || die "kwok document $s missing in $kwok_src"
done
chmod u+w "$tmp/kwok-stages"/*.yaml

for b in "${binaries[@]}"; do
    [[ -x "$tmp/$b" ]] || die "build produced no $b"
done
printf 'kubernetes %s\netcd %s\nkwok %s\nmetrics-server %s\n' "$k8s_version" "$etcd_version" \
    "$kwok_version" "$metrics_server_version" >"$tmp/VERSIONS"
touch "$tmp/.complete"

rm -rf "$bin"
mv "$tmp" "$bin"
trap - EXIT
log "built in $((SECONDS - start)) s into $bin"

free_gb="$(df -Pk "$(go env GOCACHE)" 2>/dev/null | awk 'NR == 2 {print int($4 / 1048576)}')"
if ((clean_gocache)) || [[ -n "$free_gb" && "$free_gb" -lt "${PANDO_CONTROLPLANE_MIN_FREE_GB:-4}" ]]; then
    log "running go clean -cache (free: ${free_gb:-?} GiB)"
    go clean -cache || true
fi

echo "$bin"
