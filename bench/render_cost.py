"""Render cost per frame before and after the floor-following renderer (``genpol.envs.rendering``).

Before: what genpol rendered with until this change: gymnasium's own viewer on the ``track`` camera
with shadows and reflections off (gym), ``physics.render`` on camera 0 with dm_control's defaults,
shadows and reflections on (dm_control). After: ``FloorFollowingRenderer``, also without the floor
edit (``follow_floor=False``) to separate its cost from that of the renderer. The methods take turns
in every round on the same state, and each reports its median over rounds (the machine is shared).
Two states: the reset pose (floor in view for all) and the root moved 150 m along x (past the drawn
floor: "before" then draws sky only).

    python bench/render_cost.py [--size 256] [--frames 30] [--rounds 5]

Writes ``bench/results/render_cost.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

os.environ.setdefault("MUJOCO_GL", "egl")  # before mujoco loads: it picks its GL backend on import

import mujoco  # noqa: E402
import numpy as np  # noqa: E402

from common import machine, write_results  # noqa: E402


def gym_methods(size: int):
    import gymnasium as gym

    from genpol.envs.rendering import FloorFollowingRenderer

    env = gym.make("HalfCheetah-v5", render_mode="rgb_array", width=size, height=size).unwrapped
    env.reset(seed=0)
    env.mujoco_renderer.camera_id = mujoco.mj_name2id(env.model, mujoco.mjtObj.mjOBJ_CAMERA, "track")
    viewer = env.mujoco_renderer._get_viewer("rgb_array")
    viewer.scn.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = False
    viewer.scn.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = False
    after = FloorFollowingRenderer(env.model, size, size, camera="track")
    plain = FloorFollowingRenderer(env.model, size, size, camera="track", follow_floor=False)

    def before() -> np.ndarray:
        viewer.make_context_current()  # two GL contexts live in this process
        return np.ascontiguousarray(env.render())

    methods = {"before (gymnasium viewer)": before, "after (floor following)": lambda: after.render(env.data),
               "after without the floor edit": lambda: plain.render(env.data)}
    return methods, env.model, env.data, (after, plain)


def dmc_methods(size: int):
    from dm_control import suite

    from genpol.envs.rendering import FloorFollowingRenderer

    env = suite.load("cheetah", "run", task_kwargs={"random": 0})
    env.reset()
    physics = env.physics
    model, data = physics.model.ptr, physics.data.ptr
    after = FloorFollowingRenderer(model, size, size, camera=0)
    plain = FloorFollowingRenderer(model, size, size, camera=0, follow_floor=False)
    methods = {"before (physics.render, shadows on)": lambda: physics.render(size, size, camera_id=0),
               "after (floor following)": lambda: after.render(data),
               "after without the floor edit": lambda: plain.render(data)}
    return methods, model, data, (after, plain)


def measure(methods: dict, model, data, frames: int, rounds: int) -> dict[str, dict[str, float]]:
    results: dict[str, dict[str, float]] = {}
    start = data.qpos.copy()
    for state, offset in (("reset pose", 0.0), ("150 m along x", 150.0)):
        data.qpos[:] = start
        data.qpos[0] += offset
        mujoco.mj_forward(model, data)
        times: dict[str, list[float]] = {name: [] for name in methods}
        for name, render in methods.items():  # warm-up: contexts, textures
            render()
        for _ in range(rounds):
            for name, render in methods.items():
                begin = time.perf_counter()
                for _ in range(frames):
                    render()
                times[name].append((time.perf_counter() - begin) / frames * 1e3)
        results[state] = {name: round(statistics.median(values), 2) for name, values in times.items()}
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=256, help="frame width and height in pixels")
    parser.add_argument("--frames", type=int, default=30, help="frames per method per round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds (median reported)")
    args = parser.parse_args()
    report = {"size": args.size, "frames": args.frames, "rounds": args.rounds, "cpus": machine()["cores"],
              "load_average_before": [round(x, 1) for x in os.getloadavg()], "ms_per_frame": {}}
    for task, build in (("gym:HalfCheetah-v5", gym_methods), ("dmc:cheetah-run", dmc_methods)):
        methods, model, data, renderers = build(args.size)
        report["ms_per_frame"][task] = measure(methods, model, data, args.frames, args.rounds)
        for renderer in renderers:
            renderer.close()
        print(task, json.dumps(report["ms_per_frame"][task], indent=2), flush=True)
    report["load_average_after"] = [round(x, 1) for x in os.getloadavg()]
    path = write_results("render_cost.json", report)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
