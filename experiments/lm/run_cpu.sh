#!/usr/bin/env bash
# Softmax vs linear attention vs HYLA on the `lm_cpu` preset: equal budget (3000 steps of
# 16 x 64 tokens), one run per mixer, in parallel with one thread each, in the background.
# Resumable: run the script again and every run continues from its last checkpoint (a finished
# run only re-does its final evaluation). Then: python experiments/lm/plot.py runs/lm_cpu
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-runs/lm_cpu}
SEED=${SEED:-0}
mkdir -p "$OUT"
for mixer in softmax linear hyla; do
  setsid nohup hyla train --preset lm_cpu --model.mixer "$mixer" --seed "$SEED" --train.threads 1 --log.no-progress \
    --out_dir "$OUT" --name "$mixer-s$SEED" --resume >>"$OUT/$mixer-s$SEED.log" 2>&1 &
  echo "started $mixer (pid $!): log $OUT/$mixer-s$SEED.log"
done
