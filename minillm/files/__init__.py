"""Model files: the `.npz` format (npz.py), and the converters: PyTorch, Hugging Face and GGUF
checkpoints in, Hugging Face folders out; the registry of models `minillm fetch` knows.

    from minillm.files import convert, export_hf, from_state_dict, load, save
    model = convert("path/to/hf_folder")                   # config.json + model.safetensors
    model = convert("model.Q4_K_M.gguf")                   # dequantized (gguf_config.ARCHITECTURES)
    model = from_state_dict(torch_model.state_dict(), cfg, naming="nanogpt")
    model = from_state_dict(sd, cfg, naming={"tok_emb.weight": "emb.weight", ...})
    export_hf(model, "out_dir")                            # AutoModelForCausalLM loads it

Only NumPy is needed to import this package; torch (for .pt/.bin) and safetensors are imported
when a function needs them. Layouts (docs/FORMAT.md): fused qkv rows are the q heads, then the k
heads, then the v heads; gate_up rows are the gate, then the up projection; RoPE is half-split.
"""
from .gguf import read_gguf
from .gguf_model import model_from_gguf
from .hf import convert, export_hf, from_hf_folder, read_checkpoint, to_hf_state_dict
from .hf_config import config_from_hf, config_to_hf
from .npz import WeightsError, load, save
from .naming import NAMINGS, Naming, detect_naming, half_to_interleaved, interleaved_to_half
from .state_dict import config_from_json_file, from_state_dict

__all__ = ["convert", "export_hf", "from_hf_folder", "read_checkpoint", "to_hf_state_dict",
           "config_from_hf", "config_to_hf", "NAMINGS", "Naming", "detect_naming",
           "half_to_interleaved", "interleaved_to_half", "config_from_json_file",
           "from_state_dict", "read_gguf", "model_from_gguf", "WeightsError", "load", "save"]
