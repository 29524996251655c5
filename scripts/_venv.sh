# shellcheck shell=bash
# Sourced by the scripts: make .venv with the project, the adapters, the examples, the frozen
# compatibility plugins (tests/compat) and the dev tools installed (editable), once; later runs
# only re-install when pyproject files change.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${PANDO_VENV:-$root/.venv}"
python="${PYTHON:-python3}"
stamp="$venv/.pando-installed"
want="$(cat "$root/pyproject.toml" "$root"/adapters/*/pyproject.toml "$root"/examples/*/pyproject.toml "$root"/tests/compat/*/pyproject.toml 2>/dev/null | sha256sum | cut -c1-16)"
if [ ! -x "$venv/bin/python" ]; then
    echo "setting up $venv" >&2
    "$python" -m venv "$venv"
fi
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    "$venv/bin/python" -m pip install --quiet --upgrade "pip>=25.1"
    extras=()
    for dist in "$root"/adapters/*/ "$root"/examples/*/ "$root"/tests/compat/*/; do
        [ -f "$dist/pyproject.toml" ] && extras+=(-e "$dist")
    done
    "$venv/bin/python" -m pip install --quiet -e "$root" "${extras[@]}" --group "$root/pyproject.toml:dev"
    echo "$want" > "$stamp"
fi
export PATH="$venv/bin:$PATH"
