#!/usr/bin/env bash
# One prepared GPU benchmark run, about 5 minutes on an H200: Swin-T batch 64 inference and train step
# (fp32, bf16 autocast) against timm and torchvision, the cost against input size, and the compiled inference path.
# Writes <name>.md (table), <name>.json and <name>.log (progress, errors) per run into $OUT.
#   OUT=/tmp/gpu bash benchmarks/gpu_run.sh
# Needs torch with CUDA, torchvision and timm; without timm it installs the wheels carried in .whl/ (no network).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-benchmarks/gpu}
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
python -c "import timm" 2>/dev/null || pip install -q --no-index --find-links .whl timm
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/gpu.txt"
python -c "import torch, timm, torchvision; print(torch.__version__, timm.__version__, torchvision.__version__)" \
    >> "$OUT/gpu.txt"

run() {  # run NAME SECONDS ARGS...: one benchmark, bounded so that a hang cannot eat the others' time
    local name=$1 limit=$2
    shift 2
    local start=$SECONDS
    timeout "$limit" python scripts/benchmark.py --device cuda "$@" --json "$OUT/$name.json" \
        > "$OUT/$name.md" 2> "$OUT/$name.log" || echo "$name: exit $? (see $OUT/$name.log)" | tee -a "$OUT/failed.txt"
    echo "$name: $((SECONDS - start)) s"
}

run cuda_tiny_b64 75 --batch 64 --warmup 3 --repeats 11
run cuda_sizes 75 --sizes 224,512,800x1333 --batch 2 --warmup 2 --repeats 7
run cuda_tiny_b64_compile 210 --compile --models swinlite,timm --batch 64 --warmup 3 --repeats 11
