"""The train stage: the input pipeline, the distributed update, the loop with its budget,
validation and checkpoints, and fine-tuning's parent."""
