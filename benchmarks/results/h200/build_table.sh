#!/usr/bin/env bash
# Rebuilds kernels/tuning/sm_90.json from the recorded reports (run in benchmarks/results/h200/):
#   bash build_table.sh > ../../../kernels/tuning/sm_90.json
# The newest report must list every row (a full `accel bench` run); partial reports go before it.
# Rules and the --tuned / --evidence options: ci/gpu/table_from_bench.py. History: ../README.md.
set -eu
python3 ../../../ci/gpu/table_from_bench.py \
  --tuned tune-softmax-sm_90.json --tuned tune-layer_norm-sm_90.json \
  --tuned tune-session3-runB-sm_90.json --tuned tune-session3-runE-sm_90.json --tuned tune-session3-runF-sm_90.json \
  --tuned session5/tune-runC-rms_norm.json --tuned session5/tune-runD-softmax.json --tuned session5/tune-runD-layer_norm.json \
  --tuned session6/tune-runE-layer_norm.json \
  --tuned session7/tune-runB-softmax.json --tuned session7/tune-runD-layer_norm.json \
  --tuned session8/tune-probe-runB-1.json --tuned session8/tune-probe-runB-2.json --tuned session8/tune-probe-runB-3.json \
  --tuned session8/tune-probe-runB-4.json \
  --evidence helion:18 --evidence triton:11 --evidence triton.layer_norm_bwd:23 --evidence cutedsl:2 \
  kernels-20261129-205604.json kernels-20261129-210504.json kernels-20261129-210602.json kernels-20261129-211309.json \
  kernels-20261129-211352.json kernels-20261129-214511.json kernels-20261129-213530.json kernels-20261129-213614.json \
  session4/kernels-20261129-225207.json session4/kernels-20261129-225258.json session4/kernels-20261129-230510.json \
  session5/kernels-20261130-003152.json session5/kernels-20261130-004207.json session5/kernels-20261130-003557.json \
  session5/kernels-20261130-013521.json session6/kernels-20261201-071246.json session5/kernels-20261130-010817.json \
  session7/kernels-20261201-091815.json session7/kernels-20261201-093917.json session7/kernels-20261201-092252.json \
  session7/kernels-20261201-095035.json session8/kernels-20261201-120206.json session8/kernels-20261201-122742.json
