"""pipelines/evaluate.py's scores per language pair of a multilingual model (the evaluation
itself runs in the trained-run tests: tests/test_run.py)."""
from pipelines.evaluate import corpus_scores, pair_scores


def test_each_pairs_lines_are_scored_apart_by_their_target_language_token():
    sources = ["<2fr> the cat", "<2de> the dog", "<2fr> a bird sings", "<2de> a fish swims"]
    hypotheses = ["le chat", "der Hund bellt", "un oiseau chante", "ein Fisch"]
    references = ["le chat", "der Hund", "un oiseau chante", "ein Fisch schwimmt"]
    scores = pair_scores(sources, hypotheses, references, {"fr": "en-fr"})
    assert list(scores) == ["en-fr", "de"]
    french = corpus_scores(hypotheses[0::2], references[0::2])
    german = corpus_scores(hypotheses[1::2], references[1::2])
    assert scores["en-fr"] == {"sentences": 2, "bleu": french["bleu"], "chrf": french["chrf"]}
    assert scores["de"] == {"sentences": 2, "bleu": german["bleu"], "chrf": german["chrf"]}
    assert scores["en-fr"]["chrf"] == 100.0 and scores["de"]["chrf"] < 100.0


def test_a_bilingual_split_has_no_pairs():
    assert pair_scores(["the <bt> cat"], ["le chat"], ["le chat"], {}) == {}
