"""The parsed contracts, handed from ``kcgate run`` to its own worker processes: pickled, base64 in the init line.

Trusted at both ends: the worker is a child of this process, the same interpreter running the same kcgate,
and reads its init line from a pipe only the parent holds. Nothing that crosses a trust boundary changes:
results come back over the signed JSON channel (``execution.channel``), and results files, baselines and
artifacts stay JSON read as untrusted data. pickle replaced a JSON codec (``util.frozen_json``) here for its
cost: at 10,000 contracts, ``benchmarks/handoff.py`` (the 2-vCPU VM, load average 13.7, 7 interleaved
repeats) measured a round trip (the parent's encode, the worker's decode) of 574 ms of CPU for the codec as
it was against 177 ms for this (wall 2,124 against 667 ms), with equal projects back; pausing the GC alone
brought the codec to 363 ms. The text is larger (5.1 MB against 2.3 MB), written once per worker to a pipe.
"""

from __future__ import annotations

import base64
import pickle

from kcgate.contracts.records import Project
from kcgate.results.baseline import paused_gc


def encode(project: Project) -> str:
    """``project`` as ASCII text that sits in the worker's JSON init line without escaping."""
    return base64.b64encode(pickle.dumps(project, protocol=pickle.HIGHEST_PROTOCOL)).decode("ascii")


def decode(text: str) -> Project:
    """The project ``encode`` sent (only ever text from this process's parent). The cyclic GC is paused while
    the records are built (an acyclic tree of frozen dataclasses): its full scans doubled the decode's CPU."""
    with paused_gc():
        project = pickle.loads(base64.b64decode(text, validate=True))
    if not isinstance(project, Project):
        raise TypeError(f"the init line's project is a {type(project).__name__}, not a Project")
    return project
