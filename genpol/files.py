"""Files that are replaced whole: a reader, or a run resumed after a kill -9 or a power cut, sees the old
content or the new, never half of one (checkpoints, whose directories hold several files, have their own
protocol in ``genpol.checkpoint``)."""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


def fsync_path(path: str | Path) -> None:
    """Flush a file's, or a directory's, data and entries to disk (a directory's fsync makes the renames and
    creations inside it durable)."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


@contextmanager
def replaced_atomically(path: str | Path) -> Iterator[Path]:
    """``with replaced_atomically(path) as tmp:`` write the new file at ``tmp`` (next to ``path``); on leaving
    the block it is flushed to disk and renamed over ``path``, or removed if the block raised (a full disk,
    a file-size limit: no temporary file is left behind). ``os.replace`` is atomic within a filesystem; the
    fsyncs of the file and then of its directory make the new content survive a power cut too."""
    path = Path(path)
    tmp = path.with_name(f".tmp-{path.name}-{os.getpid()}")
    try:
        yield tmp
        fsync_path(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if os.name == "posix":  # the rename itself is durable once the directory is synced (Windows cannot open one)
        fsync_path(path.parent)


def write_text_atomic(path: str | Path, text: str) -> None:
    """``text`` replacing ``path`` whole (``replaced_atomically``)."""
    with replaced_atomically(path) as tmp:
        tmp.write_text(text)
