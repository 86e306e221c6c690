"""Record built-in workloads (or any program) under nsys or torch.profiler into run directories.

A run directory holds the raw trace (`trace.sqlite` + `trace.nsys-rep` for nsys, `trace.json.gz`
for torch.profiler), `meta.json` (workload, variant, backend, GPU, driver, versions, parameters,
wall time per step) and, for the workloads' instrumented kernels, `sm_probe.npz`
(tracelab/workloads/probes.py documents it). `tracelab.io.detect.load_run_dir` reads one.

Each variant runs in its own subprocess (`python -m tracelab.workloads.runner ...`); under nsys that
subprocess is the profiled program, under torch.profiler the runner starts the profiler itself.

- `workload`: the built-in workloads (`record_workload`, `build_command`)
- `command`: any program (`record_command`) and its meta.json
- `nsys`: the nsys backend (finding nsys, its flags, the SQLite export)
- `profiler`: the torch.profiler backend
- `torchrun`: torchrun launches taken apart and wrapped
- `process`: checks before a run, the program's environment and log, run directory names
- `__main__`: `python -m tracelab.record WORKLOAD ...`, the device-side entry point
"""
