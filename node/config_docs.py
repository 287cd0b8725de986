"""Everything said about the configuration, generated from the settings' own documentation (``store.setting``).

Why generated: the keys used to be described three times (dataclass comments, ``config sample``, a README table)
and the three disagreed. Now each field carries its documentation, and from it come ``raftmq config sample``,
the reference part of docs/operations/configuration.md and the comments of the Helm chart's values that set a
key one to one. ``python -m raftmq.node.config_docs --write`` rewrites the page and the chart's comments;
``--check`` (and tests/node/test_config_docs.py) fails when either is stale or a field lacks documentation.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from raftmq.node.config import ENV_PREFIX, section_docs, setting_fields
from raftmq.store.setting import choices_of, default_of, doc_of, helm_of

GENERATED_MARK = "<!-- Generated from the settings' documentation by `python -m raftmq.node.config_docs --write`: " \
                 "do not edit below this line. -->"
CONFIG_PAGE = Path("docs/operations/configuration.md")
HELM_VALUES = Path("helm/raftmq/values.yaml")
_TYPE_NAMES = {bool: "boolean", int: "integer", float: "number", str: "string", list: "list", dict: "mapping"}


@dataclass(frozen=True)
class Setting:
    """One configuration key and everything that documents it."""

    path: str    # section.key, or cluster.raft.key
    field: dataclasses.Field

    @property
    def section(self) -> str:
        return self.path.rsplit(".", 1)[0]

    @property
    def key(self) -> str:
        return self.path.rsplit(".", 1)[1]

    @property
    def doc(self) -> str:
        return doc_of(self.field)

    @property
    def default(self) -> Any:
        return default_of(self.field)

    @property
    def type_name(self) -> str:
        return _TYPE_NAMES.get(type(self.default), type(self.default).__name__)

    @property
    def choices(self) -> tuple[str, ...]:
        return choices_of(self.field)

    @property
    def helm(self) -> str:
        return helm_of(self.field)

    @property
    def env(self) -> str:
        """The environment variable that sets it (node/config.py env_overrides)."""
        return ENV_PREFIX + self.path.replace(".", "_").upper()

    @property
    def set_flag(self) -> str:
        return f"--set {self.path}=VALUE"


def settings() -> list[Setting]:
    return [Setting(path, f) for path, f in setting_fields()]


def undocumented() -> list[str]:
    """Paths of the keys whose field carries no documentation."""
    return [s.path for s in settings() if not s.doc]


def _yaml_value(value: Any) -> str:
    return yaml.safe_dump(value, default_flow_style=True, width=1 << 16).strip().removesuffix("...").strip()


def _plain_text(doc: str) -> str:
    """Markdown code spans read as plain text in YAML comments."""
    return doc.replace("`", "")


# ---------------------------------------------------------------------------------------------- config sample
_SAMPLE_HEADER = """\
# raftmq node configuration: every key with its default. Settings are read from this file, then from
# RAFTMQ_<SECTION>_<KEY> environment variables (cluster.raft keys: RAFTMQ_CLUSTER_RAFT_<KEY>), then from
# `--set section.key=VALUE` flags; later wins. Environment and --set values are YAML (lists and numbers work:
# RAFTMQ_CLUSTER_MEMBERS='[{id: n0, raft: "h0:8091", grpc: "h0:8081"}]'); text keys such as ids, addresses
# and secrets are taken verbatim. Check a file with `raftmq config validate FILE`.
# Reference: docs/operations/configuration.md
"""


def _comment(text: str, indent: str, width: int = 110) -> list[str]:
    return textwrap.wrap(_plain_text(text), width=width - len(indent) - 2, initial_indent=f"{indent}# ",
                         subsequent_indent=f"{indent}# ", break_on_hyphens=False, break_long_words=False)


def sample_yaml() -> str:
    """A complete configuration with every default, each key under its documentation."""
    lines = _SAMPLE_HEADER.splitlines()
    intros = section_docs()
    current = ""
    for s in settings():
        top = s.path.split(".", 1)[0]
        if top != current:
            current = top
            lines += ["", *_comment(intros[top], ""), f"{top}:"]
        nested = s.section == "cluster.raft"
        indent = "    " if nested else "  "
        lines += _comment(s.doc + (f" One of: {', '.join(s.choices)}." if s.choices else ""), indent)
        if s.path == "cluster.raft":  # the section itself: its keys follow, each with its default
            lines.append(f"{indent}raft:")
            continue
        lines.append(f"{indent}{s.key}: {_yaml_value(s.default)}")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------- reference page
def _md_default(s: Setting) -> str:
    text = _yaml_value(s.default)
    return "`" + text + "`" if text else "(empty)"


def reference_markdown() -> str:
    """The generated part of docs/operations/configuration.md: one entry per key, grouped by section."""
    intros = section_docs()
    out: list[str] = []
    current = ""
    for s in settings():
        if s.path == "cluster.raft":
            continue  # its keys get the subsection below
        if s.section != current:
            current = s.section
            out += [f"## `{current}` {{#{current.replace('.', '-')}}}", "", intros[current], ""]
        facts = [f"Type: {s.type_name}", f"default: {_md_default(s)}"]
        if s.choices:
            facts.append("one of " + ", ".join(f"`{c}`" for c in s.choices))
        out += [f"### `{s.path}` {{#{s.path.replace('.', '-')}}}", "", s.doc, "",
                "; ".join(facts) + ".  ",
                f"Environment: `{s.env}`; flag: `{s.set_flag}`"
                + (f"; Helm value: `{s.helm}`." if s.helm else "."), ""]
    return "\n".join(out).rstrip() + "\n"


def render_page(current: str) -> str:
    """``current`` (the page as it is) with everything below the generated mark replaced."""
    head, mark, _ = current.partition(GENERATED_MARK)
    if not mark:
        raise ValueError(f"{CONFIG_PAGE} lacks the line {GENERATED_MARK!r}")
    return head + GENERATED_MARK + "\n\n" + reference_markdown()


# ---------------------------------------------------------------------------------------------- Helm values
def helm_settings() -> dict[str, Setting]:
    """Helm value path -> the key it sets one to one."""
    return {s.helm: s for s in settings() if s.helm}


def _helm_comment(s: Setting, indent: str) -> list[str]:
    lines = _comment(s.doc, indent)
    mark = f" [node setting {s.path}]"
    if len(lines[-1] + mark) <= 110:
        lines[-1] += mark
    else:
        lines.append(f"{indent}#{mark}")
    return lines


def render_values(text: str) -> str:
    """values.yaml with the comment block right above every value that sets a key one to one replaced by that
    key's documentation. Comments elsewhere (sections, chart-only values) are the chart's own."""
    wanted = helm_settings()
    lines = text.splitlines()
    out: list[str] = []
    path: list[tuple[int, str]] = []  # (indent, key) of the enclosing mappings
    found: set[str] = set()
    for line in lines:
        stripped = line.lstrip()
        if stripped and not stripped.startswith("#") and not stripped.startswith("-") and ":" in stripped:
            indent = len(line) - len(stripped)
            while path and path[-1][0] >= indent:
                path.pop()
            key = stripped.split(":", 1)[0].strip()
            dotted = ".".join([k for _, k in path] + [key])
            path.append((indent, key))
            if dotted in wanted:
                while out and out[-1].lstrip().startswith("#") and len(out[-1]) - len(out[-1].lstrip()) == indent:
                    out.pop()
                out += _helm_comment(wanted[dotted], " " * indent)
                found.add(dotted)
        out.append(line)
    missing = sorted(set(wanted) - found)
    if missing:
        raise ValueError(f"{HELM_VALUES} has no value {', '.join(missing)} (named by the settings' helm metadata)")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------------------------- command
def stale_files(root: Path) -> list[str]:
    """The generated files under ``root`` that differ from what the settings say (empty: all current)."""
    stale = []
    for rel, render in ((CONFIG_PAGE, render_page), (HELM_VALUES, render_values)):
        text = (root / rel).read_text(encoding="utf-8")
        if render(text) != text:
            stale.append(str(rel))
    return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m raftmq.node.config_docs", description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, default=Path("."), help="the repository (default: .)")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="rewrite the configuration page and the chart comments")
    mode.add_argument("--check", action="store_true", help="exit 1 when they are stale or a key is undocumented")
    args = parser.parse_args(argv)
    missing = undocumented()
    if missing:
        print(f"settings without documentation: {', '.join(missing)} (give the field a doc with "
              "store.setting)", file=sys.stderr)
        return 1
    if args.write:
        for rel, render in ((CONFIG_PAGE, render_page), (HELM_VALUES, render_values)):
            path = args.root / rel
            path.write_text(render(path.read_text(encoding="utf-8")), encoding="utf-8")
        return 0
    stale = stale_files(args.root)
    for rel in stale:
        print(f"{rel} is stale: run python -m raftmq.node.config_docs --write", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
