# shellcheck shell=bash
# Shared by tools/<tool>/build.sh: build a tool from the Go module pinned in that tool's
# go.mod into a cache directory outside the repository, when missing.
#
#   ${<cache_env>:-${XDG_CACHE_HOME:-$HOME/.cache}/pando-runtime/<tool>}/<tool>-<version>_<hash>/bin
#
# <version> is the pinned module's version, read from go.mod (so it cannot drift from what is
# built); <hash> covers go.mod, go.sum, the calling script and this file. Idempotent (an
# existing build only prints its directory), one build at a time per key (flock), installed
# atomically (a build killed half-way leaves nothing that looks complete). The last line on
# stdout is the bin directory; progress goes to stderr.
#
# The calling script sets `tool`, `module`, `cache_env` and the array `binaries`, defines
# `build_into DIR VERSION` (run in the tool's directory with CGO_ENABLED=0; it writes each of
# `binaries` into DIR), then runs `go_tool_main "$@"` (options: --force, --print-dir, --help).

go_tool_die() {
    echo "${tool}/build.sh: error: $*" >&2
    exit 1
}

go_tool_log() {
    echo "${tool}/build.sh: $*" >&2
}

go_tool_main() {
    local script here force=0 print_dir=0 arg
    script="$(cd "$(dirname "${BASH_SOURCE[1]}")" && pwd)/$(basename "${BASH_SOURCE[1]}")"
    here="$(dirname "$script")"
    for arg in "$@"; do
        case "$arg" in
            --force) force=1 ;;
            --print-dir) print_dir=1 ;;
            -h | --help)
                sed -n '2,/^set -euo pipefail/p' "$script" | sed '$d' | sed 's/^# \{0,1\}//'
                exit 0
                ;;
            *) go_tool_die "unknown argument: $arg (see --help)" ;;
        esac
    done

    local version digest root out bin
    version="$(awk -v m="$module" '$1 == m && $2 ~ /^v/ {print $2; exit}' "$here/go.mod")"
    [[ -n "$version" ]] || go_tool_die "$module is not required in $here/go.mod"
    digest="$(cat "$here/go.mod" "$here/go.sum" "$script" "${BASH_SOURCE[0]}" |
        sha256sum | cut -c1-10)"
    root="${!cache_env:-${XDG_CACHE_HOME:-$HOME/.cache}/pando-runtime/$tool}"
    out="$root/${tool}-${version}_${digest}"
    bin="$out/bin"

    if ((print_dir)); then
        echo "$bin"
        return 0
    fi
    if ((!force)) && _go_tool_complete "$bin"; then
        go_tool_log "${tool} ${version} present"
        echo "$bin"
        return 0
    fi
    command -v go >/dev/null 2>&1 ||
        go_tool_die "'go' not found on PATH; Go >= 1.26 is needed to build ${tool}"
    mkdir -p "$out" || go_tool_die "cannot create $out"

    # One build at a time per key (parallel CI steps, test workers).
    if command -v flock >/dev/null 2>&1; then
        exec 9>"$out/.lock"
        flock 9
        if ((!force)) && _go_tool_complete "$bin"; then
            go_tool_log "${tool} built by a concurrent run"
            echo "$bin"
            return 0
        fi
    fi

    local tmp start=$SECONDS
    tmp="$(mktemp -d "$out/bin.tmp.XXXXXX")"
    chmod 755 "$tmp"
    # shellcheck disable=SC2064 # expand now: tmp is local
    trap "rm -rf '$tmp'" EXIT
    go_tool_log "building ${module} ${version} ..."
    (cd "$here" && CGO_ENABLED=0 build_into "$tmp" "$version") ||
        go_tool_die "go build failed in tools/${tool} (a module refused by the Go proxy shows up above as a 'reading ... 404/410' error)"
    local b
    for b in "${binaries[@]}"; do
        [[ -x "$tmp/$b" ]] || go_tool_die "the build produced no $b"
    done
    echo "${tool} ${version}" >"$tmp/VERSIONS"
    touch "$tmp/.complete"
    rm -rf "$bin"
    mv "$tmp" "$bin"
    trap - EXIT
    go_tool_log "built in $((SECONDS - start)) s into $bin"
    echo "$bin"
}

_go_tool_complete() {
    [[ -f "$1/.complete" ]] || return 1
    local b
    for b in "${binaries[@]}"; do [[ -x "$1/$b" ]] || return 1; done
}
