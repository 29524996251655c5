"""Images the host brings: an archive loaded into the daemon, and whether one can start.

``import_image`` streams a ``docker save`` (or OCI layout) archive to ``POST /images/load``
without holding it in memory, then returns the loaded image's ID (``sha256:...``): the
immutable reference a plan names. ``has_image`` answers from the daemon's images, then from
the registry through the daemon (``GET /distribution/{name}/json``): what it can pull it can
start.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterable, AsyncIterator

from anyio.abc import ByteReceiveStream

from pando_runtime import InvalidInput, Problem

from .._log import logger
from ..api import EngineError, EngineTransport, progress_message, write_failed

__all__ = ["ImageImport"]

_LOG = logger("images")

_LOADED = ("Loaded image: ", "Loaded image ID: ")


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
        loaded = _loaded(answer.text, sent)
        image_id = await self._image_id(loaded[0])
        _LOG.info(
            "imported %s as %s (%.1f MiB, %.2f s)",
            loaded[0],
            image_id,
            sent / 2**20,
            time.perf_counter() - started,
        )
        return image_id

    async def _image_id(self, reference: str) -> str:
        if reference.startswith("sha256:"):
            return reference
        data = await self._api.get_json("/images/{name}/json", args={"name": reference})
        return str(data["Id"])

    async def has_image(self, reference: str) -> bool:
        """Whether the daemon holds ``reference`` or can pull it (anonymously)."""
        try:
            await self._api.get_json("/images/{name}/json", args={"name": reference})
        except EngineError as error:
            if not error.not_found:
                raise write_failed(error, "looking up an image") from None
        else:
            return True
        if reference.startswith("sha256:"):
            return False  # an ID names a loaded image only: no registry has it by that name
        try:
            await self._api.get_json("/distribution/{name}/json", args={"name": reference})
        except EngineError as error:
            _LOG.debug("the registry does not give %s: %s", reference, error.message)
            return False
        return True


def _loaded(text: str, sent: int) -> list[str]:
    """The references the load's JSON lines name; a reported error is a bad archive."""
    loaded: list[str] = []
    for line in text.splitlines():
        message = progress_message(line)
        if message is None:
            continue
        if message.get("error") or message.get("errorDetail"):
            detail = (message.get("errorDetail") or {}).get("message") or message.get("error")
            raise _bad_archive(str(detail), sent)
        stream = str(message.get("stream", ""))
        loaded.extend(stream[len(p) :].strip() for p in _LOADED if stream.startswith(p))
    if not loaded:
        raise _bad_archive("the archive holds no image", sent)
    return loaded


def _bad_archive(reason: str, sent: int) -> InvalidInput:
    return InvalidInput(
        "the image archive cannot be loaded",
        [Problem("archive", f"{reason[:300]} ({sent} bytes read)", "bad_image_archive")],
        remedy="Give a 'docker save' archive or an OCI image layout as a tar.",
    )
