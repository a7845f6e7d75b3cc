"""Checkpoint directories: checking a user's ``model.path``, building a model from ``model.config`` and saving it
with ``save_pretrained``, loading any of them through ``AutoModelForCausalLM`` / ``AutoTokenizer``, and the
settings-keyed cache those built directories live in.

Nothing is downloaded: every ``from_pretrained`` call is ``local_files_only``. A cache entry is a folder
``<cache_dir>/<kind>-<key>`` where ``key`` hashes every setting the entry depends on; it is written into a
temporary sibling and renamed into place (atomic), under a file lock so that the workers of a run, starting
together, build it once.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlinf.api import ConfigError
from rlinf.workloads.hf_grpo.config import HfGrpoConfig, ModelSizes
from rlinf.workloads.hf_grpo.tokenizer import train_bpe


def _transformers() -> Any:
    import transformers

    transformers.utils.logging.disable_progress_bar()
    return transformers


def hf_config(sizes: ModelSizes, *, pad_id: int | None = None, eos_id: int | None = None) -> Any:
    """The ``transformers`` config of a model built from ``sizes`` (Qwen2Config or LlamaConfig), with the special
    tokens of the tokenizer built with it (none when only its shapes matter)."""
    transformers = _transformers()
    cls = transformers.Qwen2Config if sizes.architecture == "qwen2" else transformers.LlamaConfig
    return cls(
        vocab_size=sizes.vocab_size,
        hidden_size=sizes.hidden_size,
        intermediate_size=sizes.intermediate_size,
        num_hidden_layers=sizes.num_layers,
        num_attention_heads=sizes.num_heads,
        num_key_value_heads=sizes.num_kv_heads,
        max_position_embeddings=sizes.max_position_embeddings,
        pad_token_id=pad_id,
        eos_token_id=eos_id,
        bos_token_id=None,
        tie_word_embeddings=sizes.tie_word_embeddings,
        rope_theta=sizes.rope_theta,
    )


def check_checkpoint(path: str) -> Any:
    """The ``transformers`` config of the checkpoint at ``path``; a :class:`ConfigError` (one line) when the folder
    is missing, is not a Hugging Face checkpoint, is not a causal LM, or lacks weights or a tokenizer."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    folder = Path(path)
    fix = "point model.path at a local Hugging Face causal-LM checkpoint directory (nothing is downloaded)"
    if not folder.is_dir():
        raise ConfigError("model.path", path, "does not exist or is not a directory", fix)
    if not (folder / "config.json").is_file():
        raise ConfigError("model.path", path, "is not a Hugging Face checkpoint (no config.json)", fix)
    try:
        config = _transformers().AutoConfig.from_pretrained(folder, local_files_only=True)
    except (OSError, ValueError, KeyError) as error:
        raise ConfigError("model.path", path, f"has an unreadable config.json ({error})", fix) from None
    if config.model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        raise ConfigError(
            "model.path", path, f"is a {config.model_type!r} model, not a causal language model", fix
        )
    if not any(folder.glob("*.safetensors")) and not any(folder.glob("*.bin")):
        raise ConfigError("model.path", path, "holds no weights (*.safetensors)", fix)
    if not any((folder / name).is_file() for name in ("tokenizer.json", "tokenizer.model", "vocab.json")):
        raise ConfigError("model.path", path, "holds no tokenizer (tokenizer.json)", fix)
    return config


def model_config(config: HfGrpoConfig) -> Any:
    """The ``transformers`` config of the run's model (read from ``model.path`` or built from the sizes)."""
    if config.model.path is not None:
        return check_checkpoint(config.model.path)
    assert config.model.config is not None
    return hf_config(config.model.config)


def parameter_count(config: HfGrpoConfig) -> int:
    """Parameters of the run's model: from its sizes (:func:`sizes_parameter_count`) when built from a config, else
    the checkpoint's model counted on the meta device (no memory, no weights read)."""
    if config.model.path is None:
        assert config.model.config is not None
        return sizes_parameter_count(config.model.config)
    with torch.device("meta"):
        model = _transformers().AutoModelForCausalLM.from_config(model_config(config))
    return sum(p.numel() for p in model.parameters())


def sizes_parameter_count(sizes: ModelSizes) -> int:
    """Parameters of the Qwen2 or Llama model ``AutoModelForCausalLM.from_config(hf_config(sizes))`` builds, from
    the shapes alone (loading a config needs no ``transformers`` import): the embedding; per layer the attention
    projections (Qwen2's query, key and value carry biases), the SwiGLU MLP and two RMSNorms; the final norm; the
    output layer unless it is tied to the embedding."""
    hidden, vocab = sizes.hidden_size, sizes.vocab_size
    kv_width = sizes.num_kv_heads * (hidden // sizes.num_heads)
    attention = 2 * hidden * hidden + 2 * hidden * kv_width
    if sizes.architecture == "qwen2":
        attention += hidden + 2 * kv_width
    layer = attention + 3 * hidden * sizes.intermediate_size + 2 * hidden
    output = 0 if sizes.tie_word_embeddings else vocab * hidden
    return vocab * hidden + sizes.num_layers * layer + hidden + output


def settings_key(settings: Mapping[str, Any]) -> str:
    """A short hash of ``settings`` (JSON-ready values) and the library versions results depend on."""
    versions = {"torch": torch.__version__, "transformers": _transformers().__version__}
    text = json.dumps({**settings, "versions": versions}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def checkpoint_identity(path: str) -> dict[str, Any]:
    """What identifies a user's checkpoint for cache keys: its resolved path and its files' sizes and times."""
    folder = Path(path).resolve()
    files = sorted(p for p in folder.iterdir() if p.is_file())
    return {"path": str(folder), "files": [(p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in files]}


@contextlib.contextmanager
def cache_lock(cache_dir: Path) -> Iterator[None]:
    """Exclusive use of the cache (the workers of a run set up in parallel; one builds, the others wait)."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    with open(cache_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def cached_directory(folder: Path, write: Callable[[Path], None]) -> Path:
    """``folder``, written by ``write(temporary)`` first if absent and renamed into place. Call under
    :func:`cache_lock`."""
    if folder.is_dir():
        return folder
    temporary = folder.with_name(f".{folder.name}.{os.getpid()}.tmp")
    shutil.rmtree(temporary, ignore_errors=True)
    temporary.mkdir(parents=True)
    try:
        write(temporary)
        os.replace(temporary, folder)
    finally:
        shutil.rmtree(temporary, ignore_errors=True)
    return folder


def base_checkpoint(config: HfGrpoConfig) -> Path:
    """The directory GRPO's model starts from before the warm start: ``model.path``, or a model built from
    ``model.config`` with its BPE tokenizer, saved in the cache (built once per settings). Call under
    :func:`cache_lock`."""
    if config.model.path is not None:
        check_checkpoint(config.model.path)
        return Path(config.model.path)
    sizes = config.model.config
    assert sizes is not None

    def build(directory: Path) -> None:
        tokenizer: Any = train_bpe(config.task, vocab_size=sizes.vocab_size, seed=config.seed)
        torch.manual_seed(config.seed)
        built = hf_config(sizes, pad_id=tokenizer.pad_token_id, eos_id=tokenizer.eos_token_id)
        save_checkpoint(_transformers().AutoModelForCausalLM.from_config(built), tokenizer, directory)

    return cached_directory(built_base_folder(config), build)


def built_base_folder(config: HfGrpoConfig) -> Path:
    """Where :func:`base_checkpoint` keeps the model built from ``model.config`` (present once a worker built it)."""
    assert config.model.config is not None, "only a model built from model.config has a cache folder"
    key = settings_key({"sizes": repr(config.model.config), "task": repr(config.task), "seed": config.seed})
    return Path(config.cache_dir) / f"base-{key}"


def save_checkpoint(model: Any, tokenizer: Any, directory: Path) -> None:
    """Write a checkpoint ``from_pretrained`` and ``AutoTokenizer`` load: ``config.json`` and
    ``generation_config.json`` (``save_pretrained``), ``model.safetensors`` and the tokenizer files.

    The weights are written with ``safetensors.torch.save_model``, as ``model.save_pretrained`` does, because
    ``save_pretrained`` writes nothing on a process whose ``torch.distributed`` rank is not 0 (a worker of a
    data-parallel component may build the cache)."""
    from safetensors.torch import save_model

    model.config.save_pretrained(directory)
    if getattr(model, "generation_config", None) is not None:
        model.generation_config.save_pretrained(directory)
    save_model(model, str(directory / "model.safetensors"), metadata={"format": "pt"})
    tokenizer.save_pretrained(directory)


def load_tokenizer(directory: Path | str) -> Any:
    """The checkpoint's own tokenizer (``AutoTokenizer``) with its EOS and pad tokens settled from what the
    checkpoint declares, never from a tokenizer class's defaults (``AutoTokenizer`` may pick the class of
    ``config.json``'s model type, which names tokens of its own, e.g. Qwen2's ``<|endoftext|>``, and adds them when
    the vocabulary lacks them). EOS: the one ``tokenizer_config.json`` (or ``special_tokens_map.json``) names, else
    the first ``eos_token_id`` of ``generation_config.json``, else of ``config.json`` (:func:`eos_token_id`). Pad:
    the declared one, else EOS; every attention mask is built from the sequences' lengths, never from the pad id, so
    a padding EOS hides nothing."""
    folder = Path(directory)
    tokenizer = _transformers().AutoTokenizer.from_pretrained(folder, local_files_only=True)
    declared = declared_special_tokens(folder)
    if "eos_token" not in declared or tokenizer.eos_token_id is None:
        eos = eos_token_id(folder)
        token = tokenizer.convert_ids_to_tokens(eos) if 0 <= eos < len(tokenizer) else None
        if token is None:
            raise ConfigError(
                "model.path", str(folder), f"names EOS token id {eos}, which its tokenizer of {len(tokenizer)} "
                "tokens lacks", "save the tokenizer the checkpoint was trained with",
            )  # fmt: skip
        tokenizer.eos_token = token
    if "pad_token" not in declared or tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def _json_file(folder: Path, name: str) -> dict[str, Any]:
    """The JSON object in ``folder / name`` ({} when absent); a :class:`ConfigError` naming it when unreadable."""
    file = folder / name
    if not file.is_file():
        return {}
    try:
        data = json.loads(file.read_text())
    except (OSError, ValueError) as error:
        raise ConfigError(
            "model.path", str(folder), f"has an unreadable {name} ({error})", f"fix or remove {name}"
        ) from None
    if not isinstance(data, dict):
        raise ConfigError("model.path", str(folder), f"has a {name} that is not a JSON object", f"fix {name}")
    return data


def declared_special_tokens(folder: Path) -> frozenset[str]:
    """The special-token keys (``eos_token``, ``pad_token``, ...) a checkpoint's tokenizer files set."""
    names = ("tokenizer_config.json", "special_tokens_map.json")
    return frozenset(
        key
        for name in names
        for key, value in _json_file(folder, name).items()
        if key.endswith("_token") and value
    )


def eos_token_id(folder: Path) -> int:
    """The EOS id a checkpoint's ``generation_config.json`` or else its ``config.json`` names (the first of a
    list); a :class:`ConfigError` when neither does (the tokenizer's files name none either: the caller's case)."""
    for name in ("generation_config.json", "config.json"):
        value = _json_file(folder, name).get("eos_token_id")
        if isinstance(value, list) and value:
            value = value[0]
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    raise ConfigError(
        "model.path",
        str(folder),
        "names no EOS token (not in its tokenizer files, generation_config.json or config.json)",
        "set eos_token in tokenizer_config.json or eos_token_id in generation_config.json",
    )


def compute_dtype(device: torch.device) -> torch.dtype:
    """bfloat16 on CUDA devices, float32 elsewhere."""
    return torch.bfloat16 if device.type == "cuda" else torch.float32


def load_model(directory: Path | str, device: torch.device, dtype: torch.dtype = torch.float32) -> Any:
    """The checkpoint's causal LM (``AutoModelForCausalLM.from_pretrained``) on ``device`` in ``dtype``."""
    model = _transformers().AutoModelForCausalLM.from_pretrained(
        directory, local_files_only=True, dtype=dtype
    )
    return model.to(device)


BFLOAT16_KEY = "__bfloat16__"
"""Marks a weight-sync payload whose arrays hold bfloat16 values as their raw 16 bits (NumPy has no bfloat16)."""


def weights_payload(
    weights: Mapping[str, torch.Tensor], dtype: torch.dtype = torch.float32
) -> dict[str, Any]:
    """Weights (Hugging Face names) as NumPy arrays in ``dtype``: a weight-sync payload. float32, or bfloat16
    carried as its raw bits (marked by :data:`BFLOAT16_KEY`): the receivers compute in bfloat16 on a GPU
    (:func:`compute_dtype`), so sending them float32 only doubled the bytes to move. The tensors are cast and
    joined on their device and copied to the host in one transfer (one per tensor was a synchronised copy each);
    the arrays are views of that one host buffer."""
    names = list(weights)
    if not names:
        return {}
    flat = torch.cat([weights[name].detach().reshape(-1).to(dtype) for name in names]).cpu()
    buffer = (flat.view(torch.int16) if dtype == torch.bfloat16 else flat).numpy()
    out: dict[str, Any] = {}
    offset = 0
    for name in names:
        count = weights[name].numel()
        out[name] = buffer[offset : offset + count].reshape(tuple(weights[name].shape))
        offset += count
    if dtype == torch.bfloat16:
        out[BFLOAT16_KEY] = np.ones(1, dtype=np.int8)
    return out


def payload_tensors(payload: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """A weight-sync payload (:func:`weights_payload`) as tensors for a backend's ``load_weights`` (no copy)."""
    bits = BFLOAT16_KEY in payload
    return {
        name: torch.from_numpy(np.ascontiguousarray(array)).view(torch.bfloat16)
        if bits
        else torch.as_tensor(array)
        for name, array in payload.items()
        if name != BFLOAT16_KEY
    }
