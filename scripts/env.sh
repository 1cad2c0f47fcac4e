# Sourced by the scripts: puts nvcc on PATH where the toolkit is installed but not on PATH.
if ! command -v nvcc >/dev/null 2>&1; then
  for d in /usr/local/cuda/bin /usr/local/cuda-13/bin /usr/local/cuda-12/bin; do
    if [ -x "$d/nvcc" ]; then export PATH="$d:$PATH"; break; fi
  done
fi
export CUDACXX="${CUDACXX:-$(command -v nvcc || true)}"
