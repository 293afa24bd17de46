#!/usr/bin/env bash
# Rebuilds kernels/tuning/sm_90.json from the recorded reports in sm_90-table/ (run in benchmarks/results/h200/):
#   bash build_table.sh > ../../../kernels/tuning/sm_90.json
# The newest report must list every row (a full `accel bench` run); partial reports go before it.
# Rules and the --tuned / --evidence options: ci/gpu/table_from_bench.py. History: README.md, "The shipped table".
set -eu
cd sm_90-table
python3 ../../../../ci/gpu/table_from_bench.py \
  --tuned tune-softmax-sm_90.json --tuned tune-layer_norm-sm_90.json \
  --tuned tune-session3-runB-sm_90.json --tuned tune-session3-runE-sm_90.json --tuned tune-session3-runF-sm_90.json \
  --tuned tune-20261130-runC-rms_norm.json --tuned tune-20261130-runD-softmax.json --tuned tune-20261130-runD-layer_norm.json \
  --tuned tune-20261201a-runE-layer_norm.json \
  --tuned tune-20261201b-runB-softmax.json --tuned tune-20261201b-runD-layer_norm.json \
  --tuned tune-20261201c-probe-runB-1.json --tuned tune-20261201c-probe-runB-2.json --tuned tune-20261201c-probe-runB-3.json \
  --tuned tune-20261201c-probe-runB-4.json \
  --evidence helion:18 --evidence triton:11 --evidence triton.layer_norm_bwd:23 --evidence cutedsl:2 \
  kernels-20261129-205604.json kernels-20261129-210504.json kernels-20261129-210602.json kernels-20261129-211309.json \
  kernels-20261129-211352.json kernels-20261129-214511.json kernels-20261129-213530.json kernels-20261129-213614.json \
  kernels-20261129-225207.json kernels-20261129-225258.json kernels-20261129-230510.json \
  kernels-20261130-003152.json kernels-20261130-004207.json kernels-20261130-003557.json \
  kernels-20261130-013521.json kernels-20261201-071246.json kernels-20261130-010817.json \
  kernels-20261201-091815.json kernels-20261201-093917.json kernels-20261201-092252.json \
  kernels-20261201-095035.json kernels-20261201-120206.json kernels-20261201-122742.json
