"""The dashboard in a real browser: Debian's headless Chromium loads the generated site from file://
with the network off, and the tests read its DOM (the points, the links, the colour of the planted
regression, the hostile id as text). A screenshot is kept under build/screenshots/ for CI to upload.

Chromium is a system package (.ci/run installs it where apt works); without it these tests skip and
say why."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from html.parser import HTMLParser
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kcgate.cli import app
from kcgate.render.dashboard import BANDS, page_name
from tests.conftest import ROOT
from tests.testing.history_samples import DRIFT_RUNNER, EXCESS, EXCESS_AT, FAIL_AT, RUNNERS, commit_sha
from tests.testing.history_site import HOSTILE, HOSTILE_CAUSE, fill_store

CHROMIUM = next((p for p in ("/usr/bin/chromium", "/usr/bin/chromium-browser") if os.access(p, os.X_OK)), "")
SCREENSHOTS = Path(os.environ.get("KCGATE_SCREENSHOTS", ROOT / "build" / "screenshots"))
FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--proxy-server=127.0.0.1:9", "--window-size=1100,900",
)  # fmt: skip

pytestmark = pytest.mark.skipif(
    not CHROMIUM,
    reason="SKIPPED LOUDLY: no Chromium at /usr/bin/chromium, so the dashboard was not checked in a browser; "
    "install it with `apt-get install -y chromium chromium-driver` (.ci/run does where apt is available)",
)


def chromium(*args: str) -> str:
    with tempfile.TemporaryDirectory() as profile:
        proc = subprocess.run(
            [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


class Dom(HTMLParser):
    """Elements as the browser serialised them: (tag, attributes, text inside up to the next tag)."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str], list[str]]] = []
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, {k: v or "" for k, v in attrs}, []))

    def handle_data(self, data: str) -> None:
        if self.elements:
            self.elements[-1][2].append(data)

    def points(self) -> list[dict[str, str]]:
        """The chart's data points, whatever their marker's shape."""
        return [a for _, a, _ in self.elements if a.get("class") == "point"]

    def find(self, tag: str, **attrs: str) -> list[tuple[dict[str, str], str]]:
        return [
            (a, "".join(t))
            for g, a, t in self.elements
            if g == tag and all(a.get(k.replace("_", "-")) == v for k, v in attrs.items())
        ]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("dash")
    db = fill_store(root, contracts=("gemm-bf16", "softmax-fp32", EXCESS))
    out = root / "site"
    result = CliRunner().invoke(
        app, ["history", "--db", str(db), "--html", str(out), "--output", str(root / "h.txt")]
    )
    assert result.exit_code == 0, result.output
    return out


def test_the_matrix_colours_the_planted_regression(site: Path) -> None:
    dom = Dom(chromium("--dump-dom", (site / "index.html").as_uri()))
    fails = next(b for b in BANDS if b.name == "fails")
    ((cell, text),) = dom.find("td", data_contract="gemm-bf16", data_runner=DRIFT_RUNNER)
    assert cell["data-band"] == "fails" and fails.colour in cell["style"] and text.strip() == "3.50×"
    for runner in ("cpu-x86", "nvidia-h100"):
        ((ok, _),) = dom.find("td", data_contract="gemm-bf16", data_runner=runner)
        assert ok["data-band"] == "passes, at most half the allowance"
    moves = dom.find("li", data_kind="fails", data_contract="gemm-bf16")
    assert [m["data-commit"] for m, _ in moves] == [commit_sha(FAIL_AT)]
    pages = {a["href"] for a, _ in dom.find("a") if a.get("href", "").startswith("c-")}
    assert page_name("gemm-bf16") in pages and all((site / p).is_file() for p in pages)


def test_the_contract_page_plots_every_step(site: Path) -> None:
    dom = Dom(chromium("--dump-dom", (site / page_name("gemm-bf16")).as_uri()))
    points = dom.points()
    assert len(points) == 6 * 3  # six commits, three runners
    amd = [a for a in points if a["data-runner"] == DRIFT_RUNNER]
    assert [a["data-status"] for a in amd] == ["pass"] * 4 + ["fail"] * 2
    assert [float(a["data-severity"]) for a in amd] == pytest.approx(
        [0.051, 0.051, 0.051, 0.601, 3.501, 3.501]
    )
    y = [float(a["cy"]) for a in amd]
    assert y[0] == y[2] > y[3] > y[4]  # drawn higher as the severity rises
    ticks = [t.strip() for a, t in dom.find("text") if a.get("class") == "tick"]
    assert ticks[FAIL_AT] == f"{commit_sha(FAIL_AT)[:7]} #{10 + FAIL_AT}"
    assert "kcgate run -c contracts.toml --runner amd-mi300x -k gemm-bf16" in "".join(
        t for _, t in dom.find("code")
    )


def test_a_failure_of_another_gate_is_visibly_failing_on_every_page(site: Path) -> None:
    """rms-norm is within its bound (budget 0.5) and fails the sensitivity gate: red in the grid and the
    matrix with its severity, its points above the edge and filled red, a "fails" step on the index."""
    index = Dom(chromium("--dump-dom", (site / "index.html").as_uri()))
    squares = [(a["data-band"], t) for a, t in index.find("span") if a.get("data-contract") == EXCESS]
    assert squares.count(("fails", "7.00×")) == 4 * 3 and ("passes, near the edge", "0.80") in squares
    for runner in RUNNERS:
        ((cell, text),) = index.find("td", data_contract=EXCESS, data_runner=runner)
        assert cell["data-band"] == "fails" and text.strip() == "7.00×"
    assert (
        len([m for m, t in index.find("li", data_kind="fails") if m["data-commit"] == commit_sha(EXCESS_AT)])
        == 3
    )
    page = Dom(chromium("--dump-dom", (site / page_name(EXCESS)).as_uri()))
    edge = next(
        float(a["y1"])
        for a, _ in page.find("line")
        if a.get("class") == "ytick" and "cf222e" in a.get("stroke", "")
    )
    failing = [a for a in page.points() if a["data-status"] == "fail"]
    assert len(failing) == 4 * 3 and all(a.get("fill") == "#cf222e" for a in failing)
    assert all(
        float(a.get("cy") or a.get("y") or a["points"].split(",")[1].split()[0]) < edge for a in failing
    )


def test_a_hostile_contract_id_is_text_in_the_browser(site: Path) -> None:
    dom = Dom(chromium("--dump-dom", (site / page_name(HOSTILE)).as_uri()))
    assert not dom.find("script") and not dom.find("img") and not dom.find("b")
    assert [t.strip() for _, t in dom.find("h1")] == [HOSTILE]
    assert any(HOSTILE_CAUSE in t for _, t in dom.find("li"))


def test_a_screenshot_for_ci(site: Path) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    pages = (
        ("history-index.png", "index.html"),
        ("history-contract.png", page_name("gemm-bf16")),
        ("history-excess.png", page_name(EXCESS)),
    )
    for name, page in pages:
        shot = SCREENSHOTS / name
        shot.unlink(missing_ok=True)
        chromium(f"--screenshot={shot}", (site / page).as_uri())
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000


def test_chromium_is_the_distributions() -> None:
    assert shutil.which("chromium") or CHROMIUM
