"""keras_transformer/tokenizer.py: SentencePiece training and the lossless in-graph tokenizer,
against SentencePiece itself."""
import numpy as np
import pytest
import sentencepiece as spm
import tensorflow as tf
from sentencepiece import sentencepiece_model_pb2 as model_pb2

from keras_transformer.tokenizer import (BOS_ID, EOS_ID, PAD_ID, UNK_ID, Tokenizer,
                                         model_type, train_sentencepiece, vocabulary)

SENTENCES = [f"The {w} number {i} walks into the garden, and {w}s sing." for i in range(60)
             for w in ("cat", "dog", "bird")] + \
            [f"Le {w} numéro {i} entre dans le jardin, et les {w}s chantent." for i in range(60)
             for w in ("chat", "chien", "oiseau")]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("corpus") / "text"
    path.write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def model_proto(corpus):
    return train_sentencepiece([corpus], vocab_size=400, seed=7)


def test_training_is_deterministic_with_fixed_special_ids(corpus, model_proto):
    assert train_sentencepiece([corpus], vocab_size=400, seed=7) == model_proto
    processor = spm.SentencePieceProcessor(model_proto=model_proto)
    assert [processor.id_to_piece(i) for i in (PAD_ID, UNK_ID, BOS_ID, EOS_ID)] == \
        ["<pad>", "<unk>", "<s>", "</s>"]
    assert str(corpus).encode() not in model_proto  # no trace of the machine
    pieces = vocabulary(model_proto)
    assert len(pieces) == Tokenizer(model_proto).vocab_size <= 400
    assert pieces[4] == ("<0x00>", 0.0)  # byte fallback


def test_unigram_trains_too(corpus, model_proto):
    unigram = train_sentencepiece([corpus], vocab_size=350, model_type="unigram")
    assert Tokenizer(unigram).vocab_size <= 350
    assert (model_type(unigram), model_type(model_proto)) == ("unigram", "bpe")
    with pytest.raises(ValueError, match="model_type"):
        train_sentencepiece([corpus], vocab_size=350, model_type="word")


def test_tokenize_matches_sentencepiece_and_frames_with_bos_eos(model_proto):
    tokenizer = Tokenizer(model_proto)
    text = tf.constant(["The cat sings.", "Le chien chante."])
    ids = tokenizer.tokenize(text)  # [2, (time)]
    expected = spm.SentencePieceProcessor(model_proto=model_proto).encode(
        ["The cat sings.", "Le chien chante."])
    assert ids.dtype == tf.int32 and ids.to_list() == expected
    framed = tokenizer.tokenize(text, add_bos=True, add_eos=True).to_list()
    assert framed == [[BOS_ID] + row + [EOS_ID] for row in expected]
    assert tokenizer.tokenize(text, add_eos=True).to_list() == [row + [EOS_ID] for row in expected]
    ragged = tokenizer.tokenize(tf.constant(["", "The cat sings."]), add_bos=True)
    assert ragged.to_list() == [[BOS_ID], [BOS_ID] + expected[0]]


@pytest.mark.parametrize("add_bos,add_eos", [(False, False), (False, True), (True, True)])
def test_whitespace_runs_read_as_one_space_and_a_cut_keeps_bos_and_eos(model_proto, add_bos,
                                                                        add_eos):
    processor = spm.SentencePieceProcessor(model_proto=model_proto)
    lines = ["The cat sings.", "", "   ", "The\tcat  sings \n now.\r", "The cat " * 2000]
    ids = Tokenizer(model_proto).tokenize(tf.constant(lines), add_bos=add_bos, add_eos=add_eos,
                                          max_length=12)
    kept = 12 - add_bos - add_eos
    assert ids.to_list() == [[BOS_ID] * add_bos + processor.encode(" ".join(line.split()))[:kept]
                             + [EOS_ID] * add_eos for line in lines]
    assert ids.row_lengths().numpy()[-1] == 12  # the 4,000-word line


def test_normalization_is_identity_but_for_the_noncharacter_u_ffff(model_proto):
    spec = model_pb2.ModelProto.FromString(model_proto).normalizer_spec
    # A charsmap, so that tensorflow-text logs no "precompiled_charsmap is empty"; the rules
    # file is not recorded (a temporary path).
    assert spec.precompiled_charsmap and not spec.normalization_rule_tsv
    tokenizer = Tokenizer(model_proto)
    texts = ["\ufb01ne \u2460 \u212b", "a\uffffb"]  # NFKC would give "fine 1 \u00c5"
    decoded = tokenizer.detokenize(tokenizer.tokenize(tf.constant(texts))).numpy().tolist()
    assert decoded == [texts[0].encode(), "a\ufffdb".encode()]


def test_detokenize_is_lossless_on_clean_text(model_proto):
    tokenizer = Tokenizer(model_proto)
    texts = ["The cat sings.", "Ünïcödé, 漢字 and emoji 😀 never seen in training!",
             "tab-free   no: single spaces only", "Œuvre «entre» — dans l'été…", "x", ""]
    texts = [" ".join(t.split()) for t in texts]
    ids = tokenizer.tokenize(tf.constant(texts))
    assert UNK_ID not in ids.flat_values.numpy()
    decoded = [b.decode("utf-8") for b in tokenizer.detokenize(ids).numpy()]
    assert decoded == texts


def test_detokenize_matches_sentencepiece_on_random_ids(model_proto):
    """Random pieces, byte pieces included (invalid UTF-8 gives U+FFFD), decode row by row as
    SentencePiece decodes them, up to the first EOS; generated line breaks become spaces."""
    processor = spm.SentencePieceProcessor(model_proto=model_proto)
    tokenizer = Tokenizer(model_proto)
    line_break, carriage_return, space = (tokenizer.tables.line_break,
                                          tokenizer.tables.carriage_return, tokenizer.tables.space)
    rng = np.random.default_rng(0)
    ids = rng.integers(4, processor.get_piece_size(), size=(64, 12)).astype(np.int32)
    ids[:8] = rng.integers(4, 4 + 256, size=(8, 12))  # byte pieces only
    ids[8, 3] = EOS_ID
    ids[9, 5:] = PAD_ID
    ids[10, 2], ids[10, 4] = line_break, carriage_return
    ids[11] = PAD_ID
    ids[12, 0] = BOS_ID
    decoded = [text.decode("utf-8") for text in tokenizer.detokenize(tf.constant(ids)).numpy()]
    for row, text in zip(ids, decoded):
        row = list(row[:list(row).index(EOS_ID)] if EOS_ID in row else row)
        row = [space if i in (line_break, carriage_return) else i for i in row]
        assert text == processor.decode(row)
    assert decoded[11] == "" and "\n" not in "".join(decoded)
    assert "\ufffd" in "".join(decoded[:8])


def test_a_model_without_byte_fallback_is_refused(tmp_path):
    (tmp_path / "text").write_text("abc def\n" * 50)
    spm.SentencePieceTrainer.train(input=str(tmp_path / "text"), model_prefix=str(tmp_path / "m"),
                                   vocab_size=10, minloglevel=2)
    with pytest.raises(ValueError, match="byte-fallback"):
        Tokenizer((tmp_path / "m.model").read_bytes())


def test_detokenize_stops_at_eos_and_skips_pad_and_bos(model_proto):
    tokenizer = Tokenizer(model_proto)
    cat, dog = tokenizer.tokenize(tf.constant(["The cat", "a dog"])).to_list()
    padded = tf.constant([[BOS_ID] + cat + [EOS_ID] + dog + [PAD_ID] * 3,
                          [BOS_ID] + dog + [PAD_ID] * (len(cat) + 4)])  # [2, time]
    assert tokenizer.detokenize(padded).numpy().tolist() == [b"The cat", b"a dog"]
    assert tokenizer.detokenize(tf.ragged.constant([cat, dog])).numpy().tolist() == \
        [b"The cat", b"a dog"]


def test_from_file_and_graph_mode(tmp_path, model_proto):
    path = tmp_path / "spm.model"
    path.write_bytes(model_proto)
    tokenizer = Tokenizer.from_file(path)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
    def round_trip(text):
        return tokenizer.detokenize(tokenizer.tokenize(text, add_bos=True, add_eos=True))

    assert round_trip(tf.constant(["Le chat chante."])).numpy().tolist() == [b"Le chat chante."]


def test_a_tokenizer_made_inside_a_traced_function(model_proto):
    """As the Translator makes it: the traced function alone holds the SentencePiece model."""
    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
    def round_trip(text):
        tokenizer = Tokenizer(model_proto)
        return tokenizer.detokenize(tokenizer.tokenize(text, add_eos=True, max_length=4))

    ops = {op.type for op in round_trip.get_concrete_function().graph.get_operations()}
    assert {"SentencepieceOp", "SentencepieceTokenizeOp", "SentencepieceDetokenizeOp"} <= ops
    processor = spm.SentencePieceProcessor(model_proto=model_proto)
    text = "Le chat chante dans le jardin."
    assert round_trip(tf.constant([text])).numpy()[0].decode() == \
        processor.decode(processor.encode(text)[:3])
