#!/usr/bin/env bash
# The test command (README): both torch code paths, in tox.
#   cpu       torch 2.13.0 CPU build
#   torch214  torch 2.14.1 (native DSL registry, torch.accelerator.random, Triton/Helion interpreter)
# Installs everything it needs itself. Pass other tox envs with ACCEL_TOX_ENVS=cuda ./ci/test.sh,
# extra pytest arguments after the command: ./ci/test.sh -- -k rng
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv-tox
.venv-tox/bin/python -m pip install --quiet --disable-pip-version-check "tox>=4,<5"
exec .venv-tox/bin/tox run -e "${ACCEL_TOX_ENVS:-cpu,torch214}" "$@"
