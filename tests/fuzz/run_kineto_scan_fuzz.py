"""Coverage-guided differential fuzzing of the Kineto C scanner (not a unit test: run it by hand).

    python tests/fuzz/run_kineto_scan_fuzz.py --seconds 600           # fuzz (libFuzzer, ASan + UBSan)
    python tests/fuzz/run_kineto_scan_fuzz.py --seconds 300 --c-only  # leak-checked, no Python oracle
    python tests/fuzz/run_kineto_scan_fuzz.py --replay FILE_OR_DIR    # re-check inputs (e.g. a crash)
    python tests/fuzz/run_kineto_scan_fuzz.py --coverage              # line / branch coverage of the corpus
    python tests/fuzz/run_kineto_scan_fuzz.py --numbers 2000000       # number literals, no clang needed

What it does: builds tests/fuzz/kineto_scan_fuzz.c with clang (`-fsanitize=fuzzer,address,undefined`;
the scanner's source is compiled into the target, so libFuzzer's coverage is the scanner's branches),
seeds a corpus with pieces cut from the bundled Kineto fixtures plus hand-written edge cases, and runs
one libFuzzer process. Every input goes through `scan()` and, when accepted, through the msgspec oracle
tests/kineto_scan_oracle.py (identical columns or a decline). A sanitizer report, an exception or a
difference stops the run and leaves the input under <work>/crashes/; turn it into a regression test in
tests/test_kineto_scan.py.

Needs clang with libFuzzer (Debian: `apt-get install clang-14 libclang-rt-14-dev`) and a Python built
with a shared libpython (the target embeds the interpreter). The work directory (default .scratch/,
git-ignored) keeps the corpus between runs. At the end it prints executions, time and coverage.
"""

from __future__ import annotations

import argparse
import decimal
import gzip
import json
import math
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
DATA = ROOT / "tests" / "data"

KERNEL = (
    b'{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 100.5, "dur": 2.25, "args": '
    b'{"device": 0, "stream": 7, "correlation": 5, "grid": [1, 2, 3], "block": [4, 5, 6], '
    b'"registers per thread": 32, "shared memory": 0, "External id": 9}}'
)
SYNC = (
    b'{"ph":"X","cat":"cuda_sync","name":"Stream Sync","pid":0,"tid":7,"ts":1,"dur":2,'
    b'"args":{"device":0,"stream":4294967295,"correlation":5,"cuda_sync_kind":"stream sync"}}'
)
SEEDS = [
    b"[]",
    b" [ ] ",
    b"[" + KERNEL + b"]",
    b"[" + SYNC + b"]",
    b'[{"ph": "M", "name": "process_name", "pid": "Traces", "tid": "stream 9", "args": {"name": "x"}}]',
    b'[{"ph": "X", "name": "k\\u00e9\\n\\"q\\"\\ud83d\\ude00", "ts": -0, "dur": -0.0}, {"ph": "i"}]',
    b'[{"ts": 1e308, "dur": 1.7976931348623157e308}, {"ts": 4.9e-324, "dur": 2.2250738585072011e-308}]',
    b'[{"ts": 123456789012345678, "dur": 1234567890123456789}, {"ts": 1.000000000000000111022302462515}]',
    b'[{"pid": 999999999999999999, "tid": -999999999999999999}, {"pid": 9223372036854775807, "tid": null}]',
    b'[{"args": {"grid": [2147483648, -2147483648, 0], "block": null, "bytes": -1, "context": 0}}]',
    b'[{"x": [1, {"y": [true, false, null, "s", 1.5e-3, -0]}], "args": null}]',
    b'[{"ph": "X", "cat": "name": "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", "pid": "1", "tid": "7 "}]',
    b'[{"name": "a\\u0000b\\/\\b\\f\\r\\t", "cat": "\x7f"}]',
    b'[{"ts": 0e999999999, "dur": 1e-400}, {"ts": -1e-400, "dur": 0.1e1}]',
    b'[{"nest": ' + b"[" * 63 + b"1" + b"]" * 63 + b"}]",
    # past the first column capacity (1024 events) and the first string table (512 distinct strings)
    b"[" + b",".join([b"{}"] * 1100) + b"]",
    b"[" + b",".join(b'{"name":"n%d","pid":"%d"}' % (i, i) for i in range(600)) + b"]",
]

DICT = [
    '"ph"',
    '"cat"',
    '"name"',
    '"pid"',
    '"tid"',
    '"ts"',
    '"dur"',
    '"args"',
    '"device"',
    '"stream"',
    '"correlation"',
    '"context"',
    '"bytes"',
    '"registers per thread"',
    '"shared memory"',
    '"grid"',
    '"block"',
    '"cuda_sync_kind"',
    '"X"',
    '"i"',
    '"s"',
    '"kernel"',
    '"Kernel"',
    '"cuda_runtime"',
    '"gpu_memcpy"',
    '"cuda_sync"',
    '"gpu_user_annotation"',
    '"stream 7"',
    "null",
    "true",
    "false",
    "-0",
    "-0.0",
    "1e308",
    "1e309",
    "4.9e-324",
    "2.2250738585072011e-308",
    "1e-400",
    "999999999999999999",
    "9223372036854775807",
    "-9223372036854775808",
    "18446744073709551616",
    "4294967295",
    "2147483648",
    "0.1",
    "1.5e+3",
    "1E-3",
    "\\u0000",
    "\\u00e9",
    "\\ud800",
    "\\udc00",
    "\\ud83d\\ude00",
    "\\n",
    '\\"',
    "\\\\",
    "\\/",
    "\\x",
    "\xc3\xa9",
    "\xed\xa0\x80",
    "\xf4\x90\x80\x80",
    "\xc0\x80",
    "\xff",
    "\x1f",
    "\x7f",
    "[1, 2, 3]",
    "{}",
    "[]",
    ", ",
    ": ",
    "\t",
    "\r\n",
]


def _piece_seeds() -> list[bytes]:
    """Pieces of 1..6 events cut from each bundled Kineto fixture, serialized as the files hold them."""
    out = []
    for path in sorted(DATA.rglob("*.json.gz"))[:12]:
        try:
            with gzip.open(path, "rb") as f:
                doc = json.load(f)
        except (OSError, ValueError):
            continue
        evs = doc.get("traceEvents") if isinstance(doc, dict) else None
        if not isinstance(evs, list):
            continue
        step = max(1, len(evs) // 40)
        for i in range(0, len(evs), step):
            out.append(json.dumps(evs[i : i + 1 + i % 6]).encode())
    return out


def _escape_dict_entry(token: str) -> str:
    raw = token.encode("latin-1") if all(ord(ch) < 256 for ch in token) else token.encode()
    return (
        '"'
        + "".join(f"\\x{b:02x}" if b < 0x20 or b >= 0x7F or b in (0x22, 0x5C) else chr(b) for b in raw)
        + '"'
    )


def _env(c_only: bool, leaks: bool) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "tests"), sysconfig.get_paths()["purelib"]])
    env["PYTHONMALLOC"] = "malloc"  # Python's own objects under ASan too
    env["ASAN_OPTIONS"] = f"detect_leaks={int(leaks)}:abort_on_error=1:allocator_may_return_null=1"
    env["UBSAN_OPTIONS"] = "print_stacktrace=1:halt_on_error=1"
    if c_only:
        env["KSCAN_C_ONLY"] = "1"
    return env


def build(work: Path, clang: str, coverage: bool = False) -> Path:
    out = work / ("kineto_scan_cov" if coverage else "kineto_scan_fuzz")
    src = [HERE / "kineto_scan_fuzz.c", ROOT / "tracelab" / "_native" / "_kineto_scan.c"]
    if out.exists() and out.stat().st_mtime > max(p.stat().st_mtime for p in src):
        return out
    libdir = sysconfig.get_config_var("LIBDIR")
    ver = sysconfig.get_config_var("LDVERSION") or sysconfig.get_python_version()
    flags = (
        ["-fsanitize=fuzzer", "-fprofile-instr-generate", "-fcoverage-mapping"]
        if coverage
        else ["-fsanitize=fuzzer,address,undefined,implicit-integer-truncation", "-fno-sanitize-recover=all"]
    )
    cmd = [
        clang, "-g", "-O1", "-fno-omit-frame-pointer", *flags,
        "-I", sysconfig.get_config_var("INCLUDEPY"),
        str(src[0]), "-o", str(out),
        f"-L{libdir}", f"-lpython{ver}", f"-Wl,-rpath,{libdir}", "-lm",
    ]  # fmt: skip
    print("build:", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)
    return out


def seed(work: Path) -> tuple[Path, Path]:
    seeds = work / "seeds"
    if seeds.exists():
        shutil.rmtree(seeds)
    seeds.mkdir(parents=True)
    for i, s in enumerate(SEEDS + _piece_seeds()):
        (seeds / f"seed{i:04d}").write_bytes(s)
    d = work / "kineto.dict"
    d.write_text("\n".join(_escape_dict_entry(t) for t in DICT) + "\n")
    return seeds, d


def fuzz(args: argparse.Namespace) -> int:
    work = Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    binary = build(work, args.clang)
    seeds, dict_path = seed(work)
    corpus = work / ("corpus_c" if args.c_only else "corpus")
    corpus.mkdir(exist_ok=True)
    crashes = work / "crashes"
    crashes.mkdir(exist_ok=True)
    other = work / ("corpus" if args.c_only else "corpus_c")  # the other mode's finds, as extra seeds
    cmd = [
        str(binary), str(corpus), str(seeds), *([str(other)] if other.is_dir() else []),
        f"-dict={dict_path}", f"-max_total_time={args.seconds}", f"-max_len={args.max_len}",
        f"-artifact_prefix={crashes}/", "-print_final_stats=1", "-timeout=10", "-rss_limit_mb=4096",
        f"-detect_leaks={int(args.c_only)}", "-use_value_profile=1",
    ]  # fmt: skip
    print("run:", " ".join(cmd), flush=True)
    t0, cpu0 = time.monotonic(), os.times()
    log = work / ("fuzz_c.log" if args.c_only else "fuzz.log")
    with open(log, "w") as f:
        env = _env(args.c_only, args.c_only)
        rc = subprocess.run(cmd, env=env, stdout=f, stderr=subprocess.STDOUT, check=False).returncode
    cpu = os.times()
    text = log.read_text(errors="replace")
    stats = dict(re.findall(r"^stat::(\w+):\s+(\d+)", text, re.MULTILINE))
    last = [line for line in text.splitlines() if re.match(r"#\d+\s", line)]
    print(
        f"exit {rc}; wall {time.monotonic() - t0:.0f} s, child CPU "
        f"{cpu.children_user - cpu0.children_user + cpu.children_system - cpu0.children_system:.0f} s"
    )
    print(
        f"executions {stats.get('number_of_executed_units', '?')}, "
        f"{stats.get('average_exec_per_sec', '?')}/s, peak RSS {stats.get('peak_rss_mb', '?')} MB"
    )
    if last:
        print("last status:", last[-1])
    print("corpus:", len(list(corpus.iterdir())), "inputs in", corpus)
    if rc:
        print("FAILED: see", log, "and", crashes)
        print("\n".join(text.splitlines()[-60:]))
    return rc


def coverage(args: argparse.Namespace) -> int:
    """Source-based coverage of _kineto_scan.c over the saved corpus (llvm-cov's line / branch report)."""
    work = Path(args.work).resolve()
    corpus = work / "corpus"
    if not corpus.is_dir():
        print("no corpus yet: fuzz first")
        return 1
    binary = build(work, args.clang, coverage=True)
    tools = Path(os.path.realpath(args.clang)).parent
    raw, data = work / "cov.profraw", work / "cov.profdata"
    env = _env(False, False)
    env["LLVM_PROFILE_FILE"] = str(raw)
    subprocess.run([str(binary), "-runs=0", str(corpus)], env=env, check=True, capture_output=True)
    subprocess.run([str(tools / "llvm-profdata"), "merge", "-o", str(data), str(raw)], check=True)
    scanner = ROOT / "tracelab" / "_native" / "_kineto_scan.c"
    show = [str(tools / "llvm-cov"), "show", str(binary), f"-instr-profile={data}", "-show-branches=count"]
    (work / "coverage.txt").write_text(
        subprocess.run([*show, str(scanner)], capture_output=True, text=True, check=True).stdout
    )
    report = [
        str(tools / "llvm-cov"),
        "report",
        str(binary),
        f"-instr-profile={data}",
        "-show-branch-summary",
    ]
    print(subprocess.run([*report, str(scanner)], capture_output=True, text=True, check=True).stdout)
    print("annotated source:", work / "coverage.txt")
    return 0


def _number_literals(rng: random.Random, n: int) -> list[bytes]:
    """Number literals where float parsers differ if any does: random digit strings and exponents, the
    exact decimal midpoints between neighbouring doubles (ties to even) and the literals one unit in the
    last digit either side of them, subnormals, limits, integers around 2^53 and 18 / 19 digits."""
    out = []
    for _ in range(n):
        kind = rng.randrange(6)
        if kind == 0:  # random mantissa and exponent
            digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 30)))
            frac = "".join(rng.choice("0123456789") for _ in range(rng.randint(0, 25)))
            lit = digits.lstrip("0") or "0"
            lit += f".{frac}" if frac else ""
            if rng.random() < 0.7:
                lit += rng.choice("eE") + rng.choice(["", "+", "-"]) + str(rng.randint(0, 340))
        elif kind == 1:  # the exact midpoint of two neighbouring doubles (a tie), and +-1 in its last digit
            x = rng.uniform(1, 2) * 2.0 ** rng.randint(-3, 40)  # its midpoints have at most ~60 digits
            with decimal.localcontext(decimal.Context(prec=1000)):
                lit = format((decimal.Decimal(x) + decimal.Decimal(math.nextafter(x, math.inf))) / 2, "f")
            step = rng.choice([0, 0, 1, -1])
            head = lit.rstrip("0123456789")
            if step and len(lit) > len(head):
                tail = lit[len(head) :]
                lit = head + str(int(tail) + step).rjust(len(tail), "0")[-len(tail) :]
        elif kind == 2:  # subnormals and the edges of the range
            x = rng.choice([5e-324, 2.2250738585072014e-308, 1.7976931348623157e308]) * rng.uniform(0.5, 2)
            lit = repr(x) if math.isfinite(x) else "1e308"
        elif kind == 3:  # integers: around 2^53, 18 and 19 digits, signs, -0
            lit = str(
                rng.choice([2**53 + rng.randint(-3, 3), rng.randint(0, 10**18 - 1), rng.randint(0, 10**19)])
            )
        elif kind == 4:
            lit = rng.choice(["0", "-0", "0.0", "-0.0", "0e0", "-0e-0", "1e-400", "-1e-400", "0e999"])
        else:  # shortest repr of a random double
            lit = repr(struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0])
            if not re.fullmatch(r"-?\d+(\.\d+)?(e[-+]?\d+)?", lit):
                lit = "1.5"
        if rng.random() < 0.5 and not lit.startswith("-"):
            lit = "-" + lit
        out.append(lit.encode())
    return out


def numbers(args: argparse.Namespace) -> int:
    """The installed extension on pieces of number literals in ts / dur (floats) and pid / tid / args
    (ints), each piece checked by the oracle (msgspec's own float parser: Eisel-Lemire with a big-decimal
    fallback; the scanner's: strtod)."""
    sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
    from kineto_scan_oracle import check
    from tracelab._native._kineto_scan import scan

    rng = random.Random(args.seed)
    t0, done, accepted, literals_read = time.process_time(), 0, 0, 0
    integer = re.compile(rb"-?\d+")
    while done < args.numbers:
        lits = _number_literals(rng, 1000)
        evs = []
        for a, b in zip(lits[::2], lits[1::2]):
            ints = b", ".join(
                b'"%s": %s' % (k, v) for k, v in ((b"pid", a), (b"tid", b)) if integer.fullmatch(v)
            )
            evs.append(b'{"ts": %s, "dur": %s%s%s}' % (a, b, b", " if ints else b"", ints))
        for i in range(0, len(evs), 8):  # groups of 8 events; a declined group is checked event by event
            group = b"[" + b",".join(evs[i : i + 8]) + b"]"
            ok = check(group, scan(group))
            if not ok:
                for e in evs[i : i + 8]:
                    ok_one = check(b"[" + e + b"]", scan(b"[" + e + b"]"))
                    accepted += ok_one
                    literals_read += 2 * ok_one
            else:
                accepted += 1
                literals_read += 2 * len(evs[i : i + 8])
        done += len(lits)
    print(
        f"{done:,} number literals in {time.process_time() - t0:.0f} s CPU: {literals_read:,} read by the "
        f"scanner ({accepted:,} pieces accepted), all equal to msgspec bit for bit; the rest declined"
    )
    return 0


def replay(args: argparse.Namespace) -> int:
    """Re-check inputs with the installed extension and the oracle (no sanitizers, no clang)."""
    sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
    from kineto_scan_oracle import check
    from tracelab._native._kineto_scan import scan

    target = Path(args.replay)
    files = sorted(p for p in target.rglob("*") if p.is_file()) if target.is_dir() else [target]
    accepted = 0
    for p in files:
        data = p.read_bytes()
        accepted += check(data, scan(data))
    print(f"{len(files)} inputs: {accepted} accepted by the scanner and equal to msgspec, the rest declined")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=int, default=300, help="fuzzing time (default 300)")
    ap.add_argument(
        "--work", default=str(ROOT / ".scratch" / "kineto_scan_fuzz"), help="corpus, build, crashes"
    )
    ap.add_argument("--max-len", type=int, default=16384, help="largest input (bytes)")
    ap.add_argument("--c-only", action="store_true", help="scanner alone, with leak detection, no oracle")
    ap.add_argument("--clang", default=shutil.which("clang") or shutil.which("clang-14") or "clang")
    ap.add_argument("--replay", help="a file or directory of inputs to re-check (no fuzzing)")
    ap.add_argument("--coverage", action="store_true", help="coverage of the saved corpus (no fuzzing)")
    ap.add_argument("--numbers", type=int, default=0, help="check this many number literals (no clang)")
    ap.add_argument("--seed", type=int, default=11)
    args = ap.parse_args()
    if args.coverage:
        return coverage(args)
    if args.numbers:
        return numbers(args)
    return replay(args) if args.replay else fuzz(args)


if __name__ == "__main__":
    sys.exit(main())
