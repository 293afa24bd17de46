#!/usr/bin/env bash
# The test command (README): the torch floor, the newest torch and both native-registry generations, in tox.
#   torch29   torch 2.9.1 (the floor)
#   cpu       torch 2.13.0 CPU build
#   torch214  torch 2.14.1 (native DSL registry, torch.accelerator.random, Triton/Helion interpreter)
#   torch215  torch 2.15.0 (namespaced native DSL registry, upstream overrides)
# Installs everything it needs itself. Pass other tox envs with ACCEL_TOX_ENVS=cuda ./ci/test.sh,
# extra pytest arguments after the command: ./ci/test.sh -- -k rng
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv-tox
.venv-tox/bin/python -m pip install --quiet --disable-pip-version-check "tox>=4,<5"
exec .venv-tox/bin/tox run -e "${ACCEL_TOX_ENVS:-torch29,cpu,torch214,torch215}" "$@"
