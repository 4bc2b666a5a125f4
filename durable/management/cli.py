"""What the run commands (``durable_runs``, ``durable_cancel``, ...) share: flags, filters, exit codes, writes.

Exit codes are a contract: ``0`` done, ``1`` the action failed (an unknown
run, a run in a state that refuses it, a declined confirmation), ``2`` bad
arguments (one line on stderr, no usage dump).

Every write goes through :func:`durable_dashboard.operations.perform` (or its
``start``), the functions the admin and the REST API call, and is written to
the audit log with ``via="cli"`` and the OS user as the username. Writing
therefore needs ``durable_dashboard`` in ``INSTALLED_APPS``; reading does not.
"""

from __future__ import annotations

import getpass
import json
import re
import sys
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any, NoReturn

from django.apps import apps
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db.models import QuerySet

from durable import runtime
from durable.exceptions import InvalidInput
from durable.management.render import runs_table
from durable.models import Run
from durable.results import RunInfo
from durable.run_filters import MAX_LIMIT, check_statuses
from durable.stale import stale_q
from durable.store.portable.shared import run_record

BAD_ARGUMENTS = 2
FAILED = 1
FILTERS = ("status", "workflow", "namespace", "tag", "stale", "since")
# Outcome codes (durable_dashboard.operations.ERROR_CODES) that mean the arguments were wrong.
_ARGUMENT_CODES = {"invalid_input", "workflow_not_found"}
_RELATIVE = re.compile(r"^(\d+)([smhd])$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def bad(message: str) -> CommandError:
    """A bad-arguments error: one line, exit code 2."""
    return CommandError(message, returncode=BAD_ARGUMENTS)


def failed(message: str) -> CommandError:
    """A failed action (unknown run, refused by the run's state): exit code 1."""
    return CommandError(message, returncode=FAILED)


def _one_line_error(parser: CommandParser, message: str) -> NoReturn:
    # argparse prints the whole usage before the error; an operator needs the error.
    if parser.called_from_command_line:
        parser.exit(BAD_ARGUMENTS, f"{parser.prog}: error: {message}\n")
    raise bad(message)


class OperatorCommand(BaseCommand):
    """Base of the run commands: argument errors exit 2 in one line, both from a shell and ``call_command``."""

    stealth_options = ("stdin",)

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        parser.error = partial(_one_line_error, parser)  # type: ignore[method-assign]
        return parser


# -- arguments -------------------------------------------------------------------------------


def _limit(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise InvalidInput(f"--limit must be a whole number, got {text!r}") from None
    if not 1 <= value <= MAX_LIMIT:
        raise InvalidInput(f"--limit must be between 1 and {MAX_LIMIT}, got {value}")
    return value


def _checked(fn: Any, value: Any) -> Any:
    try:
        return fn(value)
    except InvalidInput as exc:
        raise bad(str(exc)) from None


def add_filter_flags(parser: CommandParser, *, limit: int) -> None:
    """The filters of ``durable_runs``, shared by every bulk form."""
    group = parser.add_argument_group("filters")
    group.add_argument(
        "--status", action="append", metavar="STATUS", help="a run status; repeat it or separate with commas"
    )
    group.add_argument("--workflow", help="workflow name")
    group.add_argument("--namespace", help="namespace")
    group.add_argument("--tag", help="runs carrying this tag")
    group.add_argument("--stale", action="store_true", help="running past its lease, or suspended past its wake time")
    group.add_argument("--since", help="created at or after: ISO 8601 with a timezone, or 30m, 2h, 7d ago")
    group.add_argument("--limit", default=str(limit), help=f"at most this many runs (1-{MAX_LIMIT}; default {limit})")


def add_bulk_flags(parser: CommandParser, *, limit: int) -> None:
    """``RUN_ID`` or the filters, with ``--dry-run`` and ``--yes``."""
    parser.add_argument("run_id", nargs="?", metavar="RUN_ID", help="one run (or choose runs with the filters)")
    add_filter_flags(parser, limit=limit)
    parser.add_argument("--dry-run", action="store_true", help="list the runs it would act on, change nothing")
    parser.add_argument("--yes", action="store_true", help="do not ask for confirmation")


def parse_since(text: str, now: datetime) -> datetime:
    """``30m`` / ``2h`` / ``7d`` before ``now``, or an ISO 8601 date-time with a timezone."""
    relative = _RELATIVE.match(text.strip())
    if relative:
        return now - timedelta(**{_UNITS[relative.group(2)]: int(relative.group(1))})
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise bad(f"--since takes an ISO 8601 date-time or 30m, 2h, 7d; got {text!r}") from None
    if when.tzinfo is None:
        raise bad(f"--since needs a timezone, e.g. {text}+00:00")
    return when.astimezone(UTC)


def parse_json(text: str, flag: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise bad(f"{flag} is not valid JSON: {exc}") from None


def read_input(options: dict[str, Any], stdin: Any) -> Any:
    """The JSON of ``--input`` or ``--input-file`` (``-`` reads stdin); None when neither is given."""
    if options.get("input") is not None:
        return parse_json(options["input"], "--input")
    path = options.get("input_file")
    if path is None:
        return None
    try:
        text = stdin.read() if path == "-" else Path(path).read_text()
    except OSError as exc:
        raise bad(f"--input-file: cannot read {path}: {exc.strerror}") from None
    return parse_json(text, "--input-file")


def add_input_flags(parser: CommandParser, *, required: bool) -> None:
    group = parser.add_mutually_exclusive_group(required=required)
    group.add_argument("--input", help="the input as JSON")
    group.add_argument("--input-file", metavar="FILE", help="read the input JSON from FILE (- for stdin)")


# -- selecting runs ----------------------------------------------------------------------------


def has_filters(options: dict[str, Any]) -> bool:
    return any(options.get(name) for name in FILTERS)


def select(options: dict[str, Any]) -> tuple[list[RunInfo], bool]:
    """The runs matching the filter flags, newest first, and whether more match than ``--limit``."""
    limit = _checked(_limit, options["limit"])
    statuses = [s.strip() for item in options.get("status") or [] for s in item.split(",") if s.strip()]
    _checked(check_statuses, statuses)
    for name in ("workflow", "namespace", "tag"):
        if options.get(name) is not None and not options[name]:
            raise bad(f"--{name} must not be empty")
    now = runtime.get_engine().clock.now()
    queryset: QuerySet[Run] = runtime.default_store().runs_queryset(
        statuses=statuses, workflow=options.get("workflow"), namespace=options.get("namespace"), tag=options.get("tag")
    )
    if options.get("since"):
        queryset = queryset.filter(created_at__gte=parse_since(options["since"], now))
    if options.get("stale"):
        queryset = queryset.filter(stale_q(now))
    rows = list(queryset.order_by("-created_at", "-id")[: limit + 1])
    return [RunInfo.from_record(run_record(row)) for row in rows[:limit]], len(rows) > limit


# -- writing through the audited operations ------------------------------------------------------


def os_user() -> str:
    """Who runs the command, as the audit log records it."""
    try:
        return getpass.getuser()
    except (OSError, KeyError):
        return "unknown"


def _operations() -> Any:
    if not apps.is_installed("durable_dashboard"):
        raise failed("this command writes to the audit log: add durable_dashboard to INSTALLED_APPS")
    from durable_dashboard import operations

    return operations


def act(action: str, run_ids: list[str], params: dict[str, Any], *, reason: str = "") -> list[Any]:
    """Apply an operator action to runs, audited as the OS user; returns the per-run outcomes."""
    return list(_operations().perform(action, run_ids, params, user=None, via="cli", reason=reason, username=os_user()))


def start(params: dict[str, Any]) -> Any:
    """Start a run the way the admin and the API do, audited as the OS user."""
    return _operations().start(params, user=None, via="cli", username=os_user())


def refuse(outcome: Any) -> CommandError:
    """The error (and exit code) for an outcome that did not succeed."""
    code = BAD_ARGUMENTS if outcome.code in _ARGUMENT_CODES else FAILED
    return CommandError(outcome.message, returncode=code)


def show_runs(command: BaseCommand, runs: list[RunInfo], more: bool, more_note: str) -> bool:
    """Print ``runs`` as a table (``more_note`` when ``--limit`` cut the list); False when there are none."""
    if not runs:
        command.stdout.write("no runs match")
        return False
    command.stdout.write(runs_table(runs))
    if more:
        command.stdout.write(more_note.format(count=len(runs)))
    return True


def confirm(command: BaseCommand, question: str, options: dict[str, Any]) -> bool:
    """Ask on stdin; anything but ``y``/``yes`` (or end of input) is no."""
    command.stdout.write(f"{question} [y/N] ", ending="")
    command.stdout.flush()
    answer = (options.get("stdin") or sys.stdin).readline()
    return answer.strip().lower() in ("y", "yes")
