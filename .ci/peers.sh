#!/usr/bin/env bash
# Optional peers for tests/peers: the CPU build of torch (its wheel lies on the CI machines'
# disk; a plain "pip install torch" would pull the CUDA build), then the `peers` extra.
set -euo pipefail
cd "$(dirname "$0")/.."

# pip warns about every local index folder that lacks a package: keep real errors only.
quiet_pip() {
    python -m pip install --quiet "$@" 2>&1 \
        | { grep -v "is ignored: it is neither a file nor a directory" || true; }
}
quiet_pip "torch==2.13.0"
quiet_pip -e ".[peers]" -c .ci/constraints.txt
python -c "import torch, transformers, safetensors, tokenizers" || {
    echo "ci: the peers extra did not install" >&2
    exit 1
}
