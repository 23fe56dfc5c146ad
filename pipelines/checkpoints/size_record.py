"""The record of the model size `model.preset: auto` chose for a run
(checkpoints/model_size.json): written by train (pipelines/training/size_choice.py) before the
first update, read by a resumed train, average, evaluate and export, so that every stage builds
the same size of pipelines.config.model.SIZE_LADDER.

Example:
    >>> SizeChoice("2x128", "the budget trains 0.9 tokens a parameter", {}).save(directory)
    >>> recorded_size(directory)
    '2x128'
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from pipelines import InputError
from pipelines.config.model import SIZE_LADDER
from pipelines.files import atomic_open
from pipelines.paths import MODEL_RECORD

SIZE_RECORD = "model_size.json"


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
