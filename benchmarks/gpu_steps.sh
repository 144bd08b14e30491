# Shared by the GPU session drivers (benchmarks/gpu_session.sh, benchmarks/gpu_ood_session.sh); sourced, not run.
#
# git_exclude PATH: lists /PATH/ in .git/info/exclude, so that it travels to the device only when a call carries it.
# session_start NAME TITLE DATA...: a run's settings: $PY, $LENS, $LIMIT (SESSION_LIMIT, default 540 s), $OUT (the
# device sets it; else .cache/NAME-out), $RES (.cache/NAME, emptied), $DATA ($LENS_DATA_DIR, else the first of DATA...
# that exists; exported), the log (RES/session.log, all output) and the summary. session_header TITLE: starts $summary (the session's markdown record) with the machine, the software and a step
# table. step NAME CAP COMMAND...: runs COMMAND under min(CAP, what is left of $LIMIT less 20 s for packing) and
# records its exit status and seconds in the table; a step with under 15 s left is recorded as skipped. A step that
# fails or runs out of time is recorded and the next one still runs.

session_header() {
  {
    echo "# $1: $(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
    echo
    echo "Driver: \`bash $0 ${mode:-run}\`; data: $DATA"
    echo
    echo '```'
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 || echo "no nvidia-smi"
    $PY -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'available', torch.cuda.is_available(), 'gpus', torch.cuda.device_count(), '| transformers', transformers.__version__)" 2>&1
    echo '```'
    echo
    echo "| step | exit status | seconds | limit s |"
    echo "|---|---:|---:|---:|"
  } > "$summary"
}

step() {
  local name=$1 cap=$2; shift 2
  local left=$(( LIMIT - SECONDS - 20 ))
  local t=$(( cap < left ? cap : left ))
  if [ "$t" -lt 15 ]; then
    echo "| $name | skipped: out of time | 0 | $t |" >> "$summary"; return 0
  fi
  echo "=== $name (limit ${t}s) ==="
  local start=$SECONDS
  timeout -s TERM -k 10 "$t" "$@"
  local rc=$?
  echo "| $name | $rc$([ $rc = 124 ] && echo ' (time limit)') | $(( SECONDS - start )) | $t |" >> "$summary"
  return 0
}

git_exclude() {
  local gitdir; gitdir=$(git rev-parse --git-dir); mkdir -p "$gitdir/info"
  grep -qx "/$1/" "$gitdir/info/exclude" 2>/dev/null || echo "/$1/" >> "$gitdir/info/exclude"
}

session_start() {
  local name=$1 title=$2; shift 2
  PY=${PYTHON:-python3}
  LENS="$PY -m lens.cli"
  LIMIT=${SESSION_LIMIT:-540}
  OUT=${OUT:-$root/.cache/$name-out}
  RES=$root/.cache/$name  # .cache/ is git-ignored
  DATA=${LENS_DATA_DIR:-}
  if [ -z "$DATA" ]; then
    for d in "$@"; do [ -d "$d" ] && { DATA=$d; break; }; done
  fi
  export LENS_DATA_DIR=$DATA
  rm -rf "$RES" && mkdir -p "$RES" "$OUT"
  exec > >(tee "$RES/session.log") 2>&1
  summary=$RES/session.md
  session_header "$title"
}
