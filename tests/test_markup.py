"""Markup carried through translation (`export.markup`): tags stripped, put back around the
aligned target words, well-formed, each exactly once; malformed lines refused."""
import re

import pytest

from export.markup import MarkupError, parse_markup, restore_markup


def carried(line: str, translation: str, alignment: str) -> str:
    parsed = parse_markup(line)
    return restore_markup(parsed, translation, alignment)


@pytest.mark.parametrize("line, text, translation, alignment, expected", [
    ("Press <b>Save</b> now", "Press Save now", "Appuyez sur Enregistrer maintenant",
     "0-0 0-1 1-2 2-3", "Appuyez sur <b>Enregistrer</b> maintenant"),
    ("<p>Hello <b>big <i>world</i></b></p>", "Hello big world", "Bonjour monde grand",
     "0-0 2-1 1-2", "<p>Bonjour <b><i>monde</i> grand</b></p>"),  # nested, reordered
    ("<b>a</b> <i>b</i> c", "a b c", "A B C", "0-0 1-1 2-2", "<b>A</b> <i>B</i> C"),
    ("<b>a</b> <i>b</i>", "a b", "B A", "1-0 0-1", "<i>B</i> <b>A</b>"),  # adjacent, swapped
    ("<b>a b</b> <i>c</i>", "a b c", "X Y Z", "0-0 2-1 1-2", "<b>X</b> <i>Y</i> Z"),  # overlap
    ("a <b></b> b", "a b", "A B", "0-0 1-1", "A <b></b> B"),  # empty element
    ('one<x id="1"/> two', "one two", "un deux", "0-0 1-1", 'un<x id="1"/> deux'),  # glued
    ('one <x/>two', "one two", "deux un", "1-0 0-1", '<x/>deux un'),  # glued to the next
    ('a<x/> b c', "a b c", "C B A", "2-0 1-1 0-2", 'C B A<x/>'),  # after a's word, moved
    ('a <x/> b', "a b", "B A", "1-0 0-1", '<x/> B A'),  # spaced: before b's word
    ('wo<x/>rd next', "word next", "mot suivant", "0-0 1-1", '<x/>mot suivant'),  # in a word
    ('<b>a</b><x/><y/> b', "a b", "A B", "0-0 1-1", '<b>A</b><x/><y/> B'),
    ('<a href="x>y" title=\'say "hi"\'>link</a> text', "link text", "texte lien", "1-0 0-1",
     'texte <a href="x>y" title=\'say "hi"\'>lien</a>'),  # quotes, > inside quotes
    ("<p>all the line</p>", "all the line", "toute la ligne ici", "0-0 1-1 2-2",
     "<p>toute la ligne ici</p>"),  # around the whole line: every target word
    ("a <b>b</b> c", "a b c", "A C", "0-0 2-1", "A <b></b> C"),  # its word unaligned
    ("<b>a <i>b</i></b>", "a b", "A", "0-0", "<b>A <i></i></b>"),  # a child left no room
    ('<x id="1"/>', "", "", "", '<x id="1"/>'),  # no words
])
def test_tags_are_put_back_around_the_aligned_words(line, text, translation, alignment,
                                                    expected):
    assert parse_markup(line).text == text
    assert carried(line, translation, alignment) == expected


def test_pairs_beyond_either_text_are_left_out():
    assert carried("<b>a</b> b", "A B", "0-0 1-1 5-0 0-9") == "<b>A</b> B"


@pytest.mark.parametrize("line, error", [
    ("3 < 4", "column 3: '<' begins no tag (write &lt; for a '<' in text)"),
    ("<!-- note -->", "column 1: '<' begins no tag"),
    ("<b>open", "<b> is not closed by the end of the line"),
    ("x</b>", "column 2: </b> closes no open element (expected no closing tag)"),
    ("<b><i>x</b></i>", "column 8: </b> closes no open element (expected </i>)"),
    ('</b class="c">', "a closing tag has no attributes"),
    ('<a href="x>', "column 1: '<' begins no tag"),
])
def test_malformed_markup_is_refused_saying_where(line, error):
    with pytest.raises(MarkupError, match=re.escape(error)):
        parse_markup(line)
