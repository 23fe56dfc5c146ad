"""pipelines/training/train_data.py: the token budget checked against the replicas that split
it, the corpora of a run mixed by their weights (each worker's share too), and the batches'
iterator deleted in a thread of its own."""
import json
import threading
import weakref
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.tokenizer import Tokenizer, train_sentencepiece, vocabulary
from pipelines import InputError
from pipelines.config import load_config
from pipelines.corpus.shards import (DEFAULT_CORPUS, CorpusShards, shard_stems, train_corpora,
                                     write_manifest)
from pipelines.corpus.tags import tagged
from pipelines.training.train_data import Batches, check_batch_tokens, train_dataset_fn
from tiny_run import make_tiny_run


def test_the_budget_must_hold_a_longest_pair_in_every_replica(tmp_path: Path) -> None:
    config = load_config(make_tiny_run(tmp_path))  # max_length 40, batch_tokens 320
    check_batch_tokens(config, replicas=8)  # 8 x 40 = 320: fits
    with pytest.raises(InputError, match=r"^train.batch_tokens: must be at least 360 so that "
                       r"each of 9 replica\(s\) holds a pair of data.max_length \(40\) tokens "
                       r"padded to its length bucket \(9 x 40\), got 320$"):
        check_batch_tokens(config, replicas=9)


def test_the_batches_iterator_is_deleted_in_a_thread_of_its_own() -> None:
    """`close()` leaves the run nothing to wait for: TensorFlow's deletion of the iterator
    (which can wait seconds for tf.data's autotuning thread) runs in the thread `close` starts,
    which holds its only reference."""
    batches = Batches(tf.data.Dataset.range(3).prefetch(tf.data.AUTOTUNE))
    assert [int(next(batches)) for _ in range(2)] == [0, 1]
    deleted_in = []
    iterator = weakref.ref(vars(batches)["_iterator"],
                           lambda _: deleted_in.append(threading.current_thread().name))
    batches.close()
    for thread in threading.enumerate():
        if thread.name == "deleting the train batches' iterator":
            thread.join()
    assert iterator() is None and deleted_in == ["deleting the train batches' iterator"]


WEIGHTS = (5.0, 3.0, 2.0)  # of corpora a, b and bt (tagged <bt>)


def mixed_run(tmp_path: Path, manifest: bool = True) -> Path:
    """A tiny run whose train split is three corpora of 300, 200 and 100 pairs (the last
    tagged <bt>, a user symbol of its vocabulary), with a manifest of this version or, with
    `manifest` False, one of an earlier version (no corpora) listing the same shards."""
    config = make_tiny_run(tmp_path)
    data = tmp_path / "run" / "data"
    corpora = [CorpusShards(name, weight, tag, (pairs,)) for name, weight, tag, pairs in
               zip(("a", "b", "bt"), WEIGHTS, (None, None, "<bt>"), (300, 200, 100))]
    stems = shard_stems([(corpus.name, 1) for corpus in corpora])
    for number, (corpus, [stem]) in enumerate(zip(corpora, stems)):
        words = [f"w{number}{i % 7} x{i % 11} y{i % 5}" for i in range(corpus.pairs[0])]
        (data / f"{stem}.src").write_text("".join(tagged(w, corpus.tag) + "\n" for w in words))
        (data / f"{stem}.tgt").write_text("".join(w.upper() + "\n" for w in words))
    samples = [data / f"{stem}.{side}" for [stem] in stems for side in ("src", "tgt")]
    (tmp_path / "run" / "vocab" / "spm.model").write_bytes(
        train_sentencepiece(samples, vocab_size=300, user_symbols=["<bt>"]))
    write_manifest(data, corpora)
    if not manifest:
        old = json.loads((data / "train.json").read_text())
        for shard in old["shards"]:
            del shard["corpus"], shard["weight"], shard["tag"]
        (data / "train.json").write_text(json.dumps(old))
    return config


def corpus_shares(dataset: tf.data.Dataset, pairs: int, tag_id: int) -> np.ndarray:
    """Each corpus's share of the first `pairs` pairs (at least); checks that exactly the
    pairs of the tagged corpus (2) have the tag's id in their source."""
    counts = np.zeros(3)
    for batch in dataset:
        corpus = batch["corpus"].numpy()  # [batch]
        has_tag = (batch["source_ids"].numpy() == tag_id).any(axis=1)  # [batch]
        assert (has_tag == (corpus == 2)).all()
        counts += np.bincount(corpus, minlength=3)
        if counts.sum() >= pairs:
            return counts / counts.sum()


def test_corpora_are_mixed_by_their_weights_and_the_tag_is_one_id(tmp_path: Path) -> None:
    config = load_config(mixed_run(tmp_path))
    tokenizer = Tokenizer.from_file(tmp_path / "run" / "vocab" / "spm.model")
    [tag_id] = [i for i, (piece, _) in enumerate(vocabulary(tokenizer.model_proto))
                if piece == "<bt>"]
    assert tokenizer.tokenize(tf.constant(["<bt> w00"])).to_list()[0].count(tag_id) == 1
    dataset = train_dataset_fn(config, seed=1)(tf.distribute.InputContext())
    shares = corpus_shares(dataset, 6000, tag_id)
    expected = np.array(WEIGHTS) / sum(WEIGHTS)
    print("realised mix", shares.round(4).tolist(), "weights", expected.tolist())
    assert np.abs(shares - expected).max() < 0.02  # within 2 points over 6,000 pairs
    # Two workers: each reads its share of every corpus, in the same mix.
    for worker in (0, 1):
        context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=worker,
                                             num_replicas_in_sync=2)
        shares = corpus_shares(train_dataset_fn(config, seed=1)(context), 4000, tag_id)
        assert np.abs(shares - expected).max() < 0.02, (worker, shares)


def test_a_manifest_without_corpora_is_one_corpus(tmp_path: Path) -> None:
    config = load_config(mixed_run(tmp_path, manifest=False))
    [corpus] = train_corpora(tmp_path / "run" / "data")
    assert (corpus.name, corpus.weight, corpus.tag, corpus.pairs) == (
        DEFAULT_CORPUS, 1.0, None, (300, 200, 100))
    batch = next(iter(train_dataset_fn(config, seed=1)(tf.distribute.InputContext())))
    assert set(batch) == {"source_ids", "target_ids"}
