"""Prose for the findings of issue 14's rules (unfused_elementwise, implicit_default_stream_sync):
Finding data in, (message, where) out. `tracelab.render.findings` merges `RENDERERS` into its own."""

from __future__ import annotations

from collections.abc import Callable

from tracelab.text_format import fmt_ns

from ..analyses.names import short_name
from ..analyses.results import Finding

Prose = tuple[str, str]


def unfused_elementwise(f: Finding) -> Prose:
    d = f.data
    best = (d.get("chains") or [{}])[0]
    ops = " → ".join(best.get("ops", []))
    msg = (
        f"{f.count} elementwise kernels in {d.get('n_chains', 0)} chain(s) run {fmt_ns(d.get('kernels_ns', 0))}; "
        f"the largest repeats {best.get('period')} ops ({ops}) {best.get('repetitions')}× on stream "
        f"{best.get('stream')} with grid {tuple(best.get('grid', ()))} × block {tuple(best.get('block', ()))}. "
        f"Each repetition could be one fused kernel that reads the input once and writes the output once: at "
        f"the chain's own bandwidth it moves the bytes of the chain's lightest kernel, ≈ "
        f"{fmt_ns(best.get('fused_kernel_ns', 0))}, saving ≈ {fmt_ns(f.wasted_ns)} in all (torch.compile, a "
        "fused op such as F.gelu, or a Triton / CUDA kernel)."
    )
    return msg, f.where


def implicit_default_stream_sync(f: Finding) -> Prose:
    d = f.data
    h = (d.get("handoffs") or [{}])[0]
    held = ", ".join(map(str, d.get("held_streams", [])))
    msg = (
        f"{f.count} operations on the legacy default stream {h.get('legacy_stream')} waited for other streams' "
        f"work and then held work of stream(s) {held} back, with no cudaStreamWaitEvent issued: e.g. "
        f"{short_name(h.get('legacy_op', ''), 50)} started {fmt_ns(h.get('x_start', 0) - h.get('y_end', 0))} after "
        f"stream {h.get('waited_for_stream')}'s work ended, and {short_name(h.get('held_op', ''), 50)} on stream "
        f"{h.get('held_stream')} started {fmt_ns(h.get('z_start', 0) - h.get('x_end', 0))} after it, having been "
        f"ready {fmt_ns(h.get('held_ns', 0))} earlier. That is the implicit synchronization of blocking streams "
        f"with the legacy default stream; ready work was held {fmt_ns(f.wasted_ns)} in all. Create the streams "
        "non-blocking (cudaStreamNonBlocking; torch.cuda.Stream does), or keep that op off the legacy default "
        "stream (its own stream, or the per-thread default stream)."
    )
    return msg, f.where


RENDERERS: dict[str, Callable[[Finding], Prose]] = {
    "unfused_elementwise": unfused_elementwise,
    "implicit_default_stream_sync": implicit_default_stream_sync,
}
