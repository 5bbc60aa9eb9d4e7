"""Writing a whole buffer to a file descriptor."""

from __future__ import annotations

import os


def write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` to ``fd``. One ``os.write`` may write less than it was given (a signal, a file size
    limit, Linux's 2 GiB cap per call) and say so only by its count; the rest is written by the next."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written <= 0:
            raise OSError("write returned no progress")
        view = view[written:]
