#!/usr/bin/env bash
# The main job (README): install accel with its demo extra in .venv and run `accel demo`
# (a small transformer trained on scikit-learn's real handwritten digits, with an exact-resume check)
# on the best device present. Extra arguments go to `accel demo`, e.g. ./ci/demo.sh --device cpu --json
# ACCEL_TORCH picks the torch requirement (default torch==2.13.0; e.g. ACCEL_TORCH="torch==2.14.1").
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
echo "demo.sh: installing ${ACCEL_TORCH:-torch==2.13.0} and accel[demo] into .venv (the first time about 2-3 minutes on two cores; pip prints nothing meanwhile)..." >&2
.venv/bin/python -m pip install --quiet --disable-pip-version-check "${ACCEL_TORCH:-torch==2.13.0}" ".[demo]"
exec .venv/bin/accel demo "$@"
