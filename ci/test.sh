#!/usr/bin/env bash
# The test command (README): the torch floor, the newest torch and both native-registry generations, in tox.
#   torch29   torch 2.9.1 (the floor)
#   cpu       torch 2.13.0 CPU build (also runs the 'once' sets: interpreter config sweeps, demo, benchmark scripts)
#   torch214  torch 2.14.1 (native DSL registry, torch.accelerator.random, Triton/Helion interpreter)
#   torch215  torch 2.15.0 (namespaced native DSL registry, upstream overrides)
#   transformers457, transformers525  the oldest and newest tested transformers: the integration's tests only
# Installs everything it needs itself; one line per phase, each with its time, and a summary at the end.
# Other tox envs: ACCEL_TOX_ENVS=cuda ./ci/test.sh; extra pytest arguments after --: ./ci/test.sh -- -k rng
# Disk: three of the envs hold a CUDA build of torch (6-7 GB each). Each env is deleted once its tests
# ran (ACCEL_CI_KEEP_ENVS=1 keeps them) and pip keeps no wheel cache (PIP_NO_CACHE_DIR=0 turns it back
# on), so the run needs about 12 GB free at its peak, not about 30.
set -uo pipefail
cd "$(dirname "$0")/.."
say() { printf '[ci/test.sh %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
free_gb() { df -Pk . | awk 'NR==2 { printf "%.1f", $4 / 1048576 }'; }
export PIP_NO_CACHE_DIR="${PIP_NO_CACHE_DIR:-1}"
need_gb=12
t0=$(date +%s)
say "free disk: $(free_gb) GB (the largest env needs about $need_gb GB while it installs)"
say "tox into .venv-tox"
python3 -m venv .venv-tox && .venv-tox/bin/python -m pip install --quiet --disable-pip-version-check "tox>=4,<5" \
  || { say "could not install tox"; exit 1; }
IFS=',' read -ra envs <<< "${ACCEL_TOX_ENVS:-torch29,cpu,torch214,torch215,transformers457,transformers525}"
summary=(); failed=0
for env in "${envs[@]}"; do
  s=$(date +%s)
  if awk -v f="$(free_gb)" -v n="$need_gb" 'BEGIN { exit !(f < n) }'; then
    say "$env: warning: only $(free_gb) GB free; if the install fails with 'No space left on device', free disk space (or delete .tox/) and run again"
  fi
  say "$env: installing its dependencies (downloads torch's wheels: 1-4 min) ..."
  if ! .venv-tox/bin/tox run -e "$env" --notest -q; then
    summary+=("$env: FAILED to install ($(( $(date +%s) - s )) s)"); failed=1
    [ "${ACCEL_CI_KEEP_ENVS:-0}" = 1 ] || rm -rf ".tox/$env"
    continue
  fi
  i=$(date +%s)
  say "$env: installed in $(( i - s )) s; running the tests ..."
  .venv-tox/bin/tox run -e "$env" --skip-pkg-install "$@"
  rc=$?
  [ $rc -eq 0 ] && verdict=passed || { verdict="FAILED (exit $rc)"; failed=1; }
  summary+=("$env: $verdict; install $(( i - s )) s, tests $(( $(date +%s) - i )) s")
  say "$env: $verdict"
  if [ "${ACCEL_CI_KEEP_ENVS:-0}" != 1 ] && [ -d ".tox/$env" ]; then
    rm -rf ".tox/$env" && say "$env: env deleted; free disk: $(free_gb) GB"
  fi
done
say "summary ($(( $(date +%s) - t0 )) s in all):"
printf '  %s\n' "${summary[@]}"
exit $failed
