"""The determinism lint: calls in workflow functions that would break replay.

A workflow function runs again from the top at every turn, so everything it
does outside a durable operation must give the same answer every time. This
lint reads the source of workflow functions (``@durable.workflow``) and flags
what does not:

====== ===================================================== =========================================
code   what                                                  instead
====== ===================================================== =========================================
DL001  the wall clock: ``time.time()``, ``time.sleep()``...  ``ctx.now()``, ``ctx.sleep()``
DL002  ``datetime.now()``, ``utcnow()``, ``date.today()``,   ``ctx.now()``
       ``django.utils.timezone.now()``
DL003  ``random``, ``secrets``, ``os.urandom``               ``ctx.side_effect(lambda: ...)``
DL004  ``uuid.uuid1()``, ``uuid.uuid4()``                    ``ctx.uuid()``
DL005  ORM queries (``Model.objects...``), raw cursors       a step (``ctx.step``/``ctx.local_step``)
DL006  network calls (``requests``, ``httpx``, ``urllib``,   a step
       ``socket``, ``smtplib``, ``django.core.mail``...)
DL007  iterating over a set (its order changes per process)  ``sorted(...)``
DL008  the durable client inside a workflow: ``durable.start``  ``ctx.start_child``, ``ctx.call_entity``,
       ``call_entity``, ``signal_entity``, ``signal``...       or a step (``ctx.local_step``)
       (applied again at every replay)
====== ===================================================== =========================================

Only the workflow function's own body is read: nested functions and lambdas
(step bodies, ``side_effect`` callbacks) are skipped, and neither are
helpers it calls. A line ending in ``# durable: ignore`` is not reported.
Imports are resolved (``from datetime import datetime as dt``; ``dt.now()``
is DL002). Pure: reads source text, imports nothing it lints.

    from durable.lint import lint_workflows
    assert lint_workflows() == []            # in a test: every registered workflow

or ``manage.py durable_lint`` (exit status 1 when it finds something).
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

IGNORE = "# durable: ignore"

# Qualified call prefix -> (code, what, instead). Longest prefix wins.
RULES: dict[str, tuple[str, str, str]] = {
    "time.time": ("DL001", "reads the wall clock", "ctx.now()"),
    "time.time_ns": ("DL001", "reads the wall clock", "ctx.now()"),
    "time.monotonic": ("DL001", "reads a clock", "ctx.now()"),
    "time.perf_counter": ("DL001", "reads a clock", "ctx.now()"),
    "time.sleep": ("DL001", "sleeps in the turn (not durable)", 'ctx.sleep("...")'),
    "datetime.datetime.now": ("DL002", "reads the wall clock", "ctx.now()"),
    "datetime.datetime.utcnow": ("DL002", "reads the wall clock", "ctx.now()"),
    "datetime.datetime.today": ("DL002", "reads the wall clock", "ctx.now()"),
    "datetime.date.today": ("DL002", "reads the wall clock", "ctx.now().date()"),
    "django.utils.timezone.now": ("DL002", "reads the wall clock", "ctx.now()"),
    "random": ("DL003", "draws a random value", "ctx.side_effect(lambda: random...())"),
    "secrets": ("DL003", "draws a random value", "ctx.side_effect(lambda: secrets...())"),
    "os.urandom": ("DL003", "draws random bytes", "ctx.side_effect(lambda: os.urandom(n))"),
    "uuid.uuid1": ("DL004", "makes a new id", "ctx.uuid()"),
    "uuid.uuid4": ("DL004", "makes a new id", "ctx.uuid()"),
    "django.db.connection.cursor": ("DL005", "queries the database", "a step (ctx.step or ctx.local_step)"),
    "requests": ("DL006", "calls the network", "a step (ctx.step)"),
    "httpx": ("DL006", "calls the network", "a step (ctx.step)"),
    "aiohttp": ("DL006", "calls the network", "a step (ctx.step)"),
    "urllib.request": ("DL006", "calls the network", "a step (ctx.step)"),
    "http.client": ("DL006", "calls the network", "a step (ctx.step)"),
    "socket": ("DL006", "calls the network", "a step (ctx.step)"),
    "smtplib": ("DL006", "calls the network", "a step (ctx.step)"),
    "django.core.mail": ("DL006", "sends mail", "a step (ctx.step)"),
    "durable.start": ("DL008", "starts a run at every replay", "ctx.start_child(...) or ctx.child(...)"),
    "durable.call_entity": ("DL008", "applies an entity op at every replay", "ctx.call_entity(...)"),
    "durable.signal_entity": ("DL008", "applies an entity op at every replay", "ctx.signal_entity(...)"),
    "durable.signal": ("DL008", "sends a signal at every replay", "a step (ctx.local_step)"),
    "durable.signal_with_start": ("DL008", "signals at every replay", "a step (ctx.local_step)"),
    "durable.publish_event": ("DL008", "publishes at every replay", "a step (ctx.local_step)"),
    "durable.cancel": ("DL008", "cancels at every replay", "a step (ctx.local_step)"),
}
ORM = ("DL005", "queries the database", "a step (ctx.step or ctx.local_step)")
SET_ITERATION = ("DL007", "iterates over a set, whose order differs between processes", "sorted(...)")


@dataclass(frozen=True)
class Finding:
    """One call that breaks replay: where, which rule, and the ``ctx`` alternative."""

    file: str
    line: int
    column: int
    code: str
    message: str
    instead: str
    workflow: str = ""

    def __str__(self) -> str:
        where = f" in workflow {self.workflow!r}" if self.workflow else ""
        return f"{self.file}:{self.line}:{self.column}: {self.code} {self.message}{where}; use {self.instead}"

    def as_dict(self) -> dict[str, Any]:
        """The finding as JSON-ready data."""
        return asdict(self)


def lint_workflows(workflows: Iterable[Any] | None = None) -> list[Finding]:
    """Findings in ``workflows`` (workflow functions or definitions; default: every registered one)."""
    from durable.engine.registry import WorkflowDef
    from durable.runtime import registry

    defs = registry.workflows() if workflows is None else list(workflows)
    findings: list[Finding] = []
    seen: set[Any] = set()
    for ref in defs:
        wf = ref if isinstance(ref, WorkflowDef) else registry.resolve_workflow(ref)
        if wf.fn in seen:
            continue
        seen.add(wf.fn)
        findings.extend(lint_function(wf.fn, name=wf.name))
    return sorted(findings, key=lambda f: (f.file, f.line, f.column))


def lint_function(fn: Any, name: str = "") -> list[Finding]:
    """Findings in one workflow function's body (read from its source file)."""
    fn = inspect.unwrap(fn)
    try:
        lines, first = inspect.getsourcelines(fn)
        path = inspect.getsourcefile(fn) or "<unknown>"
        module = Path(path).read_text()
    except (OSError, TypeError):
        return []
    tree = ast.parse(textwrap.dedent("".join(lines)))
    node = next(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))
    names = _imports(ast.parse(module))
    source = module.splitlines()
    found = []
    for line, col, rule in _body_findings(node, names):
        line += first - 1
        if source[line - 1].rstrip().endswith(IGNORE):
            continue
        found.append(Finding(path, line, col + 1, *rule, workflow=name))
    return found


def lint_source(text: str, filename: str = "<source>") -> list[Finding]:
    """Findings in every ``@...workflow`` function of a module's source text."""
    tree = ast.parse(text, filename)
    names = _imports(tree)
    source = text.splitlines()
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _is_workflow(node):
            for line, col, rule in _body_findings(node, names):
                if not source[line - 1].rstrip().endswith(IGNORE):
                    found.append(Finding(filename, line, col + 1, *rule, workflow=node.name))
    return sorted(found, key=lambda f: (f.line, f.column))


def _is_workflow(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    for deco in node.decorator_list:
        target = deco.func if isinstance(deco, ast.Call) else deco
        if _dotted(target).split(".")[-1] in ("workflow", "entity"):
            return True
    return False


def _imports(tree: ast.Module) -> dict[str, str]:
    """Local name -> qualified name, from the module's imports."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                local = alias.asname or alias.name.split(".")[0]
                names[local] = alias.name if alias.asname else alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names


def _body_findings(
    fn: ast.FunctionDef | ast.AsyncFunctionDef, names: dict[str, str]
) -> Iterator[tuple[int, int, tuple[str, str, str]]]:
    seen: set[tuple[int, str]] = set()  # a chained call (Model.objects.filter().first()) is one finding
    for node in sorted(_own_nodes(fn), key=lambda n: (getattr(n, "lineno", 0), getattr(n, "col_offset", 0))):
        if isinstance(node, ast.Call):
            rule = _call_rule(node.func, names)
            if rule is not None and (node.lineno, rule[0]) not in seen:
                seen.add((node.lineno, rule[0]))
                yield node.lineno, node.col_offset, rule
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)) and _is_set(node.iter):
            yield node.iter.lineno, node.iter.col_offset, SET_ITERATION


def _own_nodes(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> Iterator[ast.AST]:
    """The nodes of ``fn``'s body, not those of functions or lambdas nested in it."""
    stack: list[ast.AST] = list(fn.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


def _call_rule(func: ast.expr, names: dict[str, str]) -> tuple[str, str, str] | None:
    dotted = _dotted(func)
    if not dotted:
        return None
    if ".objects." in f".{dotted}." or dotted.endswith(".objects"):
        return ORM
    head, _, rest = dotted.partition(".")
    qualified = names.get(head, head) + (f".{rest}" if rest else "")
    parts = qualified.split(".")
    for end in range(len(parts), 0, -1):
        rule = RULES.get(".".join(parts[:end]))
        if rule is not None:
            return rule
    return None


def _is_set(node: ast.expr) -> bool:
    if isinstance(node, (ast.Set, ast.SetComp)):
        return True
    return isinstance(node, ast.Call) and _dotted(node.func) in ("set", "frozenset")


def _dotted(node: ast.expr) -> str:
    """``a.b.c`` for a name or attribute chain (a call in the chain keeps its callee: ``a.b().c``)."""
    parts: list[str] = []
    while True:
        if isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        elif isinstance(node, ast.Call):
            node = node.func
        elif isinstance(node, ast.Name):
            parts.append(node.id)
            return ".".join(reversed(parts))
        else:
            return ""
