"""The determinism lint (durable.lint and manage.py durable_lint)."""

from __future__ import annotations

import json
import textwrap
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from durable.lint import lint_function, lint_source, lint_workflows

BAD = textwrap.dedent(
    """\
    import random, time, uuid
    import datetime as dt
    from datetime import datetime, date
    from django.utils import timezone
    import requests
    from urllib.request import urlopen
    from shop.models import Order
    import durable

    @durable.workflow(name="bad")
    def bad(ctx, data):
        a = time.time()                          # 12
        b = datetime.now()                       # 13
        c = dt.datetime.utcnow()                 # 14
        d = date.today()                         # 15
        e = timezone.now()                       # 16
        f = random.choice([1, 2])                # 17
        g = uuid.uuid4()                         # 18
        h = Order.objects.filter(id=1).first()   # 19
        i = requests.get("https://example.com")  # 20
        j = urlopen("https://example.com")       # 21
        for x in {1, 2, 3}:                      # 22
            pass
        k = [y for y in set(data)]               # 24
        time.sleep(1)                            # 25
        ok = time.time()  # durable: ignore
        durable.call_entity("counter", "k", "add", 1)     # 27
        ctx.local_step("fine", lambda: random.random() + time.time())
        def helper():
            return Order.objects.count()
        return ctx.step(helper)

    def not_a_workflow():
        return time.time()
    """
)


def test_each_rule_is_reported_with_its_line_and_alternative():
    found = lint_source(BAD, "shop/workflows.py")
    assert [(f.line, f.code) for f in found] == [
        (12, "DL001"),
        (13, "DL002"),
        (14, "DL002"),
        (15, "DL002"),
        (16, "DL002"),
        (17, "DL003"),
        (18, "DL004"),
        (19, "DL005"),
        (20, "DL006"),
        (21, "DL006"),
        (22, "DL007"),
        (24, "DL007"),
        (25, "DL001"),
        (27, "DL008"),
    ]
    by_line = {f.line: f for f in found}
    assert by_line[12].instead == "ctx.now()" and by_line[18].instead == "ctx.uuid()"
    assert str(by_line[13]) == ("shop/workflows.py:13:9: DL002 reads the wall clock in workflow 'bad'; use ctx.now()")


def test_clean_code_and_names_that_only_look_alike_are_not_reported():
    clean = textwrap.dedent(
        """
        import durable
        from myapp import clock

        @durable.workflow
        def good(ctx, items):
            now = ctx.now()
            token = ctx.uuid()
            pick = ctx.side_effect(lambda: __import__("random").random())
            for item in sorted(set(items)):
                ctx.step(handle, item)
            return clock.time(), now, token, pick
        """
    )
    assert lint_source(clean) == []


def test_the_registered_example_workflows_have_no_findings():
    assert lint_workflows() == []


def _bad_flow(ctx, x):
    import time

    return time.time() + x


def test_a_function_is_read_from_its_file_with_its_real_line_numbers():
    (finding,) = lint_function(_bad_flow, name="bad_flow")
    assert finding.file.endswith("tests/test_lint.py") and finding.code == "DL001"
    with open(finding.file) as f:
        assert "time.time()" in f.readlines()[finding.line - 1]


def test_the_command_reports_zero_findings_on_the_example_project_and_refuses_unknown_names():
    out = StringIO()
    call_command("durable_lint", stdout=out)
    assert out.getvalue().strip().splitlines()[-1].startswith("0 finding(s) in ")
    out = StringIO()
    call_command("durable_lint", "order", "--json", stdout=out)
    assert json.loads(out.getvalue()) == []
    with pytest.raises(CommandError, match="no workflow named 'nope'"):
        call_command("durable_lint", "nope", stdout=StringIO())
