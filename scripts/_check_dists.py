"""Check built distributions: one sdist and one wheel per project, at the version it declares.

Usage: python scripts/_check_dists.py OUT_DIR PROJECT_DIR...

Each project declares its version in one place: ``version`` in its ``pyproject.toml``, or, when
the version is dynamic, the file ``[tool.hatch.version] path`` names (``__version__ = "..."``).
"""

from __future__ import annotations

import re
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path


def declared(project: Path) -> tuple[str, str]:
    """The project's distribution name (normalised for file names) and declared version."""
    meta = tomllib.loads((project / "pyproject.toml").read_text(encoding="utf-8"))
    name = re.sub(r"[-_.]+", "_", meta["project"]["name"]).lower()
    if "version" in meta["project"]:
        return name, meta["project"]["version"]
    source = project / meta["tool"]["hatch"]["version"]["path"]
    found = re.search(
        r'^__version__ = "([^"]+)"$', source.read_text(encoding="utf-8"), re.MULTILINE
    )
    if found is None:
        sys.exit(f"{source}: no __version__")
    return name, found.group(1)


def check(out: Path, project: Path) -> list[str]:
    name, version = declared(project)
    problems = []
    wheels = sorted(out.glob(f"{name}-*.whl"))
    sdists = sorted(out.glob(f"{name}-*.tar.gz"))
    if [w.name for w in wheels] != [f"{name}-{version}-py3-none-any.whl"]:
        problems.append(f"{project}: wheels {[w.name for w in wheels]}, want version {version}")
    if [s.name for s in sdists] != [f"{name}-{version}.tar.gz"]:
        problems.append(f"{project}: sdists {[s.name for s in sdists]}, want version {version}")
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as archive:
            names = archive.namelist()
        if not any(n.endswith("/py.typed") for n in names):
            problems.append(f"{wheel.name}: no py.typed (the package is typed)")
        if any(n.startswith("tests/") for n in names):
            problems.append(f"{wheel.name}: ships the tests")
    for sdist in sdists:
        with tarfile.open(sdist) as archive:
            if not any(n.endswith("/pyproject.toml") for n in archive.getnames()):
                problems.append(f"{sdist.name}: no pyproject.toml")
    print(f"{name} {version}: {', '.join(p.name for p in [*sdists, *wheels])}")
    return problems


def main() -> None:
    out, *projects = (Path(arg) for arg in sys.argv[1:])
    problems = [problem for project in projects for problem in check(out, project)]
    for problem in problems:
        print(problem, file=sys.stderr)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
