"""Export a minillm .npz to a Hugging Face model folder.

The folder (config.json, model.safetensors, tokenizer.json) is what transformers'
AutoModelForCausalLM.from_pretrained loads, and what the big engines' converters read.
"""
from __future__ import annotations

from .common import add_model_positional, load_model, model_and_output

USAGE = "%(prog)s (MODEL | --model_path MODEL) OUT_DIR --to hf [options]"


def add_arguments(parser) -> None:
    add_model_positional(parser, "model_path", "a minillm .npz file, or the name of a fetched "
                                               "model", then="out_dir",
                         then_help="the folder to write")
    parser.add_argument("--to", required=True, choices=("hf",),
                        help="the target format: hf (Hugging Face transformers)")


def run(args) -> int:
    from ..files import export_hf

    path, flag, out_dir = model_and_output(args, "model_path", "out_dir")
    model = load_model(path, flag, reference=args.reference)
    export_hf(model, out_dir)
    print(f"{out_dir}: {model.config.arch} model written for transformers")
    return 0
