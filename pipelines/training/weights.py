"""Which weights a stage reads (`evaluate.weights`): the averaged checkpoint, the moving
average, the best validation's checkpoint or the latest training checkpoint."""
from __future__ import annotations

from pipelines import InputError
from pipelines.paths import RunPaths
from pipelines.training.best_checkpoints import best_checkpoint
from pipelines.training.checkpoint_files import training_checkpoints

WEIGHTS = ("averaged", "ema", "best", "latest")


def weights_checkpoint(paths: RunPaths, weights: str = "averaged") -> str:
    """The checkpoint prefix of `weights`: "averaged" (the latest training checkpoint while
    `average` has not run), "ema", "best" or "latest".

    Raises:
        InputError: the run has no such checkpoint.
    """
    if weights == "ema":
        if not paths.ema_index.exists():
            raise InputError(f"{paths.ema}: no moving average of the weights; train with "
                             f"train.ema_decay (e.g. 0.999), or choose other evaluate.weights")
        return str(paths.ema)
    if weights == "best":
        return best_checkpoint(paths)
    if weights == "averaged" and paths.averaged_index.exists():
        return str(paths.averaged)
    checkpoints = training_checkpoints(paths)
    if not checkpoints:
        raise InputError(f"{paths.checkpoints}: no checkpoint; run `keras-transformer train` "
                         f"first")
    return checkpoints[-1]

