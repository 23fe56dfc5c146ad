"""Guided-alignment training: the loss on a known case, word links mapped to pieces, the
symmetrization, the batches that carry gold alignments, a few guided training steps through
the CLI, the head that alignments then read, and the alignment error rate of bench/."""
import dataclasses
import json
import math

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import alignment
from keras_transformer.config import ModelConfig
from keras_transformer.guided_alignment import gold_alignment, guided_alignment_loss, word_links
from keras_transformer.model import Transformer
from keras_transformer.tokenizer import BOS_ID, EOS_ID, PAD_ID
from keras_transformer.words import WORD_CONTINUES, WORD_SPACE, WORD_START
from pipelines.cli import main
from pipelines.corpus.alignments import grow_diag_final_and
from bench_scripts import bench_script
from tiny_run import aligned_tiny_run, word_pieces


def test_the_loss_of_a_known_attention_against_a_known_alignment():
    attention = tf.constant([[[0.6, 0.2, 0.2],    # linked to sources 0 and 1: 1/2 each
                              [0.1, 0.7, 0.2],    # linked to source 1
                              [0.3, 0.3, 0.4]]])  # no link: adds nothing
    gold = tf.constant([[[1.0, 1.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.0]]])
    expected = -(0.5 * math.log(0.6) + 0.5 * math.log(0.2)) - math.log(0.7)
    assert guided_alignment_loss(attention, gold).numpy() == pytest.approx(expected, rel=1e-6)
    masked = tf.Variable([[[0.0, 1.0, 0.0]]])  # a PAD column's attention is exactly 0
    with tf.GradientTape() as tape:
        loss = guided_alignment_loss(masked, tf.constant([[[0.0, 1.0, 0.0]]]))
    assert loss.numpy() == pytest.approx(0.0)
    assert np.isfinite(tape.gradient(loss, masked).numpy()).all()


def test_word_links_become_links_of_every_piece_of_both_words():
    # ids 4 ▁a, 5 b, 6 ▁c, 7 ▁d, 8 e, 9 ▁: pieces that start a word, continue one, or are
    # whitespace alone (keras_transformer.words)
    marks = tf.constant([WORD_CONTINUES] * 4 + [WORD_START, WORD_CONTINUES, WORD_START,
                                                WORD_START, WORD_CONTINUES, WORD_SPACE])
    source = tf.constant([4, 5, 9, 6, EOS_ID])  # words 0 0, no word, 1, EOS
    target = tf.constant([BOS_ID, 7, 8, 6, EOS_ID])  # BOS, words 0 0 1, EOS
    gold = gold_alignment(source, target, tf.constant("1-0 0-1 5-5"), marks).numpy()
    assert gold.tolist() == [[0, 0, 0, 0, 0],   # BOS
                             [0, 0, 0, 1, 0],   # target word 0 - source word 1 (▁c)
                             [0, 0, 0, 1, 0],
                             [1, 1, 0, 0, 0],   # target word 1 - source word 0 (▁a b)
                             [0, 0, 0, 0, 0]]   # EOS; the link 5-5 names no word: left out
    assert not gold_alignment(source, target, tf.constant(""), marks).numpy().any()
    assert word_links(tf.constant(" 0-1  2-0 ")).numpy().tolist() == [[0, 1], [2, 0]]


def test_grow_diag_final_and_keeps_the_intersection_and_grows_to_unaligned_words():
    forward = {(0, 0), (1, 1), (2, 3), (4, 0), (5, 4)}
    reverse = {(0, 0), (1, 1), (2, 2), (3, 3)}
    # Grown from the intersection: (2, 2) (source 2 new), then from it (2, 3) (target 3 new)
    # and (3, 3) (source 3 new). Final-and: (5, 4) joins two unaligned words; (4, 0) does not
    # (target 0 is aligned).
    assert grow_diag_final_and(forward, reverse) == [(0, 0), (1, 1), (2, 2), (2, 3), (3, 3),
                                                     (5, 4)]


def test_batches_carry_each_target_pieces_links(tmp_path):
    from pipelines.config import load_config
    from pipelines.training.train_data import train_dataset_fn

    config = load_config(aligned_tiny_run(tmp_path))
    batch = next(iter(train_dataset_fn(config, seed=0)(tf.distribute.InputContext())))
    source, target = batch["source_ids"].numpy(), batch["target_ids"].numpy()
    gold = batch["alignment"].numpy()  # [b, target, source]
    assert gold.shape == target.shape + source.shape[1:]
    pieces = word_pieces(target, config.run_path)  # [b, target]
    assert (gold.sum(axis=2) > 0)[pieces].all()  # every word of the pairs is aligned
    assert not gold[~pieces].any() and not gold[np.broadcast_to(
        ((source == PAD_ID) | (source == EOS_ID))[:, None, :], gold.shape)].any()


@pytest.mark.slow
def test_a_few_guided_steps_train_and_the_model_reads_its_trained_head(tmp_path, capsys):
    config = aligned_tiny_run(tmp_path)
    assert main(["train", str(config)]) == 0
    recorded = json.loads((tmp_path / "run" / "checkpoints" / "model.json").read_text())
    assert recorded["alignment_heads"] == 1
    manifest = tmp_path / "run" / "data" / "train.json"
    manifest.write_text(manifest.read_text().replace('"align"', '"unaligned"'))
    assert main(["train", str(config)]) == 2
    assert (f"{manifest}: the train split was prepared without word alignments"
            in capsys.readouterr().err)


def test_alignments_read_head_0_alone_after_guided_training():
    config = ModelConfig.from_preset("tiny", vocab_size=20, alignment_heads=1)
    model = Transformer(config)
    source, target = tf.constant([[5, 6, 7, EOS_ID]]), tf.constant([[8, 9, PAD_ID]])
    attention = alignment.target_attention(model, source, target).numpy()
    decoder_input = tf.constant([[BOS_ID, 8, 9]])
    heads = model.attention_weights(source, decoder_input)["encoder_decoder_attention"][
        alignment.alignment_layer(config)].numpy()  # [1, heads, target, source]
    np.testing.assert_allclose(attention, heads[:, 0], rtol=1e-6)
    averaged = Transformer(ModelConfig.from_preset("tiny", vocab_size=20))
    assert alignment.alignment_head_count(averaged.model_config) == config.num_heads


def test_the_alignment_error_rate_of_a_hand_made_case(tmp_path):
    bench = bench_script("alignment_error")
    gold = tmp_path / "gold.tsv"
    gold.write_text("# line\tsure\tpossible\tsource\ttarget\n"
                    "7\t0-0 1-1\t2-1\ta b c\tx y\n"
                    "9\t0-1\t\td e\tz w\n")
    pairs = bench.read_gold(gold)
    assert pairs[0].possible == {(0, 0), (1, 1), (2, 1)}
    # A = {0-0, 2-1} and {0-0}: |A & S| = 1 + 0, |A & P| = 2 + 0, |A| = 3, |S| = 3.
    predicted = [{(0, 0), (2, 1)}, {(0, 0)}]
    assert bench.alignment_error_rate(predicted, pairs) == pytest.approx(1 - 3 / 6)
    assert bench.alignment_error_rate([p.sure for p in pairs], pairs) == 0.0
    gold.write_text("3\t0-0 4-1\t\ta b\tx y\n")
    with pytest.raises(bench.GoldError, match=rf"^{gold}:1: sure: a word past the pair's 2 "
                                              r"source / 2 target words, got '4-1'"):
        bench.read_gold(gold)
    assert len(bench.read_gold(bench.GOLD)) >= 40  # the measured set reads


def test_runs_stamped_before_the_alignment_keys_stay_up_to_date():
    from pipelines.config import load_config
    from pipelines.run import STAGES, config_values, fingerprint

    demo = load_config("demo")
    for stage in STAGES:
        values = config_values(demo, stage)
        assert not {"data.alignments", "train.guided_alignment_weight",
                    "model.alignment_heads"} & set(values)
    stamped = {"average": "model train.average_last train.average_from"}  # before the keys
    stage = next(stage for stage in STAGES if stage.name == "average")
    before = dataclasses.replace(stage, keys=tuple(stamped["average"].split()))
    assert fingerprint(demo, stage) == fingerprint(demo, before)
