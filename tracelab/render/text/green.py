"""Green contexts in words: why a variant is slower or faster than `sequential`
(tracelab.analyses.sm.green_explain gives the numbers)."""

from __future__ import annotations

from tracelab.analyses.sm.green_explain import GreenContextExplanation
from tracelab.text_format import fmt_ns

__all__ = ["green_context_message"]


def _short(name: str, n: int = 60) -> str:
    return name if len(name) <= n else name[: n - 1] + "…"


def _matmul_sentence(g: GreenContextExplanation) -> str:
    w_v, w_s, grid_v, grid_s = g.matmul_waves_variant, g.matmul_waves_sequential, g.matmul_grid_variant, g.matmul_grid_sequential
    sms_v, sms_s, base = g.matmul_sms_variant, g.matmul_sms_sequential, g.baseline
    if not (w_v and w_s):
        waves_txt = ""
    elif grid_v == grid_s:
        waves_txt = f"; its grid of {grid_v} blocks needs {w_v} wave(s) there vs {w_s} on the full GPU"
    else:
        waves_txt = f"; grids of {grid_v} vs {grid_s} blocks: {w_v} vs {w_s} wave(s)"
    label = (
        _short(g.matmul_name)
        if g.matmul_name_variant == g.matmul_name
        else f"{_short(g.matmul_name_variant)}; {_short(g.matmul_name)} in {base}"
    )
    sm_ratio = g.sm_ratio
    where = (
        f"on {sms_v} SMs instead of {sms_s} (SM ratio {sm_ratio:.2f}, which alone predicts "
        f"{1 / sm_ratio if sm_ratio else float('inf'):.2f}x{waves_txt})"
        if sms_v != sms_s and sms_v and sms_s
        else f"on all {sms_s} SMs in both runs"
        if sms_v == sms_s and sms_s
        else f"on {sms_v or 'an unknown number of'} SMs ({sms_s or 'unknown'} in {base})"
    )
    return (
        f"The matmul ({label}) runs {where}: {fmt_ns(g.matmul_ns_variant)} vs {fmt_ns(g.matmul_ns_sequential)} "
        f"({g.matmul_ratio:.2f}x)."
    )


def _partition_sentences(g: GreenContextExplanation) -> list[str]:
    span = max(g.variant_span_ns, 1)
    text = []
    parts = (
        ("small", g.small_green_context, g.small_sm_count, g.small_busy_fraction, g.small_idle_sm_ns),
        ("large", g.large_green_context, g.large_sm_count, g.large_busy_fraction, g.large_idle_sm_ns),
    )
    for label, gc, sms, busy, idle in parts:
        if label == "large" and gc == g.small_green_context:
            continue
        text.append(
            f"The {label} {sms}-SM partition {gc} is busy {busy:.0%} of the "
            f"span and leaves {idle / 1e6:,.1f} SM-ms idle ({idle / max(g.device_sm_count * span, 1):.1%} "
            f"of the GPU's SM-time)."
        )
    n_est = g.uninstrumented_launches
    how = f"measured by the probes, {n_est} uninstrumented kernel launches estimated" if g.source == "measured" and n_est else g.source
    text.append(f"[SM data: {how}]")
    return text


def green_context_message(g: GreenContextExplanation) -> str:
    """The explanation in a few sentences: the span ratio, the partition that sets the pace, the matmul on
    fewer SMs, the elementwise kernels, and the SM-time each partition leaves idle."""
    green = g.starving_green_context is not None
    text = [
        (
            f"{g.variant} takes {g.ratio:.2f}x the {g.baseline} time ({fmt_ns(g.variant_span_ns)} vs "
            f"{fmt_ns(g.sequential_span_ns)}: {g.verdict})."
        )
    ]
    if green:
        text.append(
            f"The {g.starving_sm_count}-SM partition {g.starving_green_context} sets the pace (busy "
            f"{g.starving_busy_fraction:.0%} of the span)."
        )
    if g.matmul_ns_sequential:
        text.append(_matmul_sentence(g))
    if g.elementwise_ns_sequential and g.elementwise_green_context is not None:
        on = (
            f"on the {g.elementwise_sm_count}-SM partition" if g.elementwise_green_context >= 0 else "on their stream"
        )
        text.append(
            f"The elementwise kernels {on} take {fmt_ns(g.elementwise_ns_variant)} vs "
            f"{fmt_ns(g.elementwise_ns_sequential)} in {g.baseline} on all {g.matmul_sms_sequential} SMs "
            f"({g.elementwise_ratio:.2f}x)."
        )
    if green:
        text += _partition_sentences(g)
    return " ".join(text)
