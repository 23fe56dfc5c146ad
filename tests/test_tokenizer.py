"""keras_transformer/tokenizer.py: SentencePiece training and the lossless in-graph tokenizer."""
import pytest
import sentencepiece as spm
import tensorflow as tf
from sentencepiece import sentencepiece_model_pb2 as model_pb2

from keras_transformer.tokenizer import (BOS_ID, EOS_ID, PAD_ID, UNK_ID, Tokenizer,
                                         train_sentencepiece, vocabulary)

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


def test_unigram_trains_too(corpus):
    unigram = train_sentencepiece([corpus], vocab_size=350, model_type="unigram")
    assert Tokenizer(unigram).vocab_size <= 350
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

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def round_trip(text):
        return tokenizer.detokenize(tokenizer.tokenize(text, add_bos=True, add_eos=True))

    assert round_trip(tf.constant(["Le chat chante."])).numpy().tolist() == [b"Le chat chante."]
