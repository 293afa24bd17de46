#!/usr/bin/env bash
# One batched run on the lent GPU machine (no network there): install accel and the carried
# wheels (.whl: helion 1.4.0, filecheck, Liger-Kernel, platformdirs; optionally quack + CuTeDSL),
# then run the stages named on the command line, writing logs and results under $OUT (or ./gpu-out).
#   stages: facts tests rng host launch graphs example plan kernels tune demo-kernels compile quant ops
#           lce bench models generate allreduce cutedsl-smoke ab
# Helpers it calls live in ci/gpu/. Results and the command of each latest run: benchmarks/results/<gpu>/README.md.
# Usage (device tool, carry [".whl"]): bash ci/gpu.sh facts tests rng host graphs
set -u
export PYTHONUNBUFFERED=1
REPO=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$REPO/gpu-out}
mkdir -p "$OUT"
SITE=/tmp/site
# quack's 92 MB CuTeDSL libs wheel comes in two halves: part.aa copied to /tmp/big by an earlier call
# (carry .whl-big1: mkdir -p /tmp/big && cp .whl-big1/part.aa /tmp/big/), part.ab carried in .whl-big2.
if [ -f /tmp/big/part.aa ] && [ -d "$REPO/.whl-big2" ]; then
  name=$(cat "$REPO/.whl-big2/name")
  cat /tmp/big/part.aa "$REPO/.whl-big2/part.ab" > "/tmp/big/$name"
  [ "$(md5sum "/tmp/big/$name" | cut -d' ' -f1)" = "$(cat "$REPO/.whl-big2/md5")" ] && echo "joined $name (md5 ok)" \
    || { echo "md5 mismatch for $name"; rm -f "/tmp/big/$name"; }
fi
if [ -d "$REPO/.whl" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$SITE" "$REPO"/.whl/*.whl /tmp/big/*.whl 2>/dev/null \
    || python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$SITE" "$REPO"/.whl/*.whl
fi
python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --upgrade --target /tmp/accel "$REPO" \
  || { echo "accel install failed"; exit 1; }
PYTHONPATH=/tmp/accel:$SITE python3 "$REPO/ci/gpu/check_deps.py" || exit 1
export PYTHONPATH=/tmp/accel:$SITE:$SITE/nvidia_cutlass_dsl/dsl_packages
# ACCEL_GPU_TF: a carried folder of another transformers release's wheels (../shared/tools/gpu-wheels.sh
# --transformers X writes .whl-tf): installed apart and put first, so every stage runs on that release
if [ -n "${ACCEL_GPU_TF:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/tf "$REPO/$ACCEL_GPU_TF"/*.whl \
    || { echo "transformers install from $ACCEL_GPU_TF failed"; exit 1; }
  export PYTHONPATH=/tmp/tf:$PYTHONPATH
fi
export PATH=/tmp/accel/bin:$PATH
accel() { python3 -m accel.cli "$@"; }
cd /tmp  # never import the source tree: accel.backends only exists in the installed layout
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__, 'transformers', transformers.__version__)"
for stage in "$@"; do
  echo "=================== stage: $stage"
  case $stage in
    facts)
      accel info 2>&1
      accel doctor 2>&1; echo "doctor exit: $?"
      accel demo --device cuda 2>&1 | tail -16
      accel demo --device cuda --json > "$OUT/demo.json"; echo "demo --json exit: $?"
      ;;
    tests)
      # ACCEL_GPU_PYTEST_ARGS: e.g. "-m cuda" or "-m cuda -k 'cutedsl or layer_norm'" (shell quoting kept;
      # default: every test not marked slow)
      eval "pytest_args=(${ACCEL_GPU_PYTEST_ARGS:--m \"not slow\"})"
      timeout ${ACCEL_GPU_TEST_TIMEOUT:-480} python3 -m pytest "$REPO/tests" -q -p no:cacheprovider --timeout 120 \
        "${pytest_args[@]}" -rfE --tb=short > "$OUT/pytest.txt" 2>&1
      grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/pytest.txt" | tail -40
      ;;
    cutedsl-smoke) timeout ${ACCEL_GPU_CUTEDSL_TIMEOUT:-400} python3 "$REPO/ci/gpu/cutedsl_smoke.py" --json "$OUT/cutedsl_smoke.json" \
                     ${ACCEL_GPU_CUTEDSL_ARGS:-} 2>&1 | tee "$OUT/cutedsl_smoke.txt" | tail -90 ;;
    rng) python3 "$REPO/ci/gpu/rng_check.py" 2>&1 | tee "$OUT/rng_check.txt" ;;
    host) python3 "$REPO/benchmarks/host_overhead.py" --out "$OUT" 2>&1 | tail -40 ;;
    launch) timeout 200 python3 "$REPO/benchmarks/launch_cost.py" --profile --out "$OUT" 2>&1 | tail -75 ;;
    graphs) timeout 240 python3 "$REPO/benchmarks/graphs.py" --out "$OUT" 2>&1 | tail -30 ;;
    example) timeout 200 python3 "$REPO/examples/kernels_rmsnorm.py" > "$OUT/example.txt" 2>&1; head -60 "$OUT/example.txt" ;;
    plan) python3 -c "import accel; p=accel.compile_plan('max-autotune'); print(list(p)); [print(s) for s in p.skipped]" ;;
    ab)
      # The old and the new commit side by side: .ab-old/ (carried; `git archive <old commit>` unpacked) is
      # installed beside this tree and `accel bench` runs old, new, old, new ... (ACCEL_GPU_AB_PAIRS pairs,
      # ACCEL_GPU_AB_ARGS for both, default --rounds 5), each in its own process; ci/gpu/ab_compare.py
      # compares the medians per row.
      [ -d "$REPO/.ab-old" ] || { echo "ab: carry .ab-old (the old commit's tree)"; exit 1; }
      python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --upgrade --target /tmp/accel-old \
        "$REPO/.ab-old" || { echo "old accel install failed"; exit 1; }
      tag=${ACCEL_GPU_AB_TAG:-$(date +%H%M%S)}
      for i in $(seq "${ACCEL_GPU_AB_PAIRS:-1}"); do
        for side in old new; do
          dir=/tmp/accel; [ "$side" = old ] && dir=/tmp/accel-old
          mkdir -p "$OUT/ab/$side-$tag-$i"
          PYTHONPATH=$dir:$SITE timeout 290 python3 -m accel.cli bench --out "$OUT/ab/$side-$tag-$i" \
            ${ACCEL_GPU_AB_ARGS:---rounds 5} > "$OUT/ab/$side-$tag-$i.txt" 2>&1
          echo "ab $side $tag-$i exit $?"
        done
      done
      python3 "$REPO/ci/gpu/ab_compare.py" "$OUT/ab" 2>&1 | tee "$OUT/ab/compare-$tag.md"
      ;;
    kernels) # ACCEL_GPU_BENCH_TABLE: a directory of user tables (<arch>.json) for this stage only
             ${ACCEL_GPU_BENCH_TABLE:+env ACCEL_TUNING_DIR="$REPO/$ACCEL_GPU_BENCH_TABLE"} \
             timeout 300 python3 "$REPO/benchmarks/kernel_bench.py" --budget "${ACCEL_GPU_BENCH_BUDGET:-200}" --out "$OUT" \
               ${ACCEL_GPU_BENCH_ARGS:-} 2>&1 | tail -80 ;;
    tune)
      # ACCEL_GPU_TUNE_ARGS: '|'-separated argument sets, one `accel bench --tune` each, e.g.
      # "--ops softmax --shapes 8192x32768|--ops layer_norm --shapes 8192x16384"; the table (user cache,
      # ACCEL_TUNING_DIR, default $OUT/tuning) merges them and is copied to $OUT/tuning.
      export ACCEL_TUNING_DIR="${ACCEL_TUNING_DIR:-$OUT/tuning}"
      IFS='|' read -ra sets <<< "${ACCEL_GPU_TUNE_ARGS:-}"
      [ ${#sets[@]} -eq 0 ] && sets=("")
      i=0; stamp=$(date +%H%M%S)  # unique per tune stage: a later stage must not overwrite these files
      for a in "${sets[@]}"; do
        i=$((i+1))
        timeout 420 python3 -m accel.cli bench --tune --json --budget "${ACCEL_GPU_TUNE_BUDGET:-330}" $a \
          > "$OUT/tune-$stamp-set$i.json" 2> "$OUT/tune-$stamp-set$i.log"; echo "tune set $i exit $?"; tail -5 "$OUT/tune-$stamp-set$i.log"
        # the fastest configs per job (every trial is in the tune-*-set$i.json file)
        python3 -c "
import json, sys, itertools
r = json.load(open(sys.argv[1]))
for key, ts in itertools.groupby(r['trials'], key=lambda t: (t['op'], t['dtype'], t['m'], t['n'])):
    ts = list(ts); aten = next(t['us'] for t in ts if t['dsl'] == 'aten')
    print(*key, 'aten', round(aten, 1), 'us')
    for t in ts[:int(sys.argv[2])]:
        print('   ', round(t['us'], 1), 'us', round(aten / t['us'], 3), 'x', t['dsl'], t['config'])
print('errors:', *r['errors'][:10], sep='\\n  ')
" "$OUT/tune-$stamp-set$i.json" "${ACCEL_GPU_TUNE_TOP:-8}" 2>&1 | tail -80
      done
      mkdir -p "$OUT/tuning"; cp "$ACCEL_TUNING_DIR"/*.json "$OUT/tuning/" 2>/dev/null; ls -la "$OUT/tuning"
      ;;
    demo-kernels)
      # the "on" run times both: the digits model on vs off, and the wide model (accel.demo.WIDE) on vs off
      accel demo --device cuda --kernels on --json > "$OUT/demo-kernels-on.json"; echo "exit $?"
      python3 -c "
import json, sys
r = json.load(open(sys.argv[1])); k = r['kernels']; w = k['wide']
print('digits model step ms on/off', round(k['step_ms_on'], 3), round(k['step_ms_off'], 3))
print('wide', w['config'], 'step ms on', round(w['step_ms_on'], 3), 'off', round(w['step_ms_off'], 3),
      'speedup', round(w['speedup'], 4))
print('wide routed', {n: c for n, c in w['counts'].items() if c['routed'] or c['failed']})
" "$OUT/demo-kernels-on.json"
      ;;
    compile) timeout 240 python3 "$REPO/ci/gpu/compile_demo.py" --mode "${ACCEL_GPU_COMPILE_MODE:-max-autotune-no-cudagraphs}" --out "$OUT" 2>&1 | tail -12 ;;
    allreduce) timeout 180 python3 "$REPO/ci/gpu/allreduce.py" --out "$OUT" 2>&1 | tail -15 ;;  # nvidia-h200-x2
    lce) timeout 300 python3 "$REPO/benchmarks/linear_cross_entropy.py" --out "$OUT" ${ACCEL_GPU_LCE_ARGS:-} 2>&1 | tail -40 ;;  # e.g. ACCEL_GPU_LCE_ARGS="--reps 20"
    generate) timeout 500 python3 "$REPO/benchmarks/generate.py" --out "$OUT/generate.jsonl" ${ACCEL_GPU_GEN_ARGS:-} 2>&1 | tail -20 ;;  # e.g. ACCEL_GPU_GEN_ARGS="--batches 1"
    bench) mkdir -p "$OUT/bench"; timeout 240 python3 -m accel.cli bench --rounds 5 --out "$OUT/bench" 2>&1 | tail -60 ;;
    models)
      # ACCEL_GPU_MODELS: '|'-separated "models:modes[:more arguments]" runs of benchmarks/real_models.py --all, appended to
      # $OUT/real_models.jsonl; a run is not started once ACCEL_GPU_MODELS_S seconds (default 360) are spent.
      # Eager's lines for runs without an eager mode: ACCEL_GPU_EAGER_FROM (a carried file, relative to the repo),
      # else this call's own results file. ACCEL_GPU_MODELS_ARGS: more arguments of every run (e.g. --profile 3).
      IFS='|' read -ra runs <<< "${ACCEL_GPU_MODELS:-hf_llama:eager,accel,liger}"
      start=$SECONDS; budget=${ACCEL_GPU_MODELS_S:-360}
      for r in "${runs[@]}"; do
        if [ $((SECONDS - start)) -ge "$budget" ]; then echo "models: not started (budget $budget s): $r"; continue; fi
        IFS=':' read -r r_models r_modes r_args <<< "$r"
        timeout $((budget - (SECONDS - start) + 60)) python3 "$REPO/benchmarks/real_models.py" --all \
          --models "$r_models" --modes "$r_modes" $r_args --steps 20 --warmup 5 --curve-steps 50 --timeout 200 \
          --out "$OUT/real_models.jsonl" ${ACCEL_GPU_MODELS_ARGS:-} --eager-from "${ACCEL_GPU_EAGER_FROM:+$REPO/}${ACCEL_GPU_EAGER_FROM:-$OUT/real_models.jsonl}" \
          2>&1 | tee -a "$OUT/real_models.log" | grep -vE "^\s*$" | tail -8
      done
      ;;
    ops) timeout 200 python3 "$REPO/benchmarks/real_models.py" --ops --steps 20 2>&1 | grep '^RESULT ' | sed 's/^RESULT //' | tee "$OUT/ops.jsonl" ;;  # each accel op alone at hf_llama's shapes
    quant) timeout 120 python3 "$REPO/benchmarks/quant.py" --out "$OUT" 2>&1 | tail -30 ;;
    *) echo "unknown stage $stage" ;;
  esac
done
ls -la "$OUT"
