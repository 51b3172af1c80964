"""Export a minillm .npz to a Hugging Face model folder.

The folder (config.json, model.safetensors, tokenizer.json) is what transformers'
AutoModelForCausalLM.from_pretrained loads, and what the big engines' converters read.
"""
from __future__ import annotations

from .common import load_model


def add_arguments(parser) -> None:
    parser.add_argument("model_path", help="a minillm .npz file, or the name of a fetched model")
    parser.add_argument("--to", required=True, choices=("hf",),
                        help="the target format: hf (Hugging Face transformers)")
    parser.add_argument("out_dir", help="the folder to write")


def run(args) -> int:
    from ..files import export_hf

    model = load_model(args.model_path, "model_path", reference=args.reference)
    export_hf(model, args.out_dir)
    print(f"{args.out_dir}: {model.config.arch} model written for transformers")
    return 0
