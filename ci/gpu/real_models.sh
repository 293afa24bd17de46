#!/usr/bin/env bash
# Issue 22's real-model batch on the lent H200, in device calls of at most ~6 minutes each (~12-13 min in all).
# Every (model, mode) runs in a fresh process (benchmarks/real_models.py --all); each phase stops starting new
# runs when its time budget is spent (the runs it did not start are listed at the end of its log).
#
#   phase 1: eager, accel, liger for hf_llama qwen3 gpt2 titan_llama vit_b16      (~5.5 min)
#   phase 2: the loss's rows-per-chunk sweep (benchmarks/linear_cross_entropy.py --chunk-sweep), then compile,
#            accel_compile for hf_llama qwen3 gpt2 (needs phase 1's file)                   (~6 min)
#   phase 3: (only if device time is left) the loss-chunk probe of item 2 on qwen3 and hf_llama (accel mode,
#            --loss-chunk 512/2048/4096 beside the default rule's 1024), --ops, compile modes of titan_llama
#            and vit_b16
#
# Before (on the CPU machine, project root): ../shared/tools/gpu-wheels.sh   (-> .whl/: Liger-Kernel, helion)
# Device tool calls (carry [".whl"]; $OUT comes back):
#   bash ci/gpu/real_models.sh 1
#   then here: mkdir -p benchmarks/results/h200/session12 && cp <files_at>/real_models-1.jsonl benchmarks/results/h200/session12/
#   bash ci/gpu/real_models.sh 2      (reads benchmarks/results/h200/session12/real_models-1.jsonl for eager's figures)
#   bash ci/gpu/real_models.sh 3      (optional)
# Then here: python benchmarks/real_models.py --plot <all phases' lines in one file> --png benchmarks/results/h200/session12/real_models.png
set -u
export PYTHONUNBUFFERED=1
REPO=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$REPO/gpu-out}
PHASE=${1:?usage: real_models.sh 1|2|3}
BUDGET=${ACCEL_GPU_PHASE_S:-$([ "$PHASE" = 3 ] && echo 420 || echo 370)}  # seconds of runs this call may start
EAGER=${ACCEL_GPU_EAGER_FROM:-$REPO/benchmarks/results/h200/session12/real_models-1.jsonl}
mkdir -p "$OUT"
if [ ! -d /tmp/accel ]; then  # a warm machine keeps the installs of an earlier call
  if [ -d "$REPO/.whl" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site "$REPO"/.whl/*.whl \
      || echo "wheel install failed: liger runs will be skipped lines"
  fi
  python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --upgrade --target /tmp/accel "$REPO" \
    || { echo "accel install failed"; exit 1; }
  PYTHONPATH=/tmp/accel:/tmp/site python3 "$REPO/ci/gpu/check_deps.py" || exit 1
fi
export PYTHONPATH=/tmp/accel:/tmp/site
cd /tmp  # never import the source tree: accel.backends exists only in the installed layout
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__, 'transformers', transformers.__version__)"
LOG="$OUT/real_models-$PHASE.log"
FILE="$OUT/real_models-$PHASE.jsonl"
START=$SECONDS
left=()
run() {  # run <models> <modes> [extra args...]: one driver call, unless the phase's budget is spent
  if [ $((SECONDS - START)) -ge "$BUDGET" ]; then left+=("$1/$2 $3 $4"); return; fi
  timeout $((BUDGET - (SECONDS - START) + 60)) python3 "$REPO/benchmarks/real_models.py" --all --models "$1" --modes "$2" \
    --steps 20 --warmup 5 --curve-steps 50 --timeout 200 --out "$FILE" "${@:3}" 2>&1 | tee -a "$LOG"
}
case $PHASE in
  1) for m in hf_llama qwen3 gpt2 titan_llama vit_b16; do run "$m" eager,accel,liger; done ;;
  2) [ -f "$EAGER" ] || echo "no $EAGER: speedups will be missing (copy phase 1's file there first)"
     # item 2's rows-per-chunk rule, the loss alone at the three LM heads (~20 s)
     timeout 150 python3 "$REPO/benchmarks/linear_cross_entropy.py" --chunk-sweep --out "$OUT" 2>&1 | tee -a "$LOG" | tail -22
     for m in hf_llama qwen3 gpt2; do run "$m" compile,accel_compile --eager-from "$EAGER"; done ;;
  3) for c in 2048 512 4096; do run qwen3 accel --loss-chunk "$c" --eager-from "$EAGER"; done
     run hf_llama accel --loss-chunk 2048 --eager-from "$EAGER"
     if [ $((SECONDS - START)) -lt "$BUDGET" ]; then
       timeout 120 python3 "$REPO/benchmarks/real_models.py" --ops 2>&1 | tee "$OUT/real_models-ops.txt" | tail -5
     fi
     for m in titan_llama vit_b16; do run "$m" compile,accel_compile --eager-from "$EAGER"; done ;;
  *) echo "unknown phase $PHASE (1, 2 or 3)"; exit 2 ;;
esac
echo "phase $PHASE: $((SECONDS - START)) s of runs; not started (budget $BUDGET s): ${left[*]:-none}" | tee -a "$LOG"
