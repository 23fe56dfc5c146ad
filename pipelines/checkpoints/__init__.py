"""A run's checkpoints as the stages after train read them: average, evaluate, export, a
resumed or fine-tuned train. Written by pipelines.training (the training checkpoints, the
moving average, the best validations) and by average (the averaged checkpoint).

    files.py        finding checkpoint files, checking one whole, TF's I/O errors in one line
    records.py      what they were trained with: vocabulary.sha256, model.json
    size_record.py  the size `model.preset: auto` chose (model_size.json)
    best.py         the best validations' checkpoints (best/best.json)
    weights.py      the model's weights: their layout, model-only checkpoints written whole,
                    restored checked, and which checkpoint `evaluate.weights` names

It imports neither pipelines.training nor pipelines.corpus (tests/test_layering.py), so that
reading a checkpoint never pulls in the training loop.
"""
