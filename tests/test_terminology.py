"""Terminology constraints: glossaries checked and matched (export/glossary.py), the SavedModel's
`translate_terms` signature as TF Serving runs it, and `translate --glossary`."""
import re

import numpy as np
import pytest
import tensorflow as tf

from export.glossary import Glossary, GlossaryError
from export.serving.client import predict_request
from export.word_alignment import parse_alignment
from export_helpers import SENTENCES
from pipelines.cli import main
from test_serving import SessionServer

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


@pytest.fixture(scope="module")
def server(saved_model_server) -> SessionServer:
    return saved_model_server


def whole_word(term: str, text: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(term)}(?!\w)", text) is not None


def terms_request(server: SessionServer, lines, terms) -> dict[str, np.ndarray]:
    response = server.predict(predict_request("tiny", {
        "text": np.array(lines, object), "terms": np.array(terms, object).reshape(
            len(terms), -1)}, "translate_terms"))
    return {name: tf.make_ndarray(value) for name, value in response.outputs.items()}


def test_the_served_signature_puts_every_term_in_its_translation(server):
    lines = SENTENCES[:4] + ["bird", ""]
    terms = [["river", "stone stone"], ["", ""], ["river", ""], ["cloud", ""],
             [" ".join(["stone"] * 60), ""], ["", ""]]
    served = terms_request(server, lines, terms)
    translations = [text.decode() for text in served["translation"]]
    plain = server.predict(predict_request("tiny", {"text": np.array(lines, object)}))
    plain_text = [text.decode() for text in tf.make_ndarray(plain.outputs["translation"])]
    for translation, line_terms in zip(translations[:4], terms):
        assert all(whole_word(term, translation) for term in line_terms if term)
    assert translations[0] != plain_text[0] and "river" not in plain_text[0]
    assert translations[1] == plain_text[1]  # no term: as serving_default
    np.testing.assert_allclose(served["score"][1], tf.make_ndarray(plain.outputs["score"])[1],
                               rtol=1e-5)
    assert served["terms_fit"].tolist() == [True] * 4 + [False, True]  # 60 pieces > 1 + 50
    assert served["term_found"][:4].all() and not served["term_found"][4, 0]
    assert translations[4] == plain_text[4] and (translations[5], served["score"][5]) == ("", 0)
    aligned = server.predict(predict_request("tiny", {"text": np.array(lines, object)},
                                             "translate_aligned"))
    alignments = [pairs.decode() for pairs in served["alignment"]]
    assert [alignments[i] for i in (1, 4, 5)] == [  # no term used: translate_aligned's
        tf.make_ndarray(aligned.outputs["alignment"])[i].decode() for i in (1, 4, 5)]
    assert [[t for _, t in parse_alignment(pairs)] for pairs in alignments[:4]] == [
        list(range(len(text.split()))) for text in translations[:4]]  # every target word
    no_terms = terms_request(server, lines[:2], np.zeros([2, 0], object))
    assert [t.decode() for t in no_terms["translation"]] == plain_text[:2]
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match="text and terms need the same batch size"):
        terms_request(server, lines[:2], [["river"]] * 3)


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
