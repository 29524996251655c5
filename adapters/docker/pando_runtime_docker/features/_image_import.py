"""Images the host brings: an archive loaded into the daemon, and whether one can start.

``import_image`` streams a ``docker save`` (or OCI layout) archive to ``POST /images/load``
without holding it in memory, then returns the loaded image's ID (``sha256:...``): the
immutable reference a plan names. ``has_image`` answers from the daemon's images, then from
the registry through the daemon (``GET /distribution/{name}/json``): what it can pull it can
start.

The containerd image store answers a load whose image it stored but could not unpack (a layer
its snapshotter cannot apply) with success and one line of text, ``Error unpacking image ...``,
beside ``Loaded image: ...``: that line fails the import, as an error object does.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterable, AsyncIterator

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
        loaded = loaded_references(answer.text, sent)
        loaded_id = await self._image_id(loaded[0])
        _LOG.info(
            "imported %s as %s (%.1f MiB, %.2f s)",
            loaded[0],
            loaded_id,
            sent / 2**20,
            time.perf_counter() - started,
        )
        return loaded_id

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
    """The references the load's lines name; a reported error fails the import."""
    loaded: list[str] = []
    for line in text.splitlines():
        message = progress_message(line)
        reason = progress_error(message) if message is not None else None
        if reason:
            raise _bad_archive(reason, sent)
        # A stream line, or a bare one from an engine that writes plain text.
        stream = str(message.get("stream", "")) if message is not None else line
        if stream.startswith(_UNPACK_FAILED):
            raise _unpack_failed(stream.strip(), loaded)
        loaded.extend(stream[len(p) :].strip() for p in _LOADED if stream.startswith(p))
    if not loaded:
        raise _bad_archive("the archive holds no image", sent)
    return loaded


def _unpack_failed(reason: str, loaded: list[str]) -> AdapterFailed:
    return AdapterFailed(
        "the engine stored the archive's image but could not unpack it: " + reason[:300],
        remedy="The engine keeps images in the containerd image store, whose snapshotter could "
        "not apply a layer: see the daemon's log. A layer that does not match its digest is a "
        "broken archive (save it again); a snapshotter the host cannot mount (overlay in an "
        "unprivileged container) needs another storage setup. Remove the image it left "
        "('docker rmi') before loading it again.",
        details={"loaded": loaded, "reason": reason[:300]},
    )


def _bad_archive(reason: str, sent: int) -> InvalidInput:
    return InvalidInput(
        "the image archive cannot be loaded",
        [Problem("archive", f"{reason[:300]} ({sent} bytes read)", "bad_image_archive")],
        remedy="Give a 'docker save' archive or an OCI image layout as a tar.",
    )
