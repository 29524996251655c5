"""Spooling an image archive to a file, decompressing gzip, bzip2 or xz on the way.

The archive arrives as a stream; :class:`Spool` writes it, plain, into a temporary file the
archive reader (:mod:`._image_archive`) then reads. A stream that is not a whole archive (cut
short, zstd, not valid in its compression) is ``InvalidInput``; a full disk ``AdapterFailed``.
"""

from __future__ import annotations

import bz2
import lzma
import zlib
from collections.abc import Callable
from typing import IO, Protocol

from pando_runtime import AdapterFailed, InvalidInput, Problem

__all__ = ["SPOOL_CHUNK", "Spool"]

SPOOL_CHUNK = 1024 * 1024
"""Bytes gathered from the stream before one write (in a worker thread)."""


class _Decoder(Protocol):
    @property
    def eof(self) -> bool: ...

    @property
    def unused_data(self) -> bytes: ...

    def decompress(self, data: bytes) -> bytes: ...


def _gunzip() -> _Decoder:
    decoder: _Decoder = zlib.decompressobj(16 + zlib.MAX_WBITS)
    return decoder


_COMPRESSIONS: tuple[tuple[bytes, str, Callable[[], _Decoder]], ...] = (
    (b"\x1f\x8b", "gzip", _gunzip),
    (b"BZh", "bzip2", bz2.BZ2Decompressor),
    (b"\xfd7zXZ\x00", "xz", lzma.LZMADecompressor),
)
_ZSTD = b"\x28\xb5\x2f\xfd"


def _bad_stream(message: str) -> InvalidInput:
    return InvalidInput(
        "the image archive cannot be read",
        [Problem("archive", message, "bad_tar")],
        remedy="Import an OCI image layout or a 'docker save' archive as a tar, plain or "
        "compressed with gzip, bzip2 or xz.",
    )


class Spool:
    """Writes an archive into a file, decompressing it on the way when it is compressed.

    Called from worker threads, one call at a time.
    """

    def __init__(self, file: IO[bytes]) -> None:
        self._file = file
        self._started = False
        self._factory: Callable[[], _Decoder] | None = None
        self._decoder: _Decoder | None = None
        self.compression = "none"
        self.received = 0
        self.written = 0

    def _start(self, data: bytes) -> None:
        self._started = True
        if data.startswith(_ZSTD):
            raise _bad_stream("is compressed with zstd; send it plain or compressed with gzip")
        for magic, name, factory in _COMPRESSIONS:
            if data.startswith(magic):
                self.compression, self._factory, self._decoder = name, factory, factory()

    def _decode(self, data: bytes) -> bytes:
        if self._decoder is None or self._factory is None:
            return data
        out = []
        try:
            while data:
                out.append(self._decoder.decompress(data))
                if not self._decoder.eof:
                    break
                data = self._decoder.unused_data  # a next member (concatenated archives)
                if not data.strip(b"\0"):
                    break  # padding after the last member
                self._decoder = self._factory()
        except (zlib.error, OSError, lzma.LZMAError, EOFError, ValueError) as error:
            raise _bad_stream(f"is not valid {self.compression} ({error})") from None
        return b"".join(out)

    def feed(self, data: bytes) -> None:
        """Write the next bytes of the archive."""
        if not data:
            return
        if not self._started:
            self._start(data)
        self.received += len(data)
        plain = self._decode(data)
        try:
            self._file.write(plain)
        except OSError as error:
            raise AdapterFailed(
                f"the image archive cannot be spooled to a temporary file: {error.strerror}",
                remedy="Free space in the temporary directory (TMPDIR), or point TMPDIR at a "
                "larger one.",
            ) from None
        self.written += len(plain)

    def finish(self, data: bytes) -> None:
        """Write the last bytes; check the archive was whole."""
        self.feed(data)
        if not self.received:
            raise _bad_stream("is empty")
        if self._decoder is not None and not self._decoder.eof:
            raise _bad_stream(f"is cut short (its {self.compression} stream does not end)")
        self._file.flush()
