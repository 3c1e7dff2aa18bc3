"""Ding & Jin's Consistency-AC offline then online (quantumiracle/Consistency_Model_For_Reinforcement_Learning
cdeae87), as their ``scripts/offline2online.slurm`` chains it: their ``offline.py`` run saves its model, and
their ``online.py`` starts from it with ``--load_model <that run's directory> --load_id offline``. Their
consistency lines of that script (commented out there, beside the diffusion ones it runs) pass ``--env_name
hopper-medium-v2 --model consistency --num_envs 3 --load_id offline`` and nothing else, so the online phase
runs at ``online.py``'s defaults and its Hopper row: lr 1e-5, clip 9, T 5, no ``--lr_decay``, epsilon 1 to 0.01
over the first 10 % of the run, a fresh replay of online transitions only.

The two phases are this directory's two harnesses, run one after the other as child processes (each with the
same ``--seed``), nothing of theirs copied:

1. ``offline/``: ``run_reference_consistency_ac_offline.py --save-models`` (their ``train_agent`` unmodified,
   ``--offline-steps`` gradient steps in one ``train`` call, their hopper-medium-v2 row with ``--lr_decay``), whose
   ``--save_best_model`` files include ``actor_offline.pth`` and ``critic_offline.pth`` (with one call, the model
   after the last step);
2. here: ``run_reference_consistency_ac.py --load-model offline --load-id offline`` (their ``online.py`` loop
   written out around their ``OnlineAgent``, which loads only the actor and critic state dicts: its critic
   target and EMA actor, copied from the fresh networks in its constructor, keep their initial weights, and its
   optimizers and step count start anew), ``--steps`` env steps.

Writes the online harness's files here (``episodes.jsonl``, ``evals.jsonl``, ``learner.jsonl``,
``reference_run.json``) and the offline harness's under ``offline/``; ``reference_run.json`` gains
``offline`` (the offline run's ``reference_run.json``) and ``offline_final_eval`` (its last ``evals.jsonl``
row: 10 episodes after the offline phase).

    OMP_NUM_THREADS=1 .venv/bin/python bench/run_reference_consistency_ac_o2o.py \\
        --ref /tmp/ref/quantumiracle+Consistency_Model_For_Reinforcement_Learning \\
        --dataset data/hopper_medium-v5.hdf5 --offline-steps 20000 --steps 150000 --seed 1
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
LOAD_ID = "offline"  # their offline2online.slurm's --load_id for the consistency runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ref", type=Path, required=True,
                        help="a snapshot of quantumiracle/Consistency_Model_For_Reinforcement_Learning")
    parser.add_argument("--dataset", type=Path, required=True, help="a D4RL-format hdf5 file of Hopper transitions")
    parser.add_argument("--offline-steps", type=int, default=20_000, help="gradient steps of the offline phase")
    parser.add_argument("--steps", type=int, required=True, help="env steps of the online phase")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    ref, dataset = str(args.ref.resolve()), str(args.dataset.resolve())
    offline_dir = Path("offline").resolve()
    offline_dir.mkdir(exist_ok=True)
    subprocess.run([sys.executable, str(HERE / "run_reference_consistency_ac_offline.py"), "--ref", ref,
                    "--dataset", dataset, "--steps", str(args.offline_steps), "--seed", str(args.seed),
                    "--save-models"], cwd=offline_dir, check=True)
    for network in ("actor", "critic"):
        if not (offline_dir / f"{network}_{LOAD_ID}.pth").exists():
            raise SystemExit(f"{offline_dir}: their offline run wrote no {network}_{LOAD_ID}.pth")
    subprocess.run([sys.executable, str(HERE / "run_reference_consistency_ac.py"), "--ref", ref,
                    "--steps", str(args.steps), "--seed", str(args.seed), "--load-model", str(offline_dir),
                    "--load-id", LOAD_ID], check=True)
    online = json.loads(Path("reference_run.json").read_text())
    offline_evals = (offline_dir / "evals.jsonl").read_text().splitlines()
    online.update(offline=json.loads((offline_dir / "reference_run.json").read_text()),
                  offline_final_eval=json.loads(offline_evals[-1]) if offline_evals else None)
    Path("reference_run.json").write_text(json.dumps(online, indent=2))


if __name__ == "__main__":
    main()
