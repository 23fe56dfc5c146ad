"""Greedy and beam search against table-driven scoring functions (no model)."""
import itertools

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.decoding_settings import DecodingSettingsError
from keras_transformer.decoding import beam_search
from keras_transformer.greedy import greedy_search
from keras_transformer.search_primitives import NEG_INF, SENTENCE_KEY, length_penalty

BOS, EOS = 0, 1
ROWS = 4099  # hash buckets of a prefix (a prime)
MAX_TIME = 64


class PrefixTable:
    """Deterministic next-token logits for any prefix: a random table row picked by a hash of
    the prefix, plus a per-sentence bias read from the cache."""

    def __init__(self, seed: int, vocab: int, eos_boost: float = 0.0, scale: float = 2.0):
        rng = np.random.default_rng(seed)
        self.table = (scale * rng.standard_normal([ROWS, vocab])).astype(np.float32)
        self.table[:, EOS] += eos_boost
        self.weights = rng.integers(1, ROWS, size=MAX_TIME).astype(np.int32)
        self.vocab = vocab

    def logits(self, prefixes: tf.Tensor, bias: tf.Tensor) -> tf.Tensor:
        """prefixes int32 [n, time] (starting with BOS), bias float32 [n, vocab] -> [n, vocab]."""
        weights = tf.constant(self.weights)[: tf.shape(prefixes)[1]]
        rows = tf.math.floormod(tf.reduce_sum(prefixes * weights, axis=1), ROWS)  # [n]
        return tf.gather(tf.constant(self.table), rows) + bias

    def np_log_probs(self, prefix: tuple[int, ...], bias: np.ndarray) -> np.ndarray:
        row = int(np.dot(prefix, self.weights[: len(prefix)].astype(np.int64)) % ROWS)
        logits = self.table[row].astype(np.float64) + bias
        return logits - np.logaddexp.reduce(logits)

    def from_ids(self, ids: tf.Tensor, step: tf.Tensor, cache: dict) -> tuple[tf.Tensor, dict]:
        """Reads the prefix from `ids`; the cache is constant."""
        return self.logits(ids, cache["bias"]), cache

    def from_cache(self, ids: tf.Tensor, step: tf.Tensor, cache: dict) -> tuple[tf.Tensor, dict]:
        """Reads the prefix only from a cache that accumulates ids[:, -1] like self-attention
        keys [n, heads, time, depth], so a wrongly reordered cache changes the logits."""
        last = tf.cast(ids[:, -1], tf.float32)[:, None, None, None]  # [n, 1, 1, 1]
        keys = tf.concat([cache["layer_0"]["keys"], last], axis=2)  # [n, 1, step + 1, 1]
        prefixes = tf.cast(keys[:, 0, :, 0], tf.int32)  # [n, step + 1]
        # A constant source-side tensor of unknown length shifts the logits per sentence.
        bias = cache["bias"] + tf.reduce_mean(cache["memory"], axis=1, keepdims=True)
        return self.logits(prefixes, bias), {**cache, "layer_0": {"keys": keys}}


def make_cache(vocab: int, batch: int, seed: int = 0, src_len: int = 5) -> dict:
    rng = np.random.default_rng(seed)
    return {
        "bias": tf.constant(rng.standard_normal([batch, vocab]), tf.float32),
        "memory": tf.constant(rng.standard_normal([batch, src_len]), tf.float32),
        "layer_0": {"keys": tf.zeros([batch, 1, 0, 1])},
    }


def hypotheses(ids: np.ndarray) -> list[tuple[int, ...]]:
    """ids [n, time] padded with -1 -> token tuples."""
    return [tuple(int(t) for t in row if t != -1) for row in ids]


def brute_force(table: PrefixTable, bias: np.ndarray, max_len: int,
                alpha: float) -> list[tuple[float, tuple[int, ...]]]:
    """Every complete output (ending at EOS or at max_len) with its score, best first."""
    results = []
    for length in range(1, max_len + 1):
        for body in itertools.product([t for t in range(table.vocab) if t != EOS],
                                      repeat=length - 1):
            ends = [EOS] if length < max_len else range(table.vocab)
            log_prob = sum(table.np_log_probs((BOS,) + body[:i], bias)[body[i]]
                           for i in range(len(body)))
            last_log_probs = table.np_log_probs((BOS,) + body, bias)
            penalty = ((5 + length) / 6) ** alpha
            results += [((log_prob + last_log_probs[end]) / penalty, body + (end,))
                        for end in ends]
    return sorted(results, reverse=True)


@pytest.mark.parametrize("vocab,max_len,alpha,seed",
                         [(4, 3, 0.6, 0), (4, 3, 0.0, 1), (3, 4, 0.6, 2), (3, 4, 1.0, 3)])
def test_wide_beam_search_is_exact(vocab, max_len, alpha, seed):
    table = PrefixTable(seed, vocab)
    cache = make_cache(vocab, batch=1, seed=seed)
    expected = brute_force(table, cache["bias"].numpy()[0], max_len, alpha)
    # A beam as wide as the number of outputs holds every extension at every step.
    for stop in ("full", "bound"):  # "full": every output has finished
        ids, scores = beam_search(table.from_ids, cache, tf.constant([max_len]),
                                  beam_size=len(expected), bos_id=BOS, eos_id=EOS, alpha=alpha,
                                  pad_id=-1, stop=stop)
        assert hypotheses(ids.numpy()[0]) == [hyp for _, hyp in expected]
        np.testing.assert_allclose(scores.numpy()[0], [s for s, _ in expected], rtol=1e-5,
                                   atol=1e-5)


def test_greedy_search_follows_the_argmax():
    table = PrefixTable(4, vocab=5)
    cache = make_cache(5, batch=1)
    ids, score = greedy_search(table.from_ids, cache, tf.constant([6]), bos_id=BOS,
                               eos_id=EOS, pad_id=-1)
    prefix, log_prob = (BOS,), 0.0
    while prefix[-1:] != (EOS,) and len(prefix) <= 6:
        log_probs = table.np_log_probs(prefix, cache["bias"].numpy()[0])
        prefix, log_prob = prefix + (int(np.argmax(log_probs)),), log_prob + log_probs.max()
    assert hypotheses(ids.numpy()) == [prefix[1:]]
    np.testing.assert_allclose(score.numpy(), [log_prob], rtol=1e-5)


@pytest.mark.parametrize("seed,alpha", [(0, 0.0), (1, 0.6), (2, 1.0), (3, 0.6)])
def test_beam_1_equals_greedy(seed, alpha):
    table = PrefixTable(seed, vocab=6, eos_boost=1.0)
    cache = make_cache(6, batch=4, seed=seed)
    max_lens = tf.constant([3, 8, 12, 20])
    greedy_ids, greedy_log_probs = greedy_search(table.from_ids, cache, max_lens, bos_id=BOS,
                                                 eos_id=EOS, pad_id=-1)
    beam_ids, beam_scores = beam_search(table.from_ids, cache, max_lens, beam_size=1,
                                        bos_id=BOS, eos_id=EOS, alpha=alpha, pad_id=-1)
    np.testing.assert_array_equal(beam_ids.numpy()[:, 0], greedy_ids.numpy())
    lengths = [len(hyp) for hyp in hypotheses(greedy_ids.numpy())]
    expected = greedy_log_probs.numpy() / length_penalty(tf.constant(lengths), alpha).numpy()
    np.testing.assert_allclose(beam_scores.numpy()[:, 0], expected, rtol=1e-6)


def test_beam_1_with_maximum_lengths_all_0_decodes_nothing():
    cache = make_cache(6, batch=2)
    ids, scores = beam_search(PrefixTable(0, vocab=6).from_ids, cache, tf.constant([0, 0]),
                              beam_size=1, bos_id=BOS, eos_id=EOS, pad_id=-1)
    assert ids.shape == (2, 1, 0) and scores.numpy().tolist() == [[0.0], [0.0]]


def test_cache_follows_its_beam():
    table = PrefixTable(5, vocab=7)
    cache = make_cache(7, batch=3)
    max_lens = tf.constant([4, 9, 6])
    for search in (lambda fn: beam_search(fn, cache, max_lens, beam_size=4, bos_id=BOS,
                                          eos_id=EOS),
                   lambda fn: greedy_search(fn, cache, max_lens, bos_id=BOS, eos_id=EOS)):
        from_cache, from_ids = search(table.from_cache), search(table.from_ids)
        np.testing.assert_array_equal(from_cache[0].numpy(), from_ids[0].numpy())
        np.testing.assert_allclose(from_cache[1].numpy(), from_ids[1].numpy(), rtol=1e-6)


def test_each_sentence_keeps_its_own_max_length():
    table = PrefixTable(6, vocab=6, eos_boost=-3.0)  # EOS unlikely: outputs run long
    cache = make_cache(6, batch=3, src_len=4)
    max_lens = [1, 4, 7]
    ids, scores = beam_search(table.from_cache, cache, tf.constant(max_lens), beam_size=3,
                              bos_id=BOS, eos_id=EOS, pad_id=-1)
    assert ids.shape[2] == max(max_lens)
    for b, max_len in enumerate(max_lens):
        lengths = [len(hyp) for hyp in hypotheses(ids.numpy()[b])]
        assert max(lengths) == max_len and min(lengths) >= 1
        alone = tf.nest.map_structure(lambda t: t[b:b + 1], cache)
        ids_alone, scores_alone = beam_search(table.from_cache, alone, tf.constant([max_len]),
                                              beam_size=3, bos_id=BOS, eos_id=EOS, pad_id=-1)
        assert hypotheses(ids_alone.numpy()[0]) == hypotheses(ids.numpy()[b])
        np.testing.assert_allclose(scores_alone.numpy()[0], scores.numpy()[b], rtol=1e-6)


def test_per_sentence_tensors_stay_one_row_a_sentence_as_sentences_leave():
    """The memory under SENTENCE_KEY (one row per sentence, read by its beams together, as the
    model's encoder-decoder keys and values) searches as the same memory tiled to every row,
    while sentences of three lengths leave the search one after another."""
    table, beam = PrefixTable(9, vocab=6, eos_boost=-3.0), 3
    cache = make_cache(6, batch=3, src_len=4)
    max_lens = tf.constant([2, 7, 4])

    def from_sentence_memory(ids: tf.Tensor, step: tf.Tensor, cache: dict) -> tuple:
        memory = cache[SENTENCE_KEY]["memory"]  # [active, src_len]
        assert memory.shape[0] * beam == ids.shape[0]
        logits, new = table.from_cache(ids, step, {**cache,
                                                   "memory": tf.repeat(memory, beam, axis=0)})
        return logits, {**cache, "layer_0": new["layer_0"]}

    per_sentence = {key: value for key, value in cache.items() if key != "memory"}
    per_sentence[SENTENCE_KEY] = {"memory": cache["memory"]}
    ids, scores = beam_search(from_sentence_memory, per_sentence, max_lens, beam_size=beam,
                              bos_id=BOS, eos_id=EOS, pad_id=-1)
    tiled_ids, tiled_scores = beam_search(table.from_cache, cache, max_lens, beam_size=beam,
                                          bos_id=BOS, eos_id=EOS, pad_id=-1)
    assert sorted(len(hyp) for hyp in hypotheses(ids.numpy()[:, 0])) == [2, 4, 7]
    np.testing.assert_array_equal(ids.numpy(), tiled_ids.numpy())
    np.testing.assert_allclose(scores.numpy(), tiled_scores.numpy(), rtol=1e-6)


def test_stops_early_once_finished_hypotheses_cannot_be_beaten():
    table = PrefixTable(7, vocab=8, eos_boost=30.0)  # EOS overwhelmingly likely
    cache = make_cache(8, batch=2)
    ids, scores = beam_search(table.from_cache, cache, tf.constant([50, 50]), beam_size=4,
                              bos_id=BOS, eos_id=EOS)
    assert ids.shape[2] < 8
    np.testing.assert_array_equal(ids.numpy()[:, 0, 0], [EOS, EOS])
    assert np.all(scores.numpy() > NEG_INF / 2)  # the finished set was filled
    assert np.all(np.diff(scores.numpy(), axis=1) <= 0)  # best first


def test_in_tf_function_with_unknown_batch_and_source_length():
    vocab = 6
    table = PrefixTable(8, vocab=vocab, eos_boost=0.5)
    spec = {"bias": tf.TensorSpec([None, vocab], tf.float32),
            "memory": tf.TensorSpec([None, None], tf.float32),
            "layer_0": {"keys": tf.TensorSpec([None, 1, None, 1], tf.float32)}}
    lengths_spec = tf.TensorSpec([None], tf.int32)

    @tf.function(input_signature=[spec, lengths_spec], autograph=False)
    def beam(cache, max_lens):
        return beam_search(table.from_cache, cache, max_lens, beam_size=4, bos_id=BOS,
                           eos_id=EOS)

    @tf.function(input_signature=[spec, lengths_spec], autograph=False)
    def greedy(cache, max_lens):
        return greedy_search(table.from_cache, cache, max_lens, bos_id=BOS, eos_id=EOS)

    for batch, src_len in [(3, 5), (1, 9)]:
        cache = make_cache(vocab, batch, seed=batch, src_len=src_len)
        max_lens = tf.constant([src_len + 2] * batch)
        for graph_fn, eager_fn in [(beam, beam_search), (greedy, greedy_search)]:
            graph_ids, graph_scores = graph_fn(cache, max_lens)
            kwargs = {"beam_size": 4} if eager_fn is beam_search else {}
            eager_ids, eager_scores = eager_fn(table.from_cache, cache, max_lens, bos_id=BOS,
                                               eos_id=EOS, **kwargs)
            np.testing.assert_array_equal(graph_ids.numpy(), eager_ids.numpy())
            np.testing.assert_allclose(graph_scores.numpy(), eager_scores.numpy(), rtol=1e-6)


def test_sentences_that_are_done_leave_the_search():
    table = PrefixTable(6, vocab=6, eos_boost=-3.0)  # EOS unlikely: each runs to its maximum
    cache = make_cache(6, batch=3, src_len=4)
    rows_per_step = []

    def counting(ids: tf.Tensor, step: tf.Tensor, cache: dict) -> tuple[tf.Tensor, dict]:
        rows_per_step.append(int(ids.shape[0]))  # eager: the loop body runs in Python
        return table.from_cache(ids, step, cache)

    ids, scores = beam_search(counting, cache, tf.constant([4, 1, 7]), beam_size=3, bos_id=BOS,
                              eos_id=EOS, pad_id=-1)
    assert rows_per_step == [9, 6, 6, 6, 3, 3, 3]  # 3 sentences, then 2 after step 1, then 1
    assert ids.shape == (3, 3, 7) and np.all(scores.numpy() > NEG_INF / 2)
    assert [max(len(hyp) for hyp in hypotheses(ids.numpy()[b])) for b in range(3)] == [4, 1, 7]


def test_stop_full_ends_a_sentence_once_its_beam_has_finished():
    table = PrefixTable(8, vocab=6, eos_boost=1.0)
    cache = make_cache(6, batch=4, src_len=3)
    row_steps, results = {}, {}
    for stop in ("full", "bound"):
        rows_per_step = []

        def counting(ids: tf.Tensor, step: tf.Tensor, cache: dict) -> tuple[tf.Tensor, dict]:
            rows_per_step.append(int(ids.shape[0]))
            return table.from_cache(ids, step, cache)

        ids, scores = beam_search(counting, cache, tf.constant([20, 20, 20, 20]), beam_size=3,
                                  bos_id=BOS, eos_id=EOS, alpha=0.6, pad_id=-1, stop=stop)
        row_steps[stop] = sum(rows_per_step)
        results[stop] = [hypotheses(ids.numpy()[b]) for b in range(4)], scores.numpy()
    hyps, scores = results["full"]
    assert np.all(scores > NEG_INF / 2) and np.all(np.diff(scores, axis=1) <= 0)
    assert all(hyp[-1] == EOS for sentence in hyps for hyp in sentence)  # none hit 20 tokens
    assert row_steps["full"] < row_steps["bound"]  # "bound" searches on for better ones
    assert np.all(results["bound"][1][:, 0] >= scores[:, 0] - 1e-6)  # and may find them
    with pytest.raises(DecodingSettingsError, match="must be one of full, bound, best, got") \
            as refused:
        beam_search(table.from_ids, cache, tf.constant([3] * 4), beam_size=3, bos_id=BOS,
                    eos_id=EOS, stop="never")
    assert refused.value.field == "stop"


@pytest.mark.parametrize("width", ["static", "given"])
def test_a_step_of_unknown_batch_computes_no_shape(width):
    """The step's reshape targets, row offsets and length penalties come from outside the inner
    loop, so its body and its condition hold no Shape or Pow op of their own (each is an op a
    step would run), nor a Cast of a reshape target; logits of a width the graph does not know
    (a shortlist's union) with their width given (`vocab_size`) too."""
    vocab = 6
    spec = {"bias": tf.TensorSpec([None, vocab if width == "static" else None], tf.float32)}

    @tf.function(input_signature=[spec, tf.TensorSpec([None], tf.int32)], autograph=False)
    def beam(cache, max_lens):
        def scoring(ids, step, cache):  # logits of a known vocabulary, as a model's
            return tf.ensure_shape(cache["bias"], spec["bias"].shape), cache

        return beam_search(scoring, cache, max_lens, beam_size=4, bos_id=BOS, eos_id=EOS,
                           vocab_size=None if width == "static" else tf.shape(cache["bias"])[1])

    library = beam.get_concrete_function().graph.as_graph_def().library
    loops = {f.signature.name: {node.op for node in f.node_def} for f in library.function
             if "while_body" in f.signature.name or "while_cond" in f.signature.name}
    steps = [ops for name, ops in loops.items() if name.startswith("while_while_body")]
    conditions = [ops for name, ops in loops.items() if name.startswith("while_while_cond")]
    assert len(steps) == len(conditions) == 1 and "TopKV2" in steps[0]  # the inner loop
    assert not (steps[0] | conditions[0]) & {"Shape", "Size", "Pow", "Cast"}


def test_stop_best_ends_a_sentence_at_the_step_its_best_extension_ends():
    """Scripted scores (no model): token 2 then EOS is the best path, EOS ends it at the second
    step. "best" stops there, as CTranslate2 does, with that hypothesis first; "full" goes on
    until its three beams have finished, and finds the same best one."""
    log_probs = np.log(np.array([[1e-9, 0.05, 0.6, 0.2, 0.15],  # step 0: 2, then 3, 4
                                 [1e-9, 0.4, 0.2, 0.2, 0.2]]))  # later: EOS likeliest
    steps, results = {}, {}
    for stop in ("best", "full"):
        calls = []

        def scripted(ids: tf.Tensor, step: tf.Tensor, cache: dict) -> tuple[tf.Tensor, dict]:
            calls.append(int(step))
            row = log_probs[min(int(step), 1)]
            return tf.constant(np.tile(row, (ids.shape[0], 1)), tf.float32), cache

        ids, scores = beam_search(scripted, {"x": tf.zeros([1, 1])}, tf.constant([6]),
                                  beam_size=3, bos_id=BOS, eos_id=EOS, alpha=0.6, pad_id=-1,
                                  stop=stop)
        steps[stop], results[stop] = len(calls), (hypotheses(ids.numpy()[0]), scores.numpy())
    assert steps["best"] == 2 < steps["full"]
    assert results["best"][0][0] == results["full"][0][0] == (2, EOS)
    np.testing.assert_allclose(results["best"][1][0, 0], results["full"][1][0, 0], rtol=1e-6)
    np.testing.assert_allclose(results["best"][1][0, 0],
                               np.log(0.6 * 0.4) / length_penalty(2, 0.6).numpy(), rtol=1e-5)
