"""Settings for the ``manage.py durable_worker`` subprocesses of tests/test_retention_workers.py.

The test settings with small retention batches and an archive that appends each batch, as JSON
lines, to a file of its own per process (``RETENTION_ARCHIVE_DIR``).
"""

from tests.settings import *  # noqa: F403
from tests.settings import DURABLE

DURABLE = {
    **DURABLE,
    "WORKER_INTERVAL": 0.5,
    "RETENTION_BATCH": 50,
    "RETENTION_ARCHIVE": "tests.retention_settings.archive_lines",
}


def archive_lines(runs):
    """Append one JSON line per run to ``<RETENTION_ARCHIVE_DIR>/<pid>.jsonl`` (one write per batch)."""
    import json
    import os

    path = os.path.join(os.environ["RETENTION_ARCHIVE_DIR"], f"{os.getpid()}.jsonl")
    with open(path, "a", encoding="utf-8") as out:
        out.write("".join(json.dumps(run) + "\n" for run in runs))
