"""Distillation in prepare (`data.distill_from`): the teacher's export translates the train
sources, an interrupted prepare goes on without translating a line twice, the originals are
kept on demand, and bad teachers are refused before any work."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from export.loading import open_translator
from export_helpers import corpus, train_spm
from pipelines import InputError
from pipelines.config import load_config
from pipelines.corpus import distill
from pipelines.corpus.prepare import prepare
from pipelines.corpus.shards import CorpusShards, train_shards, write_manifest
from pipelines.paths import RunPaths


@pytest.fixture
def teacher(export_config: Path, exported) -> Path:
    """The run of conftest's exported tiny translator (SavedModel, ONNX, CTranslate2)."""
    return load_config(export_config).run_path


def student_config(directory: Path, teacher: Path | str | list, **data: object) -> Path:
    """A student of 60 pairs (targets: the sources in upper case; 5 held out for dev, 5 for
    test)."""
    lines = corpus(60, seed=7)
    for side, text in (("src", lines), ("tgt", [line.upper() for line in lines])):
        (directory / f"domain.{side}").write_text("\n".join(text) + "\n", encoding="utf-8")
    config = {"name": "student", "run_dir": str(directory / "student"),
              "data": {"source": "files", "holdout": 5, "max_length": 40, "language_id": False,
                       "train": {"src": str(directory / "domain.src"),
                                 "tgt": str(directory / "domain.tgt")},
                       "distill_from": teacher if isinstance(teacher, list) else str(teacher),
                       **data},
              "model": {"preset": "tiny", "dtype": "float32"}}
    path = directory / "student.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


class CountingTranslator:
    """The teacher's translator, counting the lines it translates and raising
    KeyboardInterrupt (an interrupted prepare) on call `interrupt_at`."""

    def __init__(self, translator, interrupt_at: int | None = None) -> None:
        self.translator, self.interrupt_at = translator, interrupt_at
        self.calls = self.lines = 0

    def translate_lines(self, lines, batch_size=32, target_lang=None):
        self.calls += 1
        if self.calls == self.interrupt_at:
            raise KeyboardInterrupt
        self.lines += len(lines)
        return self.translator.translate_lines(lines, batch_size, target_lang=target_lang)


def test_an_interrupted_distillation_goes_on_without_translating_a_line_twice(
        teacher: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = load_config(student_config(tmp_path, teacher))
    paths = RunPaths(config.run_path)
    ct2 = open_translator(teacher, "ct2")
    monkeypatch.setattr(distill, "WINDOW", 8)
    interrupted = CountingTranslator(ct2, interrupt_at=3)
    monkeypatch.setattr(distill, "open_translator", lambda run, runtime: interrupted)
    with pytest.raises(KeyboardInterrupt):
        prepare(config)
    assert interrupted.lines == 16  # two windows written, the third interrupted
    assert not paths.train_manifest.exists()

    resumed = CountingTranslator(ct2)
    monkeypatch.setattr(distill, "open_translator", lambda run, runtime: resumed)
    summary = prepare(config)
    train = summary.pairs["train"]
    assert resumed.lines == train - 16 and summary.distilled == (train - 16, 16)
    assert paths.spm_model.read_bytes() == RunPaths(teacher).spm_model.read_bytes()
    [(source, target)] = train_shards(paths.data)
    sources = source.read_text(encoding="utf-8").splitlines()
    assert target.read_text(encoding="utf-8").splitlines() == ct2.translate_lines(sources)
    assert f"distilled {train:,} train sources translated by {teacher} (ct2 export" in \
        summary.format()

    again = CountingTranslator(ct2)  # nothing changed: every line found translated
    monkeypatch.setattr(distill, "open_translator", lambda run, runtime: again)
    with_originals = load_config(student_config(tmp_path, teacher, distill_originals=True))
    summary = prepare(with_originals)
    assert again.lines == 0 and summary.distilled == (0, train)
    assert summary.pairs["train"] == 2 * train
    assert source.read_text(encoding="utf-8").splitlines() == sources + sources
    assert target.read_text(encoding="utf-8").splitlines() == (
        ct2.translate_lines(sources) + [line.upper() for line in sources])


def test_bad_teachers_are_refused_before_any_work(teacher: Path, tmp_path: Path) -> None:
    no_export = tmp_path / "no_export"
    (no_export / "vocab").mkdir(parents=True)
    shutil.copy(RunPaths(teacher).spm_model, no_export / "vocab")
    german = tmp_path / "german"
    shutil.copytree(teacher, german, ignore=shutil.ignore_patterns("checkpoints"))
    write_manifest(german / "data", [CorpusShards("main", 1.0, None, (20,), ("en", "de"))])
    relearned = tmp_path / "relearned"  # its vocabulary learned again after the export
    shutil.copytree(german, relearned)
    (relearned / "data" / "train.json").unlink()
    RunPaths(relearned).spm_model.write_bytes(train_spm(tmp_path, ["<2fr>"]))
    cases = [
        ({"distill_from": str(tmp_path / "nowhere")},
         f"data.distill_from: {tmp_path / 'nowhere'}: no such run directory"),
        ({"distill_from": str(tmp_path)},
         f"data.distill_from: {tmp_path}: not a run directory (no vocab/spm.model)"),
        ({"distill_from": str(no_export)},
         f"data.distill_from: {no_export}: the teacher has no export; run `keras-transformer "
         f"export` on its config first"),
        ({"distill_from": str(german), "src_lang": "en", "tgt_lang": "fr"},
         f"data.distill_from: {german} translates en-de; corpus main is en-fr"),
        ({"distill_from": str(relearned)},
         f"data.distill_from: {relearned}: its export {relearned / 'export/ctranslate2/float32'} "
         f"was made with another vocabulary than {RunPaths(relearned).spm_model}; export the "
         f"teacher again"),
    ]
    for data, message in cases:
        config = load_config(student_config(tmp_path, data.pop("distill_from"), **data))
        with pytest.raises(InputError) as error:
            prepare(config)
        assert str(error.value) == message
        assert not (tmp_path / "student").exists()


def test_a_corpus_tag_the_teachers_vocabulary_lacks_is_refused(teacher: Path,
                                                              tmp_path: Path) -> None:
    path = student_config(tmp_path, teacher)
    config = yaml.safe_load(path.read_text())
    data = config["data"]
    config["data"] = {"corpora": [{"name": "bt", "source": "files", "tag": "<bt>",
                                   "train": data.pop("train")}],
                      **{key: value for key, value in data.items() if key != "source"}}
    path.write_text(yaml.safe_dump(config))
    with pytest.raises(InputError) as error:
        prepare(load_config(path))
    assert str(error.value).startswith(
        f"data.corpora[0].tag: <bt> is not a piece of the teacher's vocabulary "
        f"{RunPaths(teacher).spm_model} (data.distill_from), which would split it")
    assert not (tmp_path / "student").exists()


def test_an_ensemble_of_two_copies_distills_as_the_teacher(teacher: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(teacher, copy, ignore=shutil.ignore_patterns("checkpoints", "saved_model"))
    # its SavedModel the teacher's files, loaded once (conftest's saved_models_loaded_once)
    (copy / "export" / "saved_model").symlink_to(teacher / "export" / "saved_model")
    summary = prepare(load_config(student_config(tmp_path, [str(teacher), str(copy)])))
    [(source, target)] = train_shards(RunPaths(tmp_path / "student").data)
    sources = source.read_text(encoding="utf-8").splitlines()
    assert target.read_text(encoding="utf-8").splitlines() == open_translator(
        teacher, "tf").translate_lines(sources)
    assert f"translated by an ensemble of {teacher} + {copy} (their SavedModels" in \
        summary.format()
