"""Images the host brings: an archive loaded into the daemon, and whether one can start.

``import_image`` streams a ``docker save`` (or OCI layout) archive to ``POST /images/load``
without holding it in memory, then returns the loaded image's ID (``sha256:...``): the
immutable reference a plan names. ``has_image`` answers from the daemon's images, then from
the registry through the daemon (``GET /distribution/{name}/json``): what it can pull it can
start.

The containerd image store answers a load whose image it stored but could not unpack (a layer
its snapshotter cannot apply, or one that is not what the image's config says) with success and
one line of text, ``Error unpacking image ...``, after that image's ``Loaded image: ...``: that
line fails the import, as an error object does, and the image it names is removed again, as the
classic store keeps nothing of an archive it refuses. A layer that does not match the config's
digest is a broken archive there as in the classic store (``InvalidInput``); any other unpack
failure is the engine's (``AdapterFailed``).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass

from anyio.abc import ByteReceiveStream

from pando_runtime import AdapterFailed, InvalidInput, Problem

from .._log import logger
from ..api import (
    EngineError,
    EngineTransport,
    image_id,
    progress_error,
    progress_message,
    write_failed,
)

__all__ = ["ImageImport"]

_LOG = logger("images")

_LOADED = ("Loaded image: ", "Loaded image ID: ")
_UNPACK_FAILED = "Error unpacking image"
# What containerd's unpacker says of a layer whose content is not the config's diff ID.
_BROKEN_LAYER = "wrong diff id"


@dataclass(frozen=True)
class LoadAnswer:
    """A load's answer: the references it loaded, and why each it could not unpack failed."""

    loaded: list[str]
    not_unpacked: dict[str, str]


class ImageImport:
    """Loads image archives into one daemon and looks images up."""

    def __init__(self, api: EngineTransport) -> None:
        self._api = api

    async def import_image(self, source: ByteReceiveStream | AsyncIterable[bytes]) -> str:
        """Load the archive; the ID of the (first) image it holds."""
        started = time.perf_counter()
        sent = 0

        async def chunks() -> AsyncIterator[bytes]:
            nonlocal sent
            async for chunk in source:
                sent += len(chunk)
                yield bytes(chunk)

        try:
            answer = await self._api.request(
                "POST",
                "/images/load",
                params={"quiet": True},
                content=chunks(),
                headers={"Content-Type": "application/x-tar"},
            )
        except EngineError as error:
            if error.status in (400, 500):  # the daemon could not read it
                raise _bad_archive(error.message, sent) from None
            raise write_failed(error, "loading an image archive") from None
        read = read_load_answer(answer.text, sent)
        if read.not_unpacked:
            await self._remove(list(read.not_unpacked))
            raise unpack_failed(read, sent)
        loaded = read.loaded
        loaded_id = await self._image_id(loaded[0])
        _LOG.info(
            "imported %s as %s (%.1f MiB, %.2f s)",
            loaded[0],
            loaded_id,
            sent / 2**20,
            time.perf_counter() - started,
        )
        return loaded_id

    async def _remove(self, references: list[str]) -> None:
        """Remove what a failed load stored (best effort: the caller hears of the failure)."""
        for reference in references:
            try:
                await self._api.request("DELETE", "/images/{name}", args={"name": reference})
            except EngineError as error:
                _LOG.warning("could not remove %s, loaded but not unpacked: %s", reference, error)

    async def _image_id(self, reference: str) -> str:
        named = image_id(reference)
        if named is not None:
            return named
        data = await self._api.get_json("/images/{name}/json", args={"name": reference})
        return image_id(str(data["Id"])) or str(data["Id"])

    async def has_image(self, reference: str) -> bool:
        """Whether the daemon holds ``reference`` or can pull it (anonymously)."""
        try:
            await self._api.get_json("/images/{name}/json", args={"name": reference})
        except EngineError as error:
            if not error.not_found:
                raise write_failed(error, "looking up an image") from None
        else:
            return True
        if image_id(reference) is not None:
            return False  # an ID names a loaded image only: no registry has it by that name
        try:
            await self._api.get_json("/distribution/{name}/json", args={"name": reference})
        except EngineError as error:
            _LOG.debug("the registry does not give %s: %s", reference, error.message)
            return False
        return True


def loaded_references(text: str, sent: int) -> list[str]:
    """The references the load's lines name; an error or an image not unpacked fails it."""
    read = read_load_answer(text, sent)
    if read.not_unpacked:
        raise unpack_failed(read, sent)
    return read.loaded


def read_load_answer(text: str, sent: int) -> LoadAnswer:
    """The load's lines read; an error object, or no image named, is a bad archive."""
    loaded: list[str] = []
    not_unpacked: dict[str, str] = {}
    for line in text.splitlines():
        message = progress_message(line)
        reason = progress_error(message) if message is not None else None
        if reason:
            raise _bad_archive(reason, sent)
        # A stream line, or a bare one from an engine that writes plain text.
        stream = str(message.get("stream", "")) if message is not None else line
        if stream.startswith(_UNPACK_FAILED) and loaded:
            # The engine writes it right after the ``Loaded image`` line of the same image.
            not_unpacked[loaded[-1]] = stream.strip()
        loaded.extend(stream[len(p) :].strip() for p in _LOADED if stream.startswith(p))
    if not loaded:
        raise _bad_archive("the archive holds no image", sent)
    return LoadAnswer(loaded, not_unpacked)


def unpack_failed(read: LoadAnswer, sent: int) -> AdapterFailed | InvalidInput:
    """The failure of a load that stored images it could not unpack (since removed)."""
    reason = next(iter(read.not_unpacked.values()))
    if _BROKEN_LAYER in reason:
        return _bad_archive(reason, sent)
    return AdapterFailed(
        "the engine stored the archive's image but could not unpack it: " + reason[:300],
        remedy="The engine keeps images in the containerd image store, whose snapshotter could "
        "not apply a layer: see the daemon's log. A snapshotter the host cannot mount (overlay "
        "in an unprivileged container) needs another storage setup. The image was removed "
        "again (unless the log of this library says otherwise).",
        details={"loaded": read.loaded, "reason": reason[:300]},
    )


def _bad_archive(reason: str, sent: int) -> InvalidInput:
    return InvalidInput(
        "the image archive cannot be loaded",
        [Problem("archive", f"{reason[:300]} ({sent} bytes read)", "bad_image_archive")],
        remedy="Give a 'docker save' archive or an OCI image layout as a tar.",
    )
