#!/usr/bin/env bash
# The test command (README): the torch floor, the newest torch and both native-registry generations, in tox.
#   torch29   torch 2.9.1 (the floor)
#   cpu       torch 2.13.0 CPU build (also runs the 'once' sets: interpreter config sweeps, demo, benchmark scripts)
#   torch214  torch 2.14.1 (native DSL registry, torch.accelerator.random, Triton/Helion interpreter)
#   torch215  torch 2.15.0 (namespaced native DSL registry, upstream overrides)
# Installs everything it needs itself; one line per phase, each with its time, and a summary at the end.
# Other tox envs: ACCEL_TOX_ENVS=cuda ./ci/test.sh; extra pytest arguments after --: ./ci/test.sh -- -k rng
set -uo pipefail
cd "$(dirname "$0")/.."
say() { printf '[ci/test.sh %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
t0=$(date +%s)
say "tox into .venv-tox"
python3 -m venv .venv-tox && .venv-tox/bin/python -m pip install --quiet --disable-pip-version-check "tox>=4,<5" \
  || { say "could not install tox"; exit 1; }
IFS=',' read -ra envs <<< "${ACCEL_TOX_ENVS:-torch29,cpu,torch214,torch215}"
summary=(); failed=0
for env in "${envs[@]}"; do
  s=$(date +%s)
  say "$env: installing its dependencies (a fresh machine downloads torch's wheels: 1-3 min; cached later) ..."
  if ! .venv-tox/bin/tox run -e "$env" --notest -q; then
    summary+=("$env: FAILED to install ($(( $(date +%s) - s )) s)"); failed=1; continue
  fi
  i=$(date +%s)
  say "$env: installed in $(( i - s )) s; running the tests ..."
  .venv-tox/bin/tox run -e "$env" --skip-pkg-install "$@"
  rc=$?
  [ $rc -eq 0 ] && verdict=passed || { verdict="FAILED (exit $rc)"; failed=1; }
  summary+=("$env: $verdict; install $(( i - s )) s, tests $(( $(date +%s) - i )) s")
  say "$env: $verdict"
done
say "summary ($(( $(date +%s) - t0 )) s in all):"
printf '  %s\n' "${summary[@]}"
exit $failed
