"""Make offline datasets by rolling out a policy in the real simulator.

No D4RL or Minari server is reachable from these machines, so genpol makes its own datasets in
the same formats: roll out a trained checkpoint (a PPO run stopped at "medium" level, say) or a
uniform-random policy, and write a D4RL HDF5 file and/or a local Minari dataset.

    python -m genpol.data.collect --policy runs/hopper --env gym:Hopper-v5 --steps 100000 \\
        --d4rl data/hopper_medium-v5.hdf5 --minari genpol/hopper/medium-v0 --minari-root data/minari

Your own env: the policy's checkpoint names the modules to import; with ``--policy random`` use the
``gym:<module>:<id>`` / ``custom:<module>:<factory>`` ids or ``--import <module>``.

Observations and actions are stored raw (env units). Actions are sampled from the policy
(``--deterministic`` for its mean), as D4RL's datasets were. Only complete episodes go into the
Minari dataset; the D4RL file ends with one cut episode (no flag), as D4RL's files do. An env that
declares no time limit may never end an episode, so collection would never end: its episodes are cut
(flagged as truncations) every ``STEPS_WITHOUT_TIME_LIMIT`` steps, with a warning.

Ctrl-C (SIGINT) or SIGTERM stops the rollout after the current env step and writes the episodes complete by
then (the D4RL file also env 0's cut one), then exits 4 as a stopped training does: a collection of hours is
not lost, and ``collect && train`` does not go on with less data than asked.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np
import torch

from genpol import envs
from genpol.data.d4rl import write_d4rl
from genpol.data.minari_io import minari_dataset_path, write_minari
from genpol.data.scores import D4RL_REFERENCE, d4rl_env_name, d4rl_normalized_score
from genpol.errors import CheckpointError, ConfigError, DatasetError, require_seed
from genpol.memory import require_memory
from genpol.policy import STEPS_WITHOUT_TIME_LIMIT
from genpol.runners.guards import STOP, stop_on_signals

log = logging.getLogger(__name__)


def collect_episodes(env_id: str, policy_path: str, steps: int, num_envs: int = 8, seed: int = 0,
                     deterministic: bool = False, env_kwargs: dict[str, Any] | None = None,
                     imports: Sequence[str] = ()
                     ) -> tuple[list[dict[str, np.ndarray]], dict[str, np.ndarray] | None, Any, str | None]:
    """Roll out until ``steps`` transitions are in complete episodes, in the env the policy was
    trained on (its gymnasium kwargs, time limit and the user's modules it imports; ``env_kwargs``
    and ``imports`` add to them), or until SIGINT or SIGTERM stops it after the current env step.

    Returns ``(complete episodes, env 0's unfinished episode or None, the raw env, the name of the signal that
    stopped it or None)``; each episode has ``observations [T + 1, D]``, ``actions [T, A]``, ``rewards``,
    ``terminations``, ``truncations``.
    """
    policy = None
    max_episode_steps = None
    if policy_path != "random":
        from genpol.policy import TrainedPolicy

        policy = TrainedPolicy.load(policy_path)
        spec = policy.spec["env"]
        if policy.env_id != env_id:
            raise ValueError(f"{policy_path} was trained on {policy.env_id}, not {env_id}")
        if spec.get("action_chunk", 1) != 1:
            raise ValueError(f"{policy_path} acts in chunks of {spec['action_chunk']} actions; collection records "
                             "single actions, so use a policy with act_steps=1")
        env_kwargs, max_episode_steps = {**spec["kwargs"], **(env_kwargs or {})}, spec["max_episode_steps"]
        imports = [*policy.imports, *imports]
    env = envs.make(env_id, num_envs=num_envs, seed=seed, rescale_actions=False, env_kwargs=env_kwargs,
                    max_episode_steps=max_episode_steps, imports=imports)
    if policy is None:
        generator = torch.Generator().manual_seed(seed)
        low, high = env.action_low, env.action_high

        def act(obs: torch.Tensor) -> torch.Tensor:
            return low + torch.rand(obs.shape[0], env.act_dim, generator=generator) * (high - low)
    else:
        torch.manual_seed(seed)

        def act(obs: torch.Tensor) -> torch.Tensor:
            return torch.as_tensor(policy.predict(obs, deterministic=deterministic), dtype=torch.float32)

    cut_at = None
    if getattr(env, "max_episode_steps", None) is None:
        cut_at = STEPS_WITHOUT_TIME_LIMIT
        log.warning("%s declares no time limit (max_episode_steps is None): episodes are cut every %d steps "
                    "and flagged as truncated", env_id, cut_at)
    try:  # refused before the rollout, not after its hours
        require_memory("--steps", steps, collection_bytes(steps, num_envs, cut_at or env.max_episode_steps,
                                                          env.obs_dim, env.act_dim),
                       "cpu", "the collected episodes and their D4RL or Minari copy")
    except ConfigError:
        env.close()
        raise
    obs = env.reset()
    current = [{"observations": [obs[i].numpy()], "actions": [], "rewards": [], "terminations": [],
                "truncations": []} for i in range(num_envs)]
    complete: list[dict[str, np.ndarray]] = []
    stored = 0
    # a signal stops the rollout between env steps, keeping the complete episodes (Ctrl-C lost hours of them)
    with torch.no_grad(), stop_on_signals():
        while stored < steps and STOP.signal_name is None:
            action = act(obs)
            obs, reward, terminated, truncated, info = env.step(action)
            for i in range(num_envs):
                episode = current[i]
                env_ended = bool(terminated[i] or truncated[i])
                cut = not env_ended and cut_at is not None and len(episode["actions"]) + 1 >= cut_at
                ended = env_ended or cut  # a cut episode's successor starts where it stopped (no reset)
                episode["actions"].append(action[i].numpy())
                episode["rewards"].append(float(reward[i]))
                episode["terminations"].append(bool(terminated[i]))
                episode["truncations"].append(bool(truncated[i]) or cut)
                episode["observations"].append((info["final_obs"][i] if env_ended else obs[i]).numpy())
                if ended:
                    complete.append({key: np.asarray(value) for key, value in episode.items()})
                    stored += len(episode["actions"])
                    current[i] = {"observations": [obs[i].numpy()], "actions": [], "rewards": [],
                                  "terminations": [], "truncations": []}
        stopped_by = STOP.signal_name
    unfinished = current[0] if current[0]["actions"] else None
    return (complete, None if unfinished is None else {k: np.asarray(v) for k, v in unfinished.items()}, env,
            stopped_by)


def collection_bytes(steps: int, num_envs: int, episode_steps: int, obs_dim: int, act_dim: int) -> int:
    """Bytes a collection of ``steps`` transitions holds at its peak: the complete episodes (float32 observations
    and actions, float64 rewards, two flags) beside the flat copy the writer makes of them (observations twice,
    as D4RL's next_observations), over ``steps`` plus what ``num_envs`` episodes in progress may add (collection
    stops once ``steps`` transitions are in complete episodes, each at most ``episode_steps`` long)."""
    rows = steps + num_envs * episode_steps
    return rows * ((3 * obs_dim + 2 * act_dim) * 4 + 2 * 8 + 4)


def to_d4rl_arrays(episodes: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Concatenate episodes into D4RL's flat arrays (``timeouts`` = truncations)."""
    return {
        "observations": np.concatenate([ep["observations"][:-1] for ep in episodes]),
        "next_observations": np.concatenate([ep["observations"][1:] for ep in episodes]),
        "actions": np.concatenate([ep["actions"] for ep in episodes]),
        "rewards": np.concatenate([ep["rewards"] for ep in episodes]),
        "terminals": np.concatenate([ep["terminations"] for ep in episodes]),
        "timeouts": np.concatenate([ep["truncations"] for ep in episodes]),
    }


@contextlib.contextmanager
def checked_outputs(parser: argparse.ArgumentParser, d4rl: str | None, minari: str | None,
                    minari_root: str | None) -> Iterator[None]:
    """Exit 2 before collecting, not after (the collection would be lost), for an output that cannot be written:
    an existing D4RL file or Minari dataset (runs may resume from it, and genpol refuses to resume onto changed
    data, so overwriting it would strand them) or a malformed Minari id; then run the block (the collection).

    The output folders are made here, to try writing in them: those this made and the block left empty (a
    refused start, an interrupted collection) are removed when it raises, innermost first."""
    made: list[Path] = []
    try:
        if d4rl and Path(d4rl).exists():
            parser.exit(2, f"genpol: {d4rl} already exists; choose another path, or delete it first\n")
        for flag, folder in (("--d4rl", Path(d4rl).parent if d4rl else None), ("--minari-root", minari_root)):
            if folder is None:
                continue
            folder = Path(os.path.abspath(folder))  # ".." resolved: ghost/../keep is keep, which exists
            made += [path for path in (*reversed(folder.parents), folder) if not path.exists() and path not in made]
            try:  # a folder that cannot be made or written (a file in the path, no permission) failed after collecting
                folder.mkdir(parents=True, exist_ok=True)
                tempfile.TemporaryFile(dir=folder).close()
            except OSError as error:
                parser.exit(2, f"genpol: {flag}: cannot write in {folder} ({type(error).__name__}: "
                               f"{error.strerror})\n")
        if minari:
            try:
                path = minari_dataset_path(minari, minari_root)
            except DatasetError as error:
                parser.exit(2, f"genpol: --minari: {error}\n")
            if path.exists():
                parser.exit(2, f"genpol: the Minari dataset {minari} already exists at {path}; choose another id, "
                               "or delete it first\n")
        yield
    except BaseException:
        for folder in reversed(made):
            try:
                folder.rmdir()
            except OSError:  # not empty (something was written there), or already gone
                pass
        raise


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", required=True, help="a run or checkpoint directory, or 'random'")
    parser.add_argument("--env", required=True, help="env id, e.g. gym:Hopper-v5")
    parser.add_argument("--steps", type=int, default=100_000, help="transitions in complete episodes")
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0,
                        help="env i starts from seed + i: collections meant to be disjoint take seeds --num-envs apart")
    parser.add_argument("--deterministic", action="store_true", help="the policy's mean action")
    parser.add_argument("--d4rl", help="write a D4RL HDF5 file here")
    parser.add_argument("--minari", help="write a Minari dataset with this id (e.g. genpol/hopper/medium-v0)")
    parser.add_argument("--minari-root", help="Minari datasets root (default: $MINARI_DATASETS_PATH)")
    parser.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                        help="a module of yours to import before the env is built (repeatable; a policy's own "
                             "are imported anyway)")
    args = parser.parse_args(argv)
    if not (args.d4rl or args.minari):
        parser.error("give --d4rl and/or --minari")
    if args.steps < 1 or args.num_envs < 1:
        parser.error(f"--steps ({args.steps}) and --num-envs ({args.num_envs}) must be >= 1")
    try:  # gymnasium's or EnvPool's traceback, after the policy had loaded
        require_seed("--seed", args.seed)
    except ConfigError as error:
        parser.error(str(error))
    with checked_outputs(parser, args.d4rl, args.minari, args.minari_root):
        return collect_and_write(parser, args)


def collect_and_write(parser: argparse.ArgumentParser, args: argparse.Namespace) -> dict[str, Any]:
    """Collect ``args.steps`` transitions and write them to the D4RL file and/or Minari dataset ``args`` names."""
    try:
        episodes, unfinished, env, stopped_by = collect_episodes(
            args.env, args.policy, args.steps, args.num_envs, args.seed, args.deterministic, imports=args.imports)
    except (envs.EnvError, CheckpointError, ConfigError, ValueError) as error:  # a bad --env, --policy or pairing
        parser.exit(2, f"genpol: {type(error).__name__}: {error}\n")
    if stopped_by is not None and not episodes:
        env.close()
        parser.exit(4, f"genpol: {stopped_by} received before the first episode ended: nothing written\n")
    returns = np.array([ep["rewards"].sum() for ep in episodes])
    name = d4rl_env_name(args.env)
    report: dict[str, Any] = {"env": args.env, "policy": args.policy, "episodes": len(episodes),
                              "steps": int(sum(len(ep["actions"]) for ep in episodes)),
                              "return_mean": float(returns.mean()), "return_std": float(returns.std())}
    if name is not None:
        report["d4rl_normalized_score"] = float(d4rl_normalized_score(name, returns.mean()))
    if args.d4rl:
        arrays = to_d4rl_arrays(episodes + ([unfinished] if unfinished is not None else []))
        if unfinished is not None:  # D4RL's files end with a cut episode: no flag on its last step
            arrays["timeouts"][-1] = arrays["terminals"][-1] = False
        write_d4rl(args.d4rl, **arrays, metadata={"algorithm": f"genpol policy {args.policy}",
                                                   "env": args.env})
        report["d4rl_file"] = args.d4rl
    if args.minari:
        import gymnasium as gym

        inner = env
        while isinstance(inner, envs.VectorEnvWrapper):
            inner = inner.env
        obs_space = gym.spaces.Box(-np.inf, np.inf, (env.obs_dim,), np.float64)
        act_space = gym.spaces.Box(inner.action_low.numpy(), inner.action_high.numpy(), dtype=np.float32)
        reference = D4RL_REFERENCE.get(name or "", (None, None))
        path = write_minari(args.minari, episodes, obs_space, act_space, root=args.minari_root,
                            ref_min_score=reference[0], ref_max_score=reference[1],
                            algorithm_name=f"genpol policy {args.policy}", description=f"{args.env} rollouts",
                            env_id=args.env)
        report["minari_dataset"] = str(path)
    env.close()
    print(json.dumps(report, indent=2))
    if stopped_by is not None:  # written, but short of --steps: exit 4 as a stopped training does
        parser.exit(4, f"genpol: {stopped_by} received: wrote the {report['episodes']} episodes complete by then, "
                       f"{report['steps']} of the {args.steps} transitions asked\n")
    return report


if __name__ == "__main__":
    main()
