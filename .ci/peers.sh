#!/usr/bin/env bash
# Optional peers for tests/peers: the CPU build of torch (its wheel lies on the CI machines'
# disk; a plain "pip install torch" would pull the CUDA build), then the `peers` extra.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install --quiet "torch==2.13.0"
python -m pip install --quiet -e ".[peers]"
python -c "import torch, transformers, safetensors, tokenizers" || {
    echo "ci: the peers extra did not install" >&2
    exit 1
}
