#!/usr/bin/env bash
# Issue 39's GPU work in one lease (docs/gpu.md#measuring-the-gpu-path has the staging in general).
#
#   benchmarks/gpu_ood_session.sh prepare [--part-mib N]   # HERE, without a GPU: data and wheels to carry
#   benchmarks/gpu_ood_session.sh run                      # ON THE GPU MACHINE, from the repository root
#
# `prepare` copies what the run reads into .device-data/ (listed in .git/info/exclude, so it travels only when
# carried): SciFact, ADI, Cranfield, MEDLINE, the ATEB development sets and the labelled training mixture that
# `make train-data` wrote under .cache/lens-train/mixture (about 20 MB); then ../shared/hooks/device-stage splits the
# wheels into parts (--part-mib: the room a call leaves beside the tracked tree, 62 MiB in all). The calls:
#   1. carry [".device-data"]:               mkdir -p /tmp/stage && cp -r .device-data /tmp/device-data
#   2. one per part, carry [".device-stage/partI"]:  mkdir -p /tmp/stage && cp .device-stage/partI/* /tmp/stage/
#   3. the last part with setup.sh:          ... && source .device-stage/setup.sh && bash benchmarks/gpu_ood_session.sh run
#
# `run`, each step under its own time limit and all within SESSION_LIMIT seconds (default 540):
#   1. the shipped default merged (`lens merge default`), the start of the continuations of its training named by
#      VARIANTS ("NAME:CONFIG ...", default: lens/train/configs/default-continue-gpu-bm25.json, BM25 distillation
#      added, and default-continue-gpu.json, the control: the same 120 steps with the default's own loss, so the
#      BM25 term is told apart from more steps); the next ones to try (docs/studies.md):
#        VARIANTS="half:lens/train/configs/default-continue-gpu-bm25-half.json
#                  sparse:lens/train/configs/default-continue-gpu-bm25-sparse.json" SYSTEMS=bm25,lens-lexicon,lens-hybrid
#   2. the out-of-domain suite (benchmarks/ood.py: ADI, Cranfield, MEDLINE as written, float32 on CUDA, the systems
#      in SYSTEMS, default bm25,lens-lexicon; lens-hybrid needs MiniLM: `prepare --minilm`) for the shipped default
#      and every continuation, then their lexicality (benchmarks/lexicality.py, float32 on CUDA too);
#   3. ATEB (lens bench ateb, the LENS lexicon and dense vectors, float32 on CUDA) for the shipped default and every continuation
#      (a new default is judged on ATEB too; SKIP_ATEB=1 leaves it out);
#   4. SciFact (the regression guard) for every model, the shipped default last;
# INTERPOLATE ("NAME:FRACTION ...", e.g. "half:0.5") adds, after the continuations, each continuation NAME taken
# FRACTION of the way from the default's weights to its own (`lens merge --fraction`), judged as they are;
# SKIP_DEFAULT=1 judges the continuations only (a second run on the same warm machine, after one that judged the default);
# then tars the results into $OUT/gpu-ood.tar.gz and the model directory of each continuation named in PACK
# (default: the first of VARIANTS) into $OUT/model-NAME.tar.part-NN pieces of 15 MB (at most 8 files of 16 MiB come
# back: 4 pieces a model, so a second model's last pieces need a second call).
set -uo pipefail

cd "$(dirname "$0")/.." && root=$PWD && mode=${1:-}
source "$root/benchmarks/gpu_steps.sh"  # git_exclude, session_start, step
if [ "$mode" = prepare ]; then
  set -e && shift
  shared=${LENS_DATA_DIR:-$root/../shared/data}
  mixture=$root/.cache/lens-train/mixture
  files=(squad nq-qed wikiqa pubmedqa-labeled scifact-train snli-cad)
  for f in "${files[@]}"; do
    [ -f "$mixture/$f.jsonl.gz" ] || { echo "missing $mixture/$f.jsonl.gz: run \`make train-data\` first" >&2; exit 1; }
  done
  rm -rf .device-data && mkdir -p .device-data/beir .device-data/classic .device-data/lens-train/mixture
  cp -r "$shared/beir/scifact" .device-data/beir/
  cp -r "$shared/classic/cranfield" "$shared/classic/medline" "$shared/classic/adi" .device-data/classic/
  cp -r "$shared/ateb" .device-data/
  for f in "${files[@]}"; do cp "$mixture/$f.jsonl.gz" .device-data/lens-train/mixture/; done
  chmod -R u+w .device-data
  git_exclude .device-data
  echo ".device-data: $(du -sm .device-data | cut -f1) MB (call 1 carries it alone)"
  ../shared/hooks/device-stage "$@"
  echo "then the last call's command ends with: bash benchmarks/gpu_ood_session.sh run"
  exit 0
fi
[ "$mode" = run ] || { echo "usage: $0 prepare [--part-mib N] | run (see the comment at the top)" >&2; exit 2; }
session_start gpu-ood "GPU session (issue 39: out of domain)" /tmp/device-data "$root/.device-data" "$root/../shared/data"
W=$root/.cache/gpu-ood-models
mkdir -p "$W"

# 1. the two continuations of the shipped default (the configs name these paths)
if [ -d "$DATA/lens-train/mixture" ]; then
  mkdir -p .cache/lens-train/mixture && cp -n "$DATA"/lens-train/mixture/*.jsonl.gz .cache/lens-train/mixture/
fi
[ -f .cache/lens-train/default-merged/config.json ] || step merge 90 $LENS merge default --out .cache/lens-train/default-merged
train() {  # NAME CONFIG: train; on running out of GPU memory (this run's own errors), once more with gradient checkpointing
  local name=$1 config=$2 err=$RES/train-$name.stderr
  step "train-$name" 200 $LENS -v train --config "$config" --out "$W/$name" ${TRAIN_ARGS:-} 2> "$err"
  cat "$err" >&2  # into the session's log too
  if [ ! -f "$W/$name/config.json" ] && grep -q "OutOfMemoryError\|CUDA out of memory" "$err"; then
    $PY -c "import json,sys; from lens.train.config import resolve_extends; c=resolve_extends(sys.argv[1]); \
c['gradient_checkpointing']=True; json.dump(c, open(sys.argv[2],'w'), indent=2)" "$config" "/tmp/$name-gc.json"
    rm -rf "$W/$name"
    step "train-$name-gradient-checkpointing" 200 $LENS -v train --config "/tmp/$name-gc.json" --out "$W/$name" ${TRAIN_ARGS:-}
  fi
}
VARIANTS=${VARIANTS:-"bm25:lens/train/configs/default-continue-gpu-bm25.json control:lens/train/configs/default-continue-gpu.json"}
names=()
for v in $VARIANTS; do names+=("${v%%:*}"); train "${v%%:*}" "${v#*:}"; done

# 2. the out-of-domain sets as written, and lexicality
models=()
[ -n "${SKIP_DEFAULT:-}" ] || models+=(default:default)  # SKIP_DEFAULT=1: a second run on a warm machine
for name in "${names[@]}"; do
  [ -f "$W/$name/config.json" ] && models+=("continue-gpu-$name:$W/$name")
done
# INTERPOLATE ("NAME:FRACTION ...", default none): each trained continuation NAME also judged FRACTION of the way from
# the shipped default's weights to its own (`lens merge --onto default --fraction`), after the continuations
for v in ${INTERPOLATE:-}; do
  name=${v%%:*} f=${v#*:}
  [ -f "$W/$name/config.json" ] || continue
  step "interpolate-$name-$f" 60 $LENS merge "$W/$name" --onto default --fraction "$f" --overwrite --out "$W/$name-f$f"
  [ -f "$W/$name-f$f/config.json" ] && models+=("continue-gpu-$name-f$f:$W/$name-f$f")
done
suite() {  # SETS TAG MODEL
  step "ood-$2-$1" 60 $PY benchmarks/ood.py --sets "$1" --variants original --systems "${SYSTEMS:-bm25,lens-lexicon}" \
    --model "$3" --tag "$2-cuda-float32" --device cuda --dtype float32 --threads 8 --data-dir "$DATA" \
    --work-dir /tmp/ood-variants --cache-dir /tmp/lens-bench-cache --results-dir "$RES/ood"
}
for m in "${models[@]}"; do suite adi,cranfield,medline "${m%%:*}" "${m#*:}"; done
model_list=$(printf '%s\n' "${models[@]#*:}" | paste -sd, -)
step lexicality $((30 + 20 * ${#models[@]})) $PY benchmarks/lexicality.py adi cranfield medline --model "$model_list" --threads 8 \
  --device cuda --dtype float32 --data-dir "$DATA" --cache-dir /tmp/lens-bench-cache --output "$RES/lexicality"

# 3. ATEB for the shipped default and every continuation; SKIP_ATEB=1 leaves it out
if [ -z "${SKIP_ATEB:-}" ]; then
  for m in "${models[@]}"; do
    step "ateb-${m%%:*}" 120 $LENS bench ateb --systems lens-lexicon,lens-dense --model "${m#*:}" --data-dir "$DATA" \
      --device cuda --dtype float32 --output "$RES/ateb-${m%%:*}" --cache-dir /tmp/lens-bench-cache --no-plot
  done
fi

# 4. SciFact, the regression guard: the candidates first (the last model is the likeliest to be cut by the session's
# limit, and the shipped default's SciFact is also measured on the CPU: benchmarks/results/beir/)
for m in "${models[@]}"; do [ "$m" = default:default ] || suite scifact "${m%%:*}" "${m#*:}"; done
[ -n "${SKIP_DEFAULT:-}" ] || suite scifact default default
[ -d "$RES/ood" ] && $PY benchmarks/ood.py --table-only --results-dir "$RES/ood" > /dev/null 2>&1
echo >> "$summary"; echo "Session took $SECONDS s of its $LIMIT s." >> "$summary"

# 5. pack: the results (train logs and configs, not weights), and the BM25 continuation's weights in pieces
for name in "${names[@]}"; do
  mkdir -p "$RES/train-$name"
  for f in README.md train_log.csv train_config.json config.json; do cp "$W/$name/$f" "$RES/train-$name/" 2>/dev/null; done
done
tar czf "$OUT/gpu-ood.tar.gz" -C "$RES" . 2>/dev/null
cp "$summary" "$OUT/session.md"
for name in ${PACK:-${names[0]}}; do
  [ -f "$W/$name/config.json" ] && tar cf - -C "$W" --exclude=checkpoint "$name" | split -b 15000000 -d -a 2 - "$OUT/model-$name.tar.part-"
done
cat "$summary"
ls -la "$OUT"
