#!/usr/bin/env bash
# One prepared CPU benchmark run for the tables of issue 24, about 22 minutes on a quiet 2-core machine with
# BUDGET_S=2400 (17 without the compiled train step, which the default budget may skip).
# Swin-T at 224², swinlite against timm, side by side in one process (scripts/benchmark.py); the most needed first:
#   cpu_tiny_b8_contended_1..3  batch 8, fp32 and bf16 autocast, inference and train step, in random-order rounds:
#                               quiet, one core kept busy by a second process, and (inference) fed by a 2-worker
#                               image-decoding DataLoader; three runs (the first now, the other two last)
#   cpu_tiny_b8_quiet           batch 8, fp32 and bf16, quiet, with peak memory and the per-operator profile
#   cpu_tiny_b8_compile         optimize_for_inference against timm compiled the same way (inductor freezing), fp32
#   cpu_tiny_b8_1thread         batch 8, fp32 and bf16, one torch thread each
#   cpu_tiny_b1                 batch 1, fp32 and bf16, 2 threads
#   cpu_tiny_b8_compile_train   the train step through torch.compile (train.compile: true), fp32 and bf16; last,
#                               about 5 minutes: run when the budget allows (BUDGET_S=2400)
# bf16 only where the CPU computes it (oneDNN's bf16 check: AVX-512 BF16 or AMX); elsewhere (AVX2) every run is fp32
# only, as bf16 there is emulated, a minute per matmul. SCALE (default 1) multiplies each run's time limit: 2 on a CPU
# with a quarter of the Xeon's matmul speed (an AVX2 EPYC: `SCALE=2 BUDGET_S=3000`).
# Each run writes <name>.md (table) and <name>.json into $OUT only when it finishes (a run cut short leaves the
# committed files as they were); progress and errors go to <name>.log in a temporary folder named at the start.
# Refuses to start on a busy machine (1-minute load average at or above MAX_LOAD, default 1.5). BUDGET_S (default
# 1500) bounds the whole: a run whose time limit would end past it is skipped, and said so.
#   OUT=/tmp/bench BUDGET_S=2400 bash benchmarks/cpu_run.sh   # every run, tables in /tmp/bench (the README's)
#   bash benchmarks/cpu_run.sh                                # OUT=benchmarks: replaces the committed tables
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-benchmarks}
PYTHON=${PYTHON:-python}
MAX_LOAD=${MAX_LOAD:-1.5}
BUDGET_S=${BUDGET_S:-1500}
SCALE=${SCALE:-1}
if ! [[ $SCALE =~ ^[1-9][0-9]*$ ]]; then  # bash arithmetic reads a word as 0, and `timeout 0` never times out
    echo "error: SCALE must be a positive whole number (the factor of every run's time limit), got '$SCALE'" >&2
    exit 2
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
LOGS=$(mktemp -d -t cpu_run.XXXXXX)
mkdir -p "$OUT"

load=$(cut -d' ' -f1 /proc/loadavg)
if awk -v l="$load" -v m="$MAX_LOAD" 'BEGIN { exit !(l >= m) }'; then
    echo "error: the machine is busy (1-minute load average $load, expected below $MAX_LOAD); run it when quiet" >&2
    exit 2
fi
echo "$(date -u +%FT%TZ) start, load $(cut -d' ' -f1-3 /proc/loadavg), logs in $LOGS"

run() {  # run NAME SECONDS ARGS...: one benchmark, bounded so that a hang cannot eat the others' time
    local name=$1 limit=$(($2 * SCALE))
    shift 2
    if ((SECONDS + limit > BUDGET_S)); then
        echo "$name: skipped, its $limit s limit would pass the budget ($SECONDS of $BUDGET_S s spent)"
        return
    fi
    local start=$SECONDS
    if timeout "$limit" "$PYTHON" scripts/benchmark.py --size tiny --models swinlite,timm "$@" \
        --json "$LOGS/$name.json" > "$LOGS/$name.md" 2> "$LOGS/$name.log" && [[ -s $LOGS/$name.json ]]; then
        mv "$LOGS/$name.json" "$LOGS/$name.md" "$OUT/"
        echo "$name: $((SECONDS - start)) s, load after $(cut -d' ' -f1-3 /proc/loadavg)"
    else
        echo "$name: exit $? after $((SECONDS - start)) s (see $LOGS/$name.log)"
    fi
}

PRECISIONS=$("$PYTHON" -c 'import torch; print("fp32,bf16" if torch.ops.mkldnn._is_mkldnn_bf16_supported() else "fp32")')
echo "precisions: $PRECISIONS"
BOTH=(--precisions "$PRECISIONS" --tasks inference,train)
run cpu_tiny_b8_contended_1 330 --contended --batch 8 --threads 2 "${BOTH[@]}" --warmup 1 --repeats 5
run cpu_tiny_b8_quiet 200 --batch 8 --threads 2 "${BOTH[@]}" --warmup 1 --repeats 5 --profile
run cpu_tiny_b8_compile 300 --compile --batch 8 --threads 2 --warmup 1 --repeats 5 --no-warm-start
run cpu_tiny_b8_1thread 240 --batch 8 --threads 1 "${BOTH[@]}" --warmup 1 --repeats 3 --no-memory
run cpu_tiny_b1 120 --batch 1 --threads 2 "${BOTH[@]}" --warmup 2 --repeats 9 --no-memory
run cpu_tiny_b8_contended_2 330 --contended --batch 8 --threads 2 "${BOTH[@]}" --warmup 1 --repeats 5
run cpu_tiny_b8_contended_3 330 --contended --batch 8 --threads 2 "${BOTH[@]}" --warmup 1 --repeats 5
run cpu_tiny_b8_compile_train 480 --compile-train --batch 8 --threads 2 --precisions "$PRECISIONS" --warmup 1 --repeats 5
echo "$(date -u +%FT%TZ) end, load $(cut -d' ' -f1-3 /proc/loadavg)"
