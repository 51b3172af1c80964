"""Convert a PyTorch, Hugging Face or GGUF checkpoint to a minillm .npz.

SRC is a Hugging Face model folder (config.json + model.safetensors or pytorch_model.bin, and
tokenizer.json if present), a GGUF file (dequantized; its general.architecture one of llama,
mistral, qwen2, qwen3, gemma3, gpt2, olmo2, phi3, granite, smollm3), or one weights file
(.safetensors, .pt, .pth, .bin) with --config.
"""
from __future__ import annotations

from .common import UsageError, check_folder_texts, read_text_file


def add_arguments(parser) -> None:
    parser.add_argument("src", help="a Hugging Face model folder, a .gguf file or a weights file")
    parser.add_argument("out", help="the .npz file to write")
    parser.add_argument("--naming", default="auto",
                        help="the layout of the names: auto (default), nanogpt, hf-gpt2, "
                             "hf-llama, meta (interleaved RoPE: Meta, llama2.c), or a JSON file "
                             "{minillm name: source name} with {i} for the layer index")
    parser.add_argument("--config", default=None,
                        help="for a weights file: a minillm config JSON or a Hugging Face "
                             "config.json")
    parser.add_argument("--dtype", default="float32", choices=("float32", "float64"),
                        help="the float type of the tensors written (default float32; float64 "
                             "for comparisons at a tolerance near 1e-12)")
    parser.add_argument("--template", default=None, metavar="FILE",
                        help="a Jinja chat template (UTF-8 text) to keep in the .npz, for a "
                             "model whose files carry none (minillm chat then needs no "
                             "--template)")
    parser.add_argument("--no_tokenizer", action="store_true",
                        help="leave a folder's tokenizer.json out of the .npz")
    parser.add_argument("--int8", action="store_true",
                        help="store the linear weights as row-wise int8 (minillm.quantize, "
                             "each quantized as soon as it is read; the output layer stays "
                             "float)")


def _naming(value):
    """A table name, or a JSON file holding a user's own table."""
    import json

    if value.endswith(".json"):
        try:
            return json.loads(read_text_file(value, "--naming"))
        except json.JSONDecodeError as e:
            raise UsageError(f"--naming: {value} is not valid JSON ({e})") from None
    return value


def run(args) -> int:
    from ..files import config_from_json_file, convert
    from ..files.npz import check_folder, save

    check_folder(args.out)
    template = None if args.template is None else read_text_file(args.template, "--template")
    if template is not None and args.no_tokenizer:
        raise UsageError("--template: a chat template needs the tokenizer (--no_tokenizer "
                         "drops it)")
    config = None
    if args.config is not None:
        read_text_file(args.config, "--config")  # a missing file, a folder: named, in one line
        try:
            config = config_from_json_file(args.config)
        except ValueError as e:
            message = str(e)
            raise UsageError("--config: " + (message if message.startswith(args.config)
                                             else f"{args.config}: {message}")) from None
    check_folder_texts(args.src, tokenizer=not args.no_tokenizer)
    model = convert(args.src, naming=_naming(args.naming), config=config, dtype=args.dtype,
                    tokenizer=not args.no_tokenizer, int8=args.int8)
    if template is not None:
        if model.tokenizer is None:
            raise UsageError(f"--template: {args.src} has no tokenizer to keep a chat template "
                             "with")
        model.tokenizer = model.tokenizer.with_chat_template(template)
    save(model, args.out)
    cfg = model.config
    print(f"{args.out}: {cfg.arch}, {cfg.n_layers} layers, d_model {cfg.d_model}, "
          f"{cfg.n_params():,} parameters, {args.dtype}"
          + (", linear weights int8" if args.int8 else "")
          + (", with tokenizer" if model.tokenizer is not None else ""))
    return 0
