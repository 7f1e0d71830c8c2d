"""Results I/O: the model and its codec, the column table, files, and sources (artifacts, baselines, shard merges). No torch."""
