"""Files that are replaced whole: a reader, or a run resumed after a kill -9 or a power cut, sees the old
content or the new, never half of one (checkpoints, whose directories hold several files, have their own
protocol in ``genpol.checkpoint``)."""

from __future__ import annotations

import os
from pathlib import Path


def write_text_atomic(path: str | Path, text: str) -> None:
    """``text`` to a temporary file next to ``path``, flushed to disk, then renamed over ``path``
    (``os.replace`` is atomic within a filesystem; the fsyncs of the file and then of its directory make
    the new content survive a power cut too, not only a killed process)."""
    path = Path(path)
    tmp = path.with_name(f".tmp-{path.name}-{os.getpid()}")
    try:
        with open(tmp, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if hasattr(os, "O_DIRECTORY"):  # POSIX: the rename itself is durable once the directory is synced
        directory = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
