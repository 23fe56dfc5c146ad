"""pipelines/validation.py: dev BLEU translates the dev sources as `evaluate` does."""
import sacrebleu

from export.translator import Translator
from export_helpers import SENTENCES
from keras_transformer.tokenizer import Tokenizer
from pipelines.validation import DevBleu


def test_dev_bleu_translates_as_the_translator_with_beam_1(export_translator, tmp_path):
    """Sources cut to max_source_length tokens, an empty line translated to nothing."""
    model, model_proto = export_translator.model, export_translator.spm_model_proto
    lines = SENTENCES + ["", "bird " * 100]
    for name in ("dev.src", "dev.tgt"):
        (tmp_path / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    bleu = DevBleu(model, Tokenizer(model_proto), tmp_path / "dev.src", tmp_path / "dev.tgt",
                   max_sentences=len(lines), max_source_length=10)
    translations = bleu.translate()
    greedy = Translator(model, model_proto, beam_size=1, max_source_length=10)
    assert translations == greedy.translate_lines(lines)
    assert translations[-2] == "" and all(translations[:-2])
    assert bleu() == sacrebleu.corpus_bleu(translations, [lines]).score
