"""Length-prefixed JSON frames: the wire between the evaluator and its worker and referee processes.

Covers: `encode_message` (a 4-byte big-endian length, then compact JSON), `read_message` (a blocking read
of one frame, None at end of file), `write_all`. JSON only, never pickle: a process must not run code its
peer chose. The parent's non-blocking reading of a worker's frames, with deadlines and a size limit, is
`sandbox.Worker`'s; the referee's is `referee.RefereeLink`'s.

Not covered: what the frames mean (`sandbox.py`, `child.py`, `referee.py`). Imports neither torch nor CUDA.
"""

from __future__ import annotations

import json
import os
import struct
from typing import Any

HEADER = struct.Struct(">I")


def encode_message(message: dict[str, Any]) -> bytes:
    """Length-prefixed JSON. Raises TypeError/ValueError if `message` is not JSON-able."""
    body = json.dumps(message, separators=(",", ":")).encode()
    return HEADER.pack(len(body)) + body


def read_message(fd: int) -> dict[str, Any] | None:
    """Blocking read of one message; None at end of file."""
    header = _read_exact(fd, HEADER.size)
    if header is None:
        return None
    body = _read_exact(fd, HEADER.unpack(header)[0])
    return None if body is None else json.loads(body)


def _read_exact(fd: int, n: int) -> bytes | None:
    chunks, left = [], n
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
