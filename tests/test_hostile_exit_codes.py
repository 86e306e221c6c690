"""Issue 11, "exit 1 on bad input": each of these used to end in an internal error (exit 1). Now a file
that cannot be used exits 2 with one line naming it, and a file that can be used imports and analyses."""

from __future__ import annotations

import json

import pytest
from hostile_util import (
    analyze_json,
    cli,
    kernel,
    kineto_doc,
    launch,
    loosen,
    nsys_copy,
    one_error_line,
    sql,
    two_kernels,
    write_json,
)


@pytest.mark.parametrize("field", ["name", "cat", "ph"])
def test_invalid_utf8_in_kineto_strings_is_one_line(tmp_path, field):
    raw = json.dumps(kineto_doc(two_kernels())).encode()
    key = f'"{field}": "'.encode()
    i = raw.index(key, raw.index(b'"traceEvents"')) + len(key)
    p = write_json(tmp_path / "t.json", raw[:i] + b"\xff\xfe" + raw[i:])
    line = one_error_line(cli(tmp_path / "s.db", "import", str(p)), p)
    assert "invalid UTF-8" in line


@pytest.mark.parametrize(
    ("ts", "dur"), [(2.0**63, 1), (1000, 2.0**62), (9.3e15, 1), (-9.3e15, 1), (1000, 1e300)]
)
def test_times_overflowing_int64_ns_are_dropped_with_a_note(tmp_path, ts, dur):
    events = [*two_kernels(), kernel(ts, dur, 3, name="bad")]
    p = write_json(tmp_path / "t.json", kineto_doc(events))
    res = cli(tmp_path / "s.db", "import", str(p))
    assert res.exit_code == 0, res.stderr
    doc = analyze_json(tmp_path / "s.db", res.stdout.split()[0])
    (dev,) = doc["devices"]
    assert (dev["busy_ns"], dev["span_ns"]) == (15_000, 25_000)  # the two good kernels only


@pytest.mark.parametrize("device", [2**31, 2**31 + 5, 2**40])
def test_device_id_beyond_int32_is_dropped_not_wrapped(tmp_path, device):
    events = [*two_kernels(), launch(1029, 3), kernel(1030, 4, 3, name="far", device=device)]
    p = write_json(tmp_path / "t.json", kineto_doc(events))
    res = cli(tmp_path / "s.db", "import", str(p))
    assert res.exit_code == 0, res.stderr
    doc = analyze_json(tmp_path / "s.db", res.stdout.split()[0])
    assert [d["device"] for d in doc["devices"]] == [0]
    assert doc["devices"][0]["busy_ns"] == 15_000


@pytest.mark.parametrize("rank", [2**31, -1, 2**64])
def test_rank_beyond_int32_is_one_line(tmp_path, rank):
    p = write_json(tmp_path / "t.json", kineto_doc(two_kernels(), distributedInfo={"rank": rank}))
    line = one_error_line(cli(tmp_path / "s.db", "import", str(p)), p)
    assert "rank" in line


def test_integer_beyond_64_bits_in_device_properties_imports(tmp_path):
    props = [{"id": 0, "name": "NVIDIA H200", "numSms": 2**64, "totalGlobalMem": 2**64 + 1}]
    p = write_json(
        tmp_path / "t.json",
        {"deviceProperties": props, "traceEvents": two_kernels(), "baseTimeNanoseconds": 2**70},
    )
    res = cli(tmp_path / "s.db", "import", str(p))
    assert res.exit_code == 0, res.stderr
    doc = analyze_json(tmp_path / "s.db", res.stdout.split()[0])
    assert doc["devices"][0]["sm_count"] == 0  # unknown, not 2^64 and not a wrapped value
    assert doc["devices"][0]["name"] == "NVIDIA H200"


@pytest.mark.parametrize("depth", [1000, 3000])
def test_json_nested_about_1000_deep_is_one_line(tmp_path, depth):
    events = two_kernels()
    raw = json.dumps(kineto_doc(events)).replace(
        '"args": {', '"args": {"x": ' + "[" * depth + "]" * depth + ", ", 1
    )
    p = write_json(tmp_path / "t.json", raw.encode())
    line = one_error_line(cli(tmp_path / "s.db", "import", str(p)), p)
    assert "nested too deeply" in line


def test_invalid_utf8_in_a_sqlite_table_name_still_imports(tmp_path):
    p = nsys_copy(tmp_path / "t.sqlite")
    sql(p, 'CREATE TABLE "x\xff" (a);')
    # sqlite stored the name as UTF-8 (in name, tbl_name and the CREATE statement): make it invalid
    p.write_bytes(p.read_bytes().replace(b"x\xc3\xbf", b"x\xff\xfe"))
    res = cli(tmp_path / "s.db", "import", str(p))
    assert res.exit_code == 0, res.stderr


def test_sqlite_schema_that_quotes_invalid_utf8_in_its_error_is_one_line(tmp_path):
    p = nsys_copy(tmp_path / "t.sqlite")
    sql(p, 'CREATE TABLE "x\xff" (a);')
    data = p.read_bytes()
    i = data.index(b"x\xc3\xbf")  # only the name column: the schema no longer matches itself
    p.write_bytes(data[:i] + b"x\xff\xfe" + data[i + 3 :])
    line = one_error_line(cli(tmp_path / "s.db", "import", str(p)), p)
    assert "corrupt SQLite file" in line


def test_kernel_start_minus_2_63_is_dropped_and_analyze_runs(tmp_path):
    p = nsys_copy(tmp_path / "t.sqlite")
    k = "CUPTI_ACTIVITY_KIND_KERNEL"
    sql(
        p,
        loosen(k)
        + f"UPDATE {k} SET start = -9223372036854775808 WHERE rowid = (SELECT min(rowid) FROM {k});",
    )
    res = cli(tmp_path / "s.db", "import", str(p))
    assert res.exit_code == 0, res.stderr
    doc = analyze_json(tmp_path / "s.db", res.stdout.split()[0])
    for dev in doc["devices"]:
        assert 0 <= dev["busy_ns"] <= dev["span_ns"] < 2**62


def test_file_that_imports_also_analyzes_with_huge_durations(tmp_path):
    """Durations of 2^53 ns each on 600 events would sum past int64; the file is refused instead."""
    events = [kernel(1000 + i, 2**53 / 1000, i, name=f"k{i}") for i in range(600)]
    p = write_json(tmp_path / "t.json", kineto_doc(events))
    line = one_error_line(cli(tmp_path / "s.db", "import", str(p)), p)
    assert "add up" in line
