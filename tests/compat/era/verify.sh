#!/usr/bin/env bash
# Runs one compatibility plugin's era kit against the core as it stood at its API version, in a
# worktree of that commit and a venv of its own (under TMPDIR; kept for the next run):
#   tests/compat/era/verify.sh 1.0    # or 1.2, 1.3; extra arguments go to pytest
# The proof that each plugin is what a plugin author of that era had; not part of the suite.
set -euo pipefail
version="$1"
shift
case "$version" in
    1.0) commit=d59ef27 ;;  # the example adapter's commit; API 1.0
    1.2) commit=a6ff23b ;;  # the last commit of API 1.2 (pando_runtime.plugin is public)
    1.3) commit=6ea52d8 ;;  # API 1.3: stopping observed
    *) echo "no era kit for $version" >&2; exit 2 ;;
esac
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
compat="$(dirname "$here")"
repo="$(git -C "$here" rev-parse --show-toplevel)"
work="${TMPDIR:-/tmp}/pando-era-$version"
mkdir -p "$work"
[ -d "$work/core" ] || git -C "$repo" worktree add --detach "$work/core" "$commit" >&2
[ -x "$work/venv/bin/python" ] || python3 -m venv "$work/venv"
"$work/venv/bin/python" -m pip install --quiet -e "$work/core" "$compat/plugin_${version/./_}" \
    "pytest>=8.3" "trio>=0.27"
cd "$work/core"  # the era's pyproject: its warnings filter (error) and markers
exec "$work/venv/bin/python" -m pytest -c pyproject.toml --rootdir . -p no:cacheprovider \
    -o addopts="-ra --strict-markers -p no:asyncio -p pando_runtime.testing.pytest_plugin" \
    -o pythonpath="$compat" "$here/kit_${version/./_}.py" "$@"
