"""``python -m genpol.train env=<group> policy=<group> updater=<group> seed=<int> total_steps=<int> run_dir=<path>``

Any gymnasium Box env: ``env=gym env.id=Pendulum-v1``. Sweeps: ``--multirun seed=0,1,2``.
Re-running with the same ``run_dir`` resumes from its latest checkpoint.
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
    """Dispatch to the configured pipeline; returns its summary."""
    from genpol.runners.offline_to_online import train_offline_to_online
    from genpol.runners.online import train_online

    pipelines = {"online": train_online, "offline_to_online": train_offline_to_online}
    return pipelines[cfg.pipeline.name](cfg, run_dir)


@hydra.main(version_base="1.3", config_path="../configs", config_name="config")
def main(cfg: DictConfig) -> None:
    try:
        config = validate(cfg)
        summary = run_training(config, HydraConfig.get().runtime.output_dir)
    except (ConfigError, EnvError, CheckpointError, DatasetError) as error:
        print(f"genpol: {type(error).__name__}: {error}", file=sys.stderr)
        sys.exit(2)
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
