"""The prepare stage: corpora read as streams of cleaned pairs, split into train shards, dev
and test, and the shared SentencePiece vocabulary learned."""
