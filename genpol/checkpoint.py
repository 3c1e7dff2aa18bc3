"""Checkpoints: atomic directories that load with ``torch.load(weights_only=True)``.

Layout of ``<run_dir>/checkpoints/step_<env steps>/``::

    policy/policy.json         head spec, env spec, observation-normalization settings
    policy/weights.pt          head weights and observation-normalizer statistics
    training_state/state.pt    critic, optimizer, RNG states, counters, env state, callback state
    manifest.json              size and sha256 of each file above

``policy/`` holds all that evaluation needs and nothing else. A checkpoint is written under a
temporary name and renamed into place, so a crash never leaves a half checkpoint; the manifest
catches damage that still unpickles (a flipped byte in a tensor).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch

from genpol.errors import CheckpointError
from genpol.files import fsync_path
from genpol.memory import human_bytes

PREFIX = "step_"
POLICY_JSON = "policy/policy.json"
POLICY_WEIGHTS = "policy/weights.pt"
TRAINING_STATE = "training_state/state.pt"
MANIFEST = "manifest.json"


def random_states() -> dict[str, Any]:
    """torch's global generators, for a training state: the CPU's, and where CUDA is in use every CUDA device's
    (``cuda_rng``; the heads draw their noise on the training device, ``torch.randn(..., device=obs.device)``,
    so a GPU run that saved the CPU's alone resumed on other noise than the uninterrupted run, marked exact)."""
    states: dict[str, Any] = {"torch_rng": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():  # a CPU run on a GPU machine leaves CUDA alone
        states["cuda_rng"] = torch.cuda.get_rng_state_all()
    return states


def restore_random_states(state: dict[str, Any]) -> None:
    """Set the generators ``random_states`` saved into ``state`` (a CUDA state only where CUDA is here, each
    device's own; a machine with fewer devices than the saving one sets those it has)."""
    torch.set_rng_state(state["torch_rng"])
    cuda_states = state.get("cuda_rng")
    if cuda_states is not None and torch.cuda.is_available():
        for index, cuda_state in enumerate(cuda_states[:torch.cuda.device_count()]):
            torch.cuda.set_rng_state(cuda_state, index)


def file_sha256(path: Path) -> str:
    """Hex sha256 of a file, read in 1 MiB blocks (the manifest's; also how the benchmarks name a dataset)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _write_files(tmp: Path, policy_spec: dict[str, Any], policy_weights: dict[str, Any],
                 training_state: dict[str, Any]) -> None:
    """The checkpoint's files and manifest under the temporary name ``tmp``, fsynced."""
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "policy").mkdir(parents=True)
    (tmp / "training_state").mkdir()
    (tmp / POLICY_JSON).write_text(json.dumps(policy_spec, indent=2, sort_keys=True))
    torch.save(policy_weights, tmp / POLICY_WEIGHTS)
    torch.save(training_state, tmp / TRAINING_STATE)
    files = [POLICY_JSON, POLICY_WEIGHTS, TRAINING_STATE]
    manifest = {name: {"bytes": (tmp / name).stat().st_size, "sha256": file_sha256(tmp / name)} for name in files}
    (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2))
    for name in [*files, MANIFEST]:
        fsync_path(tmp / name)
    for directory in (tmp / "policy", tmp / "training_state", tmp):
        fsync_path(directory)


def replay_growth_bytes(tree: Any) -> int:
    """Bytes the replay buffers in a training state (``ReplayBuffer.state_dict``: rows of ``size``, of a
    ``capacity``) add to a checkpoint by the time they are full: their saved rows' bytes per row times the
    rows still empty. 0 for a state without one, or with an empty one (nothing to measure a row by)."""
    if isinstance(tree, dict):
        size, capacity = tree.get("size"), tree.get("capacity")
        if isinstance(size, int) and isinstance(capacity, int) and 0 < size < capacity:
            row_bytes = sum(value.nelement() * value.element_size() for key, value in tree.items()
                            if key != "generator" and isinstance(value, torch.Tensor) and value.ndim
                            and value.shape[0] == size) // size
            return row_bytes * (capacity - size)
        return sum(replay_growth_bytes(value) for value in tree.values())
    if isinstance(tree, (list, tuple)):
        return sum(replay_growth_bytes(value) for value in tree)
    return 0


def tensor_bytes(tree: Any) -> int:
    """Bytes of the tensors in a nested dict / list / tuple (what ``torch.save`` writes, less its framing)."""
    if isinstance(tree, torch.Tensor):
        return tree.nelement() * tree.element_size()
    if isinstance(tree, dict):
        return sum(tensor_bytes(value) for value in tree.values())
    if isinstance(tree, (list, tuple)):
        return sum(tensor_bytes(value) for value in tree)
    return 0


def save_checkpoint(
    checkpoints_dir: str | Path,
    step: int,
    policy_spec: dict[str, Any],
    policy_weights: dict[str, Any],
    training_state: dict[str, Any],
    keep: int | None = None,
) -> Path:
    """Write ``step_<step>`` atomically; keep only the ``keep`` newest checkpoints (None: all)."""
    checkpoints_dir = Path(checkpoints_dir)
    final = checkpoints_dir / f"{PREFIX}{step:012d}"
    tmp = checkpoints_dir / f".tmp-{final.name}-{os.getpid()}"
    checkpoints_dir.mkdir(parents=True, exist_ok=True)
    # checked before writing: the older checkpoints go only after the new one is complete, so the
    # new one needs its whole size free (replay included); a write that fails anyway is caught below
    needed = tensor_bytes(policy_weights) + tensor_bytes(training_state)
    free = shutil.disk_usage(checkpoints_dir).free
    previous = list_checkpoints(checkpoints_dir)
    intact = (f"the previous checkpoint {previous[-1]} is intact" if previous else "no earlier checkpoint exists")
    if needed > free:
        raise CheckpointError(
            f"checkpoint {final} needs about {human_bytes(needed)} and {checkpoints_dir} has {human_bytes(free)} free; "
            f"{intact}. Free disk space, or save less (learner.save_replay=false, a smaller learner.buffer_size)")
    # and the run's steady state: keep checkpoints of their full size (a replay saves its filled rows, so it
    # grows to its capacity) plus the one being written. Found at the first checkpoint, not when the disk
    # fills hours later
    if keep is not None:
        full = needed + replay_growth_bytes(training_state)
        on_disk = sum(file.stat().st_size for checkpoint in previous for file in checkpoint.rglob("*")
                      if file.is_file())
        steady = (keep + 1) * full - on_disk
        if steady > free:
            grows = " (its replay full)" if full > needed else ""
            raise CheckpointError(
                f"pipeline.keep_checkpoints={keep}: the run will hold {keep} checkpoints of about {human_bytes(full)}"
                f"{grows} and write one more beside them, {human_bytes(steady)} more than now, but {checkpoints_dir} "
                f"has {human_bytes(free)} free; {intact}. Lower pipeline.keep_checkpoints, free disk space, or save "
                "less (learner.save_replay=false, a smaller learner.buffer_size)")
    try:
        _write_files(tmp, policy_spec, policy_weights, training_state)
    # a full disk, a read-only or vanished directory (torch.save reports a failed write as a RuntimeError)
    except (OSError, RuntimeError) as error:
        shutil.rmtree(tmp, ignore_errors=True)
        previous = list_checkpoints(checkpoints_dir)
        cause = getattr(error, "strerror", None) or str(error).splitlines()[0]
        raise CheckpointError(
            f"could not write checkpoint {final} ({cause}); "
            f"{'the previous checkpoint ' + str(previous[-1]) + ' is intact' if previous else 'no earlier checkpoint exists'}"
        ) from error
    if final.exists():  # the same step saved again: move the old copy aside, never delete it first
        old = checkpoints_dir / f".old-{final.name}-{os.getpid()}"
        os.rename(final, old)
        os.rename(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(tmp, final)
    fsync_path(checkpoints_dir)
    if keep is not None:
        for old in list_checkpoints(checkpoints_dir)[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    return final


def list_checkpoints(checkpoints_dir: str | Path) -> list[Path]:
    """Complete checkpoints in ``checkpoints_dir``, oldest first (temporary directories skipped)."""
    checkpoints_dir = Path(checkpoints_dir)
    if not checkpoints_dir.is_dir():
        return []
    found = [p for p in checkpoints_dir.iterdir() if p.is_dir() and p.name.startswith(PREFIX)]
    return sorted(found, key=lambda p: p.name)


def remove_temporary(checkpoints_dir: str | Path) -> None:
    """Delete leftovers of checkpoints that a crash interrupted before their rename. A step saved again
    moves its old copy aside (``.old-<name>-<pid>``) before renaming the new one in: killed between the
    two renames, the old copy is the step's only complete checkpoint, and it is moved back."""
    checkpoints_dir = Path(checkpoints_dir)
    if not checkpoints_dir.is_dir():
        return
    for old in checkpoints_dir.glob(".old-*"):
        name = old.name[len(".old-"):].rpartition("-")[0]
        if name.startswith(PREFIX) and not (checkpoints_dir / name).exists():
            try:
                os.rename(old, checkpoints_dir / name)
            except FileNotFoundError:  # another torchrun rank moved it back first
                pass
        else:
            shutil.rmtree(old, ignore_errors=True)
    for leftover in checkpoints_dir.glob(".tmp-*"):
        shutil.rmtree(leftover, ignore_errors=True)


def verify_checkpoint(checkpoint: str | Path, files: list[str] | None = None) -> None:
    """Check that ``files`` (default: all) exist with the sizes and hashes of the manifest."""
    checkpoint = Path(checkpoint)
    if not checkpoint.is_dir():
        raise CheckpointError(f"no checkpoint directory at {checkpoint}")
    manifest_path = checkpoint / MANIFEST
    try:
        manifest = json.loads(manifest_path.read_text())
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint {checkpoint} has no {MANIFEST}; it is incomplete") from None
    except json.JSONDecodeError as error:
        raise CheckpointError(f"checkpoint manifest {manifest_path} is corrupted: {error}") from None
    for name in files or list(manifest):
        path = checkpoint / name
        if not path.is_file():
            raise CheckpointError(f"checkpoint file {path} is missing")
        expected = manifest.get(name)
        if expected is None:
            raise CheckpointError(f"checkpoint file {path} is not listed in {manifest_path}")
        size = path.stat().st_size
        if size != expected["bytes"]:
            raise CheckpointError(
                f"checkpoint file {path} is truncated or corrupted: {size} bytes, expected {expected['bytes']}"
            )
        if file_sha256(path) != expected["sha256"]:
            raise CheckpointError(f"checkpoint file {path} is corrupted: its sha256 does not match {MANIFEST}")


def _load_tensors(path: Path, map_location: str | torch.device) -> dict[str, Any]:
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except Exception as error:  # torch raises several types for damaged zip/pickle data
        raise CheckpointError(f"checkpoint file {path} could not be loaded ({type(error).__name__}: {error})") from None


def load_policy_files(checkpoint: str | Path, map_location: str | torch.device = "cpu") -> tuple[dict, dict]:
    """``(policy.json contents, weights dict)`` of a checkpoint, verified against its manifest."""
    checkpoint = Path(checkpoint)
    verify_checkpoint(checkpoint, [POLICY_JSON, POLICY_WEIGHTS])
    spec = json.loads((checkpoint / POLICY_JSON).read_text())
    return spec, _load_tensors(checkpoint / POLICY_WEIGHTS, map_location)


def load_training_state(checkpoint: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    checkpoint = Path(checkpoint)
    verify_checkpoint(checkpoint, [TRAINING_STATE])
    return _load_tensors(checkpoint / TRAINING_STATE, map_location)


def resolve_checkpoint(path: str | Path) -> Path:
    """A checkpoint directory from itself, a run directory or the run's ``checkpoints/`` (the latest one)."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"expected a run or checkpoint directory (a str or Path), got {path!r}")
    path = Path(path).expanduser()
    if not path.exists():
        raise CheckpointError(f"{path} does not exist: expected a run directory or one of its checkpoints")
    if path.is_file():  # it was told "no checkpoint in <file>: expected <file>/checkpoints/step_*"
        raise CheckpointError(f"{path} is a file: expected a run directory or one of its checkpoints")
    # a step_* folder without a manifest is an incomplete checkpoint (verify_checkpoint names it), unless it is
    # a run named so (run_dir=step_lr0.1): that one's checkpoints are below it
    if (path / MANIFEST).is_file() or (path.name.startswith(PREFIX) and not (path / "checkpoints").is_dir()):
        return path
    policy_folder = Path(POLICY_JSON).parent.name
    if (path / Path(POLICY_JSON).name).is_file():  # a checkpoint's policy/ folder: the checkpoint holds its manifest
        if path.name == policy_folder and (path.parent / MANIFEST).is_file():
            return path.parent
        raise CheckpointError(f"{path} holds a policy's files without the checkpoint around them: copy the whole "
                              f"checkpoint folder ({PREFIX}*, whose {MANIFEST} verifies them) and load that")
    if path.name == "checkpoints" and not (path / "checkpoints").exists():  # a run's checkpoints folder itself
        path = path.parent
    found = list_checkpoints(path / "checkpoints")
    if not found:
        raise CheckpointError(f"no checkpoint in {path}: expected {path / 'checkpoints'}/{PREFIX}*")
    return found[-1]


def load_latest(checkpoints_dir: str | Path, map_location: str | torch.device = "cpu"
                ) -> tuple[Path, dict[str, Any], dict[str, Any]] | None:
    """``(path, policy weights, training state)`` of the newest checkpoint that verifies, or None if
    there is none. A damaged newer checkpoint is skipped with a warning naming it, and once an earlier one
    has verified it is kept aside as ``damaged-step_*`` (rank 0 under torchrun), so the run resumes from the
    earlier one and nothing is lost. Left under its name it counted as the newest checkpoint: the resumed run's
    saves sorted below it, and ``keep_checkpoints`` pruned the checkpoint just written, and the one resumed from."""
    import warnings

    from genpol import collectives

    damaged, skipped = [], []
    for path in reversed(list_checkpoints(checkpoints_dir)):
        try:
            _, weights = load_policy_files(path, map_location=map_location)
            state = load_training_state(path, map_location="cpu")
        except CheckpointError as error:
            damaged.append(str(error))
            skipped.append(path)
            warnings.warn(f"skipping damaged checkpoint: {error}", RuntimeWarning, stacklevel=2)
            continue
        if collectives.is_main():
            for bad in skipped:
                aside = bad.with_name(f"damaged-{bad.name}")
                while aside.exists():
                    aside = aside.with_name(aside.name + "_")
                os.rename(bad, aside)
        return path, weights, state
    if damaged:
        raise CheckpointError("every checkpoint is damaged: " + "; ".join(damaged))
    return None
