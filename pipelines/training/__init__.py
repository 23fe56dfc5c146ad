"""The train stage: the loop (train.py) and what it runs: the compiled update, the input
pipeline, the budget, validation, the training checkpoints, the best validations, the moving
average, the size `auto` chooses, the fine-tuning parent, the strategy. What the later stages
read of its checkpoints is in pipelines.checkpoints.

Example:
    >>> train(load_config("demo")).format()  # pipelines.training.train
"""
