"""Scoring given translations (issue 29): keras_transformer/scoring.py, the SavedModel's
`score` signature (as TF Serving runs it: tests/test_serving.py), score.onnx, CTranslate2's
score_batch, and the `score` command with its bad input."""
import numpy as np
import pytest
import tensorflow as tf

from export.ct2_runtime import CTranslate2Translator
from export.onnx_runtime import OnnxTranslator
from export_helpers import EOS_ID, PAD_ID, SENTENCES, output_lengths
from keras_transformer.scoring import score_targets
from pipelines.cli import main
from test_faults import cli_error

TARGETS = ["sun moon star", "", "the river and the stone river", "fish " * 12, "été"]


def test_scoring_its_own_translations_gives_back_beam_search_scores(export_translator,
                                                                    keras_reference):
    ids = keras_reference["target_ids"]
    assert all(ids[i, length - 1] == EOS_ID for i, length in enumerate(output_lengths(ids)))
    targets = np.where(ids == EOS_ID, PAD_ID, ids)  # the pieces, then PAD
    scores = score_targets(export_translator.model, keras_reference["source_ids"], targets,
                           export_translator.settings)
    np.testing.assert_allclose(scores.score, keras_reference["score"], rtol=1e-5)
    np.testing.assert_array_equal(scores.length, output_lengths(ids))
    np.testing.assert_allclose(tf.reduce_sum(scores.token_log_probs, 1), scores.log_prob,
                               rtol=1e-6)
    assert np.all(scores.token_log_probs.numpy() <= 0)


def test_a_pairs_score_does_not_depend_on_its_batch(export_translator):
    pairs = list(zip(SENTENCES[:len(TARGETS)], TARGETS))
    alone = [export_translator.score_pairs([pair], batch_size=1)[0] for pair in pairs]
    together = export_translator.score_pairs(pairs, batch_size=len(pairs))
    for one, batched in zip(alone, together):
        assert one.token_ids == batched.token_ids and one.token_ids[-1] == EOS_ID
        np.testing.assert_allclose(batched.token_log_probs, one.token_log_probs, atol=1e-5)
    assert together[1].token_ids == [EOS_ID]  # an empty target: its EOS alone


def test_a_target_longer_than_the_model_accepts_fails_uncut(export_translator):
    too_long = tf.fill([1, export_translator.model.model_config.max_length], 40)
    with pytest.raises(tf.errors.InvalidArgumentError, match="longer than the model accepts"):
        score_targets(export_translator.model, tf.constant([[40, EOS_ID]]), too_long)


def test_the_signature_onnx_and_ctranslate2_give_the_same_scores(
        saved_model_translator, exported, export_translator):
    """The SavedModel's `score` signature, score.onnx and CTranslate2's score_batch (TF
    Serving's session: tests/test_serving.py)."""
    pairs = list(zip(SENTENCES[:len(TARGETS)], TARGETS))
    expected = export_translator.score_pairs(pairs)
    for scorer in (saved_model_translator, OnnxTranslator(exported.onnx),
                   CTranslate2Translator(exported.ctranslate2)):
        scores = scorer.score_pairs(pairs, batch_size=2)
        assert [s.token_ids for s in scores] == [s.token_ids for s in expected]
        np.testing.assert_allclose([s.score for s in scores], [s.score for s in expected],
                                   rtol=1e-4)
        np.testing.assert_allclose(np.concatenate([s.token_log_probs for s in scores]),
                                   np.concatenate([s.token_log_probs for s in expected]),
                                   atol=1e-4)


def test_score_command_files_tsv_tokens_and_a_resumed_output(saved_model_dir, exported,
                                                             export_translator, tmp_path,
                                                             capsys):
    pairs = list(zip(SENTENCES[:len(TARGETS)], TARGETS))
    source, target, tsv = tmp_path / "src.txt", tmp_path / "tgt.txt", tmp_path / "pairs.tsv"
    source.write_text("".join(s + "\n" for s, _ in pairs), encoding="utf-8")
    target.write_text("".join(t + "\n" for _, t in pairs), encoding="utf-8")
    tsv.write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    expected = export_translator.score_pairs(pairs)
    assert main(["score", str(saved_model_dir), str(source), str(target), "--tokens"]) == 0
    rows = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert [float(row[0]) for row in rows] == pytest.approx([s.score for s in expected],
                                                            abs=2e-4)
    assert rows[1][2].startswith("</s>=") and len(rows[1][2].split(" ")) == 1
    assert rows[0][2].split(" ")[-1].startswith("</s>=")
    output = tmp_path / "scores.txt"
    output.write_text("\t".join(rows[0][:2]) + "\n" + "-1.0")  # an interrupted job
    assert main(["score", str(exported.ctranslate2.parent), str(tsv), "--runtime", "ct2",
                 "--output", str(output)]) == 0
    written = [line.split("\t") for line in output.read_text().splitlines()]
    assert len(written) == len(pairs) and written[0] == rows[0][:2]
    assert [float(row[0]) for row in written] == pytest.approx([s.score for s in expected],
                                                               abs=2e-3)


def test_bad_pairs_are_named_before_anything_is_written(saved_model_dir, tmp_path, capsys):
    source, target, tsv = tmp_path / "src.txt", tmp_path / "tgt.txt", tmp_path / "pairs.tsv"
    source.write_text("bird\nfish\nsun\n")
    target.write_text("oiseau\npoisson\n")
    output = tmp_path / "out.txt"
    assert cli_error(capsys, "score", saved_model_dir, source, target, "--output", output) == \
        f"{target} has 2 lines and {source} more: the files must be parallel"
    tsv.write_text("bird\toiseau\nfish poisson\n")
    assert cli_error(capsys, "score", saved_model_dir, tsv) == \
        f"{tsv}:2: no tab between source and target"
    tsv.write_text("bird\toiseau\nfish\t" + "poisson " * 200 + "\n")
    assert cli_error(capsys, "score", saved_model_dir, tsv, "--output", output).startswith(
        f"{tsv}:2: the target has ")
    assert "scores at most 63" in cli_error(capsys, "score", saved_model_dir, tsv)
    assert not output.exists()
    tsv.write_bytes(b"bird\toiseau\ncaf\xe9\tcaf\xc3\xa9\n")
    assert main(["score", str(saved_model_dir), str(tsv)]) == 0
    captured = capsys.readouterr()
    assert len(captured.out.splitlines()) == 2 and captured.err.splitlines()[-1] == \
        f"keras-transformer score: 1 line of invalid UTF-8, each bad byte read as U+FFFD: {tsv}:2"


def test_translate_scores_and_tokens_agree_with_scoring(saved_model_dir, saved_model_translator,
                                                        exported, tmp_path, capsys):
    lines = tmp_path / "lines.txt"
    lines.write_text("\n".join(SENTENCES[:4]) + "\n", encoding="utf-8")
    assert main(["translate", str(saved_model_dir), str(lines), "--tokens"]) == 0
    rows = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    expected = saved_model_translator.translate(SENTENCES[:4])
    assert [row[1] for row in rows] == expected["translation"]
    np.testing.assert_allclose([float(row[0]) for row in rows], expected["score"], atol=1e-4)
    for row in rows:  # the pieces' log-probabilities add up to the score's log-probability
        log_probs = [float(item.rsplit("=", 1)[1]) for item in row[2].split(" ")]
        length = len(log_probs)
        assert row[2].split(" ")[-1].startswith("</s>=")
        assert sum(log_probs) / ((5 + length) / 6) ** 0.6 == pytest.approx(float(row[0]),
                                                                          abs=2e-3)
    assert main(["translate", str(exported.onnx), str(lines), "--tokens"]) == 0
    onnx_rows = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    for onnx_row, row in zip(onnx_rows, rows):  # ONNX Runtime: the same pieces and scores
        assert onnx_row[1] == row[1]
        assert float(onnx_row[0]) == pytest.approx(float(row[0]), abs=2e-4)
        assert [item.rsplit("=", 1)[0] for item in onnx_row[2].split(" ")] == \
            [item.rsplit("=", 1)[0] for item in row[2].split(" ")]
    assert main(["translate", str(exported.ctranslate2.parent), str(lines), "--runtime", "ct2",
                 "--scores"]) == 0
    ct2_rows = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    for ct2_row, row in zip(ct2_rows, rows):
        if ct2_row[1] == row[1]:  # CTranslate2 ranks by length ** alpha: it may pick another
            assert float(ct2_row[0]) == pytest.approx(float(row[0]), abs=2e-4)
    assert sum(ct2_row[1] == row[1] for ct2_row, row in zip(ct2_rows, rows)) >= 3


def test_scores_with_nbest_lists_are_refused_before_any_work(saved_model_dir, tmp_path,
                                                             capsys):
    lines = tmp_path / "lines.txt"
    lines.write_text("bird\n")
    assert "not with --n-best" in cli_error(capsys, "translate", saved_model_dir, lines,
                                            "--scores", "--n-best", "2")
