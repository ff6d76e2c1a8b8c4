#!/usr/bin/env bash
# One prepared run on a lent GPU machine that cannot download anything (see docs/bench.md, "On a GPU").
# Expects, in the ignored folder .dev/ of the checkout:
#   .dev/llama_cpp_cuda.tar.xz   the llama_cpp package of a CUDA build of llama-cpp-python (the wheel's
#                      llama_cpp/ folder, one copy of each library, stripped: ~40 MB of the 64 MiB a
#                      call may carry; the wheel itself is 267 MB)
#   .dev/whl/*.whl     the pure-Python packages the machine lacks (diskcache, platformdirs, prompt_toolkit)
#   .dev/target.skel.xz, .dev/draft.skel.xz   weight-free skeletons of the default pair (skeleton_gguf.py make)
# Writes to $OUT (or ./device-out): the measured regime, `specchat tune` and a `specchat bench` with
# every mode on the weight-free pair (every drafter is always right there: the ceiling, not a forecast).
set -uo pipefail
OUT=${OUT:-$PWD/device-out}
mkdir -p "$OUT" /tmp/x /tmp/models
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .dev/whl/*.whl || exit 1
tar -xJf .dev/llama_cpp_cuda.tar.xz -C /tmp/site || exit 1
xz -dkf .dev/target.skel.xz .dev/draft.skel.xz || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
export XDG_CONFIG_HOME=/tmp/x/config XDG_DATA_HOME=/tmp/x/data XDG_CACHE_HOME=/tmp/x/cache
for lib in libcublas.so.13 libcudart.so.13; do
    found=$(find /opt /usr/local /usr/lib -name "$lib" 2>/dev/null | head -1)
    [ -n "$found" ] && export LD_LIBRARY_PATH=$(dirname "$found"):${LD_LIBRARY_PATH:-}
done
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
lscpu | grep -E '^Model name|^CPU\(s\)'
python3 -c "import typer, rich, numpy; print('typer', typer.__version__, 'rich', rich.__version__ if hasattr(rich, '__version__') else '', 'numpy', numpy.__version__)"
python3 benchmarks/skeleton_gguf.py inflate .dev/target.skel /tmp/models/target.gguf || exit 1
python3 benchmarks/skeleton_gguf.py inflate .dev/draft.skel /tmp/models/draft.gguf || exit 1
python3 -c "import llama_cpp; print('gpu offload:', llama_cpp.llama_supports_gpu_offload())" || exit 1
pair=(--target /tmp/models/target.gguf --draft /tmp/models/draft.gguf)

timeout 100 python3 benchmarks/measure_regime.py "${pair[@]}" --name "${REGIME_NAME:-gpu-measured}" \
    --about "${REGIME_ABOUT:-measured on a lent GPU with weight-free Qwen2.5-Coder 1.5B/0.5B Q4_K_M}" \
    -o "$OUT/regime.json" 2>"$OUT/regime.log" || tail -20 "$OUT/regime.log"
timeout 90 python3 -m specchat tune "${pair[@]}" 2>&1 | tee "$OUT/tune.txt" | tail -30
timeout 180 python3 -m specchat bench "${pair[@]}" --suite quick -r 2 -n 128 --ks 1,4,8 \
    --modes spec,ngram,auto -f json -o "$OUT/bench.json" >"$OUT/bench.log" 2>&1
tail -40 "$OUT/bench.log"
