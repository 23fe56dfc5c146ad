"""`keras-transformer run` end to end on a tiny slice of the demo corpus (tiny preset), and the
stage-skipping rules."""
import contextlib
import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest
import yaml

from pipelines.cli import main
import pipelines.run as run_module
from pipelines.paths import RunPaths
from pipelines.run import STAGE_NAMES, STAGES, config_values, fingerprint, run, stale_reason
from pipelines.config import (DataConfig, EvaluateConfig, ExportConfig, ModelSection,
                              PipelineConfig, TrainConfig, load_config)
from pipelines.corpus.shards import train_shards
from cli_helpers import CLI, cli_output, run_read_only

SLICE = {"train": 400, "dev": 12, "test": 12}


@pytest.fixture(scope="module")
def tiny_config(demo_run, tmp_path_factory) -> Path:
    """A `files` corpus cut from the prepared demo corpus, and a config training the tiny
    preset (one layer a side) for 12 steps."""
    root = tmp_path_factory.mktemp("tiny_run")
    splits = {}
    data = demo_run.run_dir / "data"
    [train] = train_shards(data)
    prepared = {"train": dict(zip(("src", "tgt"), train))}
    prepared |= {split: {side: data / f"{split}.{side}" for side in ("src", "tgt")}
                 for split in ("dev", "test")}
    for split, count in SLICE.items():
        for side in ("src", "tgt"):
            lines = prepared[split][side].read_text().splitlines()
            (root / f"{split}.{side}").write_text("\n".join(lines[:count]) + "\n")
        splits[split] = {"src": f"{split}.src", "tgt": f"{split}.tgt"}
    config = {
        "name": "tiny", "run_dir": str(root / "runs" / "tiny"),
        "data": {"source": "files", **splits, "vocab_size": 400, "max_length": 64},
        # One layer a side: each stage traces or converts the model (a third less CPU than the
        # tiny preset's two); the exports' parity over several layers is conftest.py's
        # multilingual_export's (two a side) and tests/test_ctranslate2.py's (three decoder).
        "model": {"preset": "tiny", "num_encoder_layers": 1, "num_decoder_layers": 1,
                  "max_length": 128, "dtype": "float32"},
        # Enough steps for every training event (3 checkpoints kept and averaged, 2
        # validations, a BLEU); the stages cost their traces, the steps little.
        "train": {"batch_tokens": 1024, "steps": 12, "warmup_steps": 6,
                  "checkpoint_every_steps": 4, "keep_checkpoints": 3, "average_last": 3,
                  "validate_every_steps": 6, "bleu_every_steps": 12, "bleu_max_sentences": 12,
                  "log_every_steps": 4},
        "evaluate": {"beam_size": 2, "splits": ["dev", "test"]},
    }
    path = root / "tiny.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


SECTIONS = {DataConfig: "data", ModelSection: "model", TrainConfig: "train",
            EvaluateConfig: "evaluate", ExportConfig: "export"}


@contextlib.contextmanager
def recording_reads() -> Iterator[dict[str, set[str]]]:
    """Records, per stage, the config fields (`section.field`) its action reads."""
    reads: dict[str, set[str]] = {stage.name: set() for stage in STAGES}
    current: list[str] = []

    def recording(section: str):
        def getattribute(self, name: str):
            if current and name in type(self).__dataclass_fields__:
                reads[current[-1]].add(f"{section}.{name}")
            return object.__getattribute__(self, name)
        return getattribute

    def during(stage):
        def action(config):
            current.append(stage.name)
            try:
                return stage.action(config)
            finally:
                current.pop()
        return dataclasses.replace(stage, action=action)

    with pytest.MonkeyPatch.context() as patch:
        for cls, section in SECTIONS.items():
            patch.setattr(cls, "__getattribute__", recording(section))
        patch.setattr(run_module, "STAGES", tuple(during(stage) for stage in STAGES))
        yield reads


@pytest.fixture(scope="module")
def first_run(tiny_config):
    """The whole pipeline, recording the config fields each stage reads."""
    config = load_config(tiny_config)
    with recording_reads() as reads:
        ran = run(config, echo=lambda text: None)
    return config, ran, reads


def test_each_stage_fingerprint_covers_the_config_it_reads(first_run):
    """A config value a stage reads but does not fingerprint would leave the stage `up to
    date` after the value changed."""
    _, _, reads = first_run
    assert all(reads.values())  # the recording saw every stage
    uncovered = {stage.name: sorted(
        key for key in reads[stage.name] if key in stage.ignores or not any(
            key == covered or key.startswith(f"{covered}.") for covered in stage.keys))
        for stage in STAGES}
    assert uncovered == {stage.name: [] for stage in STAGES}


def test_every_stage_writes_what_it_promises(first_run):
    config, ran, _ = first_run
    assert ran == list(STAGE_NAMES)
    run_path = config.run_path
    files = {"train": train_shards(run_path / "data")[0]}
    files |= {split: tuple(run_path / "data" / f"{split}.{side}" for side in ("src", "tgt"))
              for split in ("dev", "test")}
    for split, pair in files.items():
        for path in pair:
            assert len(path.read_text().splitlines()) == SLICE[split]
    assert (run_path / "vocab" / "spm.model").stat().st_size > 0
    assert (run_path / "checkpoints" / "ckpt-12.index").exists()
    assert list((run_path / "logs").rglob("events.out.tfevents.*"))
    assert json.loads((run_path / "logs" / "train_summary.json").read_text())["step"] == 12
    assert (run_path / "checkpoints" / "averaged" / "ckpt.index").exists()
    for split in ("dev", "test"):
        hypotheses = (run_path / "eval" / f"{split}.hyp").read_text().split("\n")[:-1]
        assert len(hypotheses) == SLICE[split]
        scores = json.loads((run_path / "eval" / f"{split}.json").read_text())
        assert scores["sentences"] == SLICE[split] and 0 <= scores["bleu"] <= 100
        assert "tok:13a" in scores["bleu_signature"] and scores["chrf"] >= 0
    version = run_path / "export" / "saved_model" / "1"
    assert (version / "saved_model.pb").exists()
    assert (version / "assets.extra" / "tf_serving_warmup_requests").exists()
    assert (run_path / "export" / "models.config").exists()
    for name in ("model.onnx", "translator.onnx"):
        assert (run_path / "export" / "onnx" / name).stat().st_size > 0
    assert sorted(p.stem for p in (run_path / "stages").glob("*.json")) == sorted(STAGE_NAMES)


def test_a_finished_run_read_only_skips_every_stage_and_reports_on_stdout_alone(first_run,
                                                                            tiny_config):
    """`keras-transformer run` as a user runs it (a child process, TF_CPP_MIN_LOG_LEVEL unset)
    on the finished run, read-only: every stage skipped, then the report (scores, speed, files,
    each runtime's translations, the same), and nothing on stderr (no absl or TensorFlow
    line)."""
    config, _, _ = first_run
    result = run_read_only(config.run_path, [sys.executable, "-c", CLI, "run", str(tiny_config)])
    assert (result.returncode, result.stderr) == (0, "")
    text = result.stdout.splitlines()
    assert text[:len(STAGE_NAMES)] == [f"[{name}] up to date, skipped" for name in STAGE_NAMES]
    assert text[len(STAGE_NAMES)] == f"run tiny ({config.run_path})"
    assert any(line.startswith("  test      BLEU") for line in text)
    assert any("target tokens/s" in line for line in text)
    by_runtime = {runtime: [line[12:] for line in text if line.startswith(f"  {runtime:<9} ")]
                  for runtime in ("tf", "onnx")}
    assert len(by_runtime["tf"]) == 3 and by_runtime["tf"] == by_runtime["onnx"]


def test_rerun_skips_every_stage_and_deleting_export_reruns_only_export(first_run,
                                                                        monkeypatch):
    config, _, _ = first_run
    messages = []
    assert run(config, echo=messages.append) == []
    assert messages == [f"[{name}] up to date, skipped" for name in STAGE_NAMES]
    export_dir, moved = config.run_path / "export", config.run_path / "export.moved"
    export_dir.rename(moved)
    # Exporting again is test_a_subset_of_export_formats's; here the stage puts the first
    # export back (a whole export costs a minute).
    monkeypatch.setattr(run_module, "STAGES", [
        dataclasses.replace(stage, action=lambda _: str(moved.rename(export_dir)))
        if stage.name == "export" else stage for stage in STAGES])
    assert run(config, echo=lambda text: None) == ["export"]
    assert (export_dir / "saved_model" / "1" / "saved_model.pb").exists()
    monkeypatch.undo()
    assert run(config, echo=lambda text: None) == []


def test_an_edited_corpus_file_makes_prepare_stale_whatever_its_time(first_run, tiny_config):
    config, _, _ = first_run
    prepare = next(stage for stage in STAGES if stage.name == "prepare")
    corpus = config.data.train.src
    text, times = corpus.read_bytes(), corpus.stat()
    corpus.write_bytes(text.replace(b"a", b"e", 1))
    os.utime(corpus, ns=(times.st_atime_ns, times.st_mtime_ns))  # an edit that keeps the time
    assert stale_reason(config, prepare) == f"{corpus} changed"
    corpus.write_bytes(text)
    os.utime(corpus, ns=(times.st_atime_ns, times.st_mtime_ns))
    assert stale_reason(config, prepare) is None


def test_config_change_and_newer_inputs_make_a_stage_stale(first_run, tiny_config):
    config, _, _ = first_run
    evaluate = next(stage for stage in STAGES if stage.name == "evaluate")
    assert stale_reason(config, evaluate) is None
    changed = yaml.safe_load(tiny_config.read_text())
    changed["evaluate"]["beam_size"] = 3
    path = tiny_config.with_name("changed.yaml")
    path.write_text(yaml.safe_dump(changed))
    assert stale_reason(load_config(path), evaluate) == "evaluate.beam_size changed"
    averaged = config.run_path / "checkpoints" / "averaged" / "ckpt.index"
    times = averaged.stat()
    averaged.touch()
    assert stale_reason(config, evaluate) == "inputs are newer than outputs"
    os.utime(averaged, ns=(times.st_atime_ns, times.st_mtime_ns))  # the run up to date again


@pytest.mark.parametrize("edit, expected", [
    (lambda c: c["train"].update(stpes=10), "train.stpes"),
    (lambda c: c["train"].update(steps="many"), "train.steps"),
    (lambda c: c["data"]["train"].update(src="missing.src"), "missing.src"),
])
def test_bad_config_fails_before_any_work(tiny_config, edit, expected, capsys):
    config = yaml.safe_load(tiny_config.read_text())
    config["run_dir"] = str(tiny_config.parent / "runs" / "bad")
    edit(config)
    path = tiny_config.with_name("bad.yaml")
    path.write_text(yaml.safe_dump(config))
    assert main(["run", str(path)]) == 2
    error = capsys.readouterr().err
    assert expected in error and ("bad.yaml" in error or "no such file" in error)
    assert not (tiny_config.parent / "runs" / "bad").exists()


@pytest.mark.slow
def test_config_errors_and_whether_prepare_is_stale_need_no_tensorflow(tmp_path):
    """Config checks, and `run`'s check of whether prepare is up to date (which decides whether
    the corpus files are checked), come before TensorFlow is imported, which alone takes
    seconds; imported any earlier than the CLI's quiet start-up (pipelines.startup), it prints
    absl's `WARNING: All log messages before absl::InitializeLog() ...` and its own lines."""
    parent = tmp_path / "parent"
    (parent / "vocab").mkdir(parents=True)
    (parent / "vocab" / "spm.model").write_bytes(b"a parent's vocabulary")
    (tmp_path / "train.src").write_text("a\n")
    (tmp_path / "train.tgt").write_text("b\n")
    (tmp_path / "c.yaml").write_text("name: x\ndata: {source: bible:en-fr, vocab_sise: 10}\n")
    (tmp_path / "ok.yaml").write_text(yaml.safe_dump({
        "name": "x", "run_dir": str(tmp_path / "run"), "train": {"init_from": str(parent)},
        "data": {"source": "files", "train": {"src": "train.src", "tgt": "train.tgt"}}}))
    code = f"""import json, sys
from pipelines.config import load_config
from pipelines.paths import RunPaths
from pipelines.run import STAGES, fingerprint, stale_reason
try:
    load_config({str(tmp_path / 'c.yaml')!r})
except Exception as e:
    print(type(e).__name__, e)
config = load_config({str(tmp_path / 'ok.yaml')!r})
stamp = RunPaths(config.run_path).stamp("prepare")
stamp.parent.mkdir(parents=True)
stamp.write_text(json.dumps({{"config": fingerprint(config, STAGES[0])}}))
print(stale_reason(config, STAGES[0]))
print('tensorflow' in sys.modules)
"""
    output = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True).stdout.splitlines()
    assert output[0].startswith("ConfigError") and "data.vocab_sise" in output[0]
    assert output[1:] == [f"missing {tmp_path / 'run' / 'data' / 'train.json'}", "False"]


def test_noise_is_trainings_alone_and_earlier_stamps_stay_valid(tmp_path):
    """Noise (data.noise, data.corpora[i].noise) changes train's fingerprint, never prepare's;
    without it the fingerprints are those of the version before it (no `noise` value)."""
    def config(name: str, data: dict) -> PipelineConfig:
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump({"name": "x", "data": data}))
        return load_config(path)

    prepare, train = STAGES[:2]
    for key, plain, noisy in (
            ("data.noise", {"source": "bible:en-fr"},
             {"source": "bible:en-fr", "noise": {"typos": 0.1}}),
            ("data.corpora", {"corpora": [{"name": "a", "source": "bible:en-fr"}]},
             {"corpora": [{"name": "a", "source": "bible:en-fr", "noise": {"typos": 0.1}}]})):
        before, after = config("plain", plain), config("noisy", noisy)
        assert fingerprint(before, prepare) == fingerprint(after, prepare)
        assert fingerprint(before, train) != fingerprint(after, train)
        assert "noise" not in json.dumps(config_values(before, train))
        assert "typos" in json.dumps(config_values(after, train)[key])


def variant(tiny_config: Path, name: str, edit) -> PipelineConfig:
    """The tiny config, same run directory, with `edit` applied to its YAML mapping."""
    changed = yaml.safe_load(tiny_config.read_text())
    edit(changed)
    path = tiny_config.with_name(f"{name}.yaml")
    path.write_text(yaml.safe_dump(changed))
    return load_config(path)


def test_each_stage_is_stale_only_for_the_keys_it_reads(first_run, tiny_config):
    config, _, _ = first_run
    stages = {stage.name: stage for stage in STAGES}
    train_stamp = RunPaths(config.run_path).stamp("train")
    stamped = train_stamp.read_text()  # put back after each run: the run stays up to date
    averaging = variant(tiny_config, "average3", lambda c: c["train"].update(average_last=2))
    assert stale_reason(averaging, stages["train"]) is None
    assert stale_reason(averaging, stages["average"]) == "train.average_last changed"
    logging = variant(tiny_config, "logging", lambda c: c["train"].update(log_every_steps=5))
    assert stale_reason(logging, stages["train"]) == "train.log_every_steps changed"
    summary = RunPaths(config.run_path).train_summary
    before = summary.read_text()
    assert run(logging, only="train", echo=lambda text: None) == ["train"]  # nothing to do
    assert summary.read_text() == before  # the summary of the run that trained is kept
    train_stamp.write_text(stamped)

    # train.steps below the latest checkpoint: the train stage says so, trains nothing and is
    # done (not tried again); the later stages read the checkpoints as they are.
    fewer = variant(tiny_config, "fewer", lambda c: c["train"].update(steps=8))
    assert stale_reason(fewer, stages["train"]) == "train.steps changed"
    messages = []
    assert run(fewer, only="train", echo=messages.append) == ["train"]
    assert messages == ["[train] running: requested", "the run is already at step 12, beyond "
                        "train.steps 8: nothing to train (raise train.steps to train further)"]
    assert stale_reason(fewer, stages["train"]) is None
    assert stale_reason(fewer, stages["average"]) is None
    assert summary.read_text() == before
    train_stamp.write_text(stamped)


def test_a_subset_of_export_formats(first_run, tiny_config, capfd, caplog):
    config, _, _ = first_run
    export = next(stage for stage in STAGES if stage.name == "export")
    graph = config.run_path / "export" / "saved_model" / "1" / "saved_model.pb"
    graph.unlink()
    assert stale_reason(config, export) == f"missing {graph}"  # a version deleted
    # The subset is CTranslate2 alone: the format that exports in a second (a SavedModel takes
    # 8 s, ONNX 12 s); first_run exported all three.
    ct2_only = variant(tiny_config, "ct2_only",
                       lambda c: c.setdefault("export", {}).update(formats=["ctranslate2"]))
    shutil.rmtree(config.run_path / "export")
    assert stale_reason(ct2_only, export) == "export.formats changed"
    # `keras-transformer run` in this process: export alone runs, then the report; nothing on
    # stderr (tests/cli_helpers.py)
    assert main(["run", str(tiny_config.with_name("ct2_only.yaml"))]) == 0
    text, err = cli_output(capfd, caplog)
    assert err == []
    assert text[:len(STAGE_NAMES)] == [
        *(f"[{name}] up to date, skipped" for name in STAGE_NAMES[:-1]),
        "[export] running: export.formats changed"]
    assert sorted(path.name for path in (config.run_path / "export").iterdir()) == ["ctranslate2"]
    assert stale_reason(ct2_only, export) is None  # no SavedModel or ONNX expected
    text = text[text.index(f"run tiny ({config.run_path})"):]  # the report
    assert sum(line.startswith("  ct2       ") for line in text) == 3
    assert not any("onnx" in line or line.startswith("  tf ") for line in text)
    model = config.run_path / "export" / "ctranslate2" / "int8" / "model.bin"
    model.unlink()
    assert stale_reason(ct2_only, export) == f"missing {model}"
