"""Terminology constraints: glossaries checked and matched (export/glossary.py) and
`translate --glossary` (the SavedModel's `translate_terms` signature as TF Serving runs it:
tests/test_serving.py)."""
import re

import pytest

from export.glossary import Glossary, GlossaryError
from export.word_alignment import parse_alignment
from pipelines.cli import main

GLOSSARY = "bird\triver\nfish\tstone stone\nsun moon\tcloud\n"  # words the model would not say


def test_source_terms_match_whole_words_longest_first_case_sensitive():
    glossary = Glossary({"sun": "A", "sun moon": "B", "moon": "C", "C++": "D", "été": "E"})
    assert glossary.target_terms("sun moon, sunny moon. Sun C++ été") == ["B", "C", "D", "E"]
    assert glossary.target_terms("moon sun moon moon") == ["C", "B"]  # each once, in order
    assert glossary.target_terms("sunmoon x_sun") == []


@pytest.mark.parametrize("text, error", [
    ("a\tb\nc d\n", "g.tsv:2: expected SOURCE TERM<TAB>TARGET TERM, found 0 tabs"),
    ("a\tb\tc\n", "g.tsv:1: expected SOURCE TERM<TAB>TARGET TERM, found 2 tabs"),
    ("a\tb\n \tc\n", "g.tsv:2: empty source term"),
    ("a\t \n", "g.tsv:1: empty target term"),
    ("a\tb\nx\ty\na\tc\n", "g.tsv:3: source term 'a' has target term 'b' at line 1, here 'c'"),
    ("", "g.tsv: no SOURCE TERM<TAB>TARGET TERM line"),
])
def test_a_bad_glossary_line_is_named(tmp_path, text, error):
    path = tmp_path / "g.tsv"
    path.write_text(text)
    with pytest.raises(GlossaryError) as raised:
        Glossary.read(path)
    assert str(raised.value) == f"{path}{error[5:]}"


def test_a_repeated_entry_is_one_entry(tmp_path):
    (tmp_path / "g.tsv").write_text("a\tb\n a \tb\n")
    assert Glossary.read(tmp_path / "g.tsv").entries == {"a": "b"}


def whole_word(term: str, text: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(term)}(?!\w)", text) is not None


def test_translate_with_a_glossary_uses_each_term_or_says_why_not(saved_model_dir, tmp_path,
                                                                   capsysbinary):
    glossary = tmp_path / "glossary.tsv"
    glossary.write_text(GLOSSARY + "door\t" + " ".join(["stone"] * 60) + "\n")
    source = tmp_path / "lines.txt"
    lines = ["the bird and the fish", "sun moon star", "tree", "door"]
    source.write_text("\n".join(lines) + "\n")
    assert main(["translate", str(saved_model_dir), str(source), "--glossary",
                 str(glossary)]) == 0
    captured = capsysbinary.readouterr()
    out = captured.out.decode().splitlines()
    for row, terms in ((out[0], ["river", "stone stone"]), (out[1], ["cloud"])):
        assert all(whole_word(term, row) for term in terms), (row, terms)
    assert captured.err.decode() == (
        f'keras-transformer translate: {source}:4: glossary terms "{" ".join(["stone"] * 60)}" '
        f"do not fit in the line's output limit (source length + extra_length); translated "
        f"without them\n")
    assert main(["translate", str(saved_model_dir), str(source), "--glossary", str(glossary),
                 "--scores"]) == 0
    rows = capsysbinary.readouterr().out.decode().splitlines()
    assert [row.split("\t")[1] for row in rows] == out and float(rows[0].split("\t")[0]) < 0
    assert main(["translate", str(saved_model_dir), str(source), "--glossary", str(glossary),
                 "--tokens"]) == 0
    rows = [row.split("\t") for row in capsysbinary.readouterr().out.decode().splitlines()]
    assert [row[1] for row in rows] == out and all(row[2].split()[-1].startswith("</s>=")
                                                   for row in rows)
    # With markup: the terms of each line's text, its tags put back, the alignment printed.
    tagged = ["<b>the bird</b> and the fish", 'sun moon <x id="1"/><i>star</i>', "tree", "door"]
    source.write_text("\n".join(tagged) + "\n")
    assert main(["translate", str(saved_model_dir), str(source), "--glossary", str(glossary),
                 "--markup", "--alignments"]) == 0
    captured = capsysbinary.readouterr()
    rows = [row.split(" ||| ") for row in captured.out.decode().splitlines()]
    assert [" ".join(re.sub(r"<[^<]*?>", " ", text).split()) for text, _ in rows] == out
    for line, (text, pairs) in zip(tagged, rows):
        assert sorted(re.findall(r"<[^<]*?>", text)) == sorted(re.findall(r"<[^<]*?>", line))
        assert [t for _, t in parse_alignment(pairs)] == list(range(len(out[tagged.index(
            line)].split())))
    assert captured.err.decode().endswith(f"{source}:4: glossary terms \"{' '.join(['stone'] * 60)}"
                                          f"\" do not fit in the line's output limit (source "
                                          f"length + extra_length); translated without them\n")


def test_a_bad_glossary_or_option_is_refused_before_any_work(exported, tmp_path, capsys):
    glossary = tmp_path / "glossary.tsv"
    glossary.write_text(GLOSSARY)
    source = tmp_path / "lines.txt"
    source.write_text("bird\n")
    output = tmp_path / "out.txt"
    bad = tmp_path / "bad.tsv"
    bad.write_text("bird\triver\nfish stone\n")
    for args, error in [
            ([str(exported.saved_model), "--glossary", str(bad)],
             f"--glossary {bad}:2: expected SOURCE TERM<TAB>TARGET TERM, found 0 tabs"),
            ([str(exported.onnx), "--glossary", str(glossary)],
             f"--glossary: {exported.onnx} is an ONNX export, which has no constrained "
             f"search; use --runtime tf (the SavedModel's translate_terms signature)"),
            ([str(exported.ctranslate2 / "float32"), "--glossary", str(glossary)],
             f"--glossary: {exported.ctranslate2 / 'float32'} is a CTranslate2 export, which "
             f"has no constrained search; use --runtime tf (the SavedModel's translate_terms "
             f"signature)"),
            ([str(exported.saved_model), "--glossary", str(glossary), "--n-best", "2"],
             "--glossary: not with --n-best, --prefix-file or --sampling-*"),
            ([str(exported.saved_model), "--glossary", str(glossary), "--sampling-topk", "5"],
             "--glossary: not with --n-best, --prefix-file or --sampling-*")]:
        assert main(["translate", args[0], str(source), *args[1:], "--output",
                     str(output)]) == 2
        assert capsys.readouterr().err == f"keras-transformer translate: error: {error}\n"
        assert not output.exists()


def test_an_export_older_than_the_alignment_output_still_translates_terms(
        saved_model_translator):
    """An export whose translate_terms gives no alignment: --glossary still works (the
    alignment reads ""), and --alignments / --markup with it are refused naming the version."""
    import copy
    from types import SimpleNamespace

    from export import ExportError
    from export.translator.terms import termed_in_batches

    def older_signature(**inputs):
        outputs = saved_model_translator.translate_terms(**inputs)
        return {name: value for name, value in outputs.items() if name != "alignment"}

    [result] = termed_in_batches(older_signature, ["the bird"], [["river"]], batch_size=32)
    assert whole_word("river", result.translation) and result.alignment == ""
    older = copy.copy(saved_model_translator)
    older.loaded = SimpleNamespace(signatures={"translate_terms": SimpleNamespace(
        structured_outputs={"translation": None})})  # an older export's outputs, in part
    with pytest.raises(ExportError, match=re.escape(
            f"{older.version_dir}: its translate_terms signature has no alignment output (an "
            f"older export); export again")):
        older.check_output("translate_terms", "alignment")
    saved_model_translator.check_output("translate_terms", "alignment")  # this export has it
