"""pipelines/training/validation.py: dev BLEU translates the dev sources as `evaluate` does; dev
loss."""
import sacrebleu

from export_helpers import SENTENCES
from keras_transformer.tokenizer import Tokenizer
from pipelines.training.data import make_dataset
from pipelines.training.validation import DevBleu, DevLoss


def test_dev_bleu_translates_as_the_translator_with_beam_1(export_translator, greedy_translator,
                                                          tmp_path):
    """BLEU and chrF of what the translator gives; sources cut to max_source_length tokens
    (the session's translators': 40), an empty line translated to nothing. The translators
    are conftest's, traced once per process."""
    model, model_proto = export_translator.model, export_translator.spm_model_proto
    lines = SENTENCES + ["", "bird " * 100]
    for name in ("dev.src", "dev.tgt"):
        (tmp_path / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    greedy = greedy_translator.settings
    assert greedy.beam_size == 1 and greedy.max_source_length < 100  # the last line is cut
    bleu = DevBleu(model, Tokenizer(model_proto), tmp_path / "dev.src", tmp_path / "dev.tgt",
                   max_sentences=len(lines), max_source_length=greedy.max_source_length)
    translations = bleu.translate()
    assert translations == greedy_translator.translate_lines(lines)
    assert translations[-2] == "" and all(translations[:-2])
    assert bleu() == (sacrebleu.corpus_bleu(translations, [lines]).score,
                      sacrebleu.corpus_chrf(translations, [lines]).score)
    # With bleu_beam_size: beam search as the translator's.
    beam = export_translator.settings
    assert beam.beam_size == 4 and beam.max_source_length == greedy.max_source_length
    beam4 = DevBleu(model, Tokenizer(model_proto), tmp_path / "dev.src", tmp_path / "dev.tgt",
                    max_sentences=len(lines), max_source_length=beam.max_source_length,
                    beam_size=beam.beam_size)
    assert beam4.translate() == export_translator.translate_lines(lines)


def test_dev_loss_is_none_when_no_dev_pair_fits_max_length(export_translator, tmp_path):
    model, model_proto = export_translator.model, export_translator.spm_model_proto
    (tmp_path / "spm.model").write_bytes(model_proto)
    for name in ("dev.src", "dev.tgt"):
        (tmp_path / name).write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")

    def dev_loss(max_length: int):
        return DevLoss(model, make_dataset([(tmp_path / "dev.src", tmp_path / "dev.tgt")],
                                           tmp_path / "spm.model", shuffle=False,
                                           batch_tokens=512, max_length=max_length))()

    loss, perplexity = dev_loss(64)
    assert 0 < loss < 20 and 1 < perplexity
    assert dev_loss(3) is None  # BOS, one piece, EOS: no sentence is that short
