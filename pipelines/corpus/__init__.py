"""The prepare stage's corpus side: the builtin corpora, the sources, the forms of
`data.source`, the corpus tags, the two streaming passes that split the corpora, the train
shards and their manifest, the word alignments; `prepare` (prepare.py) runs them.

Example:
    >>> prepare(load_config("demo")).format()  # pipelines.corpus.prepare
"""
