"""pipelines/training/data.py: in-graph tokenization, length filter, token-budget buckets,
sharding."""
import collections

import pytest
import sentencepiece as spm
import tensorflow as tf

from keras_transformer.tokenizer import BOS_ID, EOS_ID, PAD_ID
from pipelines.training.buckets import bucket_boundaries
from pipelines.training.data import any_pair_fits, length_stats, make_dataset
from pipelines.corpus.shards import train_shards


# Every 8th pair of the demo's train split (3,559 of 28,469): the whole Bible's spread of
# lengths (its padding efficiencies within 0.002 of the whole split's) at an eighth of the
# tokenizing; an epoch of the whole split costs about 6 s of CPU, and these tests read a dozen.
STRIDE = 8


@pytest.fixture(scope="module")
def demo(demo_run, tmp_path_factory):
    """The slice of the demo's train split (STRIDE) and the demo's SentencePiece model."""
    [whole] = train_shards(demo_run.run_dir / "data")
    directory = tmp_path_factory.mktemp("demo_slice")
    files = {}
    for side, path in zip(("src", "tgt"), whole):
        lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
        files[side] = directory / f"train.{side}"
        files[side].write_text("".join(lines[::STRIDE]), encoding="utf-8")
    return files | {"model": demo_run.run_dir / "vocab" / "spm.model"}


def batches(demo, **kwargs):
    options = dict(batch_tokens=4096, max_length=128, seed=1) | kwargs
    return make_dataset([(demo["src"], demo["tgt"])], demo["model"], **options)


def padding_efficiency(dataset: tf.data.Dataset) -> tuple[float, float]:
    """Real tokens / (real + pad) tokens over all batches, for source and target."""

    def add(totals: tf.Tensor, batch: dict[str, tf.Tensor]) -> tf.Tensor:
        counts = [tf.math.count_nonzero(batch[k] != PAD_ID) for k in ("source_ids", "target_ids")]
        sizes = [tf.size(batch[k], out_type=tf.int64) for k in ("source_ids", "target_ids")]
        return totals + tf.stack(counts + sizes)  # [4]

    real_src, real_tgt, size_src, size_tgt = dataset.reduce(tf.zeros([4], tf.int64), add).numpy()
    return float(real_src / size_src), float(real_tgt / size_tgt)


def rows(batch: dict) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """The unpadded (source, target) id tuples of a batch."""
    return [tuple((tuple(x for x in s if x != PAD_ID), tuple(x for x in t if x != PAD_ID)))
            for s, t in zip(batch["source_ids"].numpy().tolist(),
                            batch["target_ids"].numpy().tolist())]


def expected_pairs(demo, max_length: int) -> collections.Counter:
    processor = spm.SentencePieceProcessor(model_file=str(demo["model"]))
    src = processor.encode(demo["src"].read_text(encoding="utf-8").splitlines())
    tgt = processor.encode(demo["tgt"].read_text(encoding="utf-8").splitlines())
    pairs = [(tuple(s + [EOS_ID]), tuple([BOS_ID] + t + [EOS_ID])) for s, t in zip(src, tgt)]
    return collections.Counter(p for p in pairs if max(map(len, p)) <= max_length)


def test_every_filtered_pair_once_per_epoch_within_the_budget(demo):
    seen, shapes = collections.Counter(), set()
    for batch in batches(demo, max_length=64):
        source, target = batch["source_ids"], batch["target_ids"]
        assert source.dtype == target.dtype == tf.int32
        assert source.shape[0] == target.shape[0]
        assert source.shape.num_elements() <= 4096 and target.shape.num_elements() <= 4096
        assert source.shape[1] in bucket_boundaries(64) and target.shape[1] in bucket_boundaries(64)
        shapes.add((*source.shape, target.shape[1]))
        seen.update(rows(batch))
    expected = expected_pairs(demo, max_length=64)
    assert seen == expected
    stats = length_stats(demo["src"], demo["tgt"], demo["model"], max_length=64)
    assert stats.pairs - stats.too_long == sum(expected.values()) and stats.too_long > 0
    assert len(shapes) < 120
    # Each bucket pair's batches take its budget's size but for the epoch's last one: at most
    # two shapes a pair, whatever the corpus size.
    sizes = collections.defaultdict(set)
    for size, src_len, tgt_len in shapes:
        assert size <= 4096 // max(src_len, tgt_len)
        sizes[src_len, tgt_len].add(size)
    assert all(len(found - {4096 // max(key)}) <= 1 for key, found in sizes.items())


def test_framing_source_eos_target_bos_eos(demo):
    batch = next(iter(batches(demo)))
    for source, target in rows(batch):
        assert source[-1] == EOS_ID and BOS_ID not in source
        assert target[0] == BOS_ID and target[-1] == EOS_ID


def test_bucketing_keeps_padding_low(demo, demo_run):
    # The prepared run's figure is what training gets: an epoch of its whole train split.
    [whole] = train_shards(demo_run.run_dir / "data")
    src, tgt = padding_efficiency(make_dataset([whole], demo["model"], batch_tokens=4096,
                                               max_length=128, seed=1))
    assert src >= 0.85 and tgt >= 0.85
    # The stats' efficiency: each pair padded to its buckets, whatever the batches.
    assert demo_run.padding_efficiency == pytest.approx((src, tgt), abs=1e-9)
    stats = length_stats(demo["src"], demo["tgt"], demo["model"], max_length=64)
    assert stats.padding_efficiency == pytest.approx(
        padding_efficiency(batches(demo, max_length=64, batch_tokens=1024)), abs=1e-9)
    random_src, random_tgt = padding_efficiency(batches(demo, boundaries=(128,),
                                                        pad_to_bucket_boundary=False))
    assert random_src < 0.6 and random_tgt < 0.6  # one bucket: a random-order batcher


def test_shards_per_input_pipeline_with_per_replica_budget(demo):
    shards = []
    for pipeline in range(2):
        context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=pipeline,
                                             num_replicas_in_sync=4)
        pairs = collections.Counter()
        for batch in batches(demo, input_context=context, max_length=32):
            assert batch["source_ids"].shape.num_elements() <= 1024
            assert batch["target_ids"].shape.num_elements() <= 1024
            pairs.update(rows(batch))
        shards.append(pairs)
    assert not shards[0] & shards[1]  # pairs are unique, so shards share none
    assert shards[0] + shards[1] == expected_pairs(demo, max_length=32)


def test_repeat_gives_full_batches_divisible_by_replicas_and_seeded_order(demo):
    # 60 batches (about 5,800 pairs) run past the end of the slice's epoch, where batches of
    # one epoch would come short.
    first = [b["source_ids"].shape[0] for b in batches(demo, repeat=True, num_replicas=8).take(60)]
    assert all(size % 8 == 0 and size > 0 for size in first)
    assert sum(first) > len(demo["src"].read_text(encoding="utf-8").splitlines())
    one, two = (next(iter(batches(demo, seed=5)))["source_ids"] for _ in range(2))
    assert one.numpy().tolist() == two.numpy().tolist()


def test_budget_too_small_for_the_longest_bucket(demo):
    with pytest.raises(ValueError, match=r"^batch_tokens: must be at least 512 so that each of "
                       r"4 replica\(s\) holds a pair of data.max_length \(128\) tokens padded "
                       r"to its length bucket \(4 x 128\), got 256$"):
        batches(demo, batch_tokens=256, num_replicas=4)


def test_any_pair_fits_finds_the_one_pair_at_max_length_in_a_later_shard(demo, tmp_path):
    """The check before training (`any_pair_fits`): one pair whose longer side is exactly
    max_length tokens (BOS / EOS included), past the first blocks of the second shard, is
    found; at one token less nothing fits; a missing shard is named."""
    processor = spm.SentencePieceProcessor(model_file=str(demo["model"]))
    pairs = list(zip(*(demo[side].read_text(encoding="utf-8").splitlines()
                       for side in ("src", "tgt"))))
    longest = [max(len(processor.encode(src)) + 1, len(processor.encode(tgt)) + 2)
               for src, tgt in pairs]
    limit = 20
    [fitting, *_] = [pair for pair, length in zip(pairs, longest) if length == limit]
    long_pairs = [pair for pair, length in zip(pairs, longest) if length > limit][:600]
    shards = []
    for index, shard_pairs in enumerate([long_pairs[:300], long_pairs[300:500] + [fitting]
                                         + long_pairs[500:]]):
        shard = tuple(tmp_path / f"train-{index}.{side}" for side in ("src", "tgt"))
        for side, path in enumerate(shard):
            path.write_text("".join(pair[side] + "\n" for pair in shard_pairs), encoding="utf-8")
        shards.append(shard)
    assert any_pair_fits(shards, demo["model"], limit)
    assert not any_pair_fits(shards, demo["model"], limit - 1)
    missing = tmp_path / "missing.src"
    with pytest.raises(FileNotFoundError, match=f"^{missing}: no such file$"):
        any_pair_fits([(missing, shards[0][1])], demo["model"], limit)


# Pairs enough for 4 shards read together; what is checked is exact (each pair once), not a
# statistic.
SHARDED_PAIRS = 2000


@pytest.fixture(scope="module")
def sharded(demo, tmp_path_factory):
    """The slice's first 2,000 pairs in 4 shards of 500 (pair i in shard i mod 4)."""
    directory = tmp_path_factory.mktemp("shards")
    src = demo["src"].read_text(encoding="utf-8").splitlines()[:SHARDED_PAIRS]
    tgt = demo["tgt"].read_text(encoding="utf-8").splitlines()[:SHARDED_PAIRS]
    shards = []
    for i in range(4):
        shard = (directory / f"train-{i}.src", directory / f"train-{i}.tgt")
        shard[0].write_text("".join(s + "\n" for s in src[i::4]), encoding="utf-8")
        shard[1].write_text("".join(t + "\n" for t in tgt[i::4]), encoding="utf-8")
        shards.append(shard)
    processor = spm.SentencePieceProcessor(model_file=str(demo["model"]))

    def expected(indices) -> collections.Counter:
        pairs = [(tuple(processor.encode(src[i]) + [EOS_ID]),
                  tuple([BOS_ID] + processor.encode(tgt[i]) + [EOS_ID])) for i in indices]
        return collections.Counter(p for p in pairs if max(map(len, p)) <= 64)

    return {"shards": shards, "model": demo["model"], "expected": expected}


def epoch(shards, model, **kwargs) -> collections.Counter:
    pairs = collections.Counter()
    for batch in make_dataset(shards, model, batch_tokens=2048, max_length=64, seed=3,
                              **kwargs):
        pairs.update(rows(batch))
    return pairs


def test_shards_interleaved_yield_every_pair_once_per_epoch(sharded):
    pairs = epoch(sharded["shards"], sharded["model"], parallel_calls=2)
    assert pairs == sharded["expected"](range(SHARDED_PAIRS))
    assert max(pairs.values()) == 1  # the demo's train pairs are unique
    first = [next(iter(make_dataset(sharded["shards"], sharded["model"], batch_tokens=2048,
                                    max_length=64, seed=seed)))["source_ids"].numpy().tolist()
             for seed in (3, 3, 4)]
    assert first[0] == first[1] != first[2]  # seeded order


def test_two_workers_read_disjoint_shards(sharded):
    seen = []
    for pipeline in range(2):
        context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=pipeline,
                                             num_replicas_in_sync=2)
        seen.append(epoch(sharded["shards"], sharded["model"], input_context=context))
    # Worker k reads shards k and k + 2 whole: pairs i with i mod 4 in {k, k + 2}.
    assert seen[0] == sharded["expected"](i for i in range(SHARDED_PAIRS) if i % 2 == 0)
    assert seen[1] == sharded["expected"](i for i in range(SHARDED_PAIRS) if i % 2 == 1)
    assert not seen[0] & seen[1]


def test_one_bucket_per_batch_gives_one_shape_per_bucket_and_every_pair(demo):
    """XLA's batches: both sides padded to the longer side's bucket, so that endless batches
    (full windows: one batch size per bucket) take at most one shape per bucket, the shapes
    the trainer compiles for."""
    seen, lengths = collections.Counter(), set()
    dataset = batches(demo, max_length=64, one_bucket_per_batch=True)
    for batch in dataset:
        source, target = batch["source_ids"], batch["target_ids"]
        assert source.shape[1] == target.shape[1]
        lengths.add(source.shape[1])
        seen.update(rows(batch))
    assert seen == expected_pairs(demo, max_length=64)
    assert lengths <= set(bucket_boundaries(64))
    src, tgt = padding_efficiency(dataset)
    print(f"one bucket per batch: padding efficiency {src:.3f} / {tgt:.3f}")
    assert src >= 0.75 and tgt >= 0.75
