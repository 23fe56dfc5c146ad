"""`model.preset: auto`: the size chosen from probed speeds, the config rules, and a tiny run
that chooses, records, trains and decodes with the chosen size."""
import dataclasses
import json
from pathlib import Path
from typing import Iterator

import pytest

from pipelines import InputError
from pipelines.checkpoints.size_record import SIZE_RECORD, SizeChoice
from pipelines.config import load_config
from pipelines.config.model import SIZE_LADDER
from pipelines.training import size_choice
from pipelines.training.size_choice import choose_size
from pipelines.yaml_dataclasses import ConfigError
from tiny_run import make_tiny_run

PARAMETERS = {"2x128": 2_500_000, "3x192": 5_000_000, "3x256": 7_600_000}


def faked_probe(tokens_per_second: dict[str, float], probed: list[str]):
    """A probe reporting the given speeds (one second of updates) and PARAMETERS."""
    def probe(size: str) -> tuple[float, float, int]:
        probed.append(size)
        return 1.0, tokens_per_second[size], PARAMETERS[size]
    return probe


@pytest.mark.parametrize("speeds, seconds, chosen, probed", [
    # A fast machine: the largest size reaches the threshold in the time left; no other is
    # probed.
    ({"2x128": 20_000, "3x192": 12_000, "3x256": 7_000}, 1000, "3x256", ["3x256"]),
    # The largest misses it: the middle size.
    ({"2x128": 20_000, "3x192": 12_000, "3x256": 1_000}, 1000, "3x192", ["3x256", "3x192"]),
    ({"2x128": 5_000, "3x192": 1_000, "3x256": 700}, 1000, "2x128",
     ["3x256", "3x192", "2x128"]),
    # Even the smallest misses it: the smallest.
    ({"2x128": 100, "3x192": 50, "3x256": 20}, 1000, "2x128", ["3x256", "3x192", "2x128"]),
])
def test_the_largest_size_with_enough_tokens_per_parameter_is_chosen(
        speeds: dict, seconds: float, chosen: str, probed: list[str]) -> None:
    calls: list[str] = []
    choice = choose_size(faked_probe(speeds, calls), lambda: seconds)
    assert choice.size == chosen and calls == probed
    assert list(choice.probed) == probed
    assert choice.probed[chosen] == {"tokens_per_second": speeds[chosen],
                                     "parameters": PARAMETERS[chosen]}
    # The reason gives each probed size's tokens per parameter: speed x time / parameters.
    for size in probed:
        per_parameter = speeds[size] * seconds / PARAMETERS[size]
        assert (f"{size} {speeds[size]:,.0f} target tokens/s x the time left / "
                f"{PARAMETERS[size]:,} parameters = {per_parameter:.2f} tokens per parameter"
                in choice.reason)
    reached = speeds[chosen] * seconds / PARAMETERS[chosen] >= size_choice.TOKENS_PER_PARAMETER
    assert choice.reason.startswith("the largest size" if reached else "the smallest size")


def write_config(tmp_path: Path, model: str, train: str = "  max_minutes: 10\n") -> Path:
    path = tmp_path / "auto.yaml"
    path.write_text("name: auto\ndata:\n  source: bible:en-fr\nmodel:\n" + model + "train:\n"
                    + train)
    return path


@pytest.mark.parametrize("model, train, key, words", [
    ("  preset: auto\n  d_model: 512\n", "  max_minutes: 10\n", "model.d_model",
     "is chosen by `preset: auto`"),
    ("  preset: auto\n", "  steps: 100\n", "model.preset", "set train.max_minutes"),
    ("  preset: auto\n", "  max_minutes: 10\n  init_from: runs/parent\n", "model.preset",
     "keeps its parent's size"),
])
def test_auto_refuses_a_size_field_no_budget_and_fine_tuning(
        tmp_path: Path, model: str, train: str, key: str, words: str) -> None:
    with pytest.raises(ConfigError) as error:
        load_config(write_config(tmp_path, model, train))
    assert key in str(error.value) and words in str(error.value)


def test_auto_keeps_the_fields_it_does_not_choose(tmp_path: Path) -> None:
    config = load_config(write_config(tmp_path, "  preset: auto\n  dropout: 0.2\n"))
    sized = config.model.sized("2x128").model_config(vocab_size=8000)
    assert (sized.d_model, sized.d_ff, sized.num_encoder_layers, sized.dropout) == (
        128, 512, 2, 0.2)


# One layer a side: the run below traces the train step three times (the probe, the training,
# the resumed run), each about half as long as with two layers.
TINY_LADDER = {
    "1x32": dict(num_encoder_layers=1, num_decoder_layers=1, d_model=32, d_ff=128, num_heads=4),
    "1x64": dict(num_encoder_layers=1, num_decoder_layers=1, d_model=64, d_ff=256, num_heads=4),
}


@pytest.fixture
def tiny_ladder(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The ladder of two tiny sizes, every size passing the threshold: auto picks 1x64, the
    first it probes. The ladder is put back in its order (monkeypatch's undo would reverse it,
    and `largest_size` is its last)."""
    ladder = dict(SIZE_LADDER)
    SIZE_LADDER.clear()
    SIZE_LADDER.update(TINY_LADDER)
    monkeypatch.setattr(size_choice, "TOKENS_PER_PARAMETER", 0.0)
    yield
    SIZE_LADDER.clear()
    SIZE_LADDER.update(ladder)


@pytest.mark.slow
def test_a_run_chooses_once_records_the_size_and_every_stage_uses_it(
        tmp_path: Path, tiny_ladder: None, monkeypatch: pytest.MonkeyPatch) -> None:
    from pipelines.average import average
    from pipelines.models import load_model_for_inference, sized_model
    from pipelines.paths import RunPaths
    from pipelines.training.train import TrainingRun

    config = load_config(make_tiny_run(tmp_path, model={"preset": "auto"},
                                       train={"steps": 4, "max_minutes": 5,
                                              "checkpoint_every_steps": 2}))
    paths = RunPaths(config.run_path)
    with pytest.raises(InputError, match=f"no size chosen yet .*{SIZE_RECORD}"):
        sized_model(config)
    summary = TrainingRun(config).run()
    assert summary.model_size == "1x64" and summary.step == 4
    assert "1x64 (model.preset auto): the largest size" in summary.format()
    record = json.loads((paths.checkpoints / SIZE_RECORD).read_text())
    assert record["size"] == "1x64" and list(record["probed"]) == ["1x64"]
    assert json.loads((paths.checkpoints / "model.json").read_text())["d_model"] == 64
    # Average and the decoding stages build the recorded size, not the ladder's largest.
    average(config)
    model, _ = load_model_for_inference(config)
    built = model.model_config
    assert (built.d_model, built.d_ff, built.num_decoder_layers) == (64, 256, 1)
    # A resumed run reads the record and probes nothing.
    monkeypatch.setattr(size_choice, "probe_sizes", pytest.fail)
    longer = dataclasses.replace(config, train=dataclasses.replace(  # a new budget: a new plan
        config.train, steps=6, max_minutes=6))
    resumed = TrainingRun(longer).run()
    assert resumed.start_step == 4 and resumed.step == 6 and resumed.model_size == "1x64"


def test_a_broken_size_record_is_named(tmp_path: Path) -> None:
    (tmp_path / SIZE_RECORD).write_text('{"size": "9x999", "reason": "", "probed": {}}')
    with pytest.raises(InputError, match=r"model_size.json: unknown size '9x999'"):
        SizeChoice.load(tmp_path)
    (tmp_path / SIZE_RECORD).write_text("{")
    with pytest.raises(InputError, match="model_size.json: not a size choice"):
        SizeChoice.load(tmp_path)


def test_checkpoints_of_an_explicit_preset_give_their_size(tmp_path: Path) -> None:
    from keras_transformer.config import ModelConfig
    from pipelines.checkpoints.records import record_model
    from pipelines.checkpoints.size_record import recorded_size

    assert recorded_size(tmp_path) is None
    record_model(tmp_path, ModelConfig.from_preset("small", vocab_size=8000))
    assert recorded_size(tmp_path) == "3x256"  # a demo run trained before `auto`
    record_model(tmp_path, ModelConfig.from_preset("base", vocab_size=8000))
    assert recorded_size(tmp_path) is None  # no size of the ladder
