"""Run an author's training script (SPO's ``mujoco/main.py``, CleanRL's single-file scripts) unmodified,
from its own snapshot, under gymnasium 1.x, on one thread, and record every finished episode.

Those scripts were written for gymnasium 0.29; genpol's environment has gymnasium 1.x, whose MuJoCo
v5 tasks they are compared on. Two APIs they use changed, and this launcher restores the 0.29
behaviour around them instead of editing their files (the fidelity issue's "minimal patch for the
vector API lives in your harness"):

* **The vector env.** 0.29 resets a finished sub-env inside the same ``step`` and reports the last
  observation and info under ``infos["final_observation"]`` / ``infos["final_info"]`` (object arrays,
  ``None`` where the sub-env did not finish); 1.x defaults to resetting on the *next* step and has no
  ``final_info`` list. ``Gym029VectorEnv`` below is 0.29's ``SyncVectorEnv`` contract written out:
  step every sub-env, reset the finished ones at once, report as 0.29 did. ``AsyncVectorEnv`` (SPO's
  choice) maps to it too: results are the same (each sub-env keeps its own seed), and the comparison
  runs each side on one core, where 8 worker processes would only contend.
* **Wrapper signatures.** ``TransformObservation(env, f)`` needs the new observation space in 1.x; the
  clip these scripts apply keeps the space, so the wrapped env's is passed. ``RecordEpisodeStatistics``
  reports ``episode["r"]`` as a float in 1.x and as a 1-element array in 0.29, which SPO indexes
  (``item['episode']['r'][0]``): the final infos carry 1-element arrays again.

Every episode a sub-env finishes is appended to ``episodes.jsonl`` in the working directory as
``{"step": <env steps so far, all sub-envs>, "return": <undiscounted return>, "length": <steps>}``,
the same quantity genpol logs as ``charts/episodic_return``. ``reference_run.json`` records the wall
time of the script's run (after its imports) and the env steps taken.

    python bench/run_reference.py SCRIPT [--call FUNCTION --call-args JSON] [--threads 1] -- SCRIPT_ARGS...

``--call main --call-args '["Hopper-v5", 1, "spo"]'`` loads SCRIPT as a module and calls
``main("Hopper-v5", 1, "spo")`` (SPO's ``main.py`` runs a hard-coded task list under ``__main__``);
without ``--call`` SCRIPT runs as ``__main__`` (CleanRL). The script's folder goes first on
``sys.path`` (SPO imports its ``agent`` and ``trainer`` modules from there). Run it with the
working directory where the script may write its logs.
"""

from __future__ import annotations

import argparse
import json
import numbers
import os
import runpy
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np


class EpisodeLog:
    """Appends finished episodes to ``episodes.jsonl``; ``steps`` counts env steps over all sub-envs."""

    def __init__(self, path: Path):
        self.file = open(path, "a", buffering=1)
        self.steps = 0

    def record(self, episode: dict[str, Any]) -> None:
        self.file.write(json.dumps({"step": self.steps, "return": float(np.asarray(episode["r"]).reshape(-1)[0]),
                                    "length": int(np.asarray(episode["l"]).reshape(-1)[0])}) + "\n")


def make_gym029_vector_env(gym: Any, log: EpisodeLog) -> type:
    """``Gym029VectorEnv``: gymnasium 0.29's ``SyncVectorEnv`` contract on gymnasium 1.x (module docstring)."""

    class Gym029VectorEnv(gym.vector.VectorEnv):
        def __init__(self, env_fns: Sequence[Callable[[], Any]], **_ignored: Any):
            self.envs = [make() for make in env_fns]
            self.num_envs = len(self.envs)
            self.single_observation_space = self.envs[0].observation_space
            self.single_action_space = self.envs[0].action_space
            self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, self.num_envs)
            self.action_space = gym.vector.utils.batch_space(self.single_action_space, self.num_envs)
            self.metadata = self.envs[0].metadata

        def reset(self, *, seed: int | Sequence[int] | None = None, options: dict | None = None):
            # 0.29: an int seed seeds sub-env i with seed + i; a sequence gives each sub-env its own
            if seed is None or isinstance(seed, numbers.Integral):
                seeds = [None if seed is None else int(seed) + index for index in range(self.num_envs)]
            else:
                seeds = list(seed)
                if len(seeds) != self.num_envs:
                    raise ValueError(f"{len(seeds)} seeds for {self.num_envs} envs")
            observations = [env.reset(seed=s, options=options)[0] for env, s in zip(self.envs, seeds)]
            return np.stack(observations), {}

        def step(self, actions: np.ndarray):
            log.steps += self.num_envs  # an episode ending now ended at this count (from 1)
            observations, rewards, terminations, truncations = [], [], [], []
            final_observation = np.full(self.num_envs, None, dtype=object)
            final_info = np.full(self.num_envs, None, dtype=object)
            for index, (env, action) in enumerate(zip(self.envs, actions)):
                observation, reward, terminated, truncated, info = env.step(action)
                if terminated or truncated:
                    final_observation[index] = observation
                    if "episode" in info:
                        info = {**info, "episode": {key: np.array([value]) for key, value in info["episode"].items()}}
                        log.record(info["episode"])
                    final_info[index] = info
                    observation, _ = env.reset()
                observations.append(observation)
                rewards.append(reward)
                terminations.append(terminated)
                truncations.append(truncated)
            infos: dict[str, Any] = {}
            finished = np.array([value is not None for value in final_info])
            if finished.any():
                infos = {"final_observation": final_observation, "_final_observation": finished,
                         "final_info": final_info, "_final_info": finished}
            return (np.stack(observations), np.array(rewards, dtype=np.float64), np.array(terminations),
                    np.array(truncations), infos)

        def close(self, **_ignored: Any) -> None:
            for env in self.envs:
                env.close()

    return Gym029VectorEnv


def install_shims(log: EpisodeLog) -> None:
    """Patch gymnasium's module attributes (never the authors' files) as the module docstring says."""
    import gymnasium as gym

    vector_env = make_gym029_vector_env(gym, log)
    gym.vector.SyncVectorEnv = vector_env
    gym.vector.AsyncVectorEnv = vector_env
    transform_observation = gym.wrappers.TransformObservation

    def transform_observation_029(env: Any, func: Callable, observation_space: Any = None) -> Any:
        return transform_observation(env, func, observation_space or env.observation_space)

    gym.wrappers.TransformObservation = transform_observation_029


def main(argv: Sequence[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    script_args = argv[argv.index("--") + 1:] if "--" in argv else []
    own_args = argv[:argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("script", type=Path)
    parser.add_argument("--call", default=None, help="function of SCRIPT to call instead of running it as __main__")
    parser.add_argument("--call-args", default="[]", help="JSON list of that function's arguments")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(own_args)

    import torch

    torch.set_num_threads(args.threads)
    log = EpisodeLog(Path("episodes.jsonl"))
    install_shims(log)
    script = args.script.resolve()
    sys.path.insert(0, str(script.parent))
    sys.argv = [str(script), *script_args]
    start = time.perf_counter()
    if args.call:
        namespace = runpy.run_path(str(script), run_name="reference_script")
        namespace[args.call](*json.loads(args.call_args))
    else:
        runpy.run_path(str(script), run_name="__main__")
    wall = time.perf_counter() - start
    Path("reference_run.json").write_text(json.dumps({"wall_time_s": wall, "env_steps": log.steps,
                                                      "threads": args.threads, "pid": os.getpid()}))


if __name__ == "__main__":
    main()
