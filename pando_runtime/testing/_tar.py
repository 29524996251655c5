"""Tar archives of file trees: how volume snapshots travel."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Mapping
from datetime import datetime

from .._contract._errors import InvalidInput, Problem

__all__ = ["make_tar", "read_tar"]


def make_tar(files: Mapping[str, bytes], *, mtime: datetime | None = None) -> bytes:
    """A tar archive holding ``files`` (relative paths), with their parent directories."""
    stamp = int(mtime.timestamp()) if mtime else 0
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        directories: set[str] = set()
        for path in sorted(files):
            parts = path.split("/")[:-1]
            for depth in range(1, len(parts) + 1):
                directory = "/".join(parts[:depth])
                if directory not in directories:
                    directories.add(directory)
                    info = tarfile.TarInfo(directory)
                    info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, stamp
                    archive.addfile(info)
            info = tarfile.TarInfo(path)
            info.size, info.mode, info.mtime = len(files[path]), 0o644, stamp
            archive.addfile(info, io.BytesIO(files[path]))
    return buffer.getvalue()


def read_tar(data: bytes) -> dict[str, bytes]:
    """The regular files of a tar archive, by relative path.

    Refuses members that would land outside the tree (absolute paths, ``..``,
    links), as a restore must.
    """
    files: dict[str, bytes] = {}
    problems: list[Problem] = []
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as archive:
            for member in archive.getmembers():
                name = member.name.removeprefix("./").rstrip("/")
                if not name or name == ".":
                    continue
                if name.startswith("/") or ".." in name.split("/"):
                    problems.append(Problem(member.name, "member leaves the volume", "unsafe"))
                elif member.issym() or member.islnk() or member.isdev():
                    problems.append(Problem(member.name, "links and devices are refused", "unsafe"))
                elif member.isfile():
                    extracted = archive.extractfile(member)
                    files[name] = extracted.read() if extracted else b""
    except tarfile.TarError as error:
        raise InvalidInput("not a tar archive", [Problem("", str(error), "bad_tar")]) from None
    if problems:
        raise InvalidInput("the archive has unsafe members", problems)
    return files
