# Shared by scripts/run and scripts/test: create .venv and install the pinned
# requirements when they changed. Needs only python3 (3.11+) on the machine.
#
# DURABLE_VENV_SET picks what to install: "runtime" (requirements.txt: what the
# example project needs, for scripts/run) or "dev" (also requirements-dev.txt:
# the test and lint tools, for scripts/test). A dev install serves both.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-python3}"
SET="${DURABLE_VENV_SET:-dev}"
if [ ! -x .venv/bin/python ]; then
  echo "==> creating virtualenv .venv ($("$PY" --version))"
  "$PY" -m venv .venv
fi
files=(requirements.txt)
[ "$SET" = "dev" ] && files+=(requirements-dev.txt)
want="$(cat "${files[@]}" | sha256sum | cut -d' ' -f1)"
dev="$(cat requirements.txt requirements-dev.txt | sha256sum | cut -d' ' -f1)"
have="$(cat .venv/.deps-stamp 2>/dev/null || true)"
# Up to date when the stamp matches this set, or a dev install matches (it includes runtime).
if [ "$have" != "$want" ] && [ "$have" != "$dev" ]; then
  echo "==> installing ${files[*]} into .venv"
  .venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
  log=.venv/pip-install.log
  if ! .venv/bin/python -m pip install --disable-pip-version-check --progress-bar off \
      $(printf -- '-r %s ' "${files[@]}") >"$log" 2>&1; then
    cat "$log" >&2
    echo "pip install failed (log: $log)" >&2
    exit 1
  fi
  grep -E '^Successfully installed' "$log" | sed 's/^/    /' || true
  echo "$want" > .venv/.deps-stamp
fi
