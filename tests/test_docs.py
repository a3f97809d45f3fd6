"""The docs cannot drift from the code: each reference page is checked against the code's own tables.

- ``docs/configuration.md`` has a row for every worker setting (the ``Settings`` dataclass), with
  its environment variables (the settings modules' tables) and its default;
- ``docs/http-api.md`` names every route the worker serves (Quart's rules, the hot ingest routes
  served before Quart, the login routes the access guard answers, and every path of
  ``sessionmem.protocol.routes``) and every field of the ``/debug`` snapshot;
- ``docs/architecture.md``'s layout table names every Python module of the source tree in the
  row of its folder;
- every relative link of ``README.md``, ``docs/*.md`` and ``bench/**/*.md`` leads to a file that exists,
  and a link to a heading (``page.md#heading``, ``#heading``) to a heading that page has.

Each check fails with a message that names what is missing, and where it belongs.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import msgspec
import pytest

# The settings tables, imported here only: where these modules move, this is the one place to change.
from sessionmem import settings as worker_settings
from sessionmem.protocol import client_settings, routes
from sessionmem.server.app import create_quart_app
from sessionmem.server.debug import DebugSnapshot
from sessionmem.server.jsonapi import camel
from sessionmem.testing.harness import open_worker
from tools import layout

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
# Python outside the installed packages that is still the product's: the marketplace plugin's
# bootstrap, and the tools `make lint` runs.
EXTRA_SOURCE_FOLDERS = ("plugin/bootstrap", "tools")


def table_rows(text: str) -> list[list[str]]:
    """The cells of every Markdown table row of ``text`` (header and separator rows included)."""
    rows = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("|") and line.endswith("|"):
            # A `|` inside a code span (`GET|POST`) is written `\|`, as GitHub requires.
            rows.append([cell.strip().replace("\\|", "|") for cell in re.split(r"(?<!\\)\|", line[1:-1])])
    return rows


def rows_by_first_code_span(text: str) -> dict[str, list[str]]:
    """Rows keyed by the first code span of their first cell (`` `port` `` -> ``port``)."""
    found = {}
    for cells in table_rows(text):
        match = re.match(r"`([^`]+)`", cells[0])
        if match:
            found.setdefault(match[1], cells)
    return found


# -- configuration ---------------------------------------------------------------------------

def documented_default(value: Any) -> str:
    """A default as docs/configuration.md writes it: JSON's words, whole floats without ``.0``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, tuple):
        return ",".join(value) if value else "[]"
    if isinstance(value, Path):
        return client_settings.DEFAULT_DATA_DIR
    return str(value)


def test_every_setting_is_documented_with_its_environment_variable_and_default() -> None:
    page = (DOCS / "configuration.md").read_text(encoding="utf-8")
    rows = rows_by_first_code_span(page)
    environment: dict[str, list[str]] = {}
    for name, field in {**worker_settings.ENV, **client_settings.ENV, client_settings.DATA_DIR_ENV: "data_dir"}.items():
        environment.setdefault(field, []).append(name)
    problems = []
    for field in dataclasses.fields(worker_settings.Settings):
        default = documented_default(field.default)
        env = sorted(environment.get(field.name, []))
        if field.name not in rows:
            problems.append(f"no row for the setting `{field.name}` (environment {', '.join(env) or '–'}, "
                            f"default `{default}`)")
            continue
        cells = rows[field.name]
        assert len(cells) == 4, f"docs/configuration.md: the row of `{field.name}` must have 4 cells: {cells}"
        _, env_cell, default_cell, meaning = cells
        for name in env:
            if f"`{name}`" not in env_cell:
                problems.append(f"the row of `{field.name}` does not name its environment variable `{name}`")
        if not env and env_cell != "–":
            problems.append(f"`{field.name}` has no environment variable: its row should say – , not {env_cell!r}")
        if f"`{default}`" not in default_cell:
            problems.append(f"the row of `{field.name}` should give its default as `{default}`, not {default_cell!r}")
        if not meaning:
            problems.append(f"the row of `{field.name}` does not say what it means")
    known = {field.name for field in dataclasses.fields(worker_settings.Settings)}
    table = {name for name, cells in rows.items() if len(cells) == 4 and name.islower() and " " not in name}
    problems += [f"a row for `{name}`, which is no setting any more" for name in sorted(table - known)]
    assert not problems, "docs/configuration.md:\n  " + "\n  ".join(problems)


# -- HTTP API ----------------------------------------------------------------------------------

async def served_routes(tmp_path: Path) -> set[tuple[str, str]]:
    """(method, path) of every route the worker serves, paths as the contract writes them (``{name}``)."""
    async with open_worker(tmp_path / "data") as worker:
        app = create_quart_app(worker.services)
    served = {(method, re.sub(r"<(?:[^:<>]+:)?([^<>]+)>", r"{\1}", rule.rule))
              for rule in app.url_map.iter_rules()
              for method in (rule.methods or set()) - {"HEAD", "OPTIONS"}
              if rule.endpoint != "static"}
    served |= {("POST", path) for path in routes.INGEST}  # the ASGI fast path, before Quart
    served |= {("GET", routes.LOGIN), ("POST", routes.LOGOUT)}  # answered by the access guard
    return served


def contract_paths() -> set[str]:
    return {value for name, value in vars(routes).items()
            if name.isupper() and isinstance(value, str) and value.startswith("/")}


async def test_every_route_is_documented(tmp_path: Path) -> None:
    page = (DOCS / "http-api.md").read_text(encoding="utf-8")
    served = await served_routes(tmp_path)
    missing = sorted(f"`{method} {path}`" for method, path in served
                     if not re.search(re.escape(f"`{method} {path}") + r"[`?\[]", page))
    assert not missing, ("docs/http-api.md does not document these routes (write each as a code span, "
                         "`METHOD /path` or `METHOD /path?query`): " + ", ".join(missing))
    unserved = sorted(contract_paths() - {path for _, path in served})
    assert not unserved, f"sessionmem/protocol/routes.py names paths no route serves: {unserved}"


def snapshot_fields(kind: Any, prefix: str = "") -> list[tuple[str, str]]:
    """(section, camelCase field) of the /debug snapshot, through nested records, lists and optionals."""
    found = []
    if isinstance(kind, msgspec.inspect.StructType):
        for field in kind.fields:
            name = camel(field.name)
            found.append((prefix, name))
            found += snapshot_fields(field.type, prefix)
    elif isinstance(kind, (msgspec.inspect.ListType, msgspec.inspect.TupleType, msgspec.inspect.VarTupleType)):
        found += snapshot_fields(getattr(kind, "item_type", None), prefix)
    elif isinstance(kind, msgspec.inspect.UnionType):
        for member in kind.types:
            found += snapshot_fields(member, prefix)
    return found


def test_every_debug_field_is_documented() -> None:
    page = (DOCS / "http-api.md").read_text(encoding="utf-8")
    rows = rows_by_first_code_span(page)
    snapshot = msgspec.inspect.type_info(DebugSnapshot)
    problems = []
    for section in snapshot.fields:
        key = camel(section.name)
        if key not in rows:
            problems.append(f"no row for the /debug section `{key}`")
            continue
        row = " ".join(rows[key][1:])
        problems += [f"the /debug section `{key}` does not name its field `{name}`"
                     for _, name in dict.fromkeys(snapshot_fields(section.type)) if f"`{name}`" not in row]
    assert not problems, "docs/http-api.md:\n  " + "\n  ".join(problems)


# -- layout ------------------------------------------------------------------------------------

def source_modules() -> dict[str, list[str]]:
    """Folder (``storage/``) -> its Python modules, for every folder the install maps into ``sessionmem``."""
    roots = {*layout.folders(REPO), *EXTRA_SOURCE_FOLDERS}
    folders: dict[str, list[str]] = {}
    for root in sorted(roots):
        for module in sorted((REPO / root).rglob("*.py")):
            if module.name != "__init__.py" and "__pycache__" not in module.parts:
                folder = module.parent.relative_to(REPO).as_posix() + "/"
                folders.setdefault(folder, []).append(module.name)
    return folders


def test_every_module_is_in_the_layout_table() -> None:
    page = (DOCS / "architecture.md").read_text(encoding="utf-8")
    rows = rows_by_first_code_span(page)
    problems = []
    for folder, modules in source_modules().items():
        if folder not in rows:
            problems.append(f"no row for the folder `{folder}` (modules: {', '.join(modules)})")
            continue
        row = " ".join(rows[folder][1:])
        problems += [f"the row of `{folder}` does not name `{module}`" for module in modules
                     if f"`{module}`" not in row]
        named = set(re.findall(r"`([\w/]+\.py)\b", row))
        problems += [f"the row of `{folder}` names `{name}`, which is not there" for name in sorted(named)
                     if "/" not in name and name not in modules and name != "__init__.py"]
    assert not problems, "docs/architecture.md, the layout table:\n  " + "\n  ".join(problems)


# -- links ------------------------------------------------------------------------------------

PAGES = [REPO / "README.md", *sorted(DOCS.glob("*.md")), *sorted(REPO.glob("bench/**/*.md"))]
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")


def heading_anchors(page: Path) -> set[str]:
    """The anchors GitHub gives ``page``'s headings (and any ``<a id=...>``), outside code fences.

    GitHub's rule: the heading's text (a link's text, a code span's content) in lower case, every
    character that is not a letter, a digit, ``_``, ``-`` or a space dropped, spaces made ``-``;
    a repeated anchor gets ``-1``, ``-2``... in order."""
    anchors: set[str] = set()
    fence: str | None = None
    text = page.read_text(encoding="utf-8")
    for line in text.splitlines():
        mark = _FENCE.match(line)
        if mark:
            if fence is None:
                fence = mark.group(1)
            elif mark.group(1)[0] == fence[0] and len(mark.group(1)) >= len(fence):
                fence = None
            continue
        heading = _HEADING.match(line) if fence is None else None
        if heading is None:
            continue
        title = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading.group(2))  # [text](target) -> text
        slug = re.sub(r"[^\w\- ]", "", title.replace("`", "").lower()).replace(" ", "-")
        anchor, repeat = slug, 0
        while anchor in anchors:
            repeat += 1
            anchor = f"{slug}-{repeat}"
        anchors.add(anchor)
    anchors.update(re.findall(r"<a\s+(?:id|name)=\"([^\"]+)\"", text))
    return anchors


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.relative_to(REPO).as_posix())
def test_every_relative_link_leads_to_a_file_and_heading(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)\s]+)\)", text)  # [text](target) and ![alt](target)
    broken = []
    for target in targets:
        if re.match(r"[a-z][a-z0-9+.-]*:", target):
            continue  # a URL
        path, _, anchor = target.partition("#")
        linked = (page.parent / path) if path else page
        if not linked.exists():
            broken.append(target)
        elif anchor and linked.suffix == ".md" and anchor not in heading_anchors(linked):
            broken.append(f"{target} (no such heading)")
    assert not broken, f"{page.relative_to(REPO)} links to files or headings that do not exist: {broken}"


# -- rendering ---------------------------------------------------------------------------------

EVERY_PAGE = sorted({*PAGES, *REPO.glob("bench/**/*.md"), *REPO.glob("plugin/**/*.md")} - set(REPO.glob(".venv/**/*.md")))


@pytest.mark.parametrize("page", EVERY_PAGE, ids=lambda page: page.relative_to(REPO).as_posix())
def test_every_code_fence_is_closed(page: Path) -> None:
    """A page with a fence left open renders the rest of itself as one code block (a stray one in
    docs/architecture.md once hid the layer rules and the layout table)."""
    opened: tuple[int, str] | None = None
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        fence = _FENCE.match(line)
        if fence is None:
            continue
        marks = fence.group(1)
        if opened is None:
            opened = (number, marks)
        elif marks[0] == opened[1][0] and len(marks) >= len(opened[1]) and not line.strip()[len(marks):]:
            opened = None  # a closing fence: the same character, at least as long, nothing after it
    assert opened is None, f"{page.relative_to(REPO)}: the code fence opened at line {opened[0]} is never closed"
