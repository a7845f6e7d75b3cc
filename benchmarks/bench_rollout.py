"""Rollout throughput on a GPU: rlinf's generation against ``transformers``' own ``generate`` and the roofline.

Usage (on a machine with a CUDA GPU)::

    python benchmarks/bench_rollout.py [--preset qwen2.5-0.5b] [--batches 1 16 64 256] [--new-tokens 128]
                                       [--prompt-tokens 64] [--json OUT.json]

For each batch size (rows = prompts x a group of 8, or 1 row), the same random prompts of ``--prompt-tokens`` tokens
are continued by exactly ``--new-tokens`` sampled tokens (no EOS can end a row early: its id is -1) on a model of the preset's
shape (random weights, bf16), by

* ``rlinf``: :func:`rlinf.workloads.hf_grpo.generation.stream_groups`, the rollout's engine (a dynamic KV cache,
  finished groups streamed out; sampling on the GPU);
* ``generate-static``: :func:`~rlinf.workloads.hf_grpo.generation.generate_all`, the ``hf-generate`` rollout
  backend: ``model.generate(..., cache_implementation="static")``, sampling from the full softmax;

and reports generated tokens/s, the time of one decode step (the slope between a short and the full length, so
prefill and start-up cancel) and the memory-bandwidth roofline of decoding: per step, the bf16 weights plus the KV
cache of every row at its context length read once, at the GPU's preset bandwidth (or the FLOPs at its peak when
that is slower). ``step_overhead_s`` is the measured step less the roofline step: the engine's fixed work per step
(scheduling, sampling, kernel launches) that a long generation tail pays at a small batch. Medians over
``--repeats``. Without a GPU it says so and exits 2 (``--device cpu`` runs the same code on the CPU: a check of
the script, not a figure).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rlinf.core.cluster import DEVICE_PRESETS  # noqa: E402
from rlinf.core.files import write_text_atomic  # noqa: E402
from rlinf.core.phases import mark  # noqa: E402
from rlinf.workloads.hf_grpo.checkpoints import hf_config  # noqa: E402
from rlinf.workloads.hf_grpo.config import MODEL_PRESETS  # noqa: E402
from rlinf.workloads.hf_grpo.generation import SamplingParams, generate_all, stream_groups  # noqa: E402

GROUP = 8
SHORT = 16
"""Tokens of the short run whose time is subtracted (prefill and start-up cancel in the slope)."""


def build(preset: str, device: str) -> Any:
    import transformers

    torch.manual_seed(0)
    config = hf_config(MODEL_PRESETS[preset])
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    with torch.device(device):  # random weights drawn where they live (on the host a 0.5B model took ~30 s)
        return transformers.AutoModelForCausalLM.from_config(config, dtype=dtype).eval()


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def parameter_count(preset: str) -> int:
    import transformers

    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(hf_config(MODEL_PRESETS[preset]))
    return sum(p.numel() for p in model.parameters())


def prompts_for(batch: int, prompt_tokens: int, vocab: int) -> tuple[list[list[int]], int]:
    """Prompts (one per group) and the group size for ``batch`` rows."""
    group = GROUP if batch >= GROUP else 1
    generator = torch.Generator().manual_seed(batch)
    ids = torch.randint(2, vocab, (batch // group, prompt_tokens), generator=generator)
    return ids.tolist(), group


def run_rlinf(model: Any, prompts: list[list[int]], group: int, tokens: int) -> float:
    params = SamplingParams(max_new_tokens=tokens, temperature=1.0)
    sync(model.device.type)
    start = time.perf_counter()
    produced = 0
    for finished in stream_groups(
        model, prompts, group_size=group, params=params, eos_id=-1, pad_id=0, generator=torch.Generator()
    ):
        produced += sum(len(r) for r in finished.response_ids)
    sync(model.device.type)
    assert produced == len(prompts) * group * tokens, produced
    return time.perf_counter() - start


def run_generate(model: Any, prompts: list[list[int]], group: int, tokens: int) -> float:
    """The ``hf-generate`` backend's engine: ``transformers``' ``generate`` with a static KV cache."""
    params = SamplingParams(max_new_tokens=tokens, temperature=1.0)
    sync(model.device.type)
    start = time.perf_counter()
    finished = list(
        generate_all(
            model,
            prompts,
            group_size=group,
            params=params,
            eos_id=-1,
            pad_id=0,
            generator=torch.Generator().manual_seed(0),
        )
    )
    sync(model.device.type)
    produced = sum(len(r) for g in finished for r in g.response_ids)
    assert produced == len(prompts) * group * tokens, produced
    return time.perf_counter() - start


def busy_fraction(model: Any, prompts: list[list[int]], group: int, tokens: int) -> dict[str, Any]:
    """One run of rlinf's engine under torch's profiler: the GPU's kernel time over the run's wall time. Near 1
    the kernels bound the step (the GPU is busy); far below, the host does (Python, launches, synchronisation)
    and the GPU waits. The profiler's own cost makes the wall time a little longer, so the fraction is a lower
    bound."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        wall_s = run_rlinf(model, prompts, group, tokens)
    spans = sorted(
        (e.time_range.start, e.time_range.end)
        for e in prof.events()
        if getattr(e, "device_type", None) == DeviceType.CUDA
        and "annotation" not in str(getattr(e, "activity_type", ""))
    )
    kernel_us, reach = 0.0, float("-inf")  # the union of the GPU's busy intervals (streams may overlap)
    for begin, end in spans:
        kernel_us += max(0.0, end - max(begin, reach))
        reach = max(reach, end)
    return {
        "tokens": tokens,
        "wall_s": wall_s,
        "kernel_s": kernel_us / 1e6,
        "gpu_busy_fraction": kernel_us / 1e6 / wall_s,
    }


def kv_bytes_per_token(preset: str) -> int:
    """Bytes of bf16 keys and values one token keeps in the cache over all layers."""
    sizes = MODEL_PRESETS[preset]
    return sizes.num_layers * 2 * sizes.num_kv_heads * (sizes.hidden_size // sizes.num_heads) * 2


def roofline_step_s(preset: str, params: int, batch: int, context: float, device: str = "H100") -> float:
    """Seconds of one decode step at ``batch`` rows of ``context`` tokens: bf16 weights and KV read once at the
    preset's bandwidth, or the FLOPs at its peak when slower."""
    spec = DEVICE_PRESETS[device][0]
    kv_per_token = kv_bytes_per_token(preset)
    memory_s = (2 * params + batch * context * kv_per_token) / spec.memory_bandwidth_bytes_per_s
    compute_s = 2 * params * batch / spec.peak_flops
    return max(memory_s, compute_s)


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """The rows (and, with ``args.busy_fraction``, the GPU's busy fraction at the largest batch); with
    ``args.json`` the result so far is written after every row, so a run cut short keeps its rows."""
    model = build(args.preset, args.device)
    name = torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu"
    device = next((d for d in ("H200", "H100", "A100") if d in name.upper()), "H100")
    params = parameter_count(args.preset)
    result: dict[str, Any] = {
        "device": name,
        "roofline_device": device,
        "preset": args.preset,
        "parameters": params,
        "prompt_tokens": args.prompt_tokens,
        "kv_bytes_per_token": kv_bytes_per_token(args.preset),
        "new_tokens": args.new_tokens,
        "repeats": args.repeats,
        "torch": torch.__version__,
        "transformers": __import__("transformers").__version__,
        "rows": [],
    }
    rows = result["rows"]
    for batch in args.batches:
        prompts, group = prompts_for(batch, args.prompt_tokens, model.config.vocab_size)
        for engine, run in (("rlinf", run_rlinf), ("generate-static", run_generate)):
            if engine not in args.engines:
                continue
            run(model, prompts, group, SHORT)  # warm-up (allocations, kernels, the static cache)
            full = [run(model, prompts, group, args.new_tokens) for _ in range(args.repeats)]
            short = [run(model, prompts, group, SHORT) for _ in range(args.repeats)]
            full_s, short_s = statistics.median(full), statistics.median(short)
            step_s = (full_s - short_s) / (args.new_tokens - SHORT)
            context = args.prompt_tokens + (SHORT + args.new_tokens) / 2
            roof_s = roofline_step_s(args.preset, params, batch, context, device)
            rows.append(
                {
                    "engine": engine,
                    "batch": batch,
                    "tokens_per_s": batch * args.new_tokens / full_s,
                    "seconds": full_s,
                    "step_s": step_s,
                    "roofline_step_s": roof_s,
                    "roofline_tokens_per_s": batch / roof_s,
                    "step_overhead_s": step_s - roof_s,
                    "of_roofline": roof_s / step_s if step_s > 0 else float("nan"),
                }
            )
            print(json.dumps(rows[-1]), file=sys.stderr)
            mark("rollout_row", component=engine, iteration=batch)
            if args.json:
                write_text_atomic(args.json, json.dumps(result, indent=1) + "\n")
    if args.busy_fraction:
        batch = max(args.batches)
        prompts, group = prompts_for(batch, args.prompt_tokens, model.config.vocab_size)
        try:
            busy = busy_fraction(model, prompts, group, 2 * SHORT)
        except Exception as error:  # noqa: BLE001 - the profiler's failure is a finding, not the benchmark's end
            busy = {"error": f"{type(error).__name__}: {error}"}
        result["busy"] = {"engine": "rlinf", "batch": batch, **busy}
        print(json.dumps(result["busy"]), file=sys.stderr)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="qwen2.5-0.5b", choices=sorted(MODEL_PRESETS))
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 16, 64, 256])
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--prompt-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--engines", nargs="+", choices=("rlinf", "generate-static"), default=["rlinf", "generate-static"]
    )
    parser.add_argument("--json", help="also write the result here (after every row)")
    parser.add_argument(
        "--busy-fraction",
        action="store_true",
        help="also profile rlinf's engine at the largest batch: the GPU's kernel time over wall time",
    )
    parser.add_argument(
        "--device", choices=("cuda", "cpu"), default="cuda", help="cpu: check the script only"
    )
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("bench_rollout: no CUDA GPU is visible; this benchmark only runs on a GPU", file=sys.stderr)
        return 2
    if args.new_tokens <= SHORT:
        print(f"bench_rollout: --new-tokens must exceed {SHORT}", file=sys.stderr)
        return 2
    result = measure(args)
    text = json.dumps(result, indent=1)
    print(text)
    if args.json:
        write_text_atomic(args.json, text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
