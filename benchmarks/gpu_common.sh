# Sourced (not run) by the benchmarks/gpu_*.sh session scripts: a results folder, steps each under its own time
# limit and none started past a deadline, and the wheels a bare GPU machine lacks installed into a private folder.
# Before sourcing, the script sets RESULTS (the results folder) and, for `step`, DEADLINE_S (seconds since the
# script started after which no step starts). Per step: TAIL (lines of the step's log shown, default 12) and
# STEP_SHOW (an extended regex: show only matching lines; default every line but model-loading chatter).
export PYTHONUNBUFFERED=1 GIT_PYTHON_REFRESH=quiet HF_HUB_DISABLE_XET=1
mkdir -p "$RESULTS"

log() { printf '\n=== %s (%ss)\n' "$*" "$SECONDS" | tee -a "$RESULTS/session.log"; }

# a step's timeout: its own limit, or what is left before DEADLINE_S (0: too little left, skip the step)
budget() {
  local left=$((${DEADLINE_S:-900} - SECONDS))
  if [ "$left" -lt "$1" ]; then echo $((left > 10 ? left : 0)); else echo "$1"; fi
}

# step NAME LIMIT COMMAND...: run under its budget, output to RESULTS/NAME.log, its tail shown; returns the
# command's exit code (124: stopped by the limit), 99 when skipped for the deadline
step() {
  local name=$1 t rc; t=$(budget "$2"); shift 2
  if [ "$t" -le 0 ]; then log "$name: skipped (deadline)"; return 99; fi
  log "$name (limit ${t}s)"
  timeout "$t" "$@" >"$RESULTS/$name.log" 2>&1; rc=$?
  if [ -n "${STEP_SHOW:-}" ]; then grep -E "$STEP_SHOW" "$RESULTS/$name.log"; else grep -v "Loading weights\|falling back" "$RESULTS/$name.log"; fi \
    | tail -"${TAIL:-12}"
  echo "$name exit code $rc" | tee -a "$RESULTS/session.log"
  return $rc
}

# the wheels of WHEELS=<dir> (if set) into /tmp/site, --no-deps, from that folder only; PYTHONPATH then puts
# them and this checkout (the toolkit) first
install_wheels() {
  if [ -n "${WHEELS:-}" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$WHEELS"/*.whl \
      >"$RESULTS/pip.log" 2>&1 || tail -5 "$RESULTS/pip.log"
    export PYTHONPATH=/tmp/site:$PWD
  else
    export PYTHONPATH=$PWD
  fi
}

# the machine and versions every run's log starts with (into the step log and RESULTS/session.log)
log_environment() {
  log "environment"
  { nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    python3 -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__)'
    nvcc --version | tail -1; nproc; } 2>&1 | tee -a "$RESULTS/session.log"
}

# gguf_link_builds OBJECTS [LABEL=DIR ...]: gguf-kernels linked from CUDA objects compiled elsewhere
# (benchmarks/gguf_local_build.py --objects-only, same nvcc): the build under test from OBJECTS into
# $GGUF_BUILDS/gguf-build (exported as GGUF_KERNELS_PATH; GGUF_BUILDS defaults to /tmp), and beside it, in
# parallel, one build per LABEL=DIR into $GGUF_BUILDS/gguf-LABEL, DIR holding the objects that differ from
# OBJECTS. Sets ARCH (this GPU's sm) and VLIST ("LABEL=<its pkg> ..." of the builds that linked), what
# benchmarks/gguf_variants.py takes.
gguf_link_builds() {
  local objects=$1 root=${GGUF_BUILDS:-/tmp} spec label; shift
  ARCH=$(python3 -c 'import torch; m, n = torch.cuda.get_device_capability(); print(f"{m}{n}")')
  _gguf_link() {  # OUT DIR...: the objects of each DIR in turn (later ones replace), then the link
    local out=$1; shift
    mkdir -p "$out/obj-sm$ARCH"
    for d in "$@"; do cp "$d"/*.o "$out/obj-sm$ARCH/"; done
    python3 benchmarks/gguf_local_build.py --vendor vendor/ggml --out "$out" --link-only -j 4
  }
  declare -A pids
  VLIST=""
  for spec in "$@"; do
    label=${spec%%=*}
    _gguf_link "$root/gguf-$label" "$objects" "${spec#*=}" >"$RESULTS/build-$label.log" 2>&1 &
    pids[$label]=$!
  done
  _gguf_link "$root/gguf-build" "$objects" >"$RESULTS/build.log" 2>&1
  echo "gguf-kernels link exit code $?" | tee -a "$RESULTS/session.log"; tail -2 "$RESULTS/build.log"
  export GGUF_KERNELS_PATH=$root/gguf-build/pkg
  for spec in "$@"; do
    label=${spec%%=*}
    if wait "${pids[$label]}"; then VLIST="$VLIST $label=$root/gguf-$label/pkg"
    else echo "variant $label: link failed"; tail -5 "$RESULTS/build-$label.log"; fi
  done
}

# gguf_resources REGEX: registers and shared memory of the kernels matching REGEX (mangled names) in the gemv
# and dequantize objects of every build gguf_link_builds made, into RESULTS/resources.log (needs cuobjdump)
gguf_resources() {
  command -v cuobjdump >/dev/null || return 0
  local o
  for o in "${GGUF_BUILDS:-/tmp}"/gguf-*/obj-sm"$ARCH"/gguf_mmvq.o "${GGUF_BUILDS:-/tmp}"/gguf-*/obj-sm"$ARCH"/gguf_convert.o; do
    echo "$o"; cuobjdump --dump-resource-usage "$o" | grep -A1 -E "$1" \
      | grep -oE "Function [^ :]+|REG:[0-9]+|SHARED:[0-9]+" | paste -sd' ' | sed 's/Function /\n  /g'
  done >"$RESULTS/resources.log" 2>&1
  cat "$RESULTS/resources.log"
}
