"""``python -m genpol.train env=<group> policy=<group> updater=<group> seed=<int> total_steps=<int> run_dir=<path>``

Any gymnasium Box env: ``env=gym env.id=Pendulum-v1``. Sweeps: ``--multirun seed=0,1,2``.
Re-running with the same ``run_dir`` resumes from its latest checkpoint.

Exit codes: 0 trained (or stopped by SIGTERM / SIGINT after a checkpoint: re-run to resume);
2 a bad config, env, dataset or checkpoint, or a run_dir held by another live process;
3 NaN or inf in training (the message names the last good checkpoint).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from envs import EnvError
from genpol.checkpoint import CheckpointError
from genpol.config import ConfigError, TrainConfig, register_configs, validate
from genpol.data.dataset import DatasetError

register_configs()


def run_training(cfg: TrainConfig, run_dir: str | Path) -> dict[str, Any]:
    """Dispatch to the configured pipeline; returns its summary.

    The run holds ``run_dir``'s lock throughout (a second writer fails at once), and SIGTERM or
    SIGINT make it checkpoint at the end of the current iteration and raise ``TrainingInterrupted``.
    """
    from genpol.runners.guards import hold_run_dir, stop_on_signals
    from genpol.runners.gorl import train_gorl
    from genpol.runners.offline_to_online import train_offline_to_online
    from genpol.runners.online import train_online

    pipelines = {"online": train_online, "offline_to_online": train_offline_to_online,
                 "gorl": train_gorl}
    with hold_run_dir(run_dir), stop_on_signals():
        return pipelines[cfg.pipeline.name](cfg, run_dir)


@hydra.main(version_base="1.3", config_path="../configs", config_name="config")
def main(cfg: DictConfig) -> None:
    from genpol.runners.guards import NonFiniteError, RunDirBusyError, TrainingInterrupted

    try:
        config = validate(cfg)
        summary = run_training(config, HydraConfig.get().runtime.output_dir)
    except (ConfigError, EnvError, CheckpointError, DatasetError, RunDirBusyError) as error:
        print(f"genpol: {type(error).__name__}: {error}", file=sys.stderr)
        sys.exit(2)
    except NonFiniteError as error:
        print(f"genpol: {type(error).__name__}: {error}", file=sys.stderr)
        sys.exit(3)
    except TrainingInterrupted as error:  # checkpointed: a clean stop that the same command resumes
        print(f"genpol: {error}", file=sys.stderr)
        sys.exit(0)
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
