"""Writing an evaluation episode's mp4: genpol's ``Mp4Stream`` against the imageio writer it replaced.

Before: ``VideoRecorder`` kept every frame of env 0's episode in a list and wrote them at the episode's
end with ``imageio.get_writer(..., codec="libx264", quality=7)``. After: each frame goes to ffmpeg as it
is rendered (``genpol.envs.video.Mp4Stream``, the same encoder settings), published when ffmpeg is done.

The frames are real HalfCheetah-v5 renders (a running gait, ``--distinct`` of them, cycled to
``--frames``) so that the encoder sees real content. Per method: the wall time from the first frame
handed over to the file published (an episode's rendering, which the stream overlaps with encoding, is
not included) and the peak of Python-side allocations (tracemalloc; numpy reports its buffers there)
while it runs. The methods alternate over ``--rounds``; medians are reported.

    python bench/video_write.py [--frames 1000] [--size 256] [--rounds 3]

Writes ``bench/results/video_write.json``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np

from common import machine, write_results


def halfcheetah_frames(count: int, size: int) -> list[np.ndarray]:
    """``count`` consecutive frames of HalfCheetah running an open-loop gait."""
    import torch

    from genpol import envs

    frames = []
    with envs.make("gym:HalfCheetah-v5", num_envs=1, seed=0, render=True, render_size=(size, size)) as env:
        env.reset()
        for t in range(count):
            phase = torch.arange(env.act_dim, dtype=torch.float32)
            env.step(torch.sin(2 * np.pi * 3.3 * t * 0.05 + phase)[None])
            frames.append(env.render())
    return frames


def write_before(path: Path, source: list[np.ndarray], count: int) -> None:
    import imageio.v2 as imageio

    held = [source[k % len(source)].copy() for k in range(count)]  # render() hands over a new array per frame
    with imageio.get_writer(path, fps=30, codec="libx264", quality=7, macro_block_size=1) as writer:
        for frame in held:
            writer.append_data(frame)


def write_after(path: Path, source: list[np.ndarray], count: int) -> None:
    from genpol.envs.video import Mp4Stream

    with Mp4Stream(path, fps=30) as stream:
        for k in range(count):
            stream.append(source[k % len(source)].copy())


def measure(method, path: Path, source: list[np.ndarray], count: int) -> tuple[float, float]:
    """(seconds, peak MiB of Python-side allocations)."""
    tracemalloc.start()
    start = time.perf_counter()
    method(path, source, count)
    seconds = time.perf_counter() - start
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return seconds, peak / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=1000)
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--distinct", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    source = halfcheetah_frames(args.distinct, args.size)
    methods = {"before: list + imageio writer": write_before, "after: Mp4Stream": write_after}
    times: dict[str, list[float]] = {name: [] for name in methods}
    peaks: dict[str, list[float]] = {name: [] for name in methods}
    sizes: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as scratch:
        for round_ in range(args.rounds):
            for name, method in methods.items():
                path = Path(scratch) / f"{round_}-{len(times[name])}-{name.split(':')[0]}.mp4"
                seconds, peak = measure(method, path, source, args.frames)
                times[name].append(seconds)
                peaks[name].append(peak)
                sizes[name] = path.stat().st_size
    rows = {name: {"seconds": times[name], "median_seconds": statistics.median(times[name]),
                   "peak_mib": statistics.median(peaks[name]), "file_bytes": sizes[name]} for name in methods}
    frame_mib = args.size * args.size * 3 / 2**20
    print(f"{args.frames} frames of {args.size} x {args.size} RGB ({frame_mib:.3f} MiB each), {args.rounds} rounds")
    print(f"{'method':32} {'median s':>9} {'peak MiB':>9} {'file kB':>9}")
    for name, row in rows.items():
        print(f"{name:32} {row['median_seconds']:9.2f} {row['peak_mib']:9.1f} {row['file_bytes'] / 1e3:9.1f}")
    before, after = rows["before: list + imageio writer"], rows["after: Mp4Stream"]
    ratio = after["median_seconds"] / before["median_seconds"]
    print(f"time after / before: {ratio:.2f}")
    write_results("video_write.json", {"machine": machine(), "frames": args.frames, "size": args.size,
                                  "distinct_frames": args.distinct, "rounds": args.rounds, "methods": rows,
                                  "time_ratio_after_over_before": ratio})


if __name__ == "__main__":
    main()
