"""pipelines/corpus/prepare.py and the `keras-transformer prepare` command."""
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import pipelines.corpus.splitting
from pipelines.cli import main
from pipelines.config import load_config
from pipelines.files import read_lines
from pipelines.corpus.prepare import prepare
from pipelines.corpus.shards import train_shards

SPLITS = [f"data/{split}.{side}" for split in ("dev", "test") for side in ("src", "tgt")]
OUTPUTS = SPLITS + ["data/train.json", "vocab/spm.model", "vocab/spm.vocab", "vocab/shortlist.npz"]
DEMO_OUTPUTS = OUTPUTS + ["data/train-00000-of-00001.src", "data/train-00000-of-00001.tgt"]
# The demo's split files: dev and test as the in-memory prepare of round 1 wrote them, train
# (then train.src / .tgt) less the 151 pairs that language ID drops (data.language_id auto).
DEMO_SHA256 = {"data/dev.src": "9c491eb3903e398d", "data/dev.tgt": "ad3616577a3c0258",
               "data/test.src": "19c8b283c7bd82b5", "data/test.tgt": "751f163c446ad4f9",
               "data/train-00000-of-00001.src": "8260a669f1c5c766",
               "data/train-00000-of-00001.tgt": "c377ed0538fc79f6"}


def checksums(run_dir, names=None):
    names = names or sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("*")
                            if p.is_file())
    return {name: hashlib.sha256((run_dir / name).read_bytes()).hexdigest() for name in names}


def test_demo_outputs_and_summary(demo_run):
    run_dir = demo_run.run_dir
    assert sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("*")) == \
        sorted(DEMO_OUTPUTS + ["data", "vocab"])  # no temporary file or directory left behind
    assert {name: digest[:16] for name, digest in checksums(run_dir, DEMO_SHA256).items()} == \
        DEMO_SHA256
    [(train_src, train_tgt)] = train_shards(run_dir / "data")
    lines = {name: read_lines(run_dir / name) for name in SPLITS}
    lines["train.src"], lines["train.tgt"] = read_lines(train_src), read_lines(train_tgt)
    assert {split: n for split, n in demo_run.pairs.items()} == \
        {split: len(lines[f"data/{split}.src" if split != "train" else "train.src"])
         for split in ("train", "dev", "test")}
    for split in ("dev", "test"):
        assert len(lines[f"data/{split}.src"]) == len(lines[f"data/{split}.tgt"])
        assert not set(lines[f"data/{split}.src"]) & set(lines["train.src"])
        assert not set(lines[f"data/{split}.tgt"]) & set(lines["train.tgt"])
    assert lines["train.src"][0] == "In the beginning God created the heavens and the earth."
    assert demo_run.vocab_size == 8000 and demo_run.shards == 1
    assert demo_run.sampled_pairs == demo_run.pairs["train"]
    assert 20 < demo_run.avg_tokens[0] < 50 and 20 < demo_run.avg_tokens[1] < 50
    assert min(demo_run.padding_efficiency) >= 0.85
    text = demo_run.format()
    for expected in ("train 28,", "(1 train shard)", "Psalm title on one side 116",
                     "8,000 shared bpe pieces", "measured on all 28,469 train pairs:", "too long",
                     "padding   source 0.", "per train sentence"):
        assert expected in text


def write_corpus(tmp_path, src: bytes, tgt: bytes, **overrides):
    """A `files` config over two corpus files; `overrides` replace its data keys."""
    (tmp_path / "corpus.en").write_bytes(src)
    (tmp_path / "corpus.fr").write_bytes(tgt)
    data = {"source": "files", "train": "{src: corpus.en, tgt: corpus.fr}", "holdout": 20,
            "vocab_size": 300, "max_length": 32} | overrides
    config = tmp_path / "small.yaml"
    config.write_text(f"name: small\nrun_dir: {tmp_path / 'runs' / 'small'}\ndata:\n" +
                      "".join(f"  {key}: {value}\n" for key, value in data.items()),
                      encoding="utf-8")
    return config


SRC = "".join(f"the {w} number {i} is here\n" for i in range(80) for w in ("cat", "dog")).encode()
TGT = "".join(f"le {w} numéro {i} est là\n" for i in range(80)
              for w in ("chat", "chien")).encode()


def test_small_files_corpus_is_reproducible_through_the_cli(tmp_path, capsys):
    config = write_corpus(tmp_path, SRC, TGT)
    assert main(["prepare", str(config)]) == 0
    out = capsys.readouterr().out
    assert "train 120  dev 20  test 20" in out
    assert "  language  not checked (languages unknown) (fastText lid.176" in out
    assert "  shortlist shortlist.npz from the co-occurrence of 120 train pairs" in out
    first = checksums(tmp_path / "runs" / "small", OUTPUTS)
    prepare(load_config(config))
    assert checksums(tmp_path / "runs" / "small", OUTPUTS) == first


@pytest.mark.parametrize("src, tgt, data, message", [
    (SRC, TGT[:TGT.rindex(b"le")], {},
     "corpus.fr:160: file ends after 159 lines, but {dir}/corpus.en has 160"),
    (SRC, b"ok\n" * 100 + b"caf\xe9\n" + b"ok\n" * 59, {}, "corpus.fr:101: not valid UTF-8"),
    (b"\n" * 160, TGT, {}, "no training pairs left after filtering (dropped: 160 empty side)"),
    (SRC, TGT, {"source": "bible:en-xx"}, "small.yaml:4: data.source: unknown builtin corpus"),
    (SRC, TGT, {"train": "{src: missing.en, tgt: corpus.fr}"}, "{dir}/missing.en: no such file"),
])
def test_bad_input_exits_2_with_one_line_and_writes_nothing(tmp_path, capsys, src, tgt, data,
                                                            message):
    config = write_corpus(tmp_path, src, tgt, **data)
    assert main(["prepare", str(config)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("keras-transformer prepare: error: ")
    assert message.format(dir=tmp_path) in err
    assert not (tmp_path / "runs").exists()


def numbered_corpus(pairs: int, repeats: int = 1) -> tuple[bytes, bytes]:
    """`pairs` different pairs "the ANIMAL number N is here" / "le ANIMAL numéro N est là", the
    five animals in turn, each number in `repeats` consecutive pairs."""
    words = ("cat", "dog", "bird", "fish", "horse")
    src = "".join(f"the {words[i % 5]} number {i // repeats} is here\n" for i in range(pairs))
    tgt = "".join(f"le {words[i % 5]} numéro {i // repeats} est là\n" for i in range(pairs))
    return src.encode(), tgt.encode()


def test_shards_samples_and_a_smaller_re_prepare(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(pipelines.corpus.splitting, "STATS_SAMPLE", 500)
    config = write_corpus(tmp_path, *numbered_corpus(3040), shards=3, vocab_max_sentences=1000)
    assert main(["prepare", str(config)]) == 0
    out = capsys.readouterr().out
    assert "train 3,000  dev 20  test 20  (3 train shards)" in out
    assert "from 1,000 sampled train sentences per side" in out
    assert "estimated from 500 sampled pairs of the 3,000 in train:" in out
    data = tmp_path / "runs" / "small" / "data"
    manifest = json.loads((data / "train.json").read_text())
    assert manifest["pairs"] == 3000 and [s["pairs"] for s in manifest["shards"]] == [1000] * 3
    shards = train_shards(data)
    first = [pair for src, tgt in shards for pair in zip(read_lines(src), read_lines(tgt))]
    assert len(set(first)) == 3000
    config.write_text(config.read_text().replace("shards: 3", "shards: 2"))
    assert main(["prepare", str(config)]) == 0
    assert sorted(p.name for p in data.iterdir()) == [
        "dev.src", "dev.tgt", "test.src", "test.tgt", "train-00000-of-00002.src",
        "train-00000-of-00002.tgt", "train-00001-of-00002.src", "train-00001-of-00002.tgt",
        "train.json"]  # the 3-shard files are gone
    second = [pair for src, tgt in train_shards(data) for pair in zip(read_lines(src),
                                                                        read_lines(tgt))]
    assert sorted(second) == sorted(first)


ANIMALS = (("cat", "chat"), ("dog", "chien"), ("horse", "cheval"), ("bird", "oiseau"))
SENTENCES = [(f"The {en} number {i} is sleeping in the garden near the house.",
              f"Le {fr} numéro {i} dort dans le jardin près de la maison.")
             for i, (en, fr) in enumerate(ANIMALS * 10)]
PLANTED = [("The weather is very nice today in the mountains.",  # a German target
            "Das Wetter ist heute in den Bergen sehr schön."),
           ("El tiempo es muy agradable hoy en las montañas.",  # a Spanish source
            "Il fait très beau aujourd'hui à la montagne.")]


def written_pairs(run_dir: Path) -> list[tuple[str, str]]:
    """Every pair prepare wrote: the train shards', dev's and test's."""
    data = run_dir / "data"
    files = train_shards(data) + [(data / f"{split}.src", data / f"{split}.tgt")
                                  for split in ("dev", "test")]
    return [pair for src, tgt in files for pair in zip(read_lines(src), read_lines(tgt))]


def test_language_id_drops_planted_wrong_language_pairs_and_keeps_the_rest(tmp_path, capsys):
    """An en-fr corpus with a German target and a Spanish source planted: both dropped and
    counted, every other pair written; the given dev split kept whole (a German target too);
    with data.language_id off, the planted pairs are kept."""
    pairs = SENTENCES[:15] + PLANTED[:1] + SENTENCES[15:30] + PLANTED[1:] + SENTENCES[30:]
    src, tgt = ("".join(pair[side] + "\n" for pair in pairs).encode() for side in (0, 1))
    (tmp_path / "dev.tsv").write_text("\t".join(PLANTED[0]) + "\n", encoding="utf-8")
    config = write_corpus(tmp_path, src, tgt, src_lang="en", tgt_lang="fr", holdout=5,
                          dev="{tsv: dev.tsv}", vocab_size=400)  # the planted pairs' letters
    assert main(["prepare", str(config)]) == 0
    out = capsys.readouterr().out
    assert "source not en 1" in out and "target not fr 1" in out
    assert "  language  source en, target fr (fastText lid.176, data.language_id)\n" in out
    run_dir = tmp_path / "runs" / "small"
    assert sorted(written_pairs(run_dir)) == sorted(SENTENCES + PLANTED[:1])
    config.write_text(config.read_text() + "  language_id: off\n")
    assert main(["prepare", str(config)]) == 0
    out = capsys.readouterr().out
    assert " not en" not in out and " not fr" not in out and "language  " not in out
    assert sorted(written_pairs(run_dir)) == sorted(SENTENCES + PLANTED + PLANTED[:1])


@pytest.mark.slow
def test_language_id_in_a_process_pool_gives_the_verdicts_of_this_process(tmp_path,
                                                                          monkeypatch):
    """A corpus of more than INLINE_CHUNKS chunks is classified in a pool of spawned
    processes: the same files, the same counts as classified in this process."""
    import multiprocessing

    from pipelines.config import DataConfig, SplitFiles
    from pipelines.corpus import language_id
    from pipelines.corpus.sources import open_sources

    pairs = SENTENCES[:20] + PLANTED + SENTENCES[20:]
    for side, name in enumerate(("corpus.en", "corpus.fr")):
        (tmp_path / name).write_text("".join(pair[side] + "\n" for pair in pairs), "utf-8")
    data = DataConfig(source="files", src_lang="en", tgt_lang="fr", holdout=5,
                      train=SplitFiles(src=tmp_path / "corpus.en", tgt=tmp_path / "corpus.fr"))

    def split(directory: Path) -> tuple[dict[str, int], dict[str, bytes]]:
        dropped = pipelines.corpus.splitting.write_splits(open_sources(data), data,
                                                          directory).dropped
        return dropped, {path.name: path.read_bytes() for path in directory.iterdir()}

    here = split(tmp_path / "here")
    assert here[0] == {"source not en": 1, "target not fr": 1}
    contexts = []
    get_context = multiprocessing.get_context
    monkeypatch.setattr(multiprocessing, "get_context",
                        lambda method: contexts.append(method) or get_context(method))
    monkeypatch.setattr(language_id, "CHUNK", 3)  # 14 chunks
    monkeypatch.setattr(language_id, "INLINE_CHUNKS", 2)
    assert split(tmp_path / "pool") == here
    assert contexts == ["spawn"]


@pytest.mark.slow
def test_alignments_are_written_beside_each_shard_in_spm_words(tmp_path, capsys):
    """data.alignments: eflomal: a .align file per shard, a line per pair, links inside both
    sides' SentencePiece words. The words that vary from pair to pair (the animal, 1, and the
    number, 3, the same on both sides, each number in five pairs) are aligned to each other;
    the others always occur together, so which of them align is the aligner's guess (eflomal
    samples: it varies). A number of one pair only has no evidence but its position: two
    eflomal runs in 60 aligned it in 417 and 527 of the 560 pairs."""
    import sentencepiece as spm

    from pipelines.corpus.alignments import line_words
    from pipelines.corpus.shards import train_alignments

    config = write_corpus(tmp_path, *numbered_corpus(600, repeats=5), shards=2,
                          alignments="eflomal")
    assert main(["prepare", str(config)]) == 0
    out = capsys.readouterr().out
    assert "aligning the words of 560 train pairs with eflomal" in out
    assert "aligned   560 train pairs with eflomal in " in out
    assert "shortlist shortlist.npz from the alignments of 560 train pairs" in out
    data = tmp_path / "runs" / "small" / "data"
    processor = spm.SentencePieceProcessor(model_file=str(data.parent / "vocab" / "spm.model"))
    found = total = 0
    for (src, tgt), align in zip(train_shards(data), train_alignments(data), strict=True):
        assert align.name == src.name.replace(".src", ".align")
        for source, target, links in zip(read_lines(src), read_lines(tgt), read_lines(align),
                                         strict=True):
            sizes = tuple(len(words) for words in line_words(processor, [source, target]))
            pairs = {tuple(map(int, link.split("-"))) for link in links.split()}
            assert all(i < sizes[0] and j < sizes[1] for i, j in pairs)
            found += {(1, 1), (3, 3)} <= pairs
            total += 1
    assert total == 560 and found >= 0.95 * total  # 560 of 560 in 40 runs here
    config.write_text(config.read_text().replace("alignments: eflomal", "alignments: none"))
    assert main(["prepare", str(config)]) == 0
    assert not list(data.glob("*.align"))  # a prepare without alignments removes them


@pytest.mark.slow
def test_a_killed_prepare_leaves_the_previous_files_whole(tmp_path):
    """SIGKILL during the writing pass (a corpus of 100,000 pairs, long enough to catch it
    there): data/ keeps the earlier prepare's files, byte for byte; the next prepare removes
    the staging directory and completes (on the earlier corpus, which prepares in a fraction
    of the time: its files again, byte for byte)."""
    small = numbered_corpus(200)
    config = write_corpus(tmp_path, *small)
    assert main(["prepare", str(config)]) == 0
    run_dir = tmp_path / "runs" / "small"
    before = checksums(run_dir)
    for path, text in zip((tmp_path / "corpus.en", tmp_path / "corpus.fr"),
                          numbered_corpus(100_000)):
        path.write_bytes(text)
    child = subprocess.Popen([Path(sys.executable).parent / "keras-transformer", "prepare",
                              str(config)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not list((run_dir / "data").glob(".prepare-*/train-*.src")):
        assert child.poll() is None, "prepare ended before its writing pass was caught"
        assert time.monotonic() < deadline, "prepare never started writing"
        time.sleep(0.01)
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    staging = list((run_dir / "data").glob(".prepare-*"))
    assert len(staging) == 1
    assert checksums(run_dir, list(before)) == before
    for path, text in zip((tmp_path / "corpus.en", tmp_path / "corpus.fr"), small):
        path.write_bytes(text)
    assert main(["prepare", str(config)]) == 0
    assert not list((run_dir / "data").glob(".prepare-*"))
    assert checksums(run_dir) == before


def write_corpora(tmp_path, corpora: dict[str, tuple[bytes, bytes, str]], **overrides):
    """A config of `data.corpora`: name -> (source file, target file, extra keys of the corpus,
    e.g. `, weight: 2, tag: <bt>`); `overrides` add data keys."""
    items = []
    for name, (src, tgt, keys) in corpora.items():
        (tmp_path / f"{name}.en").write_bytes(src)
        (tmp_path / f"{name}.fr").write_bytes(tgt)
        items.append(f"    - {{name: {name}, source: files, "
                     f"train: {{src: {name}.en, tgt: {name}.fr}}{keys}}}\n")
    data = {"holdout": 20, "vocab_size": 300, "max_length": 32} | overrides
    config = tmp_path / "mixed.yaml"
    config.write_text(f"name: mixed\nrun_dir: {tmp_path / 'runs' / 'mixed'}\ndata:\n"
                      "  corpora:\n" + "".join(items) +
                      "".join(f"  {key}: {value}\n" for key, value in data.items()),
                      encoding="utf-8")
    return config


def test_corpora_are_de_duplicated_across_tagged_sharded_and_counted(tmp_path, capsys):
    from keras_transformer.tokenizer import Tokenizer
    import tensorflow as tf

    extra = ([(f"the horse number {i} runs", f"le cheval numéro {i} court") for i in range(60)]
             + [(f"the cat number {i} is here", f"le chat numéro {i} est là")
                for i in range(12)])  # 12 pairs of `main`
    extra_src, extra_tgt = ("".join(pair[side] + "\n" for pair in extra).encode()
                            for side in (0, 1))
    bt_src = "".join(f"a bird saw {i} fish\n" for i in range(50)).encode()
    bt_tgt = "".join(f"un oiseau a vu {i} poissons\n" for i in range(50)).encode()
    config = write_corpora(tmp_path, {"main": (SRC, TGT, ", weight: 3"),
                                      "extra": (extra_src, extra_tgt, ", max_pairs: 40"),
                                      "bt": (bt_src, bt_tgt, ", weight: 1, tag: <bt>")})
    assert main(["prepare", str(config)]) == 0
    out = capsys.readouterr().out
    # main: 160 pairs, 40 held out for dev / test; extra: 60 new + 12 of main's, capped at 40
    assert "prepared corpora main, extra, bt" in out
    assert "train 210  dev 20  test 20  (3 train shards)" in out
    assert "corpus    main   120 train pairs (57.1%), weight 3 (60.0%), 0 duplicate(s)" in out
    assert "corpus    extra  40 train pairs (19.0%), weight 1 (20.0%), 12 duplicate(s)" in out
    assert "corpus    bt     50 train pairs (23.8%), weight 1 (20.0%), tag <bt>, 0 dup" in out
    assert "duplicate pair 12" in out and "over max_pairs of extra 20" in out
    run = tmp_path / "runs" / "mixed"
    manifest = json.loads((run / "data" / "train.json").read_text())
    assert [(s["src"], s["pairs"], s["corpus"], s["weight"], s["tag"])
            for s in manifest["shards"]] == [
        ("train-main-00000-of-00001.src", 120, "main", 3.0, None),
        ("train-extra-00000-of-00001.src", 40, "extra", 1.0, None),
        ("train-bt-00000-of-00001.src", 50, "bt", 1.0, "<bt>")]
    bt_lines = read_lines(run / "data" / "train-bt-00000-of-00001.src")
    assert all(line.startswith("<bt> a bird saw ") for line in bt_lines)
    train = [line for shard in manifest["shards"]
             for line in read_lines(run / "data" / shard["src"])]
    untagged = [line.removeprefix("<bt> ") for line in train]
    assert len(set(untagged)) == len(untagged) == 210  # no pair twice across corpora
    assert not set(read_lines(run / "data" / "dev.src")) & set(untagged)
    # The tag is one id, the same in a text as the serving graph's tokenizer reads it.
    tokenizer = Tokenizer.from_file(run / "vocab" / "spm.model")
    tag_id = [i for i, (piece, _) in enumerate(vocabulary_of(run)) if piece == "<bt>"]
    ids = tokenizer.tokenize(tf.constant(["<bt> a bird", "a<bt>b"])).to_list()
    assert len(tag_id) == 1 and ids[0].count(tag_id[0]) == 1 and ids[1].count(tag_id[0]) == 1


def vocabulary_of(run_dir: Path) -> list[tuple[str, float]]:
    from keras_transformer.tokenizer import vocabulary

    return vocabulary((run_dir / "vocab" / "spm.model").read_bytes())


@pytest.mark.parametrize("keys, message", [
    (", tag: <cat>", "data.corpora[1].tag: <cat> occurs in the text of corpus main"),
    (", weight: 2", None),
])
def test_a_tag_in_a_corpus_text_exits_2_and_writes_nothing(tmp_path, capsys, keys, message):
    src = SRC + b"the <cat> tag\n"
    tgt = TGT + b"la balise\n"
    config = write_corpora(tmp_path, {"main": (src, tgt, ""),
                                      "other": (*numbered_corpus(40), keys)})
    if message is None:  # the same corpora, untagged, prepare
        assert main(["prepare", str(config)]) == 0
        return
    assert main(["prepare", str(config)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err
    assert not (tmp_path / "runs").exists()


def test_corpora_into_two_languages_make_a_multilingual_run(tmp_path, capsys):
    """Each source after its target-language token (a user symbol: one id), in train and in
    each language's dev and test, held out from the first corpus of that language."""
    from keras_transformer.languages import target_languages
    from keras_transformer.tokenizer import Tokenizer, user_symbols, vocabulary
    import tensorflow as tf

    german = ("".join(f"the {w} number {i} is here\n" for i in range(80)
                      for w in ("bird", "fish")).encode(),
              "".join(f"der {w} Nummer {i} ist hier\n" for i in range(80)
                      for w in ("Vogel", "Fisch")).encode())
    config = write_corpora(tmp_path, {"fr": (SRC, TGT, ", tgt_lang: fr"),
                                      "de": (*german, ", tgt_lang: de, tag: <web>")})
    assert main(["prepare", str(config)]) == 0
    assert "train 240  dev 40  test 40" in capsys.readouterr().out
    data = tmp_path / "runs" / "mixed" / "data"
    assert {line.split(" ")[0] for line in read_lines(data / "train-fr-00000-of-00001.src")} \
        == {"<2fr>"}
    assert {line.split(" ", 2)[:2] == ["<2de>", "<web>"]
            for line in read_lines(data / "train-de-00000-of-00001.src")} == {True}
    for split in ("dev", "test"):
        sources, targets = (read_lines(data / f"{split}.{side}") for side in ("src", "tgt"))
        assert [line.split(" ")[0] for line in sources] == ["<2fr>"] * 20 + ["<2de>"] * 20
        assert all(t.startswith("le ") for t in targets[:20])
        assert all(t.startswith("der ") for t in targets[20:])
    model = (tmp_path / "runs" / "mixed" / "vocab" / "spm.model").read_bytes()
    assert target_languages(user_symbols(model)) == ("fr", "de")
    ids = Tokenizer(model).tokenize(tf.constant(["<2de> the bird"])).to_list()[0]
    pieces = [piece for piece, _ in vocabulary(model)]
    assert [pieces[i] for i in ids][:2] == ["▁", "<2de>"]


def test_a_language_token_in_a_corpus_text_exits_2_and_writes_nothing(tmp_path, capsys):
    german = tuple(text.replace(b"the ", b"a ") for text in numbered_corpus(40))
    config = write_corpora(tmp_path, {"fr": (SRC + b"ask <2de> here\n", TGT + b"demande ici\n",
                                             ", tgt_lang: fr"),
                                      "de": (*german, ", tgt_lang: de")})
    assert main(["prepare", str(config)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "data.corpora[1].tgt_lang: <2de> occurs in the text of corpus fr" in err
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("symbols, message", [
    (("<2fr>", "<2de>", "<bt>"), None),
    (("<2fr>", "<2de>"), "data.corpora[1].tag: <bt> is not a piece of the parent's vocabulary"),
    (("<2fr>", "<bt>"), "data.corpora[1].tgt_lang: de is not a target language of the parent "
                        "{model} (train.init_from: fr), whose vocabulary has no <2de> token"),
])
def test_a_fine_tuning_run_needs_its_tags_and_languages_in_the_parents_vocabulary(
        tmp_path, symbols, message):
    from keras_transformer.tokenizer import train_sentencepiece
    from pipelines import InputError
    from pipelines.config import CorpusConfig, DataConfig, SplitFiles
    from pipelines.corpus.prepare import check_parent_symbols

    (tmp_path / "text").write_bytes(SRC + TGT)
    model = tmp_path / "spm.model"
    model.write_bytes(train_sentencepiece([tmp_path / "text"], vocab_size=300,
                                          user_symbols=symbols))
    data = DataConfig(corpora=(
        CorpusConfig("fr", "bible:en-fr"),
        CorpusConfig("de", "files", train=SplitFiles(tsv=Path("de.tsv")), tgt_lang="de",
                     tag="<bt>")))
    if message is None:
        check_parent_symbols(data, model)
        return
    with pytest.raises(InputError) as raised:
        check_parent_symbols(data, model)
    assert message.format(model=model) in str(raised.value)
