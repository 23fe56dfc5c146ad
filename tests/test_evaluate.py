"""pipelines/evaluate.py's scores per target language of a multilingual model (the evaluation
itself runs in the trained-run tests: tests/test_run.py)."""
from pipelines.evaluate import corpus_scores, language_scores


def test_each_languages_lines_are_scored_apart_by_their_target_language_token():
    sources = ["<2fr> the cat", "<2de> the dog", "<2fr> a bird sings", "<2de> a fish swims"]
    hypotheses = ["le chat", "der Hund bellt", "un oiseau chante", "ein Fisch"]
    references = ["le chat", "der Hund", "un oiseau chante", "ein Fisch schwimmt"]
    scores = language_scores(sources, hypotheses, references)
    assert list(scores) == ["fr", "de"]
    french = corpus_scores(hypotheses[0::2], references[0::2])
    german = corpus_scores(hypotheses[1::2], references[1::2])
    assert scores["fr"] == {"sentences": 2, "bleu": french["bleu"], "chrf": french["chrf"]}
    assert scores["de"] == {"sentences": 2, "bleu": german["bleu"], "chrf": german["chrf"]}
    assert scores["fr"]["chrf"] == 100.0 and scores["de"]["chrf"] < 100.0


def test_a_bilingual_split_has_no_languages():
    assert language_scores(["the <bt> cat"], ["le chat"], ["le chat"]) == {}
