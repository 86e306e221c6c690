"""Issue 3: the same program recorded once under nsys and once under torch.profiler (separate
processes, on a real H200: the bundled demo runs) gives the same kernels per stream and the same busy
time within 5 %, through two different parsers."""

from __future__ import annotations

from collections import Counter

import pytest

from tracelab.analyses import analyze
from tracelab.demo import demo_archives, demo_run
from tracelab.model import EventKind
from tracelab.parsers import load_trace


def _pairs() -> list[tuple[str, str]]:
    names = {a.name[: -len(".tar.xz")] for a in demo_archives()}
    pairs = []
    for nsys in sorted(n for n in names if "-nsys" in n):
        torch = nsys.replace("-nsys", "-torch")
        if torch in names:
            pairs.append((nsys, torch))
    return pairs


PAIRS = _pairs()


def test_every_workload_variant_has_both_backends():
    # 5 workloads with 4 + 4 + 2 + 3 + 3 variants, plus green_ctx with the instrumented Triton matmul;
    # issue 14: fusion 5, default_stream 3, priorities 2, graphs 2 more
    assert len(PAIRS) == 17 + 12


@pytest.mark.parametrize(("nsys_run", "torch_run"), PAIRS, ids=[p[0].replace("-nsys", "") for p in PAIRS])
def test_same_program_same_numbers_in_both_formats(nsys_run, torch_run, tmp_path):
    summaries = []
    for name in (nsys_run, torch_run):
        tl = load_trace(demo_run(name, tmp_path))
        assert tl.meta.format == ("nsys" if "-nsys" in name else "kineto")
        kernels = tl.events[tl.events["kind"] == int(EventKind.KERNEL)]
        per_stream = Counter(zip(kernels["stream"].tolist(), kernels["green_context"].tolist()))
        summaries.append((per_stream, analyze(tl).devices[0]))
    (nsys_streams, nsys_dev), (torch_streams, torch_dev) = summaries
    assert nsys_streams == torch_streams
    assert sum(nsys_streams.values()) > 0
    assert torch_dev.busy_ns == pytest.approx(nsys_dev.busy_ns, rel=0.05)
    assert torch_dev.kernel_ns == pytest.approx(nsys_dev.kernel_ns, rel=0.05)
