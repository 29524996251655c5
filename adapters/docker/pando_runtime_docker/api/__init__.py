"""The lowest layer: the Engine API over ``httpx``, anyio-native (private)."""

from ._errors import EngineError, unreachable, write_failed
from ._frames import FrameDecoder, StreamKind
from ._hijack import HijackedStream
from ._image_ids import image_id
from ._progress import progress_error, progress_message
from ._transport import EngineTransport, TransportStats
from ._version import NEWEST_API, OLDEST_API, negotiate_version, parse_version

__all__ = [
    "NEWEST_API",
    "OLDEST_API",
    "EngineError",
    "EngineTransport",
    "FrameDecoder",
    "HijackedStream",
    "StreamKind",
    "TransportStats",
    "image_id",
    "negotiate_version",
    "parse_version",
    "progress_error",
    "progress_message",
    "unreachable",
    "write_failed",
]
