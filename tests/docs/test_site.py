"""The documentation site (issue 42): it builds with --strict (no broken link or anchor, every page in the
navigation), every repository path and class member the pages name exists, every docs page the code cites exists
with the cited section, the console's screenshots are on its page, and the metrics page lists what a running
cluster exports."""

from __future__ import annotations

import glob
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.processes import REPO_ROOT, running_nodes

DOCS = REPO_ROOT / "docs"
PAGES = sorted(DOCS.rglob("*.md"))
# Top-level folders of the repository: a code span starting with one of them names a file or folder in it.
REPO_DIRS = ("bench", "client", "docs", "helm", "node", "pipeline", "proto", "replication", "store", "tests")
CODE_PATH = re.compile(r"`((?:{})/[^`\s]*)`".format("|".join(REPO_DIRS)))
CITED = re.compile(r"\b(docs/[\w./-]+\.md)(?:#([\w-]+))?")
SOURCES = [p for ext in ("py", "proto", "yaml", "tpl") for p in REPO_ROOT.glob(f"**/*.{ext}")
           if not {".venv", "site", "build"} & set(p.relative_to(REPO_ROOT).parts)]


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                       cwd=REPO_ROOT, capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, f"mkdocs build --strict failed:\n{r.stdout}\n{r.stderr}"
    return out


def test_the_site_builds_strictly_with_every_page(site):
    for page in PAGES:
        rel = page.relative_to(DOCS).with_suffix(".html")
        assert (site / rel).is_file(), f"{rel} was not built"


def _code_paths(text: str) -> list[str]:
    paths = [m.group(1).split("#")[0].split(":")[0].rstrip(".,)") for m in CODE_PATH.finditer(text)]
    return [p for p in paths if "<" not in p]  # `tests/<room>/`: a placeholder, not a path


@pytest.mark.parametrize("page", [REPO_ROOT / "README.md", *PAGES], ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_every_repository_path_a_page_names_exists(page):
    missing = [p for p in _code_paths(page.read_text())
               if not (glob.glob(str(REPO_ROOT / p)) if "*" in p else (REPO_ROOT / p).exists())]
    assert missing == [], f"{page.relative_to(REPO_ROOT)} names paths that do not exist: {missing}"


def test_the_path_check_can_fail():
    assert _code_paths("see `store/no_such_module.py` and `bench/peer_bench.py`, not `config/topics.json`") == \
        ["store/no_such_module.py", "bench/peer_bench.py"]


CLASS_DEF = re.compile(r"^class (\w+)\b", re.M)
# `Class.member` (or `module.Class.member()`) in a page; a member in CamelCase is an RPC, checked by the protos
MEMBER = re.compile(r"`(?:[\w.]+\.)?([A-Z]\w+)\.([a-z_]\w*)(?:\(\))?`")


def _class_sources() -> dict[str, list[str]]:
    """Every class of the package's code, with the text of each module that defines one of that name."""
    out: dict[str, list[str]] = {}
    for room in ("store", "replication", "node", "client", "pipeline"):
        for path in (REPO_ROOT / room).rglob("*.py"):
            text = path.read_text()
            for m in CLASS_DEF.finditer(text):
                out.setdefault(m.group(1), []).append(text)
    return out


def _missing_members(text: str, classes: dict[str, list[str]]) -> list[str]:
    missing = []
    for m in MEMBER.finditer(text):
        cls, member = m.groups()
        defined = re.compile(rf"\b(?:def|class) {member}\b|^\s+{member}\s*[:=]|self\.{member}\b", re.M)
        if cls in classes and not any(defined.search(source) for source in classes[cls]):
            missing.append(m.group(0))
    return missing


@pytest.mark.parametrize("page", [REPO_ROOT / "README.md", *PAGES], ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_every_class_member_a_page_names_exists(page):
    """A page that names `RaftWritePath._some_method` after a refactor removed it sends readers to nothing."""
    missing = _missing_members(page.read_text(), _class_sources())
    assert missing == [], f"{page.relative_to(REPO_ROOT)} names class members the code does not define: {missing}"


def test_the_member_check_can_fail():
    classes = _class_sources()
    assert _missing_members("`RaftWritePath._join_as_new_member` and `IndexFile.put_key`", classes) == \
        ["`RaftWritePath._join_as_new_member`"]


def test_the_readme_links_only_into_existing_files():
    text = (REPO_ROOT / "README.md").read_text()
    links = re.findall(r"\]\(((?!https?:)[^)#]+)(?:#[^)]*)?\)", text)
    assert links and [link for link in links if not (REPO_ROOT / link).exists()] == []


def test_the_readme_is_short():
    assert len((REPO_ROOT / "README.md").read_text().splitlines()) <= 150


def test_every_docs_page_the_code_cites_exists_with_its_section(site):
    """Code may cite only files in the repository: every docs/ page named in a source file exists, and a cited
    section is a heading of that page (checked in the built HTML, where the anchors are)."""
    problems = []
    for src in SOURCES:
        for m in CITED.finditer(src.read_text(errors="replace")):
            page, anchor = m.group(1), m.group(2)
            if not (REPO_ROOT / page).is_file():
                problems.append(f"{src.relative_to(REPO_ROOT)}: {page} does not exist")
            elif anchor:
                html = (site / Path(page).relative_to("docs").with_suffix(".html")).read_text()
                if f'id="{anchor}"' not in html:
                    problems.append(f"{src.relative_to(REPO_ROOT)}: {page} has no section #{anchor}")
    assert problems == []


def test_no_code_cites_the_design_notes_outside_the_repository():
    outside = re.compile(r"(?<![\w/])(?:REPLICATION|FORMATS|ARCHITECTURE|ROCKETMQ5_PROTOCOL|KUBERNETES_LOCAL)"
                         r"(?:\.md\b| §| contract| section)|/work/shared")
    found = [f"{src.relative_to(REPO_ROOT)}:{n}" for src in SOURCES + PAGES if src != Path(__file__)
             for n, line in enumerate(src.read_text(errors="replace").splitlines(), 1) if outside.search(line)]
    assert found == []


def test_the_console_page_shows_every_screenshot():
    page = (DOCS / "operations" / "console.md").read_text()
    shots = sorted(p.name for p in (DOCS / "console").glob("*.png"))
    assert shots and [s for s in shots if f"](../console/{s})" not in page] == []


# ---------------------------------------------------------------- metrics
METRICS_PAGE = DOCS / "operations" / "metrics.md"
_METRIC = re.compile(r"`((?:raftmq|rocketmq)_[a-z0-9_]+)`")


def _documented_metrics() -> set[str]:
    return {m.group(1) for m in _METRIC.finditer(METRICS_PAGE.read_text()) if not m.group(1).endswith("_")}


def test_every_metric_the_docs_name_exists_in_the_code():
    code = "\n".join(p.read_text() for d in ("node", "replication", "store") for p in (REPO_ROOT / d).rglob("*.py"))
    names = {m.group(1) for page in PAGES for m in _METRIC.finditer(page.read_text())}
    unknown = sorted(n for n in names if n.removesuffix("_total").removesuffix("_seconds") not in code
                     and n.removesuffix("_total") not in code and not n.startswith("raftmq_store_"))
    assert unknown == [], f"metrics named in docs/ that no code exports: {unknown}"


@pytest.mark.slow
def test_the_metrics_page_lists_every_metric_a_cluster_exports(tmp_path):
    with running_nodes(tmp_path, 3) as nodes:
        exported: set[str] = set()
        for node in nodes:
            status, text = node.http_get("/metrics")
            assert status == 200
            for line in text.splitlines():
                m = re.match(r"# TYPE ((?:raftmq|rocketmq)_\S+) ", line)
                if m and not m.group(1).endswith("_created"):  # prometheus_client's creation-time series
                    exported.add(m.group(1))
    missing = sorted(exported - _documented_metrics())
    assert missing == [], f"exported but not on {METRICS_PAGE.relative_to(REPO_ROOT)}: {missing}"
