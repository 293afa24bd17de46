#!/usr/bin/env bash
# The 2-GPU FSDP2 table of issue 26 in one run (nvidia-h200-x2; not run yet): examples/fsdp2_llama.py at the
# real-model benchmark's size (HF Llama 8 x d2048, GQA 16/8, vocab 32000, 4 x 2048 tokens per rank, bf16 mixed
# precision), one torchrun launch per mode (eager, accel, liger: each its own process group and processes, as
# Liger patches classes globally), then a markdown table: ms per step and peak GiB per rank, and whether each
# mode's resume in a fresh process group equalled its uninterrupted run bit for bit.
# Usage (device tool, kind nvidia-h200-x2, carry [".whl"] with the Liger-Kernel wheel):
#   bash ci/gpu/fsdp2.sh [steps] [save_at]          # default 12 6
set -u
export PYTHONUNBUFFERED=1
# NVLink multicast stays off (KINDS.md: a program using it can put the shared host's GPUs out of service)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
REPO=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$REPO/gpu-out}
STEPS=${1:-12}
SAVE_AT=${2:-6}
mkdir -p "$OUT"
SITE=/tmp/site
if [ -d "$REPO/.whl" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$SITE" "$REPO"/.whl/*.whl
fi
python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --upgrade --target /tmp/accel "$REPO" \
  || { echo "accel install failed"; exit 1; }
export PYTHONPATH=/tmp/accel:$SITE
cd /tmp  # import the installed accel, never the source tree
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__, 'gpus', torch.cuda.device_count())"
port=29511
for mode in eager accel liger; do
  echo "=================== mode: $mode"
  ckpt=/tmp/fsdp2-ckpt-$mode
  rm -rf "$ckpt"
  timeout 540 torchrun --nproc-per-node 2 --master-port $port "$REPO/examples/fsdp2_llama.py" --size bench \
      --mode "$mode" --steps "$STEPS" --save-at "$SAVE_AT" --ckpt "$ckpt" --json \
      > "$OUT/fsdp2-$mode.json" 2> "$OUT/fsdp2-$mode.log"
  echo "exit: $?"; tail -3 "$OUT/fsdp2-$mode.log"
  rm -rf "$ckpt"  # ~7 GB of model + AdamW state per mode
  port=$((port + 1))
done
python3 - "$OUT" <<'PY'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
rows = ["| mode | ms/step rank 0 | ms/step rank 1 | peak GiB rank 0 | peak GiB rank 1 | resume exact | dtype |",
        "|---|---:|---:|---:|---:|---|---|"]
eager = None
for mode in ("eager", "accel", "liger"):
    text = (out / f"fsdp2-{mode}.json").read_text().strip().splitlines()
    if not text:
        rows.append(f"| {mode} | failed: see fsdp2-{mode}.log | | | | | |")
        continue
    r = json.loads(text[-1])
    ms, peak = r["ms_per_step"], r["peak_gib"]
    eager = eager or ms[0]
    rows.append(f"| {mode} | {ms[0]:.1f} ({eager / ms[0]:.2f}x) | {ms[1]:.1f} | {peak[0]} | {peak[1]} | "
                f"{r['resume']['exact']} | {r['dtype']} |")
table = "\n".join(rows)
(out / "fsdp2-table.md").write_text(table + "\n")
print(table)
PY
