"""What a workload is (CPU-importable: no torch here) and the context a variant runs in."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import msgspec

from ..errors import BadInput


class Variant(msgspec.Struct, frozen=True):
    name: str
    description: str
    # recorded with GPU memory tracing (issue 27): torch.profiler profile_memory=True ([memory] instants),
    # nsys --cuda-memory-usage=true (CUDA_GPU_MEMORY_USAGE_EVENTS); the memory timeline reads either
    memory: bool = False


class Workload(msgspec.Struct, frozen=True):
    """A built-in workload: named variants of one loop that each show (or avoid) one effect."""

    name: str
    description: str  # one line: what it demonstrates
    effect: str  # a short paragraph: what to look for in the trace and why it happens
    variants: tuple[Variant, ...]
    module: str  # import path of the module with `run(ctx, variant) -> dict`
    params: Mapping[str, Any]  # full size (fills an H100/H200)
    quick: Mapping[str, Any]  # --quick overrides
    world_size: int = 1  # processes (one GPU each) a variant runs in; > 1 is launched with torchrun

    def variant_names(self) -> tuple[str, ...]:
        return tuple(v.name for v in self.variants)

    def traces_memory(self, variant: str) -> bool:
        """Whether `variant` is recorded with GPU memory tracing (Variant.memory)."""
        return any(v.memory for v in self.variants if v.name == variant)

    def resolve_variants(self, variant: str | None) -> list[str]:
        """`None`/'all' → every variant; otherwise the one named (BadInput when unknown)."""
        if variant in (None, "", "all"):
            return list(self.variant_names())
        if variant not in self.variant_names():
            raise BadInput(
                f"unknown variant {variant!r} of workload {self.name!r} "
                f"(choose from: {', '.join(self.variant_names())}, all)"
            )
        return [variant]

    def parameters(self, quick: bool, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The parameters a run uses: full size, --quick overrides, then explicit overrides (typed
        like the defaults; unknown names are BadInput)."""
        p = dict(self.params)
        if quick:
            p.update(self.quick)
        for key, value in (overrides or {}).items():
            if key not in p:
                raise BadInput(
                    f"workload {self.name!r} has no parameter {key!r} (has: {', '.join(sorted(p))})"
                )
            p[key] = _coerce(value, p[key], key)
        return p

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "effect": self.effect,
            "variants": [{"name": v.name, "description": v.description, "memory": v.memory} for v in self.variants],
            "params": dict(self.params),
            "quick": dict(self.quick),
            "world_size": self.world_size,
        }


def declare(
    module: str, doc: str, description: str, variants: tuple[Variant, ...], world_size: int = 1
) -> Workload:
    """The workload of module `module` (its `__name__`; the workload's name is the module's): `doc` (its
    `__doc__`) after the first paragraph is the effect, WORKLOAD_PARAMS[name] the parameters."""
    from ..workload_params import WORKLOAD_PARAMS

    name = module.rsplit(".", 1)[1]
    p = WORKLOAD_PARAMS[name]
    return Workload(name, description, doc.split("\n\n", 1)[1].strip(), variants, module, p.full, p.quick, world_size)


def _coerce(value: Any, default: Any, key: str) -> Any:
    if not isinstance(value, str):
        return value
    try:
        if isinstance(default, bool):
            if value.lower() not in ("1", "0", "true", "false", "yes", "no"):
                raise ValueError(value)
            return value.lower() in ("1", "true", "yes")
        if isinstance(default, int):
            return int(value)
        if isinstance(default, float):
            return float(value)
    except ValueError:
        raise BadInput(f"parameter {key}={value!r} is not a {type(default).__name__}") from None
    return value


class RunContext(msgspec.Struct):
    """Everything a variant needs while it runs: parameters, the probe recorder, step timing."""

    workload: str
    variant: str
    params: dict[str, Any]
    seed: int
    recorder: Any  # probes.ProbeRecorder
    steps: int
    warmup: int
    probe_steps: tuple[int, ...] = ()  # measured steps (0-based) whose launches are probed
    step_wall_ms: list[float] = msgspec.field(default_factory=list)
    extra: dict[str, Any] = msgspec.field(default_factory=dict)  # variant facts for meta.json
    on_measure_start: Any = None  # callback: the runner starts torch.profiler here

    def loop(self, setup: Callable[[], None] | None = None) -> Iterator[tuple[int, bool]]:
        """Yields (step index, measured?) for warm-up then measured steps. Between them it opens
        the profiler window (torch.profiler start / cudaProfilerStart for nsys), resets the probe
        launch counts (probe invocations count from the window's start) and runs `setup` inside it
        (work the trace must see, such as capturing a CUDA graph). Each measured step is timed on
        the host; the last one ends after a device synchronize, so the sum is the loop's wall time."""
        import torch

        from .ranges import rng

        for i in range(self.warmup):
            # the first warm-up step compiles the probed kernels, the others the plain ones
            self.recorder.active = i == 0
            self.recorder.discard = True
            with rng(f"warmup {i}"):
                yield i, False
        self.recorder.discard = False
        torch.cuda.synchronize()
        if self.on_measure_start is not None:
            self.on_measure_start()
        self.recorder.reset_counts()
        if setup is not None:
            self.recorder.active = False
            with rng("setup"):
                setup()
            torch.cuda.synchronize()
        last = time.perf_counter()
        for i in range(self.steps):
            self.recorder.active = i in self.probe_steps
            with rng(f"step {i}"):
                yield i, True
            if i == self.steps - 1:
                torch.cuda.synchronize()
            now = time.perf_counter()
            self.step_wall_ms.append((now - last) * 1e3)
            last = now
        self.recorder.active = False

    @contextmanager
    def note(self, key: str) -> Iterator[dict[str, Any]]:
        d: dict[str, Any] = {}
        yield d
        self.extra[key] = d
