#!/usr/bin/env bash
# One prepared GPU benchmark run against the targets of issue 24, bounded by BUDGET_S seconds (default 540: one
# command of a 10-minute limit). Parts, in this order: first the four that make docs/performance.md's CUDA table,
# whose limits add up to 510 s (the default BUDGET_S less 30 s for the setup: the budget cuts none of them short),
# then the diagnostic ones, in what the first four leave of it:
#   cuda_tiny_b64          Swin-T batch 64 at 224², inference and train step, fp32 and bf16 autocast, peak memory,
#                          against timm; the table's header lists the attention kernel chosen per shape, and the
#                          table ends with each case's top CUDA kernels by self time (one profiled step)
#   cuda_tiny_b1           the same at batch 1 (swinlite, timm), profiled: each case's kernel launches and the share
#                          of its wall time the GPU is busy (launch-bound where low)
#   cuda_sizes             224² and 800×1344 at batch 2, fp32 (swinlite, timm, detection backbones)
#   cuda_tiny_b64_compile  optimize_for_inference (inductor freezing, CUDA graphs) against timm compiled the same way
#   cuda_checks            the Triton window attention compiled for this GPU against the per-window loop (pytest, if
#                          installed; the dispatch also refuses any candidate whose output or gradients are off the
#                          explicit formula's)
#   cuda_variants          the train step with and without the GELU recompute and the gather's own backward, batch 1
#                          and 64, fp32 and bf16, against timm (benchmarks/cuda_variants_check.py)
#   cuda_v2_tiny_b1        Swin-V2-T at batch 1, profiled as cuda_tiny_b1 (the V2 bias table and merged q, k, v bias
#                          kept between inference calls: fewer launches)
#   cuda_tiny_b64_compile_train  the train step through torch.compile (train.compile: true), batch 64, fp32 and
#                          bf16, against timm compiled the same way; last: past the default budget, run it by name
# The first call of each attention shape times the candidate kernels, compiling FlexAttention's and Triton's
# (swinlite/fast/measured.py): most of a part's time. Each part runs under its own limit, cut to what is left of
# BUDGET_S; a part with less than a minute left is skipped (skipped.txt), one that fails or runs out of time is named
# in failed.txt (the script then exits 1, after the other parts). Writes <name>.md (table), <name>.json and
# <name>.log (progress, errors) per part into $OUT, but for cuda_variants, whose .md holds its lines (no JSON), and
# cuda_checks, which writes pytest's output to cuda_checks.log alone (a part that fails leaves no empty table and no
# JSON; a part run or skipped removes its files of an earlier run in that $OUT first), and gpu.txt (GPU, versions);
# refuses to start where torch has no CUDA. With PACK=<file.tgz> the folder is also packed into that one file after
# each part, so a run stopped midway still hands back what it finished, in one file:
#   OUT=/tmp/gpu bash benchmarks/gpu_run.sh                                  # everything, in this order
#   OUT=/tmp/gpu PACK=/tmp/gpu.tgz bash benchmarks/gpu_run.sh cuda_checks cuda_tiny_b64   # only those, packed
# Needs torch >= 2.11 with CUDA, torchvision and timm >= 1.0.31 (pyproject.toml); with an older timm or none it
# installs the timm wheel carried in .whl/ (no network there; fetch it here with
# `python3 -m pip download --no-deps -d .whl timm==1.0.31` and carry .whl).
set -uo pipefail
cd "$(dirname "$0")/.."
PARTS="cuda_tiny_b64 cuda_tiny_b1 cuda_sizes cuda_tiny_b64_compile cuda_checks cuda_variants cuda_v2_tiny_b1"
PARTS+=" cuda_tiny_b64_compile_train"
for name in "$@"; do
    [[ " $PARTS " == *" $name "* ]] || { echo "gpu_run.sh: no part named '$name'; the parts: $PARTS" >&2; exit 2; }
done
ONLY=" $* "  # the names to run; all when none is given
wanted() { [ "$ONLY" = "  " ] || [[ "$ONLY" == *" $1 "* ]]; }
cuda=$(python -c "import torch; print(torch.cuda.is_available())" 2>&1 | tail -n 1)
if [ "$cuda" != True ]; then  # every part would fail, and a CPU run of them is benchmarks/cpu_run.sh's
    echo "error: gpu_run.sh needs CUDA: torch.cuda.is_available() gave '$cuda', expected True" >&2
    exit 2
fi
OUT=${OUT:-benchmarks/gpu}
BUDGET_S=${BUDGET_S:-540}
PACK=${PACK:-}
mkdir -p "$OUT"
rm -f "$OUT/failed.txt" "$OUT/skipped.txt"  # this run's lists only, in an $OUT used before
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1

pack() {  # the results so far into $PACK, replaced whole (a stopped run leaves the previous pack, never half of one)
    [ -z "$PACK" ] || { tar czf "$PACK.part" --exclude="$(basename "$PACK")*" -C "$OUT" . && mv "$PACK.part" "$PACK"; }
}

limit_for() {  # limit_for NAME SECONDS: the part's limit cut to the budget left; empty (and skipped.txt) under 60 s
    local left=$((BUDGET_S - SECONDS))
    if [ "$left" -lt 60 ]; then
        echo "$1: skipped, ${left} s of BUDGET_S=$BUDGET_S left" | tee -a "$OUT/skipped.txt" >&2
        return 1
    fi
    echo $(($2 < left ? $2 : left))
}

python -c "import swinlite" 2>/dev/null ||  # swinlite/versions.py refuses a missing or older timm
    python -m pip install -q --no-deps --no-index --find-links .whl "timm>=1.0.31"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/gpu.txt"
python -c "import torch, timm, torchvision; print(torch.__version__, timm.__version__, torchvision.__version__)" \
    >> "$OUT/gpu.txt"
pack

run() {  # run NAME SECONDS ARGS...: one benchmark, bounded so that a hang cannot eat the others' time
    wanted "$1" || return 0
    local name=$1 limit
    rm -f "$OUT/$name".{md,json,log}  # an earlier run's, in an $OUT used before: packed as this run's otherwise
    limit=$(limit_for "$1" "$2") || return 0
    shift 2
    local start=$SECONDS
    local command=(python scripts/benchmark.py --device cuda "$@" --json "$OUT/$name.json")
    [[ "${1:-}" == benchmarks/*.py ]] && command=(python "$@")  # a check script: its own arguments
    local code=0
    timeout -k 10 "$limit" "${command[@]}" > "$OUT/$name.md" 2> "$OUT/$name.log" || code=$?
    if [ "$code" -ne 0 ]; then
        echo "$name: exit $code (see $OUT/$name.log)" | tee -a "$OUT/failed.txt"
        [ -s "$OUT/$name.md" ] || rm -f "$OUT/$name.md"  # no empty table; a check script's lines so far are kept
    fi
    echo "$name: $((SECONDS - start)) s"
    pack
}

checks() {  # the Triton kernels as this GPU compiles them, against the per-window loop (pytest, if installed)
    wanted cuda_checks || return 0
    local limit
    rm -f "$OUT/cuda_checks.log"  # an earlier run's
    limit=$(limit_for cuda_checks 120) || return 0
    if ! python -c "import pytest" 2>/dev/null; then
        echo "pytest is not installed: kernel checks skipped" > "$OUT/cuda_checks.log"
        return 0
    fi
    timeout -k 10 "$limit" python -m pytest -q -o addopts="" -p no:cacheprovider tests/fast/test_window_triton.py \
        -k cuda > "$OUT/cuda_checks.log" 2>&1 || echo "cuda_checks: exit $? (see $OUT/cuda_checks.log)" | tee -a "$OUT/failed.txt"
    pack
}

# the CUDA table's parts first: 200 + 75 + 75 + 160 = 510 s, within the default BUDGET_S after the setup above
run cuda_tiny_b64 200 --batch 64 --models swinlite,timm --warmup 3 --repeats 11 --profile
run cuda_tiny_b1 75 --batch 1 --models swinlite,timm --warmup 3 --repeats 11 --profile
run cuda_sizes 75 --sizes 224,800x1344 --batch 2 --warmup 2 --repeats 7
run cuda_tiny_b64_compile 160 --compile --no-warm-start --models swinlite,timm --batch 64 --warmup 3 --repeats 11
checks
run cuda_variants 120 benchmarks/cuda_variants_check.py --batches 1,64
run cuda_v2_tiny_b1 90 --size v2_tiny --batch 1 --models swinlite,timm --warmup 3 --repeats 11 --profile
run cuda_tiny_b64_compile_train 300 --compile-train --models swinlite,timm --batch 64 --warmup 3 --repeats 11
pack  # skipped.txt too
[ ! -s "$OUT/failed.txt" ] || { echo "gpu_run.sh: parts failed:" >&2; cat "$OUT/failed.txt" >&2; exit 1; }
