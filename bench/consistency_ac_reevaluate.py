"""Consistency-AC offline: both sides' final policies of the learning pair, evaluated again on many episodes.

The ``consistency_ac_offline`` pairs (``bench/learning_parity.py``) score each run by its final evaluation, 10
episodes on each side. On Hopper after 20k offline steps those returns are bimodal (most episodes fall at
45-60, a few walk on to 200-1000), so one long episode moves a run's mean by 40 or more and the seed-level
medians carry that noise. This script takes the final policies themselves and evaluates each on
``--episodes`` episodes, the same start states for every policy (episode i resets gymnasium's Hopper-v5
with seed 10000 + i, genpol's evaluation seed), each side acting as its own evaluation does:

* genpol (``<pair>-genpol-s<seed>`` run folders, their latest checkpoint): ``deterministic`` (what the pair's
  metric uses: for the softmax-Q policy, every step's draws from torch's generator reseeded to 0, for each
  state since 2026-12-06 and for the whole batch before, so a fixed function of the state) and
  ``stochastic`` (fresh draws every step);
* the authors (Ding & Jin's ``Consistency_QL``, built from their ``offline.py`` hyperparameters for
  ``hopper-medium-v2`` and loaded with the run's weights): their ``sample_action``, 50 actor samples and a
  ``torch.multinomial`` draw from the softmax of the target critics' minimum, fresh every step. Their weights
  come from ``final_agent.pt`` (written by ``run_reference_consistency_ac_offline.py`` since 2026-12-06: actor,
  critic and target critic), or else from the ``consistency_ac_o2o`` pair's ``offline/actor_offline.pth`` and
  ``critic_offline.pth`` (their own checkpoint of the same offline phase, which keeps the online critic only:
  the target then starts as a copy of it, as their ``online.py --load_id`` does). ``--check-target`` measures
  what that stand-in changes on the seeds that have both.

Prints the per-seed means and the sides' medians with the exact bootstrap 95 % interval of their difference,
and writes ``bench/results/consistency_ac_reevaluate.json``. ``--rows`` re-measures only some rows (say,
genpol's deterministic one after a change to how it acts) and keeps the others from that file, each row
with the date it was measured.

    python bench/consistency_ac_reevaluate.py --ref /tmp/ref/Consistency_Model_For_Reinforcement_Learning \\
        [--seeds 1 2 3 4 5] [--episodes 50] [--genpol-pair consistency_ac_offline_raw] \\
        [--rows "genpol deterministic"]
"""

from __future__ import annotations

import argparse
import copy
from pathlib import Path
from typing import Any

import numpy as np
import torch

from common import RUNS, date_stamp, machine, read_results, write_results
from learning_parity import median_difference_ci
from run_reference_consistency_ac import evaluate_episodes as their_episodes, import_their_script
from run_reference_consistency_ac_offline import THEIR_TASK

from genpol.callbacks.evaluation import EVAL_SEED  # genpol's evaluation: env i reset with 10000 + i

PARITY_RUNS = RUNS / "learning_parity"
ROWS = ("genpol deterministic", "genpol stochastic", "authors")


def genpol_returns(run_dir: Path, episodes: int, deterministic: bool) -> list[float]:
    """Episode returns of the run's latest checkpoint, env i reset with ``EVAL_SEED + i``."""
    from genpol.policy import TrainedPolicy, evaluate_episodes

    policy = TrainedPolicy.load(run_dir, device="cpu")
    env = policy.make_env(num_envs=episodes, device="cpu")
    try:
        with torch.no_grad():
            results = evaluate_episodes(env, lambda obs: policy.act(obs, deterministic=deterministic), EVAL_SEED)
    finally:
        env.close()
    return [float(value) for value in results.returns]


def their_agent(ref: Path, state_dim: int, action_dim: int) -> Any:
    """Their ``Consistency_QL`` as their ``offline.py`` ``train_agent`` builds it for ``hopper-medium-v2`` (the
    optimizer settings are unused here: the agent only acts)."""
    offline = import_their_script(ref, "offline.py")
    row = offline.consistency_hyperparameters[THEIR_TASK]
    from agents.ql_consistency import Consistency_QL  # their package, on sys.path after import_their_script

    return Consistency_QL(state_dim=state_dim, action_dim=action_dim, max_action=1.0, device="cpu", discount=0.99,
                          tau=0.005, max_q_backup=row["max_q_backup"], n_timesteps=row["T"], eta=row["eta"],
                          lr=row["lr"], lr_decay=True, lr_maxt=20, grad_norm=row["gn"], q_norm=row["q_norm"],
                          steps_per_epoch=1000, improved_CT=False)


def their_weights(seed: int, target_from_critic: bool = False) -> tuple[dict[str, Any], str] | None:
    """``(state dicts, source)`` of their final offline agent for ``seed``: the offline pair's ``final_agent.pt``,
    else the o2o pair's offline checkpoint, whose target critic is the online critic's copy (also where
    ``target_from_critic`` asks for that stand-in on a saved agent); None if the seed has neither."""
    final = PARITY_RUNS / f"consistency_ac_offline-reference-s{seed}" / "final_agent.pt"
    checkpoint = PARITY_RUNS / f"consistency_ac_o2o-reference-s{seed}" / "offline"
    if final.exists():
        state, source = torch.load(final, weights_only=True), "final_agent.pt"
    elif (checkpoint / "actor_offline.pth").exists():
        state = {"actor": torch.load(checkpoint / "actor_offline.pth", weights_only=True),
                 "critic": torch.load(checkpoint / "critic_offline.pth", weights_only=True)}
        source, target_from_critic = "the o2o pair's offline checkpoint", True
    else:
        return None
    if target_from_critic:
        state = {**state, "critic_target": copy.deepcopy(state["critic"])}
        source += ", target = critic"
    return state, source


def their_returns(agent: Any, weights: dict[str, Any], episodes: int, env_id: str = "Hopper-v5") -> list[float]:
    """Episode returns of their ``sample_action`` with ``weights`` (the harness's loop around it, networks in
    eval mode as their ``eval_policy``), episode i reset with ``EVAL_SEED + i``."""
    for name in ("actor", "critic", "critic_target"):
        getattr(agent, name).load_state_dict(weights[name])
    return their_episodes(agent, env_id, EVAL_SEED, episodes, [EVAL_SEED + i for i in range(episodes)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ref", type=Path, required=True,
                        help="a snapshot of quantumiracle/Consistency_Model_For_Reinforcement_Learning")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    parser.add_argument("--episodes", type=int, default=50)
    parser.add_argument("--genpol-pair", default="consistency_ac_offline_raw",
                        help="the learning pair whose genpol runs are evaluated")
    parser.add_argument("--check-target", action="store_true",
                        help="also evaluate their saved agents with the online critic standing in for the target")
    parser.add_argument("--rows", nargs="+", choices=ROWS, default=list(ROWS),
                        help="the rows to measure; the others are kept from the results file (same episodes)")
    args = parser.parse_args()
    torch.set_num_threads(1)

    agent = their_agent(args.ref.resolve(), state_dim=11, action_dim=3)  # Hopper-v5
    earlier = read_results("consistency_ac_reevaluate.json")
    rows: dict[str, dict[str, Any]] = {}
    if earlier.get("episodes") == args.episodes and earlier.get("genpol_pair") == args.genpol_pair:
        rows = {key: {"date": earlier["date"], **row} for key, row in earlier["runs"].items()
                if key.split("/")[0] not in args.rows and int(key.split("/")[1]) in args.seeds}
    for seed in args.seeds:
        run_dir = PARITY_RUNS / f"{args.genpol_pair}-genpol-s{seed}"
        if (run_dir / "checkpoints").is_dir():
            for mode in ("deterministic", "stochastic"):
                if f"genpol {mode}" not in args.rows:
                    continue
                torch.manual_seed(seed)  # fresh draws from torch's generator: each row reproducible on its own
                returns = genpol_returns(run_dir, args.episodes, deterministic=mode == "deterministic")
                rows[f"genpol {mode}/{seed}"] = {"returns": returns, "source": run_dir.name, "date": date_stamp()}
        found = their_weights(seed) if "authors" in args.rows else None
        if found is not None:
            torch.manual_seed(seed)  # their sample_action draws from torch's global generator
            rows[f"authors/{seed}"] = {"returns": their_returns(agent, found[0], args.episodes), "source": found[1],
                                       "date": date_stamp()}
            if args.check_target and "target = critic" not in found[1]:
                weights, source = their_weights(seed, target_from_critic=True)
                torch.manual_seed(seed)
                rows[f"authors, target = critic/{seed}"] = {"returns": their_returns(agent, weights, args.episodes),
                                                           "source": source, "date": date_stamp()}
        for key in [key for key in rows if key.endswith(f"/{seed}")]:
            rows[key]["mean"] = float(np.mean(rows[key]["returns"]))
            print(f"seed {seed}  {key.split('/')[0]:<26} mean {rows[key]['mean']:7.1f}  "
                  f"median episode {np.median(rows[key]['returns']):7.1f}  ({rows[key]['source']})", flush=True)

    sides = sorted({key.split("/")[0] for key in rows})
    summary: dict[str, Any] = {}
    for side in sides:
        means = [row["mean"] for key, row in sorted(rows.items()) if key.split("/")[0] == side]
        summary[side] = {"seeds": len(means), "median": float(np.median(means)), "means": means}
        print(f"{side:<28} median of {len(means)} seed means {np.median(means):7.1f}  {np.round(means, 1).tolist()}")
    for side in (side for side in sides if side.startswith("genpol")):
        if summary[side]["seeds"] >= 2 and summary.get("authors", {}).get("seeds", 0) >= 2:
            low, high = median_difference_ci(summary[side]["means"], summary["authors"]["means"])
            summary[f"{side} - authors"] = {"difference": summary[side]["median"] - summary["authors"]["median"],
                                            "ci95": [low, high], "parity": bool(low <= 0.0 <= high)}
            print(f"{side} - authors: {summary[side]['median'] - summary['authors']['median']:+.1f} "
                  f"({low:+.1f} to {high:+.1f})")
    payload = {"benchmark": "consistency_ac_reevaluate", "date": date_stamp(), "machine": machine(),
               "episodes": args.episodes, "eval_seed": EVAL_SEED, "genpol_pair": args.genpol_pair,
               "runs": rows, "summary": summary}
    write_results("consistency_ac_reevaluate.json", payload)


if __name__ == "__main__":
    main()
