"""Verifies one case in the current process: the trial (call, guard bands, oracle, bound), the backward
pass, the sensitivity gate, the class checks and the failure diagnosis."""
