"""The idle intervals of a big timeline are classified in bounded blocks, side by side (`gaps/idle._in_blocks`):
each interval's cause and evidence depend on it alone, so the parts joined in order must give what one pass
gives. Forced here on small recordings (blocks of at most 3 intervals on 2 threads): the whole analysis document
(gaps, their causes and evidence, per-step idle by cause, findings whose waste sums short intervals' causes)
and every device's idle-interval causes equal the single-pass ones."""

from __future__ import annotations

import numpy as np
import pytest
from multigpu_util import run_dir

from tracelab import api
from tracelab.analyses import parallel
from tracelab.analyses.gaps import idle as idle_module
from tracelab.analyses.gaps.idle import Classification
from tracelab.demo import demo_run
from tracelab.io.detect import load_run_dir


def _document_and_causes(tl):
    an = api.analyze(tl, context=api.AnalysisContext(tl))
    c = Classification(tl)
    causes = {k: v.cause.tolist() for k, v in c.idle().items()}
    return api.to_json(an), causes, len(an.gaps)


@pytest.mark.parametrize(
    "name", ["sync_pitfalls-item_every_step-nsys", "input_pipeline-slow_loader-torch", "ddp2_loaderstall_nsys"]
)
def test_parts_give_what_one_pass_gives(tmp_path, name, monkeypatch):
    tl = load_run_dir(run_dir(name, tmp_path)) if name.startswith("ddp") else api.load(demo_run(name))
    one_doc, one_causes, n_gaps = _document_and_causes(tl)
    monkeypatch.setattr(parallel, "PARALLEL_MIN_EVENTS", 0)
    monkeypatch.setattr(parallel, "usable_cores", lambda: 2)
    monkeypatch.setattr(idle_module, "PART_MIN", 2)
    monkeypatch.setattr(idle_module, "BLOCK", 3)  # and in blocks of at most 3 intervals (more blocks than threads)
    monkeypatch.setattr(idle_module, "ONE_PASS_MAX", 0)  # every device through the gaps-then-the-rest path
    calls = []
    real = idle_module._classify
    monkeypatch.setattr(idle_module, "_classify", lambda *a, **k: calls.append(a[3].a.size) or real(*a, **k))
    doc, causes, _ = _document_and_causes(tl)
    # more passes than one for the gaps and one for the rest of each device: classified in parts
    assert n_gaps >= 4 and len(calls) > 2 * len(one_causes)
    assert doc == one_doc
    assert causes == one_causes
    assert any(np.asarray(v).size for v in causes.values())
