"""mkdocs hooks (mkdocs.yml ``hooks:``): the public API must be documented, and read well.

``mkdocs build --strict`` fails on any warning logged under the ``mkdocs`` logger,
so the checks below only have to warn:

* every public object is rendered by a ``::: identifier`` directive somewhere in
  ``docs/reference/`` (a new name in ``durable.__all__`` without a reference
  entry fails the build);
* every public object has a docstring, and so does every public method and
  property of a public class (inherited ones included, as the reference shows
  them), unless it is listed in ``UNDOCUMENTED`` below. A listed object that has
  gained its docstring (or is no longer there) fails the build too, so the list
  only shrinks;
* every key of the ``DEFAULTS`` dicts of the two settings modules
  (``SETTINGS_DEFAULTS``) has a row in ``docs/settings.md``, and every row there
  is a real key.

The code is read statically with griffe (as mkdocstrings reads it): nothing is
imported, so the docs build needs neither Django nor the project's dependencies.

``on_page_content`` also turns the reStructuredText some docstrings use into what
Markdown shows: roles (``:func:`x```) become plain code, and the ``::`` that
introduces a literal block becomes ``:``.
"""

from __future__ import annotations

import ast
import logging
import re
from pathlib import Path
from typing import Any

import griffe

log = logging.getLogger("mkdocs.hooks.public_api")
ROOT = Path(__file__).resolve().parents[1]

# Public objects beyond ``durable.__all__`` and ``durable.testing.__all__``.
EXTRA_PUBLIC = (
    "durable.testing",
    "durable.signals",
    "durable.tasks_backend",
    "durable.tasks_backend.DurableBackend",
    "durable.tasks_backend.DurableTask",
    "durable.transports.celery.configure",
)

# Public objects whose docstring is still to be written (their modules are being
# restructured). Remove an entry once the docstring exists: the build says when.
UNDOCUMENTED = frozenset(
    {
        "durable.Backoff.delay",
        "durable.ChildFailed.child_id",
        "durable.RunInfo.from_record",
        "durable.RunInfo.is_terminal",
        "durable.WorkflowContext.input",
        "durable.WorkflowContext.namespace",
        "durable.WorkflowContext.run_id",
        "durable.WorkflowContext.version",
        "durable.WorkflowContext.workflow",
        "durable.testing.FakeClock.now",
        "durable.testing.FakeClock.set",
    }
)

# Where the settings' defaults are defined, and the heading of their table in docs/settings.md.
SETTINGS_DEFAULTS = {"DURABLE": "durable/conf.py", "DURABLE_DASHBOARD": "durable_dashboard/conf.py"}

_DIRECTIVE = re.compile(r"^:::\s+(\S+)", re.MULTILINE)
_ROLE = re.compile(r":(?:func|class|meth|mod|attr|exc|data|obj):(<code>)~?")
_LITERAL_MARKER = re.compile(r"(\w)::(\s*</p>)")


def _directives(docs_dir: Path) -> set[str]:
    found: set[str] = set()
    for page in (docs_dir / "reference").rglob("*.md"):
        found.update(_DIRECTIVE.findall(page.read_text()))
    return found


def _public_names(package: griffe.Module) -> list[str]:
    names = [f"durable.{name}" for name in package.exports or ()]
    testing = package["testing"]
    names += [f"durable.testing.{name}" for name in testing.exports or ()]
    return [*names, *EXTRA_PUBLIC]


def _target(obj: Any) -> Any:
    try:
        return obj.final_target if obj.is_alias else obj
    except griffe.AliasResolutionError:
        return None


def _members(cls: Any) -> list[tuple[str, Any]]:
    """Public methods and properties of ``cls``, inherited ones too, defined in the durable package."""
    out = []
    for name, member in cls.all_members.items():
        if name.startswith("_"):
            continue
        target = _target(member)
        if target is None or target.package.name != "durable":
            continue
        if target.is_function or (target.is_attribute and "property" in target.labels):
            out.append((name, target))
    return out


def _missing(package: griffe.Module, names: list[str]) -> list[str]:
    missing = []
    for path in names:
        obj = _target(package[path.removeprefix("durable.")] if path != "durable" else package)
        if obj is None:
            log.warning("public API: %s cannot be resolved", path)
            continue
        if not obj.docstring:
            missing.append(path)
        if obj.is_class:
            missing += [f"{path}.{name}" for name, member in _members(obj) if not member.docstring]
    return missing


def on_pre_build(config: Any) -> None:
    docs_dir = Path(config["docs_dir"])
    package = griffe.load("durable", search_paths=[str(ROOT)], allow_inspection=False)
    names = _public_names(package)
    rendered = _directives(docs_dir)
    for path in names:
        if not any(path == d or path.startswith(d + ".") for d in rendered):
            log.warning("public API: %s has no '::: %s' entry under docs/reference/", path, path)
    missing = set(_missing(package, names))
    for path in sorted(missing - UNDOCUMENTED):
        log.warning("public API: %s has no docstring", path)
    for path in sorted(UNDOCUMENTED - missing):
        log.warning("public API: %s has a docstring now (or is gone); remove it from UNDOCUMENTED", path)
    _check_settings(docs_dir)
    if missing & UNDOCUMENTED:
        log.info("public API: %d object(s) still without a docstring (UNDOCUMENTED)", len(missing & UNDOCUMENTED))


def _default_keys(path: Path) -> set[str] | None:
    """The keys of the module-level ``DEFAULTS = {...}`` dict in ``path`` (None if there is none)."""
    for node in ast.parse(path.read_text()).body:
        value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if isinstance(value, ast.Dict) and any(isinstance(t, ast.Name) and t.id == "DEFAULTS" for t in targets):
            return {k.value for k in value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
    return None


def _documented_keys(page: str, setting: str) -> set[str]:
    """The first-column keys of the table under the ``## `SETTING``` heading of ``page``."""
    section = page.split(f"## `{setting}`", 1)[-1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `([A-Z_]+)` \|", section, re.MULTILINE))


def _check_settings(docs_dir: Path) -> None:
    page = (docs_dir / "settings.md").read_text()
    for setting, module in SETTINGS_DEFAULTS.items():
        keys = _default_keys(ROOT / module)
        if keys is None:
            log.warning("settings: no DEFAULTS dict in %s; point SETTINGS_DEFAULTS at the new place", module)
            continue
        documented = _documented_keys(page, setting)
        for key in sorted(keys - documented):
            log.warning("settings: %s[%r] (%s) has no row in docs/settings.md", setting, key, module)
        for key in sorted(documented - keys):
            log.warning("settings: docs/settings.md documents %s[%r], which %s does not define", setting, key, module)


def on_page_content(html: str, **kwargs: Any) -> str:
    return _LITERAL_MARKER.sub(r"\1:\2", _ROLE.sub(r"\1", html))
