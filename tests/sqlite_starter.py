"""Start N runs from N threads of this process, then wait (bounded) until every run of this process settles.

Run as ``python -m tests.sqlite_starter PREFIX N`` under tests.sqlite_plain_settings;
prints one JSON line: the statuses of its runs and the errors the starts raised.
``python -m tests.sqlite_starter PREFIX N sqlite_serial TOTAL`` starts runs of that singleton
workflow for one key instead, and waits until TOTAL runs of it (all processes') completed:
a slot freed here may admit another process's run, which this process then executes.
"""

import json
import os
import sys
import threading
import time

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.sqlite_plain_settings")

import django

django.setup()

import durable  # noqa: E402
from durable.models import Run  # noqa: E402

prefix, count = sys.argv[1], int(sys.argv[2])
workflow = sys.argv[3] if len(sys.argv) > 3 else "sqlite_busy"
total = int(sys.argv[4]) if len(sys.argv) > 4 else None
errors: list[str] = []
barrier = threading.Barrier(count)


def start(i: int) -> None:
    barrier.wait()
    try:
        durable.start(workflow, {"key": "one"} if total else {}, run_id=f"{prefix}-{i}")
    except Exception as exc:  # reported, not raised: the test counts them
        errors.append(f"{type(exc).__name__}: {exc}")


threads = [threading.Thread(target=start, args=(i,)) for i in range(count)]
for t in threads:
    t.start()
for t in threads:
    t.join()
deadline = time.monotonic() + 120
ids = [f"{prefix}-{i}" for i in range(count)]
created = Run.objects.filter(id__in=ids).count()  # a start that failed left nothing to wait for
while time.monotonic() < deadline:
    if total is not None:
        if Run.objects.filter(workflow=workflow, status="completed").count() == total:
            break
    elif Run.objects.filter(id__in=ids, status="completed").count() == created:
        break
    time.sleep(0.05)
statuses = dict(Run.objects.filter(id__in=ids).values_list("id", "status"))
print(json.dumps({"statuses": statuses, "errors": errors}))
