"""pipelines/training/noise.py: each modifier does what it says (typos on the source alone,
casing, end punctuation on both sides, inline tags in export/markup.py's syntax at aligned
words, the links following), the noised stream is a function of its seed, and through the
train stage's batches: their length buckets kept, the dev split untouched."""
import re
from pathlib import Path

import numpy as np
import pytest
import sentencepiece as spm
import tensorflow as tf
import yaml

from export.markup import TAG, parse_markup
from keras_transformer.tokenizer import EOS_ID, PAD_ID
from pipelines.config import NoiseConfig, load_config
from pipelines.corpus.shards import train_shards
from pipelines.training.buckets import bucket_boundaries
from pipelines.training.data import make_dataset
from pipelines.training.noise import TAGS, noised
from pipelines.training.train_data import train_dataset_fn
from pipelines.training.validation import Validator
from tiny_run import WORDS, aligned_tiny_run, make_tiny_run, word_pieces

PAIRS = [
    ("Hello world.", "Bonjour le monde."),
    ("<bt> Where is the station ?", "Où est la gare ?"),  # a corpus tag; end marks apart
    ("Straße und Öl", "Rue et huile"),  # no end mark
    ("It was 2019!", "C'était 2019 !"),  # digits: never a typo
    ("Wait...", "Attends..."),  # several end marks: kept
    ("Really?!", "Vraiment ?!"),
    ("Yes.", "Oui !"),  # end marks of two kinds: kept
    ("日本へ行く。", "I go to Japan."),  # a CJK full stop is a full stop
]
UNPUNCTUATED = {"Hello world.": ("Hello world", "Bonjour le monde"),
                "<bt> Where is the station ?": ("<bt> Where is the station", "Où est la gare"),
                "It was 2019!": ("It was 2019", "C'était 2019"),
                "日本へ行く。": ("日本へ行く", "I go to Japan")}


def noise(pairs, config: NoiseConfig | None, seed: int = 1, links=None, stream: int = 0,
          repeat: int = 1) -> list[tuple[str, ...]]:
    """The pairs (and their links) through `noised` with one corpus's `config`."""
    columns = tuple(map(list, zip(*pairs))) + ((list(links),) if links is not None else ())
    dataset = tf.data.Dataset.from_tensor_slices(columns).repeat(repeat)
    return [tuple(text.decode() for text in item) for item in noised(
        dataset, [config], seed, stream, links=links is not None).as_numpy_iterator()]


def test_casing_is_both_sides_in_utf8_and_never_a_corpus_tag():
    upper = noise(PAIRS, NoiseConfig(uppercase=1.0))
    assert upper[:3] == [("HELLO WORLD.", "BONJOUR LE MONDE."),
                         ("<bt> WHERE IS THE STATION ?", "OÙ EST LA GARE ?"),
                         ("STRASSE UND ÖL", "RUE ET HUILE")]
    # A multilingual run's language token too (prepare writes it before the corpus tag).
    assert noise([("<2de> <bt> a <bt>", "ein")], NoiseConfig(uppercase=1.0)) == [
        ("<2de> <bt> A <BT>", "EIN")]
    title = noise(PAIRS, NoiseConfig(titlecase=1.0))
    assert title[:4] == [("Hello World.", "Bonjour Le Monde."),
                         ("<bt> Where Is The Station ?", "Où Est La Gare ?"),
                         ("Straße Und Öl", "Rue Et Huile"), ("It Was 2019!", "C'était 2019 !")]


def test_end_punctuation_goes_on_both_sides_only_when_they_end_alike():
    removed = noise(PAIRS, NoiseConfig(remove_end_punctuation=1.0))
    assert removed == [UNPUNCTUATED.get(src, (src, tgt)) for src, tgt in PAIRS]


def test_probability_zero_or_no_noise_leaves_every_byte():
    pairs = PAIRS + [("two  spaces ", " and\ta tab.")]
    assert noise(pairs, NoiseConfig()) == noise(pairs, None) == pairs


def edits(a: str, b: str) -> int:
    """Optimal string alignment distance: insertions, deletions, substitutions and swaps of
    neighbours."""
    d = [[i + j if not i * j else 0 for j in range(len(b) + 1)] for i in range(len(a) + 1)]
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1,
                          d[i - 1][j - 1] + (a[i - 1] != b[j - 1]))
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                d[i][j] = min(d[i][j], d[i - 2][j - 2] + 1)
    return d[-1][-1]


def test_typos_edit_a_few_source_words_once_and_never_the_target():
    pairs = PAIRS * 50
    typed = noise(pairs, NoiseConfig(typos=1.0))
    changed_words = 0
    for (src, tgt), (new_src, new_tgt) in zip(pairs, typed):
        assert new_tgt == tgt
        assert new_src != src  # every source has a word to edit
        words, new_words = src.split(), new_src.split()
        assert len(new_words) == len(words)
        for word, new_word in zip(words, new_words):
            assert edits(word, new_word) <= 1
            if re.search(r"\d", word) or word == "<bt>":
                assert new_word == word
            changed_words += word != new_word
    assert changed_words < 1.5 * len(pairs)  # a few words of each: one, and some 10% more


def test_inline_tags_without_alignments_are_at_the_ends_of_both_sides():
    pairs = [(src, tgt) for src, tgt in PAIRS if not src.startswith("<bt>")] * 20
    forms = set()
    for (src, tgt), (new_src, new_tgt) in zip(pairs, noise(pairs, NoiseConfig(inline_tags=1.0))):
        sides = [parse_markup(side) for side in (new_src, new_tgt)]
        assert [side.text for side in sides] == [src, tgt]  # markup.py reads the tags
        assert [match[0] for match in TAG.finditer(new_src)] == [
            match[0] for match in TAG.finditer(new_tgt)]
        spans = []
        for side in sides:
            [tag] = side.root.children
            spans.append((tag.first, tag.end, len(side.words)))
            forms.add(tag.open)
        (first, end, length), (target_first, target_end, target_length) = spans
        assert (first, end, target_first, target_end) in (
            (0, 0, 0, 0), (length, length, target_length, target_length),  # a placeholder
            (0, length, 0, target_length))  # an element around each whole side
    assert forms == {opening for opening, _ in TAGS}


def reversed_pairs(count: int) -> tuple[list[tuple[str, str]], list[str]]:
    """tiny_run's pairs (the target: the source's words reversed, upper case) and their word
    alignments (source word i - target word n - 1 - i), a corpus tag before a few sources."""
    rng = np.random.default_rng(0)
    pairs, links = [], []
    for index in range(count):
        words = list(rng.choice(WORDS, size=rng.integers(1, 8)))
        tag = ["<bt>"] * (index % 3 == 0)
        pairs.append((" ".join(tag + words), " ".join(reversed(words)).upper()))
        links.append(" ".join(f"{i + len(tag)}-{len(words) - 1 - i}" for i in range(len(words))))
    return pairs, links


def test_inline_tags_with_alignments_are_at_aligned_words_and_the_links_follow():
    pairs, links = reversed_pairs(300)
    noised_pairs = noise(pairs, NoiseConfig(inline_tags=1.0, uppercase=0.3, typos=0.3),
                         links=links)
    for (src, _), old_links, (new_src, new_tgt, new_links) in zip(pairs, links, noised_pairs):
        assert src.startswith("<bt> ") == new_src.startswith("<bt> ")  # the corpus tag first
        markup = [parse_markup(side) for side in (new_src.removeprefix("<bt> "), new_tgt)]
        [source_tag], [target_tag] = (side.root.children for side in markup)
        assert source_tag.open == target_tag.open
        # Where restore_markup puts them: a placeholder before a word and before its
        # translation, an element around both (the target: the source's word in upper case).
        [source_word], [target_word] = (side.words[tag.first:max(tag.end, tag.first + 1)]
                                        for side, tag in zip(markup, (source_tag, target_tag)))
        assert edits(source_word.upper(), target_word) <= 1  # a typo, maybe
        # Each link names a word and its translation, or a word of the tag on both sides (a
        # placeholder's, or those of an element's opening before the word it is against).
        src_words, tgt_words = new_src.split(), new_tgt.split()
        tag_words = source_tag.open.split()[:None if source_tag.close is None else -1]
        linked = [tuple(map(int, link.split("-"))) for link in new_links.split()]
        assert len(linked) == len(old_links.split()) + len(tag_words)
        for i, j in linked:
            if src_words[i] in tag_words:
                assert tgt_words[j] == src_words[i]
            else:  # the word without its tags (`id="1">bird</g>`: bird)
                plain = [re.sub(r"^[^<]*>|<[^>]*>", "", word) for word in (src_words[i],
                                                                          tgt_words[j])]
                assert plain[0] and edits(plain[0].upper(), plain[1]) <= 1


def test_the_noise_is_a_function_of_the_seed_the_stream_and_the_epoch():
    pairs, links = reversed_pairs(800)
    config = NoiseConfig(typos=0.3, uppercase=0.3, titlecase=0.3, remove_end_punctuation=0.3,
                         inline_tags=0.3)
    first = noise(pairs, config, seed=5, links=links, repeat=2)
    assert first == noise(pairs, config, seed=5, links=links, repeat=2)

    def share_differing(a, b) -> float:
        return np.mean([x != y for x, y in zip(a, b)])

    assert share_differing(first, noise(pairs, config, seed=6, links=links, repeat=2)) > 0.5
    assert share_differing(first, noise(pairs, config, seed=5, links=links, stream=1,
                                        repeat=2)) > 0.5
    assert share_differing(first[:800], first[800:]) > 0.5  # each epoch its own noise
    noised_share = share_differing(first, [pair + (link,) for pair, link in
                                           zip(pairs * 2, links * 2)])
    # Each modifier picks 30% of the pairs; these have no end punctuation to remove.
    assert abs(noised_share - (1 - 0.7 ** 4)) < 0.045  # 4 standard deviations


def test_each_corpus_gets_its_own_noise():
    pairs = PAIRS * 10
    corpora = [index % 2 for index in range(len(pairs))]
    dataset = tf.data.Dataset.from_tensor_slices(
        (*map(list, zip(*pairs)), tf.constant(corpora, tf.int32)))
    output = list(noised(dataset, [NoiseConfig(uppercase=1.0), None], seed=1,
                         corpus=True).as_numpy_iterator())
    for (src, tgt), corpus, (new_src, new_tgt, new_corpus) in zip(pairs, corpora, output):
        assert new_corpus == corpus
        expected = (src, tgt) if corpus else tuple(
            ("<bt> " if side.startswith("<bt> ") else "") + side.removeprefix("<bt> ").upper()
            for side in (src, tgt))
        assert (new_src.decode(), new_tgt.decode()) == expected


def test_noised_batches_keep_their_length_buckets(tmp_path):
    """Tags and typos lengthen pairs before tokenization: each lands in the bucket of its
    noised length, every batch in the budget and a bucket's shape."""
    config = load_config(aligned_tiny_run(tmp_path))
    shards = train_shards(tmp_path / "run" / "data")
    options = dict(batch_tokens=320, max_length=40, seed=1, repeat=False,
                   alignments=[tmp_path / "run" / "data" / "train-00000-of-00001.align"])
    bounds = bucket_boundaries(40)
    totals = []
    for noise_config in (None, NoiseConfig(inline_tags=1.0, typos=1.0)):
        tokens = 0
        for batch in make_dataset(shards, config.run_path / "vocab" / "spm.model",
                                  noise=[noise_config], **options):
            for key in ("source_ids", "target_ids"):
                ids = batch[key].numpy()
                assert ids.size <= 320 and ids.shape[1] in bounds
                lengths = (ids != PAD_ID).sum(axis=1)
                below = bounds[bounds.index(ids.shape[1]) - 1] if ids.shape[1] > bounds[0] else 0
                assert ((lengths > below) & (lengths <= ids.shape[1])).all()
                tokens += lengths.sum()
            gold, target = batch["alignment"].numpy(), batch["target_ids"].numpy()
            pieces = word_pieces(target, config.run_path)  # [b, target]
            assert (gold.sum(axis=2) > 0)[pieces].all()  # the links followed the noise
        totals.append(tokens)
    assert totals[1] > 1.3 * totals[0]


def test_the_train_batches_are_noised_and_the_dev_split_is_not(tmp_path):
    path = make_tiny_run(tmp_path, train={"validate_every_steps": 5})
    text = yaml.safe_load(path.read_text())
    text["data"]["noise"] = {"titlecase": 1.0}
    path.write_text(yaml.safe_dump(text))
    config = load_config(path)
    processor = spm.SentencePieceProcessor(model_file=str(config.run_path / "vocab" / "spm.model"))

    def sources(batch) -> list[str]:
        return processor.decode([[i for i in row if i not in (PAD_ID, EOS_ID)]
                                 for row in batch["source_ids"].numpy().tolist()])

    batch = next(iter(train_dataset_fn(config, seed=1)(tf.distribute.InputContext())))
    assert all(word[0].isupper() for line in sources(batch) for word in line.split())
    validator = Validator(config, model=None, tokenizer=None)  # its dev-loss batches alone
    dev = [line for batch in validator.loss.dataset for line in sources(batch)]
    clean = (config.run_path / "data" / "dev.src").read_text().splitlines()
    assert sorted(dev) == sorted(clean) and any(line.islower() for line in dev)
