"""keras_transformer/ensemble.py and ensembles through the stack: two copies of one model decode
as the model in every searching family (Keras level here, untrained; the Translator's
signatures with the trained tiny model); members of other sizes; the one-vocabulary rule; an
ensemble exported (one SavedModel and ONNX holding both, translator.json naming them) and
translated (`translate --ensemble`); bad ensembles refused in one line, status 2, nothing
written."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
import yaml

from export.metadata import METADATA_FILE, SAVED_MODEL_EXTRA, SPM_FILE, ExportMetadata
from export_helpers import SENTENCES, make_model, source_ids, train_spm
from keras_transformer import ModelConfig
from keras_transformer.decoding_settings import DecodingSettings
from keras_transformer.ensemble import Ensemble
from keras_transformer.model import Transformer
from keras_transformer.translate import decode_hypotheses
from pipelines.cli import main
from pipelines.config import load_config
from tiny_run import ONE_LAYER_A_SIDE

# Short outputs: an untrained model writes up to its limit.
SETTINGS = DecodingSettings(beam_size=3, extra_length=6)


@pytest.fixture(scope="module")
def spm_model(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    return train_spm(tmp_path_factory.mktemp("spm"))


@pytest.fixture(scope="module")
def other_spm_model(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """Another vocabulary: spm_model's corpus, with a user symbol."""
    return train_spm(tmp_path_factory.mktemp("other_spm"), ("<x>",))


@pytest.fixture(scope="module")
def untrained(spm_model: bytes):
    """An untrained tiny model (one layer a side) and the test sentences' source ids for it."""
    return (make_model(spm_model, **ONE_LAYER_A_SIDE),
            tf.constant(source_ids(spm_model, SENTENCES[:6])))


def test_two_copies_of_a_model_search_as_the_model(untrained):
    """The n-best lists, the first sentence's forced to begin with a prefix (Keras level;
    every family, trained: test_an_ensemble_export_of_two_copies_translates_as_the_model)."""
    model, source = untrained
    prefix = tf.constant([[9, 10]] + [[0, 0]] * (source.shape[0] - 1), tf.int32)
    search = tf.function(lambda model: decode_hypotheses(model, source, SETTINGS, prefix),
                         autograph=False)
    ids, scores = search(model)  # [batch, beam, time], [batch, beam]
    ensemble_ids, ensemble_scores = search(Ensemble([model, model]))
    np.testing.assert_array_equal(ensemble_ids.numpy(), ids.numpy())
    np.testing.assert_allclose(ensemble_scores.numpy(), scores.numpy(), rtol=1e-5)
    assert (ids.numpy()[0, :, :2] == [9, 10]).all()


def test_members_of_other_sizes_decode_within_the_strictest_limit(spm_model, untrained):
    model, source = untrained
    small = Transformer(dataclasses.replace(model.model_config, num_decoder_layers=1,
                                            d_model=32, d_ff=64, max_length=8))
    ensemble = Ensemble([model, small])
    assert ensemble.model_config == dataclasses.replace(model.model_config, max_length=8)
    assert len(ensemble.variables) == len(model.variables) + len(small.variables)
    ids, scores = decode_hypotheses(ensemble, source, DecodingSettings(beam_size=2))
    assert ids.shape[2] <= 8 and np.isfinite(scores.numpy()).all()


def test_members_of_another_vocabulary_are_refused(untrained):
    model, _ = untrained
    config = dataclasses.replace(model.model_config, vocab_size=model.model_config.vocab_size + 1)
    with pytest.raises(ValueError, match="member 1 has vocab_size 301, member 0 300"):
        Ensemble([model, Transformer(config)])
    with pytest.raises(ValueError, match="at least two members"):
        Ensemble([model])


def fake_run(directory: Path, name: str, spm_model: bytes, pair: tuple[str, str] = ("en", "fr"),
             prepared: bool = True) -> Path:
    """directory/NAME/config.yaml of a run translating `pair` (`prepared`: its spm.model and
    an averaged checkpoint's index, which the checks read before any work); returns it."""
    run = directory / name / "run"
    if prepared:
        (run / "vocab").mkdir(parents=True)
        (run / "vocab" / "spm.model").write_bytes(spm_model)
        (run / "checkpoints" / "averaged").mkdir(parents=True)
        (run / "checkpoints" / "averaged" / "ckpt.index").touch()
    config = directory / name / "config.yaml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(yaml.safe_dump({
        "name": name, "run_dir": str(run), "model": {"preset": "tiny"},
        "data": {"source": "files", "src_lang": pair[0], "tgt_lang": pair[1],
                 "train": {"src": str(run / "train.src"), "tgt": str(run / "train.tgt")}}}))
    return config


@pytest.mark.parametrize("member, fault", [
    ("other_vocabulary", "differs from {a}/vocab/spm.model: an ensemble's members share one "
                         "SentencePiece model byte for byte"),
    ("other_pair", "translates en-de, {a} en-fr: an ensemble's members translate one language "
                   "pair"),
    ("missing", "{member}/vocab/spm.model: no such file; run `keras-transformer prepare` first"),
    ("ctranslate2", "CTranslate2 cannot decode an ensemble (it decodes one model); export "
                    "saved_model and/or onnx")])
def test_a_bad_ensemble_export_is_one_line_status_2_and_writes_nothing(
        spm_model, other_spm_model, tmp_path, capsys, member, fault):
    first = fake_run(tmp_path, "a", spm_model)
    other = {"other_vocabulary": lambda: fake_run(tmp_path, member, other_spm_model),
             "other_pair": lambda: fake_run(tmp_path, member, spm_model, ("en", "de")),
             "missing": lambda: fake_run(tmp_path, member, spm_model, prepared=False),
             "ctranslate2": lambda: first}[member]()
    options = ["--format", "ctranslate2"] if member == "ctranslate2" else []
    assert main(["export", str(first), "--ensemble", str(other), *options]) == 2
    runs = {"a": tmp_path / "a" / "run", "member": tmp_path / member / "run"}
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("keras-transformer export: error: ") and line.endswith(
        fault.format(**runs)), line
    if member != "ctranslate2":
        assert f"ensemble member {runs['member']}" in line
    assert not (runs["a"] / "export").exists()


def fake_export(directory: Path, spm_model: bytes) -> Path:
    """A SavedModel version's files as `translate` checks them before loading any."""
    extra = directory / "saved_model" / "1" / SAVED_MODEL_EXTRA
    extra.mkdir(parents=True)
    (extra.parent / "saved_model.pb").touch()
    (extra / SPM_FILE).write_bytes(spm_model)
    ExportMetadata(DecodingSettings(), ModelConfig.from_preset("tiny", vocab_size=300)).write(
        extra / METADATA_FILE)
    return directory


@pytest.mark.parametrize("member, options, fault", [
    ("other_vocabulary", [], "{member}/saved_model/1/assets.extra/spm.model differs from "
                             "{a}/saved_model/1/assets.extra/spm.model: an ensemble's members "
                             "share one SentencePiece model byte for byte"),
    ("missing", [], "{member}: no SavedModel (version) or ONNX export found; run "
                    "`keras-transformer export` first"),
    ("onnx", ["--runtime", "onnx"], "--ensemble: SavedModels only (one search over the "
                                    "members' log-probabilities, in process); not with "
                                    "--runtime onnx")])
def test_a_bad_ensemble_translate_is_one_line_status_2_and_writes_nothing(
        spm_model, other_spm_model, tmp_path, capsys, member, options, fault):
    exports = {"a": fake_export(tmp_path / "a", spm_model), "member": tmp_path / member}
    if member != "missing":
        fake_export(exports["member"], other_spm_model if member == "other_vocabulary"
                    else spm_model)
    (tmp_path / "input.txt").write_text("Hello.\n")
    output = tmp_path / "output.txt"
    assert main(["translate", str(exports["a"]), str(tmp_path / "input.txt"), "--ensemble",
                 str(exports["member"]), "--output", str(output), *options]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"keras-transformer translate: error: {fault.format(**exports)}"]
    assert not output.exists()


@pytest.fixture(scope="module")
def ensemble_export(export_config: Path, export_translator, tmp_path_factory):
    """The suite's one ensemble export: the shared tiny run and a copy of it in a run of its
    own (the same weights, spm.model and config), exported with export.formats' default
    (saved_model, onnx, ctranslate2) into the copy's export/ (about 90 s on a 2-core Zen 4)."""
    from export_helpers import write_run
    from pipelines.export import export_run

    copy = load_config(write_run(tmp_path_factory.mktemp("ensemble"), export_translator))
    return export_run(copy, ensemble=[load_config(export_config)]), copy, load_config(
        export_config)


def test_an_ensemble_export_names_its_members_and_skips_ctranslate2(ensemble_export):
    summary, copy, original = ensemble_export
    assert summary.ctranslate2 is None
    assert summary.skipped == "ctranslate2 (in export.formats): CTranslate2 cannot decode an " \
                              "ensemble"
    for metadata_file in (summary.saved_model / SAVED_MODEL_EXTRA / METADATA_FILE,
                          summary.onnx / METADATA_FILE):
        members = ExportMetadata.read(metadata_file).ensemble
        assert [(member.run, Path(member.checkpoint).name) for member in members] == [
            (str(copy.run_path), "ckpt"), (str(original.run_path), "ckpt")]
        assert members[0].model == members[1].model
    from export.saved_model import SavedModelTranslator

    models = SavedModelTranslator(summary.saved_model).models()  # the rebuild's weights
    assert len(models) == 2
    for first, second in zip(models[0].variables, models[1].variables, strict=True):
        np.testing.assert_array_equal(first.numpy(), second.numpy())


def test_an_ensemble_export_of_two_copies_translates_as_the_model(ensemble_export,
                                                                   saved_model_translator):
    """Every signature family that searches (translate, nbest, prefix, terms, sample), and
    score and align, of the ensemble's SavedModel against the model's."""
    from export.saved_model import SavedModelTranslator
    from export.translator.terms import termed_in_batches
    from keras_transformer.decoding_settings import SamplingSettings

    ensemble = SavedModelTranslator(ensemble_export[0].saved_model)
    lines = SENTENCES[:6]
    prefixes = ["", "the", "", "", "bird", ""]
    sampling = SamplingSettings(top_k=5, seed=3)
    terms = [["river"], [], ["bird"], [], [], []]
    pairs = list(zip(lines, SENTENCES[4:10]))
    calls = {
        "translate": lambda t: t.scored_lines(lines),
        "nbest": lambda t: t.nbest_lines(lines),
        "prefix": lambda t: [(text, 0.0) for text in t.prefixed_lines(lines, prefixes)],
        "terms": lambda t: [(f"{r.translation} {r.term_found}", r.score) for r in
                            termed_in_batches(t.translate_terms, lines, terms, batch_size=32)],
        "sample": lambda t: t.sampled_lines(lines, sampling),
        "score": lambda t: [(str(s.token_ids), s.score) for s in t.score_pairs(pairs)],
        "align": lambda t: [(f"{text} ||| {links}", 0.0) for text, links in
                            t.aligned_lines(lines)]}
    for family, call in calls.items():
        expected, got = call(saved_model_translator), call(ensemble)
        if family == "nbest":
            expected, got = sum(expected, []), sum(got, [])
        assert [text for text, _ in got] == [text for text, _ in expected], family
        np.testing.assert_allclose([score for _, score in got],
                                   [score for _, score in expected], rtol=1e-4, atol=1e-5,
                                   err_msg=family)


def test_the_ensembles_onnx_and_tf_serving_translate_as_the_model(ensemble_export, onnx_dir,
                                                                  saved_model_translator,
                                                                  plain_ops):
    from export.onnx_runtime import OnnxTranslator
    from op_audit import discarded_nodes, op_audit, serving_registry_problems
    from test_serving import SessionServer, translate

    summary = ensemble_export[0]
    expected = saved_model_translator.translate_lines(SENTENCES)
    assert OnnxTranslator(summary.onnx).translate_lines(SENTENCES) == expected
    assert OnnxTranslator(onnx_dir).translate_lines(SENTENCES) == expected
    ops, not_core, allowed = op_audit(summary.saved_model, plain_ops)
    assert set(not_core) <= allowed and serving_registry_problems(summary.saved_model) == []
    assert discarded_nodes(summary.saved_model) == []
    assert translate(SessionServer(summary.saved_model), SENTENCES)[0] == expected


def test_translate_ensembles_exports_and_runs(export_config, saved_model_dir, tmp_path,
                                              capsys):
    """`translate A --ensemble B`: an export and a run (its newest SavedModel) of the same
    weights translate as the model; --output written whole."""
    input_file = tmp_path / "input.txt"
    input_file.write_text("\n".join(SENTENCES) + "\n")
    assert main(["translate", str(saved_model_dir), str(input_file), "--scores"]) == 0
    expected = capsys.readouterr().out.splitlines()
    output = tmp_path / "out.txt"
    run = load_config(export_config).run_path  # its newest SavedModel: saved_model_dir
    assert main(["translate", str(saved_model_dir), str(input_file), "--scores", "--ensemble",
                 str(run), "--output", str(output)]) == 0
    got = output.read_text().splitlines()
    assert [row.split("\t")[1] for row in got] == [row.split("\t")[1] for row in expected]
    np.testing.assert_allclose([float(row.split("\t")[0]) for row in got],
                               [float(row.split("\t")[0]) for row in expected], atol=2e-4)
