"""Test-suite hygiene (issue 10).

- Under CI=true a skipped `corpus` or `browser` test fails the run: CI must not go green because the
  shared corpus or the browser went missing. GPU / torch / nsys-only tests (marked `gpu`, or `needs_gpu_tools`)
  may skip: CI has no GPU.
- Without the shared corpus (tl_hygiene.CORPUS) every test marked `corpus` is skipped with the reason
  (`tl_hygiene.missing_corpus()`), so a fresh clone without ../shared passes README's test command.
- `tl_hygiene.missing_browser()` names the missing piece (chromium or chromedriver) for skip reasons.
- Screenshots go to a temporary directory (`tl_hygiene.screenshots_path()`), never into docs/.
"""

from __future__ import annotations

import os

import pytest
from tl_hygiene import missing_corpus  # tests/ is on sys.path: pytest puts a conftest's folder there

MUST_RUN_IN_CI = ("corpus", "browser")
MAY_SKIP = ("gpu", "needs_gpu_tools")


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = missing_corpus()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=reason)
    for item in items:
        if item.get_closest_marker("corpus") is not None:
            item.add_marker(skip)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    if not (in_ci() and report.skipped) or hasattr(report, "wasxfail"):
        return
    marks = {m.name for m in item.iter_markers()}
    if marks & set(MUST_RUN_IN_CI) and not marks & set(MAY_SKIP):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        reason = str(reason).removeprefix("Skipped: ")
        report.outcome = "failed"
        report.longrepr = f"skipped under CI=true (a {'/'.join(sorted(marks & set(MUST_RUN_IN_CI)))} test must run): {reason}"
