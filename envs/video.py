"""An mp4 written frame by frame into an ffmpeg process, and published only when it is complete.

imageio-ffmpeg finds (or ships) the ffmpeg binary; the pipe is genpol's own, for three reasons that
``imageio.get_writer`` / ``imageio_ffmpeg.write_frames`` cannot meet:

* **Memory bounded by the frame size.** Frames go to the encoder as they are rendered; nothing holds a
  whole episode (1000 frames of 256 x 256 RGB are 197 MB, 188 MiB; of 1920 x 1080, 6.2 GB; a custom env without a
  time limit has no bound at all).
* **No Python code between fork and exec.** imageio-ffmpeg starts ffmpeg with ``preexec_fn=os.setpgrp`` so
  that Ctrl-C does not reach it; a ``preexec_fn`` runs Python in the forked child of a multithreaded
  process. JAX warns that this "will likely lead to a deadlock" (each video of a Playground run did), and
  imageio-ffmpeg's own issue #58 reports such hangs. ``start_new_session=True`` detaches ffmpeg from the
  terminal's process group in C, between fork and exec, so an interrupt still reaches genpol alone.
* **Atomic.** ffmpeg writes ``.<name>.<pid>.partial``; the file is renamed to ``<name>`` once ffmpeg has exited
  cleanly, so a killed run leaves no truncated mp4 under the published name (resuming re-records it).

Encoding: H.264 (libx264), yuv420p (what QuickTime and browsers play), constant rate factor 15 (imageio's
``quality=7``, the setting genpol used before). yuv420p needs even sides: an odd width or height is padded
by one black row or column.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from fractions import Fraction
from pathlib import Path

import numpy as np

CONSTANT_RATE_FACTOR = 15  # 0 lossless .. 51 worst; imageio's quality 7 is int((1 - 0.7) * 51)


def _remove_partials_of_dead_writers(path: Path) -> None:
    """Delete ``.<name>.<pid>.partial`` files next to ``path`` whose process is gone (killed while writing):
    each kill would otherwise leave one behind, as large as the frames it had encoded."""
    for partial in path.parent.glob(f".{path.name}.*.partial"):
        pid = partial.name[len(path.name) + 2:-len(".partial")]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)  # signal 0: only asks whether the process exists
        except ProcessLookupError:
            partial.unlink(missing_ok=True)
        except PermissionError:  # alive, another user's
            pass


class Mp4Stream:
    """One mp4 at ``path``: ``append`` RGB frames ``[H, W, 3]`` (uint8, or floats in [0, 1]; an alpha channel
    is dropped), all of one size, then ``finish``
    (publishes the file) or ``abort`` (removes what was written). Also a context manager that finishes on
    success and aborts on an exception.

    ffmpeg starts with the first frame (its size is the video's).
    """

    def __init__(self, path: str | Path, fps: float = 30):
        self.path = Path(path)
        # the pid: two processes writing one name (two evaluations of a run) must not share a partial file
        self.partial = self.path.with_name(f".{self.path.name}.{os.getpid()}.partial")
        _remove_partials_of_dead_writers(self.path)
        self.fps = Fraction(fps).limit_denominator()
        self.frames = 0
        self.size: tuple[int, int] | None = None  # (height, width)
        self._process: subprocess.Popen | None = None
        self._errors = tempfile.TemporaryFile()  # ffmpeg's stderr: a file cannot fill up and block it

    def _start(self, height: int, width: int) -> subprocess.Popen:
        import imageio_ffmpeg

        command = [imageio_ffmpeg.get_ffmpeg_exe(), "-y", "-loglevel", "error",
                   "-f", "rawvideo", "-pix_fmt", "rgb24", "-s", f"{width}x{height}", "-r", str(self.fps), "-i", "-",
                   "-an", "-vcodec", "libx264", "-pix_fmt", "yuv420p", "-crf", str(CONSTANT_RATE_FACTOR)]
        if height % 2 or width % 2:
            command += ["-vf", "pad=ceil(iw/2)*2:ceil(ih/2)*2"]
        command += ["-f", "mp4", str(self.partial)]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        return subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=self._errors,
                                start_new_session=True)

    def append(self, frame: np.ndarray) -> None:
        frame = np.asarray(frame)
        if frame.ndim != 3 or frame.shape[-1] not in (3, 4):
            raise ValueError(f"{self.path.name}: frames must be RGB [H, W, 3] (or RGBA), got shape {frame.shape}")
        if np.issubdtype(frame.dtype, np.floating):  # [0, 1], as imageio reads float images
            frame = (np.clip(frame, 0.0, 1.0) * 255.0).round()
        frame = frame[..., :3].astype(np.uint8, copy=False)
        if self._process is None:
            self.size = frame.shape[:2]
            self._process = self._start(*self.size)
        elif frame.shape[:2] != self.size:
            raise ValueError(f"{self.path.name}: frame {self.frames} is {frame.shape[:2]}, the video's frames "
                             f"are {self.size} (height, width)")
        try:
            self._process.stdin.write(np.ascontiguousarray(frame).tobytes())
        except OSError:  # BrokenPipeError (EINVAL on Windows): ffmpeg has exited
            code = self._process.wait()
            message = self._stderr()
            self.abort()
            raise RuntimeError(f"ffmpeg stopped writing {self.path} (exit status {code}): {message}") from None
        self.frames += 1

    def finish(self) -> Path:
        """Wait for ffmpeg to write the file, then move it to ``path``; on any failure (ffmpeg's, or an
        interrupt while waiting) the stream is aborted before the error propagates."""
        if self._process is None:
            raise RuntimeError(f"{self.path}: no frames were appended")
        try:
            try:
                self._process.stdin.close()  # flushes the last frame's tail
            except OSError:
                pass  # ffmpeg has exited: its status and message below say why
            code = self._process.wait()
            if code != 0:
                raise RuntimeError(f"ffmpeg failed writing {self.path} (exit status {code}): {self._stderr()}")
            os.replace(self.partial, self.path)
        except BaseException:
            self.abort()
            raise
        self._errors.close()
        return self.path

    def abort(self) -> None:
        """Stop ffmpeg and remove the partial file."""
        if self._process is not None:
            if self._process.poll() is None:
                self._process.kill()
            self._process.wait()
            if self._process.stdin is not None:
                try:
                    self._process.stdin.close()
                except OSError:
                    pass
        self.partial.unlink(missing_ok=True)
        self._errors.close()

    def _stderr(self) -> str:
        self._errors.seek(0)
        return self._errors.read().decode(errors="replace").strip()[-2000:] or "(no message)"

    def __enter__(self) -> "Mp4Stream":
        return self

    def __exit__(self, kind, error, trace) -> None:
        if kind is None:
            self.finish()
        else:
            self.abort()
