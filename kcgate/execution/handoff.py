"""The parsed contracts, handed from ``kcgate run`` to its own worker processes: pickled, base64 in the init line.

Trusted at both ends: the worker is a child of this process, the same interpreter running the same kcgate,
and reads its init line from a pipe only the parent holds. Nothing that crosses a trust boundary changes:
results come back over the signed JSON channel (``execution.channel``), and results files, baselines and
artifacts stay JSON read as untrusted data. pickle replaced a JSON codec (``util.frozen_json``) here for its
cost: at 10,000 contracts ``benchmarks/handoff.py`` measured a round trip (parent's encode, worker's decode)
of 1,766 ms median for the JSON codec against 543 ms for pickle on the 2-vCPU VM (load average 14 at the
time; minima 1,766 and 543 ms over 3 interleaved repeats), with equal projects back.
"""

from __future__ import annotations

import base64
import pickle

from kcgate.contracts.spec import Project


def encode(project: Project) -> str:
    """``project`` as ASCII text that sits in the worker's JSON init line without escaping."""
    return base64.b64encode(pickle.dumps(project, protocol=pickle.HIGHEST_PROTOCOL)).decode("ascii")


def decode(text: str) -> Project:
    """The project ``encode`` sent (only ever text from this process's parent)."""
    project = pickle.loads(base64.b64decode(text, validate=True))
    if not isinstance(project, Project):
        raise TypeError(f"the init line's project is a {type(project).__name__}, not a Project")
    return project
