"""Issue 14 §1 in one command: the runner against a raw aiohttp load generator, side by side, on the real requests.

    .venv/bin/python bench/throughput.py                      # 2 s, 400 ms and 250 ms server latency
    .venv/bin/python bench/throughput.py --latencies 0.4      # one latency
    .venv/bin/python bench/throughput.py --profile 0.4        # cProfile the runner at 400 ms (file in $TMPDIR)
    .venv/bin/python bench/throughput.py --history 7          # in a home that already holds 7 runs of them

Needs the ``bench`` extra (aiohttp) and ../shared/data/public. PubMedQA (1,000), MedQA (1,273) and MedCalc-Bench
(1,047) are registered from their real files: 3,320 requests. For each latency, against the fake
OpenAI-compatible server in its own process with 256 concurrent slots (server limit: 3,320 / 256 x latency):

* raw: a plain aiohttp client, in its own process, posting the very request bodies the runner sends (built
  beforehand and read from a file) over 256 connections; timed from its first request to its last reply, and
  as a process from spawn to exit (its own start: interpreter, aiohttp, reading the bodies).
* raw httpx: the same generator on httpx's own transports, one single-connection pool per slot: what httpx's
  layers cost beyond aiohttp (the runner's lanes use httpcore's connection directly, under them).
* runner without HTTP: the same command with ``ChatClient.complete_once`` replaced by a wait of the latency
  (no sockets): the runner's own cost per request, beyond the HTTP library.
* runner: ``medhelm-local run --model fake --benchmarks pubmedqa,medqa,medcalc_bench --concurrency 256 --json``
  as a subprocess, timed from spawn to exit (start-up, planning, sending, scoring): end to end; its send phase
  and the CPU the runner process spent in it (all threads, ``time.process_time``) come from its JSON report.

Each runner process gets its own copy of the set-up home (datasets registered; with ``--history N``, N earlier
runs of the same requests, sent to a 1 ms server), so every latency measures the same home: one reused across the
measurements would make later latencies pay for the rows the earlier ones stored.

Printed per latency: both walls, runner/raw ratios (end to end against the generator's first-request-to-last-reply
time and, both as processes, spawn to exit; and send phase only), the runner's fixed cost (end to end minus its
send phase), the runner's CPU per request
in the send phase and end to end (``getrusage``), its peak concurrency and how many round trips (latencies) its
adaptive limiter took to reach 256, where the runner's wall time went (process start and imports, planning,
the manifest, storing the plan, sending, scoring, the rest), and the load average before and after. Everything
also goes to ``bench/results/throughput-<UTC>.json``. This machine is shared: compare figures only with figures
taken at a similar load average (the lead takes the final figures on an idle machine).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from run_bench import FakeServer, git_commit  # noqa: E402

PUBLIC = REPO.parent / "shared" / "data" / "public"
FILES = {"pubmedqa": "pubmedqa/ori_pqal.json", "medqa": "medqa/phrases_no_exclude_test.jsonl",
         "medcalc_bench": "medcalc_bench/test_data.csv"}
BENCHMARKS = ",".join(FILES)
SLOTS = 256
RESULTS = REPO / "bench" / "results"

RAW = r"""
import asyncio, json, sys, time, resource
import aiohttp

async def main(url, path, connections):
    bodies = [line.encode() for line in open(path, encoding="utf-8")]
    queue = iter(bodies)
    connector = aiohttp.TCPConnector(limit=connections, limit_per_host=connections)
    async with aiohttp.ClientSession(connector=connector, headers={"content-type": "application/json"}) as s:
        async def worker():
            for body in queue:
                async with s.post(url, data=body) as r:
                    r.raise_for_status()
                    await r.read()
        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(connections)))
        return time.perf_counter() - start

wall = asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
usage = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime}))
"""

# The same generator on httpx's own transports, one single-connection pool per slot (I/O on plain asyncio, prepared
# requests): what httpx's layers cost per request. The runner's lanes use httpcore's connection directly, under them.
RAW_HTTPX = r"""
import asyncio, json, os, sys, time, resource
for absent in filter(None, os.environ.get("MEDHELM_BENCH_ABSENT", "").split(",")):
    sys.modules[absent] = None
import httpcore, httpx
from medhelm_local.inference.netio import AsyncioBackend

async def main(url, path, connections):
    bodies = [line.encode() for line in open(path, encoding="utf-8")]
    queue = iter(bodies)
    target = httpx.URL(url)
    headers = [(b"content-type", b"application/json")]
    extensions = {"timeout": httpx.Timeout(60).as_dict()}
    tls = httpx.create_ssl_context()  # once, shared, as ChatClient does (each one costs tens of ms)
    async def worker():
        lane = httpx.AsyncHTTPTransport(verify=tls, trust_env=False)
        lane._pool = httpcore.AsyncConnectionPool(ssl_context=tls, max_connections=1, max_keepalive_connections=1,
                                                  network_backend=AsyncioBackend())
        async with lane:
            for body in queue:
                r = await lane.handle_async_request(httpx.Request("POST", target, headers=headers, content=body,
                                                                  extensions=extensions))
                await r.aread()
                await r.aclose()
                if r.status_code != 200:
                    raise RuntimeError(f"HTTP {r.status_code}")
    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(connections)))
    return time.perf_counter() - start

wall = asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
usage = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime}))
"""

# `medhelm-local run` as the CLI runs it, with where its wall time goes: each phase's function is wrapped (by name,
# in the modules that have it) and the times written as JSON to $MEDHELM_BENCH_PHASES at exit. With a latency as
# first argument, ``ChatClient.complete_once`` is replaced by a wait of that latency (no sockets; the rest of the
# runner unchanged): what the runner costs per request beyond the HTTP library.
RUNNER = r"""
import time
started = time.time()
import atexit, functools, importlib, inspect, json, os, sys
for absent in filter(None, os.environ.get("MEDHELM_BENCH_ABSENT", "").split(",")):
    sys.modules[absent] = None  # importing it raises ImportError, as where it is not installed
spawned = float(os.environ.get("MEDHELM_BENCH_SPAWNED", started))
stub = sys.argv.pop(1)
t_imports = time.perf_counter()
from medhelm_local.cli import entry, register_commands
register_commands("run")
imported = time.perf_counter()
phases = {}

def timed(name, fn):
    def record(t0, c0):
        entry = phases.setdefault(name, {"calls": 0, "wall_s": 0.0, "cpu_s": 0.0})
        entry["calls"] += 1
        entry["wall_s"] += time.perf_counter() - t0
        entry["cpu_s"] += time.process_time() - c0
    if inspect.iscoroutinefunction(fn):
        @functools.wraps(fn)
        async def wrapper(*a, **k):
            t0, c0 = time.perf_counter(), time.process_time()
            try:
                return await fn(*a, **k)
            finally:
                record(t0, c0)
    else:
        @functools.wraps(fn)
        def wrapper(*a, **k):
            t0, c0 = time.perf_counter(), time.process_time()
            try:
                return fn(*a, **k)
            finally:
                record(t0, c0)
    return wrapper

PHASES = ["refuse_early", "require_judges", "resolve", "compute_plan", "describe", "token_counter", "new_run",
          "record_plan", "insert_plan", "execute_run", "score_benchmark", "benchmark_score", "_finish",
          # names before the evaluation path was split (issue 16 §4), to measure older commits alike
          "_prepare_client", "_token_counter", "_new_run"]
for module_name in ["medhelm_local.runner.session", "medhelm_local.application.evaluation",
                    "medhelm_local.runner.plan", "medhelm_local.store.runs", "medhelm_local.runner.execute"]:
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        continue
    for name in PHASES:
        fn = module.__dict__.get(name)
        if callable(fn) and not isinstance(fn, type):
            setattr(module, name, timed(name, getattr(fn, "__wrapped__", fn)))

if stub != "-":
    import asyncio
    from medhelm_local.inference import client
    latency = float(stub)

    async def complete_once(self, request, base_url=None):
        await asyncio.sleep(latency)
        return client.Completion("yes", 100, 1, "stop")

    client.ChatClient.complete_once = complete_once

def report():
    out = {"start_s": started - spawned, "imports_s": imported - t_imports,
           "main_s": time.perf_counter() - imported, "phases": phases}
    with open(os.environ["MEDHELM_BENCH_PHASES"], "w") as handle:
        json.dump(out, handle)

atexit.register(report)
sys.argv[0] = "medhelm-local"
entry()  # as the installed command does (its quick exit included)
"""

CHILD = r"""
import json, resource, subprocess, sys, time
start = time.perf_counter()
done = subprocess.run(sys.argv[1:], capture_output=True, text=True)
wall = time.perf_counter() - start
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"code": done.returncode, "stderr_tail": done.stderr[-3000:] if done.returncode else "",
                  "stdout": done.stdout, "wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime,
                  "max_rss_mb": usage.ru_maxrss / 1024}))
"""


# Packages that libraries the runner uses import when they are installed, and that only this checkout's dev and
# test extras bring: httpcore and anyio import trio at start if it is there (selenium's dependency, the test
# extra's: about 0.1 s of imports and 0.03 s of teardown per process on this machine).
OPTIONAL_IMPORTS = ("trio",)


def image_packages() -> set[str]:
    """The distributions the image installs: medhelm-local with its ``embedded`` extra (Dockerfile) and everything
    they require, read from this venv's metadata (markers evaluated here)."""
    from importlib import metadata

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    seen: set[str] = set()
    todo: list[tuple[str, tuple[str, ...]]] = [("medhelm-local", ("embedded",))]
    while todo:
        name, extras = todo.pop()
        if canonicalize_name(name) in seen:
            continue
        seen.add(canonicalize_name(name))
        try:
            requirements = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        for line in requirements:
            requirement = Requirement(line)
            environments = [{"extra": extra} for extra in extras] or [{"extra": ""}]
            if requirement.marker is None or any(requirement.marker.evaluate(e) for e in environments):
                todo.append((requirement.name, tuple(requirement.extras)))
    return seen


def absent_from_image() -> list[str]:
    """The optional imports installed here that the image does not install: hidden from the measured processes
    (importing them fails, as in the image), so that the runner is measured with the packages it ships with."""
    from importlib import metadata
    from importlib.util import find_spec

    from packaging.utils import canonicalize_name

    image = image_packages()
    absent = []
    for module in OPTIONAL_IMPORTS:
        if find_spec(module) is None:
            continue
        owners = {canonicalize_name(d) for d in metadata.packages_distributions().get(module, [module])}
        if not owners & image:
            absent.append(module)
    return absent


ABSENT = absent_from_image()


def env() -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if not k.startswith("MEDHELM_")}
    out["MEDHELM_LOG_LEVEL"] = "WARNING"
    out["PYTHONPATH"] = str(REPO)  # this checkout's code, whatever the venv's editable install points at
    out["MEDHELM_BENCH_ABSENT"] = ",".join(ABSENT)
    return out


def cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-m", "medhelm_local.cli", "--home", str(home), *args],
                          capture_output=True, text=True, env=env())
    if done.returncode != 0:
        raise RuntimeError(f"medhelm-local {' '.join(args[:2])} failed: {done.stderr[-2000:]}")
    return done


def setup_home(root: Path) -> Path:
    home = root / "home"
    cli(home, "init")
    for benchmark, rel in FILES.items():
        cli(home, "datasets", "register", benchmark, str(PUBLIC / rel))
    return home


def add_history(home: Path, port: int, runs: int) -> None:
    """``runs`` earlier runs of the same requests in the home (against a 1 ms server on the model's ``port``): a
    home in use, whose tables hold what those runs stored, as a hospital's does after a few evaluations."""
    server = FakeServer(latency=0.001, slots=SLOTS, responder="hash", port=port, tokenizer="vllm",
                        context_length=32768)
    try:
        for _ in range(runs):
            cli(home, "run", "--model", "fake", "--benchmarks", BENCHMARKS, "--concurrency", str(SLOTS),
                "--new-run", "--json")
    finally:
        server.stop()


def write_bodies(home: Path, path: Path) -> int:
    """The request bodies the runner will send, built the same way (spec, prompt, seed) from the stored data."""
    from medhelm_local.benchmarks.registry import shipped_spec
    from medhelm_local.home import Home
    from medhelm_local.inference.client import request_body
    from medhelm_local.prompts.build import build_request
    from medhelm_local.store import Store

    n = 0
    with Store.open(Home(home), read_only=True) as store, path.open("w", encoding="utf-8") as out:
        for benchmark in FILES:
            spec = shipped_spec(benchmark)
            dataset = store.current_dataset(benchmark)
            assert dataset is not None
            for chunk in store.iter_instances(benchmark, dataset.fingerprint, chunk=2000):
                for instance in chunk:
                    body = request_body("fake-model", build_request(spec, instance, seed=0))
                    out.write(json.dumps(body, separators=(",", ":")) + "\n")
                    n += 1
    return n


def rounds_to_cap(steps: list[list[Any]], latency: float, cap: int) -> float | None:
    for t, limit, _ in steps:
        if limit >= cap:
            return round(float(t) / latency, 2)
    return None


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run_runner(clean: Path, work: Path, label: str, stub: float | None, profile: Path | None) -> dict[str, Any]:
    """One `medhelm-local run` in a fresh copy of the set-up home; its wall, CPU, peak RSS, report and phases."""
    home = work / f"home-{label}"
    shutil.copytree(clean, home, symlinks=True)
    phases_file = work / f"phases-{label}.json"
    script = work / "runner.py"
    script.write_text(RUNNER)
    command = [sys.executable, *(["-m", "cProfile", "-o", str(profile)] if profile else []), str(script),
               "-" if stub is None else str(stub), "--home", str(home), "run", "--model", "fake",
               "--benchmarks", BENCHMARKS, "--concurrency", str(SLOTS), "--new-run", "--json"]
    child_env = env() | {"MEDHELM_BENCH_PHASES": str(phases_file)}
    child_env["MEDHELM_BENCH_SPAWNED"] = repr(time.time())
    done = subprocess.run([sys.executable, "-c", CHILD, *command], capture_output=True, text=True, env=child_env)
    measured = json.loads(done.stdout)
    if measured["code"] != 0:
        raise RuntimeError(f"runner ({label}) failed: {measured['stderr_tail']}")
    measured["report"] = json.loads(measured.pop("stdout"))
    measured["phases"] = json.loads(phases_file.read_text()) if phases_file.exists() else {}
    shutil.rmtree(home, ignore_errors=True)
    return measured


def phase_walls(measured: dict[str, Any]) -> dict[str, float]:
    """Where the runner's wall time went, in the order it happens; ``other``: the rest (opening the store and the
    model server's description, the audit trail, closing the store with its last checkpoint, the JSON output)."""
    phases = measured["phases"]
    wall = {k: v["wall_s"] for k, v in phases.get("phases", {}).items()}
    out = {"process start": phases.get("start_s", 0.0), "imports": phases.get("imports_s", 0.0),
           "checks (specs, judges)": wall.get("refuse_early", wall.get("require_judges", 0.0)),
           "plan": wall.get("compute_plan", 0.0),
           "server checks": wall.get("describe", wall.get("_prepare_client", 0.0))
           + wall.get("token_counter", wall.get("_token_counter", 0.0)),
           "manifest": wall.get("new_run", 0.0),
           "store the plan": wall.get("record_plan", wall.get("_new_run", 0.0)),
           "send": wall.get("execute_run", 0.0), "score": wall.get("_finish", 0.0)}
    out["other"] = measured["wall_s"] - sum(out.values())
    return {k: round(v, 3) for k, v in out.items()}


def measure(clean: Path, work: Path, port: int, bodies: Path, n: int, latency: float, profile: Path | None
            ) -> dict[str, Any]:
    load_start = os.getloadavg()
    # Like a vLLM server: /tokenize and a model length (32,768, e.g. Llama 3.1 8B served with --max-model-len
    # 32768) that these prompts fit, so the runner sends them whole, as the raw generator does.
    server = FakeServer(latency=latency, slots=SLOTS, responder="hash", port=port, tokenizer="vllm",
                        context_length=32768)
    try:
        url = f"{server.base_url}/chat/completions"
        spawned = time.perf_counter()
        raw_done = subprocess.run([sys.executable, "-c", RAW, url, str(bodies), str(SLOTS)], capture_output=True,
                                  text=True, env=env())
        raw_process_s = time.perf_counter() - spawned
        if raw_done.returncode != 0:
            raise RuntimeError(f"raw generator failed: {raw_done.stderr[-2000:]}")
        raw = json.loads(raw_done.stdout) | {"process_s": raw_process_s}
        httpx_done = subprocess.run([sys.executable, "-c", RAW_HTTPX, url, str(bodies), str(SLOTS)],
                                    capture_output=True, text=True, env=env())
        if httpx_done.returncode != 0:
            raise RuntimeError(f"raw httpx generator failed: {httpx_done.stderr[-2000:]}")
        raw_httpx = json.loads(httpx_done.stdout)
        measured = run_runner(clean, work, f"{latency}", None, profile)
        stubbed = run_runner(clean, work, f"{latency}-stub", latency, None)
    finally:
        server.stop()
    session = measured["report"]["session"]
    if session["sent"] != n or session["errors"]:
        raise RuntimeError(f"runner sent {session['sent']} of {n}, {session['errors']} errors")
    steps = session.get("concurrency_steps") or []
    stub_session = stubbed["report"]["session"]
    return {
        "latency_s": latency, "requests": n, "server_limit_s": n / SLOTS * latency,
        "raw": {"wall_s": raw["wall_s"], "process_s": raw["process_s"], "cpu_s": raw["cpu_s"],
                "cpu_ms_per_request": 1000 * raw["cpu_s"] / n},
        "raw_httpx": {"wall_s": raw_httpx["wall_s"], "cpu_s": raw_httpx["cpu_s"],
                      "cpu_ms_per_request": 1000 * raw_httpx["cpu_s"] / n},
        "runner": {"end_to_end_s": measured["wall_s"], "send_s": session["wall_s"],
                   "cpu_s": measured["cpu_s"], "cpu_ms_per_request": 1000 * measured["cpu_s"] / n,
                   "send_cpu_s": session.get("cpu_s"),
                   "send_cpu_ms_per_request": 1000 * session["cpu_s"] / n if session.get("cpu_s") else None,
                   "peak_concurrency": session["peak_concurrency"], "concurrency_steps": steps,
                   "round_trips_to_cap": rounds_to_cap(steps, latency, SLOTS), "max_rss_mb": measured["max_rss_mb"],
                   "phases_s": phase_walls(measured), "phases_detail": measured["phases"]},
        "runner_without_http": {"end_to_end_s": stubbed["wall_s"], "send_s": stub_session["wall_s"],
                                "cpu_ms_per_request": 1000 * stubbed["cpu_s"] / n,
                                "send_cpu_ms_per_request": 1000 * stub_session["cpu_s"] / n,
                                "phases_s": phase_walls(stubbed)},
        "ratio_end_to_end": raw["wall_s"] / measured["wall_s"],
        # both as processes, spawn to exit: the generator's own start (interpreter, aiohttp, reading the bodies)
        "ratio_process_to_process": raw["process_s"] / measured["wall_s"],
        # what the runner costs beyond its send phase, whatever the server's latency
        "fixed_s": measured["wall_s"] - session["wall_s"],
        "ratio_send_phase": raw["wall_s"] / session["wall_s"],
        "load_average_before": load_start, "load_average_after": os.getloadavg(),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--latencies", default="2,0.4,0.25", help="server latencies in seconds, comma-separated")
    parser.add_argument("--profile", type=float, default=None, help="cProfile the runner at this latency too")
    parser.add_argument("--history", type=int, default=0,
                        help="earlier runs of the same requests in the home before each measured run (a home in "
                             "use; default 0: a fresh home)")
    args = parser.parse_args()
    latencies = [float(x) for x in args.latencies.split(",")]
    results: dict[str, Any] = {"when": datetime.now(UTC).isoformat(timespec="seconds"), "commit": git_commit(),
                               "host": platform.node(), "cpus": os.cpu_count(), "python": platform.python_version(),
                               "slots": SLOTS, "runs": []}
    results["load_average_start"] = os.getloadavg()
    results["hidden_not_in_image"] = ABSENT
    with tempfile.TemporaryDirectory(prefix="medhelm-throughput-") as tmp_s:
        tmp = Path(tmp_s)
        t = time.perf_counter()
        # As the image does (Dockerfile: compileall): this checkout's modules from bytecode, not compiled from
        # source at every start (an editable install under PYTHONDONTWRITEBYTECODE never writes it).
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "medhelm_local")], check=True)
        home = setup_home(tmp)
        bodies = tmp / "bodies.jsonl"
        n = write_bodies(home, bodies)
        port = free_port()
        # Registered as what it stands in for: a vLLM server (it answers /version, /health and /tokenize as vLLM
        # does), whose scheduler queues what exceeds its batch, so the limiter starts at the cap.
        cli(home, "models", "add", "fake", "--kind", "vllm", "--base-url", f"http://127.0.0.1:{port}/v1",
            "--served-model", "fake-model")
        if args.history:
            add_history(home, port, args.history)
        results["history_runs"] = args.history
        home_mb = sum(f.stat().st_size for f in home.rglob("*") if f.is_file()) / 2**20
        print(f"setup: {n} requests from the real PubMedQA, MedQA and MedCalc-Bench files "
              f"({time.perf_counter() - t:.0f}s; home {home_mb:.0f} MB with {args.history} earlier runs, copied "
              "afresh for each runner process); "
              f"{os.cpu_count()} CPUs, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
        if ABSENT:
            print(f"installed here but not in the image, so hidden from the measured processes: {', '.join(ABSENT)}",
                  flush=True)
        for latency in latencies:
            profile = Path(tempfile.gettempdir()) / f"medhelm-throughput-{latency}.prof" \
                if args.profile == latency else None
            run = measure(home, tmp, port, bodies, n, latency, profile)
            results["runs"].append(run)
            print_run(run)
            if profile is not None:
                import pstats

                out = profile.with_suffix(".txt")
                with out.open("w") as handle:
                    pstats.Stats(str(profile), stream=handle).sort_stats("cumulative").print_stats(60)
                    pstats.Stats(str(profile), stream=handle).sort_stats("tottime").print_stats(40)
                print(f"  profile: {out}")
    results["load_average_end"] = os.getloadavg()
    print_table(results["runs"])
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"throughput-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}.json"
    path.write_text(json.dumps(results, indent=2, default=str) + "\n")
    print(f"\ncommit {results['commit']}; results: {path}")
    return 0


def print_run(r: dict[str, Any]) -> None:
    runner = r["runner"]
    send_cpu = runner["send_cpu_ms_per_request"]
    print(f"\nlatency {r['latency_s']}s, {SLOTS} slots, {r['requests']} requests "
          f"(server limit {r['server_limit_s']:.1f}s); load average {r['load_average_before'][0]:.2f} -> "
          f"{r['load_average_after'][0]:.2f}")
    print(f"  raw aiohttp generator: {r['raw']['wall_s']:.2f}s first request to last reply, "
          f"{r['raw']['process_s']:.2f}s spawn to exit ({r['raw']['cpu_ms_per_request']:.2f} ms CPU/request)")
    print(f"  raw httpx generator:   {r['raw_httpx']['wall_s']:.2f}s "
          f"({r['raw_httpx']['cpu_ms_per_request']:.2f} ms CPU/request; the HTTP library alone)")
    print(f"  runner end to end:     {runner['end_to_end_s']:.2f}s  ratio raw/runner {r['ratio_end_to_end']:.3f}"
          f" (both spawn to exit: {r['ratio_process_to_process']:.3f})"
          f"  ({runner['cpu_ms_per_request']:.2f} ms CPU/request, peak RSS {runner['max_rss_mb']:.0f} MB)")
    print(f"  runner fixed cost:     {r['fixed_s']:.2f}s beyond the send phase (start-up, planning, scoring, ...)")
    if send_cpu is not None:
        print(f"  runner send phase:     {runner['send_s']:.2f}s  ratio raw/runner {r['ratio_send_phase']:.3f}"
              f"  ({send_cpu:.2f} ms CPU/request)")
    print("  runner wall by phase:  " + ", ".join(f"{k} {v:.2f}s" for k, v in runner["phases_s"].items()))
    stub = r["runner_without_http"]
    print(f"  runner without HTTP:   {stub['end_to_end_s']:.2f}s end to end, send {stub['send_s']:.2f}s "
          f"({stub['send_cpu_ms_per_request']:.2f} ms CPU/request in the send phase; client stubbed)")
    print(f"  limiter: peak {runner['peak_concurrency']}, reached {SLOTS} after "
          f"{runner['round_trips_to_cap']} round trips; steps {runner['concurrency_steps'][:8]}")


def print_table(runs: list[dict[str, Any]]) -> None:
    """The rows of bench/README.md's "Line rate" table, in its column order."""
    print("\n| server latency (limit) | raw aiohttp (spawn to exit) | raw httpx | runner end to end (ratio; both "
          "spawn to exit) | runner send phase (ratio) | runner fixed cost | runner CPU/request: send phase, end to end "
          "| same, HTTP stubbed | httpx alone | aiohttp alone | round trips to 256 | load average |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in runs:
        runner, stub = r["runner"], r["runner_without_http"]
        latency = f"{r['latency_s'] * 1000:.0f} ms" if r["latency_s"] < 1 else f"{r['latency_s']:g} s"
        send_cpu = runner["send_cpu_ms_per_request"]
        print(f"| {latency} ({r['server_limit_s']:.1f} s) | {r['raw']['wall_s']:.2f} s ({r['raw']['process_s']:.2f} s) "
              f"| {r['raw_httpx']['wall_s']:.2f} s "
              f"| {runner['end_to_end_s']:.2f} s ({r['ratio_end_to_end']:.3f}; {r['ratio_process_to_process']:.3f}) "
              f"| {runner['send_s']:.2f} s ({r['ratio_send_phase']:.3f}) | {r['fixed_s']:.2f} s "
              f"| {send_cpu:.2f} ms, {runner['cpu_ms_per_request']:.2f} ms | {stub['send_cpu_ms_per_request']:.2f} ms "
              f"| {r['raw_httpx']['cpu_ms_per_request']:.2f} ms | {r['raw']['cpu_ms_per_request']:.2f} ms "
              f"| {runner['round_trips_to_cap']} "
              f"| {r['load_average_before'][0]:.1f} -> {r['load_average_after'][0]:.1f} |")


if __name__ == "__main__":
    sys.exit(main())
