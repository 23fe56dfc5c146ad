"""pipelines/prepare.py and the `keras-transformer prepare` command."""
import hashlib

import pytest

from pipelines.cli import main
from pipelines.config import load_config
from pipelines.prepare import prepare

OUTPUTS = [f"data/{split}.{side}" for split in ("train", "dev", "test") for side in ("src", "tgt")]
OUTPUTS += ["vocab/spm.model", "vocab/spm.vocab"]


def checksums(run_dir):
    return {name: hashlib.sha256((run_dir / name).read_bytes()).hexdigest() for name in OUTPUTS}


def test_demo_outputs_and_summary(demo_run):
    run_dir = demo_run.run_dir
    assert sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("*") if p.is_file()) == \
        sorted(OUTPUTS)  # no temporary file left behind
    lines = {name: (run_dir / name).read_text(encoding="utf-8").split("\n")[:-1]
             for name in OUTPUTS[:6]}
    assert {split: n for split, n in demo_run.pairs.items()} == \
        {split: len(lines[f"data/{split}.src"]) for split in ("train", "dev", "test")}
    for split in ("train", "dev", "test"):
        assert len(lines[f"data/{split}.src"]) == len(lines[f"data/{split}.tgt"])
    for split in ("dev", "test"):
        assert not set(lines[f"data/{split}.src"]) & set(lines["data/train.src"])
        assert not set(lines[f"data/{split}.tgt"]) & set(lines["data/train.tgt"])
    assert lines["data/train.src"][0] == "In the beginning God created the heavens and the earth."
    assert demo_run.vocab_size == 8000
    assert 20 < demo_run.avg_tokens[0] < 50 and 20 < demo_run.avg_tokens[1] < 50
    assert min(demo_run.padding_efficiency) >= 0.85
    text = demo_run.format()
    for expected in ("train 28,", "Psalm title on one side 116", "8,000 shared bpe pieces",
                     "too long", "padding   source 0.", "per train sentence"):
        assert expected in text


def write_corpus(tmp_path, src: bytes, tgt: bytes, **overrides):
    """A `files` config over two corpus files; `overrides` replace its data keys."""
    (tmp_path / "corpus.en").write_bytes(src)
    (tmp_path / "corpus.fr").write_bytes(tgt)
    data = {"source": "files", "train": "{src: corpus.en, tgt: corpus.fr}", "holdout": 20,
            "vocab_size": 300, "max_length": 32, "batch_tokens": 256} | overrides
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
    first = checksums(tmp_path / "runs" / "small")
    prepare(load_config(config))
    assert checksums(tmp_path / "runs" / "small") == first


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
