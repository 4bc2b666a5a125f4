"""The memory store is importable without Django (engine unit tests, users' fast tests)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# ``durable.store``'s own __init__ builds the ORM store; the memory package must not need it,
# so the check loads the package directory without running that __init__.
CHECK = """
import pathlib, sys, types
import durable
package = types.ModuleType("durable.store")
package.__path__ = [str(pathlib.Path(durable.__file__).parent / "store")]
sys.modules["durable.store"] = package
from durable.store.memory import MemoryStore
assert MemoryStore().create_run({"id": "r1", "workflow": "wf"})
leaked = sorted(name for name in sys.modules if name == "django" or name.startswith("django."))
assert not leaked, leaked
"""


def test_the_memory_store_imports_nothing_from_django() -> None:
    env = {key: value for key, value in os.environ.items() if key != "DJANGO_SETTINGS_MODULE"}
    done = subprocess.run([sys.executable, "-c", CHECK], cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
