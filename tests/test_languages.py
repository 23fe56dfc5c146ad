"""Tests for keras_transformer/languages.py: the target-language tokens of a multilingual model."""
import pytest

from keras_transformer.languages import (language_of_token, language_problem, language_token,
                                         missing_language_message, split_language,
                                         target_language_problem, target_languages,
                                         unknown_language_message, with_language)


@pytest.mark.parametrize("language", ["fr", "deu", "pt-BR", "zh-Hant"])
def test_a_language_code_round_trips_through_its_token(language):
    assert language_problem(language) is None
    assert language_of_token(language_token(language)) == language


@pytest.mark.parametrize("language", ["French", "f", "FR", "fr_FR", "", "<2fr>"])
def test_a_malformed_language_code_is_named(language):
    assert repr(language) in language_problem(language)


def test_the_target_languages_are_the_language_tokens_among_the_user_symbols():
    assert target_languages(["<bt>", "<2fr>", "<2de>", "<2>", "<2FR>"]) == ("fr", "de")
    assert target_languages(["<bt>"]) == ()
    assert with_language("Hello.", "de") == "<2de> Hello."
    assert with_language("Hello.", None) == "Hello."


def test_a_target_language_is_checked_against_the_models_and_split_from_a_source():
    assert target_language_problem("fr", ("fr", "de")) is None
    assert target_language_problem(None, ()) is None  # a bilingual model, none asked
    assert target_language_problem("es", ("fr", "de")) == \
        unknown_language_message("es", ("fr", "de"))
    assert target_language_problem(None, ("fr", "de")) == missing_language_message(("fr", "de"))
    assert "bilingual" in target_language_problem("fr", ())
    assert split_language(with_language("Hello there.", "pt-BR")) == ("pt-BR", "Hello there.")
    assert split_language("<bt> Hello.") == (None, "<bt> Hello.")
