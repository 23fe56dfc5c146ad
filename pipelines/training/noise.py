"""Noise on the fly: typos, casing, removed end punctuation and inline placeholder tags put into
each corpus's train pairs as training reads them (`data.corpora[i].noise`, `data.noise`:
`pipelines.config.data.NoiseConfig`), in the tf.data graph, before tokenization.

Contract: `noised(pairs, noise, seed, stream)` takes a stream of (source, target[, links][,
corpus]) string scalars and gives the same structure, each pair with each modifier of its
corpus's `NoiseConfig` applied with its probability, drawn for each pair independently. The
draws are stateless: pairs go through in batches of NOISE_BATCH and batch b draws from the seed
fold_in((seed, stream), b), so the noised stream is a function of the stream that comes in, the
seed and the stream's id (a worker's input pipeline): the same for a seed, each epoch's
different (b goes on counting), each worker's its own; no Python, no state, any parallelism.
A pair no modifier picked comes out byte for byte as it came in.

The modifiers, in the order they apply:
- remove_end_punctuation: when both sides end with one mark of the same kind (END_MARKS: . ! ?
  and … with their CJK, Devanagari and Arabic forms) after a letter or digit (a space between
  allowed), both marks go; a line ending with `?!`, `...` or a quote is left as it is.
- uppercase, titlecase: both sides, UTF-8 case mapping (`straße` -> `STRASSE`); titlecase
  capitalizes the first character of each word.
- typos: the source only (the target stays the clean reference). One of its words at random
  and each other with TYPO_WORD_SHARE get one edit: two neighbouring letters swapped, a letter
  dropped, a letter repeated, or a letter replaced by a QWERTY neighbour (the case kept; a
  letter with none is repeated instead). Words with a digit or under two letters are never
  edited, so numbers stay as the target has them.
- inline_tags: one of TAGS, a placeholder (`<x id="1"/>`) or an element (`<b>...</b>`), into
  both sides, in export/markup.py's syntax. With word alignments (`links`): at a source word
  picked among the aligned ones, the placeholder before it and before its first aligned target
  word, the element around it and around its aligned target words (first to last), which is
  where export/markup.py's restore_markup puts them. Without (or for a pair with no link):
  a placeholder at the start or at the end of both sides, an element around both whole sides.
The leading source words that are corpus tags (`<bt>`) or language tokens (`<2fr>`) are never
changed and never follow an inline tag. Words are whitespace-separated (those of prepare's
word alignments on text SentencePiece does not normalize), and the links (`I-J ...`) follow
the edits: those of a removed word dropped, the words after an inserted tag renumbered, a tag's
own words (`<x`, `id="1"/>`; an element's before the word it is against) linked to the other
side's.

Example:
    >>> pairs = tf.data.Dataset.from_tensor_slices((["Hello world."], ["Bonjour le monde."]))
    >>> list(noised(pairs, [NoiseConfig(uppercase=1.0)], seed=1).as_numpy_iterator())
    [(b'HELLO WORLD.', b'BONJOUR LE MONDE.')]
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Iterator, Sequence

import tensorflow as tf

from keras_transformer.languages import TOKEN as LANGUAGE_TOKEN
from pipelines.config.data import NoiseConfig
from pipelines.corpus.tags import TAG_FORM

MODIFIERS = tuple(field.name for field in dataclasses.fields(NoiseConfig))  # probability columns
NOISE_BATCH = 1024  # pairs noised in one graph call
TYPO_WORD_SHARE = 0.1  # of a typo pair's other words, those that get an edit too
# (open, close) tags: a placeholder when close is "", an element otherwise.
TAGS = (('<x id="1"/>', ""), ('<x id="2"/>', ""), ("<br/>", ""), ("<b>", "</b>"),
        ("<i>", "</i>"), ('<g id="1">', "</g>"), ('<a href="#">', "</a>"))
END_MARKS = (".。．｡।۔", "!！﹗", "?？؟﹖", "…")  # the kinds of end punctuation
KEYBOARD = ("qwertyuiop", "asdfghjkl", "zxcvbnm")  # QWERTY letter rows, each half a key right
PROTECTED = f"{TAG_FORM}|{LANGUAGE_TOKEN.pattern}"  # leading source words never changed
TYPO_WORD = r"\PN*\pL\PN*\pL\PN*"  # a word typos may edit: two letters or more, no digit
SWAP, DROP, REPEAT, NEIGHBOUR = range(4)  # the typo edits
LENGTH_DELTA = (0, -1, 1, 0)  # characters each edit adds
LAST_CHARACTER = 1 << 30  # a substring length reaching any word's end
NONE = tf.int64.max  # segment minimum of no value


def is_noisy(noise: Sequence[NoiseConfig | None] | None) -> bool:
    """Whether some corpus has a modifier with a probability above 0."""
    return any(config and any(dataclasses.astuple(config)) for config in noise or ())


def noised(pairs: tf.data.Dataset, noise: Sequence[NoiseConfig | None], seed: int,
           stream: int = 0, *, links: bool = False, corpus: bool = False) -> tf.data.Dataset:
    """`pairs` with each corpus's noise (`noise[i]` for corpus i; None: none).

    Args:
        pairs: (source, target) string scalars, then the alignment line (`links`), then the
            corpus index, int32 (`corpus`; else every pair is corpus 0).
        noise: each corpus's modifier probabilities.
        seed, stream: the draws' seed and the stream's id (its worker's input pipeline).
        links, corpus: whether the elements have those items.
    """
    table = tf.constant([[getattr(config, name) if config else 0.0 for name in MODIFIERS]
                         for config in noise], tf.float32)  # [corpora, modifiers]
    base = tf.constant([seed, stream], tf.int64)

    traced = _traced_noise_pairs(links)

    def apply(index: tf.Tensor, batch: tuple[tf.Tensor, ...]) -> tuple[tf.Tensor, ...]:
        src, tgt = batch[:2]  # [n] each
        corpora = batch[-1] if corpus else tf.zeros(tf.shape(src), tf.int32)  # [n]
        noised_texts = traced(*batch[:2 + links], tf.gather(table, corpora),
                              tf.random.experimental.stateless_fold_in(base, index))
        return tuple(noised_texts) + batch[2 + links:]

    return (pairs.batch(NOISE_BATCH).enumerate()
            .map(tf.autograph.experimental.do_not_convert(apply),  # no Python control flow
                 num_parallel_calls=tf.data.AUTOTUNE).unbatch())


@functools.cache
def _traced_noise_pairs(links: bool) -> tf.types.experimental.GenericFunction:
    """`noise_pairs` as a tf.function traced once per process (with or without links):
    (source, target[, links], probabilities, seed) -> (source, target[, links]). Each noised
    dataset's map calls it instead of tracing its hundreds of ops again (about 1 CPU-s a
    dataset)."""
    text = tf.TensorSpec([None], tf.string)
    specs = [text] * (2 + links) + [tf.TensorSpec([None, len(MODIFIERS)], tf.float32),
                                    tf.TensorSpec([2], tf.int64)]

    def noise_texts(*args: tf.Tensor) -> tuple[tf.Tensor, ...]:
        *texts, probabilities, seed = args
        new_src, new_tgt, new_links = noise_pairs(
            texts[0], texts[1], texts[2] if links else None, probabilities, seed)
        return (new_src, new_tgt) + (new_links,) * links

    return tf.function(noise_texts, input_signature=specs, autograph=False)


def noise_pairs(src: tf.Tensor, tgt: tf.Tensor, links: tf.Tensor | None,
                probabilities: tf.Tensor, seed: tf.Tensor
                ) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor | None]:
    """(source, target, links) strings [n] each (links: `I-J ...` or None) with the modifiers
    drawn for each pair with `probabilities`: float32 [n, MODIFIERS]; seed: int [2]. Only the
    pairs some modifier picked are split into words and joined again."""
    seeds = iter(tf.unstack(tf.random.experimental.stateless_split(seed, num=16)))
    picked = tf.random.stateless_uniform(tf.shape(probabilities), next(seeds)) < probabilities
    rows = tf.where(tf.reduce_any(picked, axis=1))  # [changed, 1]
    texts = [text for text in (src, tgt, links) if text is not None]
    changed = _noised_rows(*(tf.gather(text, rows[:, 0]) for text in texts),
                           picked=tf.gather(picked, rows[:, 0]), seeds=seeds)
    outputs = [tf.tensor_scatter_nd_update(text, rows, new) for text, new in zip(texts, changed)]
    return outputs[0], outputs[1], outputs[2] if links is not None else None


def _noised_rows(src: tf.Tensor, tgt: tf.Tensor, links: tf.Tensor | None = None, *,
                 picked: tf.Tensor, seeds: Iterator[tf.Tensor]) -> list[tf.Tensor]:
    """[source, target(, links)] strings [n] each with the modifiers `picked`: bool [n,
    MODIFIERS]."""
    on = dict(zip(MODIFIERS, tf.unstack(picked, num=len(MODIFIERS), axis=1)))  # [n] each
    new_src, new_tgt = _without_end_marks(src, tgt, on["remove_end_punctuation"])
    src_words, tgt_words = tf.strings.split(new_src), tf.strings.split(new_tgt)  # [n, (words)]
    word_counts = src_words.row_lengths(), tgt_words.row_lengths()  # [n] each
    protected = _protected(src_words)  # [src words]
    src_words = _cased(src_words, on["uppercase"], on["titlecase"], protected)
    tgt_words = _cased(tgt_words, on["uppercase"], on["titlecase"],
                       tf.zeros(tf.shape(tgt_words.flat_values), tf.bool))
    src_words = _with_typos(src_words, on["typos"], protected, seeds)
    pair_links = _parsed_links(links) if links is not None else None
    src_words, tgt_words, shift = _with_tags(src_words, tgt_words, on["inline_tags"], protected,
                                             pair_links, seeds)
    outputs = [tf.strings.reduce_join(words, axis=1, separator=" ")
               for words in (src_words, tgt_words)]
    if links is not None:
        outputs.append(_moved_links(pair_links, word_counts, shift))
    return outputs


@dataclasses.dataclass(frozen=True)
class _Shift:
    """What an inline tag did to a pair's word numbers: `extra` words of the tag at `src_at` /
    `tgt_at`, each linked to its copy on the other side, the words from there on moved."""
    src_at: tf.Tensor  # int64 [n]
    tgt_at: tf.Tensor  # int64 [n]
    extra: tf.Tensor  # int64 [n]


def _without_end_marks(src: tf.Tensor, tgt: tf.Tensor, on: tf.Tensor
                       ) -> tuple[tf.Tensor, tf.Tensor]:
    """Both sides without their end mark where `on` and both end with one of a kind."""
    ends_alike = tf.zeros(tf.shape(src), tf.bool)  # [n]
    for marks in END_MARKS:
        pattern = rf"(?s).*[\pL\pN]\s?[{marks}]\s*"
        ends_alike |= (tf.strings.regex_full_match(src, pattern)
                       & tf.strings.regex_full_match(tgt, pattern))
    remove = on & ends_alike
    mark = rf"\s?[{''.join(END_MARKS)}]\s*$"
    return tuple(tf.where(remove, tf.strings.regex_replace(side, mark, ""), side)
                 for side in (src, tgt))


def _positions(words: tf.RaggedTensor) -> tuple[tf.Tensor, tf.Tensor]:
    """(row, position in the row) of each word: int64 [words] each."""
    rows = words.value_rowids()
    flat_index = tf.range(tf.size(words.flat_values, out_type=tf.int64))
    return rows, flat_index - tf.gather(words.row_starts(), rows)


def _protected(words: tf.RaggedTensor) -> tf.Tensor:
    """bool [words]: the leading corpus tags and language tokens of each row."""
    rows, position = _positions(words)
    token = tf.strings.regex_full_match(words.flat_values, PROTECTED)
    first_other = tf.math.unsorted_segment_min(tf.where(token, NONE, position), rows,
                                               words.nrows())  # [n]
    return position < tf.gather(first_other, rows)


def _cased(words: tf.RaggedTensor, upper: tf.Tensor, title: tf.Tensor, protected: tf.Tensor
           ) -> tf.RaggedTensor:
    """Words in upper case in the rows `upper`, capitalized in the rows `title` [n]."""
    rows = words.value_rowids()
    flat = words.flat_values
    capitalized = (tf.strings.upper(tf.strings.substr(flat, 0, 1, unit="UTF8_CHAR"),
                                    encoding="utf-8")
                   + tf.strings.substr(flat, 1, LAST_CHARACTER, unit="UTF8_CHAR"))
    flat = tf.where(tf.gather(title, rows) & ~protected, capitalized, flat)
    flat = tf.where(tf.gather(upper, rows) & ~protected,
                    tf.strings.upper(flat, encoding="utf-8"), flat)
    return words.with_flat_values(flat)


def _pick(mask: tf.Tensor, rows: tf.Tensor, count: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
    """int64 [count]: the index of one item of each row picked at random among those of `mask`
    (bool [items], `rows` int64 [items] sorted), -1 for a row with none."""
    score = tf.where(mask, tf.random.stateless_uniform(tf.shape(mask), seed), -1.0)
    best = tf.math.unsorted_segment_max(score, rows, count)  # [count]
    index = tf.range(tf.size(mask, out_type=tf.int64))
    first = tf.math.unsorted_segment_min(
        tf.where(mask & (score == tf.gather(best, rows)), index, NONE), rows, count)
    return tf.where(first == NONE, tf.constant(-1, tf.int64), first)


def _with_typos(words: tf.RaggedTensor, on: tf.Tensor, protected: tf.Tensor,
                seeds: Iterator[tf.Tensor]) -> tf.RaggedTensor:
    """The words of the rows `on` [n] with typos: one word picked, each other with
    TYPO_WORD_SHARE."""
    rows, _ = _positions(words)
    flat = words.flat_values
    editable = (tf.gather(on, rows) & ~protected
                & tf.strings.regex_full_match(flat, TYPO_WORD))  # [words]
    one = _pick(editable, rows, words.nrows(), next(seeds))  # [n]
    index = tf.range(tf.size(flat, out_type=tf.int64))
    edited = editable & ((tf.random.stateless_uniform(tf.shape(flat), next(seeds))
                          < TYPO_WORD_SHARE) | (index == tf.gather(one, rows)))
    where = tf.where(edited)  # [edited, 1]
    return words.with_flat_values(tf.tensor_scatter_nd_update(
        flat, where, _typo(tf.gather(flat, where[:, 0]), seeds)))


def _typo(words: tf.Tensor, seeds: Iterator[tf.Tensor]) -> tf.Tensor:
    """string [words] (each two letters or more) with one edit each (SWAP, DROP, REPEAT,
    NEIGHBOUR at random; REPEAT where the one drawn has no letter to edit)."""
    chars = tf.strings.unicode_split(words, "UTF-8")  # [words, (chars)]
    codes = tf.strings.unicode_decode(words, "UTF-8").flat_values  # [chars]
    flat = chars.flat_values
    count = chars.nrows()
    rows, position = _positions(chars)
    letter = tf.strings.regex_full_match(flat, r"\pL")  # [chars]
    following = tf.concat([flat[1:], [""]], 0)
    last = position == tf.gather(chars.row_lengths(), rows) - 1
    neighbours = tf.gather(_neighbour_table(), tf.where(codes < 128, codes, 0))  # [chars]
    possible = tf.stack([
        letter & ~last & tf.concat([letter[1:], [False]], 0) & (flat != following),  # SWAP
        letter, letter,  # DROP, REPEAT
        letter & (tf.strings.length(neighbours) > 0)], axis=1)  # NEIGHBOUR; [chars, 4]
    available = tf.math.unsorted_segment_max(tf.cast(possible, tf.int32), rows, count) > 0
    drawn = tf.cast(tf.random.stateless_uniform([count], next(seeds)) * 4, tf.int64)  # [words]
    kind = tf.where(tf.gather(available, drawn, batch_dims=1), drawn, REPEAT)  # [words]
    at = _pick(tf.gather(possible, tf.gather(kind, rows), batch_dims=1), rows, count,
               next(seeds))  # [words]: the flat index of the edited character
    start = chars.row_starts()
    offset = at - start  # [words]
    lengths = chars.row_lengths() + tf.gather(tf.constant(LENGTH_DELTA, tf.int64), kind)
    new_rows = tf.repeat(tf.range(count), lengths)  # [new chars]
    new_position = tf.ragged.range(lengths).flat_values
    edit, point = tf.gather(kind, new_rows), tf.gather(offset, new_rows)
    read = tf.where(edit == SWAP, tf.where(new_position == point, point + 1,
                                           tf.where(new_position == point + 1, point,
                                                    new_position)),
                    tf.where(edit == DROP, tf.where(new_position < point, new_position,
                                                    new_position + 1),
                             tf.where(edit == REPEAT,
                                      tf.where(new_position <= point, new_position,
                                               new_position - 1),
                                      new_position)))  # position read from the old word
    new_chars = tf.gather(flat, tf.gather(start, new_rows) + read)
    options = tf.gather(neighbours, tf.maximum(at, 0))  # [words]
    choice = tf.cast(tf.random.stateless_uniform([count], next(seeds))
                     * tf.cast(tf.strings.length(options), tf.float32), tf.int32)
    replacement = tf.strings.substr(options, choice, tf.ones_like(choice))  # [words]
    new_chars = tf.where((edit == NEIGHBOUR) & (new_position == point),
                         tf.gather(replacement, new_rows), new_chars)
    return tf.strings.reduce_join(tf.RaggedTensor.from_row_lengths(new_chars, lengths), axis=1)


def _neighbour_table() -> tf.Tensor:
    """string [128]: the QWERTY neighbours of each ASCII letter, in its case ("" for others)."""
    table = [""] * 128
    for row, keys in enumerate(KEYBOARD):
        for column, key in enumerate(keys):
            near = [(row, column - 1), (row, column + 1), (row - 1, column),
                    (row - 1, column + 1), (row + 1, column - 1), (row + 1, column)]
            found = "".join(KEYBOARD[r][c] for r, c in near
                            if 0 <= r < len(KEYBOARD) and 0 <= c < len(KEYBOARD[r]))
            table[ord(key)], table[ord(key.upper())] = found, found.upper()
    return tf.constant(table)


def _parsed_links(links: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """(row, source word, target word), int64 [links] each, of `I-J ...` lines [n]."""
    items = tf.strings.split(links)  # [n, (links)]
    numbers = tf.strings.to_number(tf.strings.split(items.flat_values, "-").flat_values,
                                   tf.int64)
    pairs = tf.reshape(numbers, [-1, 2])  # [links, 2]
    return items.value_rowids(), pairs[:, 0], pairs[:, 1]


def _with_tags(src_words: tf.RaggedTensor, tgt_words: tf.RaggedTensor, on: tf.Tensor,
               protected: tf.Tensor,
               links: tuple[tf.Tensor, tf.Tensor, tf.Tensor] | None,
               seeds: Iterator[tf.Tensor]) -> tuple[tf.RaggedTensor, tf.RaggedTensor, _Shift]:
    """Both sides with one of TAGS in the rows `on` [n], and how their words moved."""
    count = src_words.nrows()
    src_rows, _ = _positions(src_words)
    src_length, tgt_length = src_words.row_lengths(), tgt_words.row_lengths()  # [n]
    start = tf.math.unsorted_segment_sum(tf.cast(protected, tf.int64), src_rows, count)  # [n]
    form = tf.cast(tf.random.stateless_uniform([count], next(seeds)) * len(TAGS), tf.int64)
    opening = tf.gather([tag for tag, _ in TAGS], form)  # [n]
    closing = tf.gather([tag for _, tag in TAGS], form)  # [n]
    element = closing != ""
    at_end = tf.random.stateless_uniform([count], next(seeds)) < 0.5  # a placeholder's side
    word = first = last = tf.zeros([count], tf.int64)
    aligned = tf.zeros([count], tf.bool)
    if links is not None:
        rows, source, target = links
        usable = ((source >= tf.gather(start, rows)) & (source < tf.gather(src_length, rows))
                  & (target >= 0) & (target < tf.gather(tgt_length, rows)))
        chosen = _pick(usable, rows, count, next(seeds))  # [n]
        aligned = chosen >= 0
        word = tf.gather(source, tf.maximum(chosen, 0))  # [n]
        same = usable & (source == tf.gather(word, rows))
        first = tf.math.unsorted_segment_min(tf.where(same, target, NONE), rows, count)
        last = tf.math.unsorted_segment_max(tf.where(same, target, -1), rows, count)
    src_at = tf.where(aligned, word, tf.where(~element & at_end, src_length, start))
    tgt_at = tf.where(aligned, first, tf.where(~element & at_end, tgt_length, 0))
    src_last = tf.where(aligned, word, src_length - 1)
    tgt_last = tf.where(aligned, last, tgt_length - 1)
    on &= ~element | ((src_length > start) & (tgt_length > 0))  # an element wraps a word
    words = tf.gather([len(tag.split()) for tag, _ in TAGS], form)  # [n]: the opening's words
    src_words = _tagged(src_words, on, element, src_at, src_last, opening, closing)
    tgt_words = _tagged(tgt_words, on, element, tgt_at, tgt_last, opening, closing)
    # The opening's words before the word it is against (an element's) or all of them.
    extra = tf.where(on, words - tf.cast(element, tf.int32), tf.zeros_like(words))
    return src_words, tgt_words, _Shift(src_at, tgt_at, tf.cast(extra, tf.int64))


def _tagged(words: tf.RaggedTensor, on: tf.Tensor, element: tf.Tensor, at: tf.Tensor,
            last: tf.Tensor, opening: tf.Tensor, closing: tf.Tensor) -> tf.RaggedTensor:
    """The rows `on` [n] with their tag: a placeholder `opening` as a word before word `at`
    (`at` = the row's length: after the last), or an element, `opening` against word `at`
    and `closing` against word `last`."""
    rows, position = _positions(words)
    wrap = tf.gather(on & element, rows)  # [words]
    flat = tf.where(wrap & (position == tf.gather(at, rows)), tf.gather(opening, rows) + (
        words.flat_values), words.flat_values)
    flat = tf.where(wrap & (position == tf.gather(last, rows)),
                    flat + tf.gather(closing, rows), flat)
    insert = on & ~element  # [n]
    lengths = words.row_lengths() + tf.cast(insert, tf.int64)
    new_rows = tf.repeat(tf.range(words.nrows()), lengths)  # [new words]
    new_position = tf.ragged.range(lengths).flat_values
    inserting, point = tf.gather(insert, new_rows), tf.gather(at, new_rows)
    read = tf.gather(words.row_starts(), new_rows) + new_position - tf.cast(
        inserting & (new_position > point), tf.int64)  # the old word's flat index
    old = tf.gather(tf.concat([flat, [""]], 0), tf.minimum(read, tf.size(flat, tf.int64)))
    return tf.RaggedTensor.from_row_lengths(
        tf.where(inserting & (new_position == point), tf.gather(opening, new_rows), old),
        lengths)


def _moved_links(links: tuple[tf.Tensor, tf.Tensor, tf.Tensor],
                 word_counts: tuple[tf.Tensor, tf.Tensor], shift: _Shift) -> tf.Tensor:
    """`I-J ...` lines [n] of `links` (row, source word, target word) after the edits: links
    of words beyond `word_counts` (removed end marks) dropped, the words at and after an
    inline tag moved, the tag's own words linked."""
    rows, source, target = links
    kept = ((source >= 0) & (source < tf.gather(word_counts[0], rows))
            & (target >= 0) & (target < tf.gather(word_counts[1], rows)))
    rows, source, target = (tf.boolean_mask(values, kept) for values in (rows, source, target))
    extra = tf.gather(shift.extra, rows)
    source += tf.where(source >= tf.gather(shift.src_at, rows), extra, 0)
    target += tf.where(target >= tf.gather(shift.tgt_at, rows), extra, 0)
    count = tf.size(shift.extra, out_type=tf.int64)
    tag_rows = tf.repeat(tf.range(count), shift.extra)  # [tag links]
    tag_word = tf.ragged.range(shift.extra).flat_values  # [tag links]
    rows = tf.concat([rows, tag_rows], 0)
    order = tf.argsort(rows, stable=True)
    source = tf.gather(tf.concat([source, tf.gather(shift.src_at, tag_rows) + tag_word], 0),
                       order)
    target = tf.gather(tf.concat([target, tf.gather(shift.tgt_at, tag_rows) + tag_word], 0),
                       order)
    text = tf.strings.as_string(source) + "-" + tf.strings.as_string(target)
    return tf.strings.reduce_join(tf.RaggedTensor.from_value_rowids(
        text, tf.gather(rows, order), nrows=count),
        axis=1, separator=" ")
