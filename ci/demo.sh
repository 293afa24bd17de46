#!/usr/bin/env bash
# The main job (README): install accel with its demo extra in .venv and run `accel demo`
# (a small transformer trained on scikit-learn's real handwritten digits, with an exact-resume check)
# on the best device present. Extra arguments go to `accel demo`, e.g. ./ci/demo.sh --device cpu --json
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install --quiet --disable-pip-version-check "torch>=2.9" ".[demo]"
exec .venv/bin/accel demo "$@"
