"""Adoption paths into an existing repository: the pytest plugin, the Python API, ``@contract`` discovery
and ``kcgate init``. Nothing here imports torch at module level."""
