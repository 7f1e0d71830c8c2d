"""Results I/O, in layers with no import cycle: ``columns`` (column kinds: JSON types, limits, readers and
writers) -> ``records`` (the case records and the one column table, the row codec) -> ``table`` (cases by
column, bulk-checked) -> ``model`` (a run, its files and the one loader; re-exports the records) -> the
sources: ``merge`` (shards), ``artifacts`` (CI downloads) and ``baseline`` (files, directories, git). No torch.
"""
