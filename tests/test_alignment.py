"""Word alignments from the alignment layer's cross-attention: the graph's rules and Python's
(CTranslate2's path) agree, the SavedModel's `align` signature and CTranslate2's
`return_attention` give the same pairs, and `translate --alignments` / `--markup` print them."""
import dataclasses
import re

import numpy as np
import pytest
import sentencepiece as spm
import tensorflow as tf

from export.ct2_runtime import CTranslate2Translator
from export.ctranslate2 import export_ctranslate2
from export.markup import parse_markup
from export.word_alignment import (AlignmentError, align_words, format_alignment,
                                   parse_alignment)
from export_helpers import SENTENCES, source_ids
from keras_transformer import alignment
from keras_transformer.tokenizer import EOS_ID, PAD_ID, vocabulary
from keras_transformer.words import piece_words, word_marks
from pipelines.cli import main

MARKUP = ['<b>sun</b> moon <i>star</i>', '<p>the <a href="x>y">river</a> and the stone</p>',
          'bird<x id="1"/>', '<b></b>fish <i><b>fish</b> fish</i>', ""]


@pytest.fixture(scope="module")
def ct2_model(exported):
    """The shared export's float32 CTranslate2 model directory (export_translator's model)."""
    return exported.ctranslate2 / "float32"


def test_pieces_are_merged_into_words_alike_in_the_graph_and_in_python(export_translator):
    pieces = [piece for piece, _ in vocabulary(export_translator.spm_model_proto)]
    marks = tf.constant(word_marks(pieces))
    word = next(piece for piece in pieces if piece.startswith("▁") and len(piece) > 1)
    rows = [["s", "▁", "<0xE6>", "<0x20>", word, "n"], [word, "▁", "s", "<0x0A>"],
            ["▁", word, "▁"], ["▁", "s", "<0x20>"]]
    ids = [[pieces.index(piece) for piece in row] + [EOS_ID] + [PAD_ID] * (6 - len(row))
           for row in rows]
    graph = alignment.piece_words(tf.constant(ids), marks).numpy()
    assert graph.tolist() == [[0, -1, 1, -1, 2, 2, -1], [0, -1, 1, -1, -1, -1, -1],
                              [-1, 0, -1, -1, -1, -1, -1], [-1, 0, -1, -1, -1, -1, -1]]
    assert [piece_words(row) for row in rows] == [row[:len(pieces)].tolist() for row, pieces
                                                  in zip(graph, rows)]


def test_the_words_of_any_pieces_are_their_decoded_texts_whitespace_words(export_translator):
    """Whitespace pieces (the mark alone, space bytes) next to words, at either end, repeated:
    the words counted are the decoded text's `split()`, word by word."""
    processor = spm.SentencePieceProcessor(model_proto=export_translator.spm_model_proto)
    pieces = [piece for piece, _ in vocabulary(export_translator.spm_model_proto)]
    texts = [piece for piece in pieces[4:] if not piece.startswith("<")]
    choices = texts[:40] + ["▁", "▁", "▁", "<0x20>", "<0x0A>"]
    rng = np.random.default_rng(0)
    for _ in range(300):
        row = list(rng.choice(choices, rng.integers(1, 8)))
        words = piece_words(row)
        joined = ["".join(piece for piece, index in zip(row, words) if index == word)
                  .replace("▁", "") for word in range(max(words, default=-1) + 1)]
        assert joined == processor.decode_pieces(row).split(), row


def test_a_target_word_takes_the_source_word_of_most_attention_summed_over_pieces():
    attention = np.array([[0.3, 0.3, 0.4, 0.0],    # ▁x: a+b 0.6 > c 0.4
                          [0.1, 0.0, 0.3, 0.6],    # ▁y: c 0.3 (the EOS column left out)
                          [0.25, 0.25, 0.0, 0.5]])  # z, with ▁y: a+b 0.6 > c 0.3
    assert align_words(attention, ["▁a", "b", "▁c"], ["▁x", "▁y", "z"]) == [(0, 0), (0, 1)]
    assert align_words(attention, [], ["▁x"]) == []
    assert format_alignment([(0, 0), (2, 1)]) == "0-0 2-1"
    assert parse_alignment(" 0-0  2-1 ") == [(0, 0), (2, 1)] and parse_alignment("") == []
    with pytest.raises(AlignmentError, match="'1:2' is not SOURCE-TARGET word indices"):
        parse_alignment("0-0 1:2")


def test_a_multilingual_sources_language_token_is_no_word_of_the_line():
    """Source `▁ <2fr> ▁a b ▁c`: the token's word (0) left out in the graph and in Python, the
    line's words counted from 0, whatever attention the token draws."""
    pieces = ["<pad>", "<unk>", "<s>", "</s>", "<2fr>", "▁", "▁a", "b", "▁c", "▁x", "▁y"]
    marks = tf.constant(word_marks(pieces))
    source, target = ["▁", "<2fr>", "▁a", "b", "▁c"], ["▁x", "▁y"]
    attention = np.array([[0.1, 0.5, 0.1, 0.0, 0.3, 0.0],    # ▁x: the token, then ▁c
                          [0.0, 0.2, 0.3, 0.3, 0.2, 0.0]])  # ▁y: ▁a b
    ids = [[pieces.index(piece) for piece in source] + [EOS_ID]]
    target_ids = [[pieces.index(piece) for piece in target]]
    for skip, expected in [(0, [(0, 0), (1, 1)]), (1, [(1, 0), (0, 1)])]:
        graph = alignment.word_alignment(tf.constant([attention], tf.float32), tf.constant(ids),
                                         tf.constant(target_ids), marks, skip).numpy()
        assert list(enumerate(graph[0])) == [(target, source) for source, target in expected]
        assert align_words(attention, source, target, skip) == expected
    assert align_words(attention, ["▁", "<2fr>"], target, 1) == []  # a blank line's token


def test_the_graph_follows_the_python_rules_on_the_models_attention(export_translator):
    translations = export_translator.translate_lines(SENTENCES)
    served = export_translator.align(text=tf.constant(SENTENCES),
                                     target=tf.constant(translations))["alignment"].numpy()
    processor_pieces = [piece for piece, _ in vocabulary(export_translator.spm_model_proto)]
    source = source_ids(export_translator.spm_model_proto, SENTENCES)
    target = source_ids(export_translator.spm_model_proto, translations)  # pieces, EOS, PAD
    target = np.where(target == EOS_ID, PAD_ID, target)
    attention = alignment.target_attention(export_translator.model, source, target).numpy()
    for line, text, row, sources, targets, expected in zip(SENTENCES, translations, attention,
                                                           source, target, served):
        pairs = align_words(row, [processor_pieces[i] for i in sources if i > EOS_ID],
                            [processor_pieces[i] for i in targets if i > EOS_ID])
        assert expected.decode() == format_alignment(pairs)
        assert [target for _, target in pairs] == list(range(len(text.split())))
        assert all(source < len(line.split()) for source, _ in pairs)


def test_the_saved_model_and_ctranslate2_give_the_same_alignments(saved_model_translator,
                                                                   ct2_model):
    lines = SENTENCES + ["", "  "]
    served = saved_model_translator.aligned_lines(lines)
    ct2 = CTranslate2Translator(ct2_model.parent).aligned_lines(lines)
    # CTranslate2's beam search keeps finished hypotheses by its own rule, so on this tiny
    # model a line or two end on another translation (scored higher by one runtime or the
    # other). Where the translations are the same, so are the pairs.
    alike = [(ours, theirs) for ours, theirs in zip(served, ct2) if ours[0] == theirs[0]]
    assert len(alike) > len(lines) // 2 and all(ours == theirs for ours, theirs in alike)
    assert served[-2:] == [("", ""), ("", "")] and all(pairs for _, pairs in served[:-2])


def test_translate_prints_alignments_and_carries_markup(saved_model_dir, ct2_model,
                                                        saved_model_translator, tmp_path,
                                                        capsysbinary):
    source = tmp_path / "lines.txt"
    source.write_text("\n".join(SENTENCES) + "\n")
    for model_dir, runtime in ((saved_model_dir, saved_model_translator),
                               (ct2_model, CTranslate2Translator(ct2_model.parent))):
        assert main(["translate", str(model_dir), str(source), "--alignments"]) == 0
        assert capsysbinary.readouterr().out.decode().splitlines() == [
            f"{text} ||| {pairs}" for text, pairs in runtime.aligned_lines(SENTENCES)]
    source.write_text("\n".join(MARKUP) + "\n")
    assert main(["translate", str(saved_model_dir), str(source), "--markup",
                 "--alignments"]) == 0
    rows = [row.split(" ||| ") for row in capsysbinary.readouterr().out.decode().splitlines()]
    plain = [parse_markup(line).text for line in MARKUP]
    assert [pairs for _, pairs in rows] == [p for _, p in saved_model_translator.aligned_lines(
        plain)]
    for line, (marked, _) in zip(MARKUP, rows):
        assert sorted(re.findall(r"<[^<]*?>", marked)) == sorted(re.findall(r"<[^<]*?>",
                                                                              line))  # once each
        parse_markup(marked)  # well-formed
    assert rows[-1] == ["", ""]


def test_alignments_and_markup_are_refused_before_any_work(exported, tmp_path, capsys):
    source = tmp_path / "lines.txt"
    source.write_text("<b>bird</b>\nfish <i>x\n")
    output = tmp_path / "out.txt"
    for args, error in [
            ([str(exported.onnx), "--alignments"],
             f"--alignments: {exported.onnx} is an ONNX export, which gives no word "
             f"alignments; use --runtime tf (the SavedModel's align signature) or --runtime "
             f"ct2"),
            ([str(exported.saved_model), "--markup", "--n-best", "2"],
             "--markup: not with --n-best, --prefix-file, --scores, --tokens or --sampling-*"),
            ([str(exported.saved_model), "--alignments", "--sampling-topk", "5"],
             "--alignments: not with --n-best, --prefix-file, --scores, --tokens or "
             "--sampling-*"),
            ([str(exported.saved_model), "--markup"],
             f"{source}:2: <i> is not closed by the end of the line")]:
        assert main(["translate", args[0], str(source), *args[1:], "--output",
                     str(output)]) == 2
        assert capsys.readouterr().err == f"keras-transformer translate: error: {error}\n"
        assert not output.exists()


def test_ctranslate2_returns_head_0_alone_for_a_guided_model(export_translator, tmp_path):
    """A model of alignment_heads 1 (guided alignment): CTranslate2's returned attention is
    head 0 of the alignment layer, as `target_attention` computes it, not the heads' mean."""
    import ctranslate2

    from export.translator import Translator
    from keras_transformer.model import Transformer

    config = dataclasses.replace(export_translator.model.model_config, alignment_heads=1)
    model = Transformer(config)
    model.set_weights(export_translator.model.get_weights())
    directory = export_ctranslate2(Translator(model, export_translator.spm_model_proto,
                                              export_translator.settings), tmp_path,
                                   ("float32",))["float32"]
    pieces = [piece for piece, _ in vocabulary(export_translator.spm_model_proto)]
    source = source_ids(export_translator.spm_model_proto, SENTENCES[:1])  # [1, s]: .. EOS
    result = ctranslate2.Translator(str(directory)).translate_batch(
        [[pieces[i] for i in source[0] if i > EOS_ID]], beam_size=1, return_attention=True)[0]
    target = np.array([[pieces.index(piece) for piece in result.hypotheses[0]]])  # [1, t]
    theirs = np.array(result.attention[0])  # [t, s - 1]: the source's EOS left out
    rows, columns = theirs.shape
    ours = alignment.target_attention(model, source, target).numpy()[0]  # [t, s]
    np.testing.assert_allclose(theirs, ours[:rows, :columns], atol=1e-4)
    averaged = alignment.target_attention(export_translator.model, source, target).numpy()[0]
    assert not np.allclose(theirs, averaged[:rows, :columns], atol=1e-3)


def test_translate_aligned_aligns_translations_cut_at_the_models_positions(export_translator):
    """translate_aligned gives `translate`'s outputs and `align`'s pairs in one call, also for
    translations that end at the model's positions without EOS, which `align` accepts (and no
    longer target)."""
    from export.translator import Translator
    from keras_transformer.decoding_settings import DecodingSettings
    from keras_transformer.model import Transformer

    config = dataclasses.replace(export_translator.model.model_config, max_length=5)
    model = Transformer(config)
    model.set_weights(export_translator.model.get_weights())
    translator = Translator(model, export_translator.spm_model_proto, DecodingSettings())
    lines = SENTENCES + [""]
    output = translator.translate_aligned(tf.constant(lines))
    expected = translator.translate(tf.constant(lines))
    np.testing.assert_array_equal(output["translation"], expected["translation"])
    np.testing.assert_array_equal(output["score"], expected["score"])
    ids = translator.translate_ids(source_ids(translator.spm_model_proto, lines))["target_ids"]
    ids = ids.numpy()
    assert (((ids != PAD_ID).sum(axis=1) == 5) & (ids != EOS_ID).all(axis=1)).any()  # cut
    translations = [text.decode() for text in output["translation"].numpy()]
    served = [text.decode() for text in output["alignment"].numpy()]
    assert served == [text.decode() for text in translator.align(
        text=tf.constant(lines), target=tf.constant(translations))["alignment"].numpy()]
    assert [[target for _, target in parse_alignment(pairs)] for pairs in served] == \
        [list(range(len(text.split()))) for text in translations]
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"a target longer than the model aligns \(5 pieces\)"):
        translator.align(text=tf.constant(["bird"]), target=tf.constant(["stone " * 6]))
