#!/usr/bin/env bash
# Issue 42's GPU measurements in one go, for a session lent a GPU (docs/gpu.md#measuring-the-gpu-path).
#
#   benchmarks/gpu_session.sh prepare   # HERE, without a GPU: data into .device-data/, wheels into .device-stage/
#   benchmarks/gpu_session.sh run       # ON THE GPU MACHINE, from the repository root, after setup.sh
#
# `prepare` copies the few data sets the run reads (SciFact, Cranfield, MEDLINE, PubMedQA pairs: ~4.5 MB) into
# .device-data/ (listed in .git/info/exclude, so it travels only when carried) and runs ../shared/hooks/device-stage
# with parts small enough that the last call can carry the data too. It prints the device calls: every part's call
# copies its wheels into /tmp/stage; the last one carries [.device-stage/partK, .device-stage/setup.sh, .device-data]
# and runs
#   mkdir -p /tmp/stage && cp .device-stage/partK/* /tmp/stage/ && source .device-stage/setup.sh && \
#     bash benchmarks/gpu_session.sh run
#
# `run` does, each step under its own time limit and all of them within SESSION_LIMIT seconds (default 540; on an
# H100 on 2026-11-26, steps 1-3 took 184 + 89 + 176 s: benchmarks/results/gpu-session/):
#   1. benchmarks/speed_gpu.py --compile --cuda-graphs: docs/s float32 vs bfloat16 by batch size against the bare
#      forward, share of the bf16 ceiling, peak memory, SDPA backends, query p50/p95, fixed-shape query path;
#   2. lens bench beir scifact cranfield medline --systems lens-lexicon --device cuda, --dtype float32 then
#      bfloat16 (each precision's vectors cached apart), and their nDCG@10 side by side (beir_compare.md);
#   3. a CUDA training smoke (lens/train/configs/smoke-gpu.json: bf16 autocast, gradient checkpointing, the cached
#      loss): stopped by SIGTERM after its first checkpoint (exit 75 expected), then resumed to the end (exit 0);
#      with two GPUs, also 2 processes under torchrun (NCCL);
#   4. with the time left, issue 39's case variants on the GPU (benchmarks/ood.py --device cuda --dtype float32): the
#      shipped default with and without the lowercase rule on ADI, Cranfield and MEDLINE, and SciFact as the guard;
# then tars everything into $OUT/gpu-session.tar.gz and copies the small tables beside it (at most 8 files come
# back). A step that fails or runs out of time is recorded in session.md; the next one still runs.
set -uo pipefail

cd "$(dirname "$0")/.."
root=$PWD
mode=${1:-}
source "$root/benchmarks/gpu_steps.sh"  # git_exclude, session_start, step

if [ "$mode" = prepare ]; then
  set -e
  shared=${LENS_DATA_DIR:-$root/../shared/data}
  rm -rf .device-data && mkdir -p .device-data/beir .device-data/classic .device-data/train
  cp -r "$shared/beir/scifact" .device-data/beir/
  cp -r "$shared/classic/cranfield" "$shared/classic/medline" "$shared/classic/adi" .device-data/classic/
  cp -r "$shared/train/pubmedqa-labeled" .device-data/train/
  chmod -R u+w .device-data
  git_exclude .device-data
  echo ".device-data: $(du -sm .device-data | cut -f1) MB"
  tree=$(git ls-files -z | xargs -0 du -cb | tail -1 | cut -f1)
  data=$(du -sb .device-data | cut -f1)
  part=$(( (62 * 1048576 - tree - data) / 1048576 ))  # the last call carries a part, setup.sh and the data
  ../shared/hooks/device-stage --part-mib "$part"
  echo "last call: also carry \".device-data\"; its command ends with: bash benchmarks/gpu_session.sh run"
  exit 0
fi
[ "$mode" = run ] || { echo "usage: $0 prepare|run (see the comment at the top)" >&2; exit 2; }
session_start gpu-session "GPU session (issue 42)" "$root/.device-data" "$root/../shared/data"

# 1. encoding speed
SPEED_BUDGET=${SPEED_BUDGET:-150}
step speed_gpu $(( SPEED_BUDGET + 60 )) $PY benchmarks/speed_gpu.py --compile --cuda-graphs --docs 512 --time-budget $SPEED_BUDGET \
  --output "$RES/speed_gpu" --note "benchmarks/gpu_session.sh run"

# 2. bf16 vs float32 nDCG@10 (each run writes its own folder; vectors cached per precision)
for dt in float32 bfloat16; do
  step "beir-$dt" 110 $LENS bench beir scifact cranfield medline --systems lens-lexicon --device cuda --dtype $dt \
    --data-dir "$DATA" --output-dir "$RES/beir-$dt" --cache-dir /tmp/lens-bench-cache --no-plot
done
$PY - "$RES" > "$RES/beir_compare.md" <<'PY' || true
import json, sys
from pathlib import Path
res = Path(sys.argv[1])
print("# lens-lexicon nDCG@10, bfloat16 vs float32 on CUDA (`lens bench beir ... --dtype`)\n")
print("| dataset | float32 | bfloat16 | bf16 - fp32 | docs/s fp32 | docs/s bf16 |\n|---|---:|---:|---:|---:|---:|")
for ds in ("scifact", "cranfield", "medline"):
    got = {}
    for dt in ("float32", "bfloat16"):
        f = res / f"beir-{dt}" / ds / "results.json"
        got[dt] = json.loads(f.read_text())["systems"]["lens-lexicon"] if f.is_file() else None
    if None in got.values():
        print(f"| {ds} | {'-' if got['float32'] is None else got['float32']['ndcg@10']} | "
              f"{'-' if got['bfloat16'] is None else got['bfloat16']['ndcg@10']} | missing run | | |")
        continue
    a, b = got["float32"], got["bfloat16"]
    print(f"| {ds} | {a['ndcg@10']:.4f} | {b['ndcg@10']:.4f} | {b['ndcg@10'] - a['ndcg@10']:+.4f} | "
          f"{a['docs_per_s']:.0f} | {b['docs_per_s']:.0f} |")
PY

# 3. training smoke: inputs as the Makefile makes them, SIGTERM after the first checkpoint, then --resume
W=.cache/gpu-smoke   # the paths lens/train/configs/smoke-gpu.json names
rm -rf "$W" && mkdir -p "$W"
step smoke-inputs 90 bash -c "$LENS cluster-vocab --model default --clusters 1000 --iterations 5 --attention causal --overwrite --out $W/clusters && \
  $LENS data shared '$DATA/train/pubmedqa-labeled' --instruction auto --out $W/pubmedqa-labeled.jsonl.gz"
train_once() {  # first run, stopped with SIGTERM once its first checkpoint is written (exit 75 = stopped, resumable)
  $LENS -v train --config lens/train/configs/smoke-gpu.json --out "$W/train" &
  local pid=$!
  while kill -0 $pid 2>/dev/null && [ ! -f "$W/train/checkpoint/state.json" ]; do sleep 0.5; done
  kill -TERM $pid 2>/dev/null
  wait $pid
}
export -f train_once; export LENS W
step train-smoke-stopped 100 bash -c train_once
grep -h "stopped at step\|resumed at step" "$RES/session.log" | tail -2
step train-smoke-resumed 150 $LENS -v train --config lens/train/configs/smoke-gpu.json --out "$W/train" --resume
ngpu=$($PY -c "import torch; print(torch.cuda.device_count())" 2>/dev/null || echo 0)
if [ "${ngpu:-0}" -ge 2 ]; then
  step train-smoke-nccl-2gpu 100 $PY -m torch.distributed.run --nproc_per_node 2 -m lens.cli train \
    --config lens/train/configs/smoke-gpu.json --out "$W/train-2gpu"
else
  echo "| train-smoke-nccl-2gpu | skipped: $ngpu GPU(s) | 0 | 0 |" >> "$summary"
fi
# 4. issue 39 on the GPU (with the time left): the out-of-domain suite's case variants (and SciFact as the guard), BM25 and the lexicon in
#    float32, the shipped default against the same model with the lowercase rule (config text_normalization)
LC=.cache/models/default-lowercase
rm -rf "$LC" && mkdir -p .cache/models && cp -r lens/default_model "$LC" && $PY -c "
import sys; from lens.config import LensConfig
c = LensConfig.load(sys.argv[1]); c.text_normalization = 'lowercase'; c.save(sys.argv[1])" "$LC"
for tag in default default-lowercase; do
  model=$([ $tag = default ] && echo default || echo "$LC")
  step "ood-$tag" 60 $PY benchmarks/ood.py --sets adi,cranfield,medline --variants original,upper-queries,upper-corpus,upper-all,lower-all \
    --systems bm25,lens-lexicon --model "$model" --tag "$tag-cuda-float32" --device cuda --dtype float32 \
    --data-dir "$DATA" --work-dir /tmp/ood-variants --cache-dir /tmp/lens-bench-cache --results-dir "$RES/ood"
  step "scifact-$tag" 40 $PY benchmarks/ood.py --sets scifact --variants original --systems bm25,lens-lexicon \
    --model "$model" --tag "$tag-cuda-float32" --device cuda --dtype float32 \
    --data-dir "$DATA" --work-dir /tmp/ood-variants --cache-dir /tmp/lens-bench-cache --results-dir "$RES/ood"
done
[ -f "$RES/ood/README.md" ] && cp "$RES/ood/README.md" "$RES/ood_cuda.md"

mkdir -p "$RES/train-smoke"
for f in README.md train_log.csv train_config.json; do cp "$W/train/$f" "$RES/train-smoke/" 2>/dev/null; done
[ -d "$W/train-2gpu" ] && mkdir -p "$RES/train-smoke-2gpu" && cp "$W/train-2gpu"/{README.md,train_log.csv} "$RES/train-smoke-2gpu/" 2>/dev/null
{
  echo
  echo "Training smoke: stopped/resumed lines from the log (exit 75 then 0 expected):"
  echo
  echo '```'
  grep -h "stopped at step\|resumed at step\|trained [0-9]* steps" "$RES/session.log" | grep -v "^+" | tail -4
  echo '```'
  echo
  echo "Session took $SECONDS s of its $LIMIT s."
} >> "$summary"

# 5. pack: one tarball + the small tables (at most 8 files come back from \$OUT)
tar czf "$OUT/gpu-session.tar.gz" -C "$RES" --exclude='*/runs' . 2>/dev/null
for f in session.md speed_gpu.md speed_gpu.json beir_compare.md ood_cuda.md; do [ -f "$RES/$f" ] && cp "$RES/$f" "$OUT/"; done
[ -f "$RES/train-smoke/train_log.csv" ] && cp "$RES/train-smoke/train_log.csv" "$OUT/train_smoke_log.csv"
cat "$summary"
ls -la "$OUT"
