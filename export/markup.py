"""Inline markup carried through translation (standard library only, for TF Serving clients too):
strip a line's tags, translate its plain text, put every tag back around the target words
aligned to the source words it surrounded.

    parse_markup(line) -> MarkupLine: its plain `text`, its tags (MarkupError if malformed)
    restore_markup(line, translation, alignment "I-J ...") -> the translation with the tags

Tags: `<name attr="v" ...>` ... `</name>` elements (nested, adjacent, empty: `<b></b>`) and
self-closing `<name .../>` placeholders; attribute values in double or single quotes (a `>`
inside them is text) or bare. Words are the plain text's whitespace tokens; an element covers
the words its content touches, a placeholder or an empty element sits between two words. In
the translation, each element spans its aligned target words, from the first to the last
(all the words its parent spans when it covered all its parent's words, e.g. a tag around the
whole line), clipped to its parent, less the words aligned to source words outside it and
those of its earlier siblings (the run of most of its own words is kept), so the output is
well-formed with each tag exactly once, as written; an element none of whose words is aligned,
or left no room, becomes empty where its first word's nearest aligned neighbour went. A
placeholder or empty element written against a word, with no space between (`word<x/>`,
`<x/>word`, `wo<x/>rd`), stays against one: after the target word of the nearest aligned
source word before it (`word<x/>`), before that of the nearest one at or after it. Text
outside tags is not unescaped (`&amp;` is translated as written). Anything else with `<` (a
comment, a stray `<`, a tag that is never closed or closes another) is a MarkupError.

Example:
    >>> line = parse_markup('Press <b>Save</b> now<x id="1"/>')
    >>> line.text  # what is translated
    'Press Save now'
    >>> restore_markup(line, "Appuyez sur Enregistrer maintenant", "0-0 0-1 1-2 2-3")
    'Appuyez sur <b>Enregistrer</b> maintenant<x id="1"/>'
"""
from __future__ import annotations

import dataclasses
import re

from export.word_alignment import parse_alignment

NAME = r"[A-Za-z_][\w.:-]*"
ATTRIBUTE = r"""\s+[^\s"'<>/=]+(?:\s*=\s*(?:"[^"]*"|'[^']*'|[^\s"'<>`=]+))?"""
TAG = re.compile(rf"<(?P<close>/)?(?P<name>{NAME})(?P<attributes>(?:{ATTRIBUTE})*)\s*"
                 rf"(?P<empty>/)?>")


# A tag or word to write: sort keys (target word, 0 before it / 1 the word / 2 after it,
# nesting order: an empty element before a sibling's opening tag at the same word), its text,
# and its kind: "open", "close", "empty", "glued-left" / "glued-right" (an empty element
# against the word before / after it) or "word".
Item = tuple[int, int, float, str, str]
SPACE_AFTER = ("word", "close", "empty", "glued-left")  # a space between one of these
SPACE_BEFORE = ("word", "open", "empty", "glued-right")  # and one of these after it


class MarkupError(ValueError):
    """A line whose markup is not well-formed; the message says where (column from 1)."""


@dataclasses.dataclass
class Element:
    """A tag pair (`close` set) or a self-closing tag (`close` None) and the source words it
    covers, [first, end) (first == end: none; it then sits before word `first`); `glued`:
    "left" / "right" for an empty one written against the word before / after it."""
    open: str
    close: str | None
    first: int = 0
    end: int = 0
    glued: str = ""
    children: list[Element] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class MarkupLine:
    """A line without its tags: `text` (its words joined by single spaces) and the tree of its
    elements under `root`, which covers every word."""
    text: str
    root: Element

    @property
    def words(self) -> list[str]:
        return self.text.split()


def parse_markup(line: str) -> MarkupLine:
    """The plain text and elements of `line`.

    Raises:
        MarkupError: a `<` that begins no tag, a closing tag without its opening one, or an
            element not closed by the end of the line.
    """
    plain: list[str] = []
    root = Element("", "")
    stack: list[tuple[Element, str, int]] = []  # open elements, their name, start in plain
    spans: list[tuple[Element, int, int]] = []  # element, start, end in plain characters
    position = 0
    while (start := line.find("<", position)) >= 0:
        plain.append(line[position:start])
        match = TAG.match(line, start)
        if not match:
            raise MarkupError(f"column {start + 1}: '<' begins no tag (write &lt; for a '<' "
                              f"in text)")
        if match["close"] and (match["attributes"] or match["empty"]):
            raise MarkupError(f"column {start + 1}: {match[0]}: a closing tag has no "
                              f"attributes and no '/' before '>'")
        parent = stack[-1][0] if stack else root
        offset = len("".join(plain))
        if match["close"]:
            if not stack or stack[-1][1] != match["name"]:
                expected = f"</{stack[-1][1]}>" if stack else "no closing tag"
                raise MarkupError(f"column {start + 1}: {match[0]} closes no open element "
                                  f"(expected {expected})")
            element, _, opened = stack.pop()
            element.close = match[0]
            spans.append((element, opened, offset))
        else:
            element = Element(match[0], None)
            parent.children.append(element)
            if match["empty"]:
                spans.append((element, offset, offset))
            else:
                stack.append((element, match["name"], offset))
        position = match.end()
    if stack:
        raise MarkupError(f"<{stack[-1][1]}> is not closed by the end of the line")
    plain.append(line[position:])
    text = "".join(plain)
    words = [(word.start(), word.end()) for word in re.finditer(r"\S+", text)]
    for element, start, end in spans:
        touched = [index for index, (first, last) in enumerate(words)
                   if first < end and start < last]
        after = sum(1 for _, last in words if last <= start)
        element.first, element.end = (touched[0], touched[-1] + 1) if touched else (after,
                                                                                     after)
        if start == end:  # inside a word (touched), it sits before the word, against it
            element.glued = ("right" if touched else
                             "left" if start and not text[start - 1].isspace() else
                             "right" if start < len(text) and not text[start].isspace() else "")
    root.end = len(words)
    return MarkupLine(" ".join(text.split()), root)


def restore_markup(line: MarkupLine, translation: str, alignment: str) -> str:
    """`translation` (of `line.text`) with `line`'s tags put back around the target words
    aligned (`alignment`: `I-J ...`, source word I - target word J; pairs naming a word
    beyond either text are left out) to the source words each element covers."""
    target_words = translation.split()
    sources: dict[int, list[int]] = {}
    for source, target in parse_alignment(alignment):
        if source < len(line.words) and target < len(target_words):
            sources.setdefault(source, []).append(target)
    items: list[Item] = []
    _place(line.root, (0, len(target_words)), sources, items, depth=0)
    items += [(index, 1, 0, word, "word") for index, word in enumerate(target_words)]
    return _join(sorted(items, key=lambda item: item[:3]))


def _place(element: Element, span: tuple[int, int], sources: dict[int, list[int]],
           items: list[Item], depth: int) -> None:
    """Adds the tags of `element`'s children placed inside `span` (target words [start,
    end)), each child's own children inside its span."""
    taken: list[tuple[int, int]] = []
    for child in element.children:
        start, end = _child_span(child, element, span, sources, taken)
        if start == end:  # a placeholder, an empty element: after the span's last word
            inside_end = start == span[1] > span[0]  # (before its closing tag)
            kind = f"glued-{child.glued}" if child.glued else "empty"
            items.append((start - 1, 2, -depth, _collapsed(child), kind) if inside_end
                         else (start, 0, depth - 0.5, _collapsed(child), kind))
            continue
        taken.append((start, end))
        items.append((start, 0, depth, child.open, "open"))
        items.append((end - 1, 2, -depth, child.close or "", "close"))
        _place(child, (start, end), sources, items, depth + 1)


def _collapsed(element: Element) -> str:
    """An element with its descendants and no words: `<b><i></i></b>`, `<x/>`."""
    return element.open + "".join(map(_collapsed, element.children)) + (element.close or "")


def _child_span(child: Element, parent: Element, span: tuple[int, int],
                sources: dict[int, list[int]], taken: list[tuple[int, int]]) -> tuple[int, int]:
    """The target words [start, end) of `child` inside its parent's `span`: of the runs of
    words from its first aligned word to its last that are neither aligned to a source word
    outside it nor in the spans its earlier siblings `taken`, the one with most of its aligned
    words. start == end: none, a tag at that word boundary."""
    inside = range(child.first, child.end)
    if child.first < child.end and (child.first, child.end) == (parent.first, parent.end):
        wanted = span
    else:
        targets = [t for s in inside for t in sources.get(s, []) if span[0] <= t < span[1]]
        wanted = (min(targets), max(targets) + 1) if targets else (0, 0)
    own = {t for s in inside for t in sources.get(s, [])}
    blocked = {t for s, targets in sources.items() if s not in inside for t in targets}
    blocked |= {t for start, end in taken for t in range(start, end)}
    runs: list[tuple[int, int]] = []
    for word in range(*wanted):
        if word in blocked:
            continue
        if runs and runs[-1][1] == word:
            runs[-1] = (runs[-1][0], word + 1)
        else:
            runs.append((word, word + 1))
    if child.close is not None and runs:
        return max(runs, key=lambda run: (len(own.intersection(range(*run))), -run[0]))
    boundary = _boundary(child.first, sources, span, after_first=child.glued != "left")
    for start, end in taken:  # not inside an earlier sibling
        if start < boundary < end:
            boundary = end
    return boundary, boundary


def _boundary(word: int, sources: dict[int, list[int]], span: tuple[int, int],
              after_first: bool = True) -> int:
    """The target word boundary for a tag before source word `word`: before the first target
    word of the nearest aligned source word at or after it, else after the last one of the
    nearest before it (the other way round without `after_first`), else the start of `span`;
    within `span`."""
    after = [min(sources[s]) for s in sorted(sources) if s >= word]
    before = [max(sources[s]) + 1 for s in sorted(sources) if s < word]
    first, second = (after[:1], before[-1:]) if after_first else (before[-1:], after[:1])
    boundary = (first or second or [span[0]])[0]
    return min(max(boundary, span[0]), span[1])


def _join(items: list[Item]) -> str:
    """Tags and words in order as one line: a space between a word, closing tag or empty
    element and a word, opening tag or empty element after it, none on a glued side."""
    text, previous = "", "open"
    for *_, item, kind in items:
        if previous in SPACE_AFTER and kind in SPACE_BEFORE:
            text += " "
        text, previous = text + item, kind
    return text
