"""The names that mark a training step: torch.profiler's `ProfilerStep#N` and step-like user ranges ("step 3",
"train_iter-12", ...). nsys `--pytorch=autograd-nvtx` (torch's emit_nvtx) names the NVTX range of a
record_function / ProfilerStep "step 3, op_id = 1234" (and ", sizes = [...]", ", input_op_ids = [...]" after
it): as a marker, the name is the part before ", op_id = "."""

from __future__ import annotations

import re

NVTX_OP_ID = r"(?:, op_id = \d+(?:, .*)?)?"
_PROFILER_STEP = r"^ProfilerStep#(\d+)"
_STEP_LIKE = r"^\s*(train(ing)?[\s_-]?)?(step|iter|iteration)(\s*[#_:-]?\s*\d+)?\s*"

PROFILER_STEP = re.compile(_PROFILER_STEP + NVTX_OP_ID + "$")  # step markers (group 1: the step number)
STEP_LIKE = re.compile(_STEP_LIKE + NVTX_OP_ID + "$", re.IGNORECASE)
# the markers' own names only (an autograd-nvtx range inside a marker is host activity: it is only a marker
# where no plain marker holds it)
PROFILER_STEP_NAME = re.compile(_PROFILER_STEP + "$")
STEP_LIKE_NAME = re.compile(_STEP_LIKE + "$", re.IGNORECASE)
