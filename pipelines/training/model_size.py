"""The ladder of model sizes that `model.preset: auto` chooses from (pipelines/training/
size_choice.py), each named LAYERSxD_MODEL: encoder and decoder layers and model width, with
d_ff = 4 d_model and 4 heads (the `small` preset's proportions), so that a smaller size trains
more tokens in the same time; and the record of the size chosen for a run
(checkpoints/model_size.json)."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from pipelines import InputError
from pipelines.files import atomic_open
from pipelines.paths import MODEL_RECORD

AUTO_PRESET = "small"  # the preset whose other fields (dropout, label smoothing...) auto keeps
SIZE_FIELDS = ("num_encoder_layers", "num_decoder_layers", "d_model", "d_ff", "num_heads")
SIZE_LADDER: dict[str, dict[str, Any]] = {
    name: dict(zip(SIZE_FIELDS, (layers, layers, width, 4 * width, 4)))
    for name, layers, width in (("2x128", 2, 128), ("3x192", 3, 192), ("3x256", 3, 256))
}
SIZE_RECORD = "model_size.json"


def largest_size() -> str:
    """The ladder's largest size: what `auto` stands for in the checks made before train
    chooses."""
    return list(SIZE_LADDER)[-1]


@dataclasses.dataclass(frozen=True)
class SizeChoice:
    """The chosen size, and what it was chosen from."""

    size: str
    reason: str
    probed: dict[str, dict[str, float]]  # size -> {"tokens_per_second", "parameters"}

    def save(self, directory: Path) -> None:
        """Writes directory/model_size.json whole (a temporary file renamed into place)."""
        with atomic_open(directory / SIZE_RECORD, "w") as file:
            json.dump(dataclasses.asdict(self), file, indent=2)
            file.write("\n")

    @classmethod
    def load(cls, directory: Path) -> SizeChoice | None:
        """The recorded choice, None if train has not chosen yet."""
        path = directory / SIZE_RECORD
        if not path.is_file():
            return None
        try:
            choice = cls(**json.loads(path.read_text()))
        except (ValueError, TypeError) as error:
            raise InputError(f"{path}: not a size choice ({error}); delete it to choose "
                             f"again") from None
        if choice.size not in SIZE_LADDER:
            raise InputError(f"{path}: unknown size {choice.size!r} (known: "
                             f"{', '.join(SIZE_LADDER)})")
        return choice


def recorded_size(directory: Path) -> str | None:
    """The size of a run's checkpoints in `directory`: the one `auto` chose
    (model_size.json), else the ladder size that their model.json describes (a run trained
    with an explicit preset before its config said `auto`); None when neither says."""
    choice = SizeChoice.load(directory)
    if choice is not None:
        return choice.size
    try:
        trained = json.loads((directory / MODEL_RECORD).read_text())
    except (OSError, ValueError):
        return None
    return next((size for size, fields in SIZE_LADDER.items()
                 if all(trained.get(name) == value for name, value in fields.items())), None)
