#!/usr/bin/env bash
# Paper Fig. 6 on one GPU in <= 30 minutes: softmax vs linear attention vs HYLA, same model, same
# corpus, same token budget, one after the other (each run resumable). Corpus: the offline
# documentation corpus written by experiments/lm/make_corpus.py (carry data/lm_docs to a machine
# without network, or run make_corpus.py there). See experiments/lm/GPU.md.
#
#   bash experiments/lm/run_gpu.sh                      # STEPS=3000 by default
#   STEPS=2000 bash experiments/lm/run_gpu.sh           # calibrate STEPS first, see GPU.md
#   python experiments/lm/plot.py runs/lm_gpu_docs --out experiments/lm/lm_gpu_docs.png
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-runs/lm_gpu_docs}
CORPUS=${CORPUS:-data/lm_docs}
STEPS=${STEPS:-3000}
SEED=${SEED:-0}
[ -d "$CORPUS" ] || python experiments/lm/make_corpus.py --out "$CORPUS"
mkdir -p "$OUT"
for mixer in softmax linear hyla; do
  hyla train --preset lm_cpu --model.mixer "$mixer" --seed "$SEED" \
    --text.corpus "$CORPUS" --text.vocab-size 8192 --text.seq-len 256 \
    --model.num-layers 6 --model.dim 256 --model.num-heads 8 --model.qk-dim 256 --model.v-dim 256 --model.mlp-dim 1024 \
    --train.steps "$STEPS" --train.batch-size 64 --optim.warmup-steps 200 \
    --eval.every 250 --eval.samples 1024 --eval.final-samples 4096 --checkpoint.every 500 \
    --train.device cuda --log.no-progress \
    --out-dir "$OUT" --name "$mixer-s$SEED" --resume 2>&1 | tee -a "$OUT/$mixer-s$SEED.log"
done
