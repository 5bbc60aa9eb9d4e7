"""Runner benchmark (not a test): throughput, overhead and memory, measured side by side in one run.

    .venv/bin/python bench/run_bench.py            # full: about 5-8 minutes on 2 cores
    .venv/bin/python bench/run_bench.py --quick    # smaller sizes, about 2 minutes

Everything runs against the fake OpenAI-compatible server (``medhelm_local/testing/fake_openai.py``) started
as a separate process, so server and client do not share a GIL:

(a) runner throughput / raw async load generator throughput, same requests, same server with 256 slots;
(b) CPU time per instance and peak RSS of a real ``medhelm-local run`` subprocess over 100,000 instances
    (tiny server latency, so the runner's own cost dominates);
(c) the same requests sent the way reference harnesses do: 4 threads, one blocking request each;
(d) prefix-grouped versus shuffled send order against a server whose latency rewards cached prefixes.

Results are printed and written to ``bench/results/<UTC timestamp>.json``. ``latest.json`` holds the latest
measurement of each part, with where it came from (file, commit, time, load): a run of some parts (``--skip``)
replaces those parts only.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from medhelm_local.application.evaluation import EvaluationRequest, Mode, Selection, Sending, evaluate  # noqa: E402
from medhelm_local.benchmarks.registry import shipped_spec  # noqa: E402
from medhelm_local.context import AppContext  # noqa: E402
from medhelm_local.home import Home  # noqa: E402
from medhelm_local.home.config import ModelEndpoint, RunnerSettings  # noqa: E402
from medhelm_local.inference.client import POOL_CONNECTIONS, request_body  # noqa: E402
from medhelm_local.prompts.build import build_request  # noqa: E402
from medhelm_local.records import Instance  # noqa: E402
from medhelm_local.runner.plan import store_prefix_keys  # noqa: E402
from medhelm_local.store import Store  # noqa: E402

RESULTS = REPO / "bench" / "results"
LABELS = ("yes", "no", "maybe")


# -- fixtures -----------------------------------------------------------------------------------------------


class FakeServer:
    """The fake server in its own process."""

    def __init__(self, **options: Any) -> None:
        args = [sys.executable, "-m", "medhelm_local.testing.fake_openai"]
        for key, value in options.items():
            args += [f"--{key.replace('_', '-')}", str(value)]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True, cwd=REPO)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("READY"):
            raise RuntimeError("fake server did not start")
        self.port = int(line.split()[1])
        self.base_url = f"http://127.0.0.1:{self.port}/v1"

    def stats(self) -> dict[str, Any]:
        return dict(httpx.get(f"http://127.0.0.1:{self.port}/stats", timeout=10).json())

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


def instances(n: int, *, contexts: int | None = None, context_chars: int = 600, tag: str = "") -> list[Instance]:
    out = []
    for i in range(n):
        c = i % contexts if contexts else i
        context = (f"Synthetic abstract {tag}{c}: findings and methods. " * (context_chars // 40 + 1))[:context_chars]
        label = LABELS[int(hashlib.sha256(f"{tag}{i}".encode()).hexdigest(), 16) % 3]
        out.append(Instance(benchmark="pubmedqa", id=f"{tag}q{i:07d}",
                            fields={"context": context, "question": f"Is finding {i} supported?"},
                            references=[label], label=label))
    return out


def make_home(root: Path, base_url: str, *, concurrency: int) -> Home:
    home = Home(root)
    home.init()
    config = home.config.model_copy(deep=True)
    config.models.append(ModelEndpoint(name="fake", base_urls=[base_url], served_model="fake-model", timeout_s=60))
    config.runner = RunnerSettings(max_concurrency=concurrency, max_retries=4, seed=0)
    home.save_config(config)
    return home


def register(home: Home, items: list[Instance]) -> None:
    """Register through the store's API; beyond a few thousand rows, its row-by-row insert is slow, so the
    remaining instances are appended in one columnar insert with the same row layout (bench setup only). Then the
    send-order keys, as ``datasets register`` stores them, so that planning reads them as it does for a user."""
    import pyarrow as pa

    source = hashlib.sha256("".join(i.id for i in items[:1000]).encode() + str(len(items)).encode()).hexdigest()
    head, rest = items[:2000], items[2000:]
    with Store.open(home) as store:
        fingerprint = store.register_dataset("pubmedqa", source, "bench", "bench.json", head, {}).fingerprint
        if rest:
            table = pa.table({
                "benchmark": ["pubmedqa"] * len(rest), "fingerprint": [fingerprint] * len(rest),
                "instance_id": [i.id for i in rest],
                "position": pa.array(range(len(head), len(items)), pa.int32()),
                "label": [i.label for i in rest],
                "payload": [i.model_dump_json(include={"fields", "references", "meta"}) for i in rest],
            })
            store.conn.register("bench_instances", table)
            with store.transaction():
                store.conn.execute("INSERT INTO instances SELECT * FROM bench_instances")
                store.conn.execute("UPDATE datasets SET n_instances = ? WHERE fingerprint = ?",
                                   [len(items), fingerprint])
            store.conn.unregister("bench_instances")
        store_prefix_keys(store, shipped_spec("pubmedqa"), fingerprint, items)


def bodies(items: list[Instance]) -> list[dict[str, Any]]:
    spec = shipped_spec("pubmedqa")
    return [request_body("fake-model", build_request(spec, i, seed=0)) for i in items]


def actx(home: Home) -> AppContext:
    return AppContext(home=home, actor="bench")


# -- measurements -------------------------------------------------------------------------------------------


async def raw_load(base_url: str, payloads: list[dict[str, Any]], slots: int) -> float:
    """The ceiling: ``slots`` workers posting pre-built bodies, no parsing, no storage, no adaptation.

    Same HTTP library and pool layout as the runner (httpx, pools of 16 connections), so the ratio measures the
    runner's own overhead: building requests, adaptive concurrency, retries bookkeeping, group commits.
    """
    queue = iter(payloads)
    per = POOL_CONNECTIONS
    clients = [httpx.AsyncClient(timeout=60, trust_env=False,
                                 limits=httpx.Limits(max_connections=per, max_keepalive_connections=per))
               for _ in range(-(-slots // per))]

    async def worker(client: httpx.AsyncClient) -> None:
        for body in queue:
            response = await client.post(f"{base_url}/chat/completions", json=body)
            response.raise_for_status()

    start = time.perf_counter()
    await asyncio.gather(*(worker(clients[i % len(clients)]) for i in range(slots)))
    elapsed = time.perf_counter() - start
    for client in clients:
        await client.aclose()
    return elapsed


def four_threads(base_url: str, payloads: list[dict[str, Any]]) -> float:
    """How reference harnesses send: a pool of 4 threads, one blocking request each."""
    local = threading.local()

    def send(body: dict[str, Any]) -> None:
        client = getattr(local, "client", None)
        if client is None:
            client = local.client = httpx.Client(timeout=60, trust_env=False)
        response = client.post(f"{base_url}/chat/completions", json=body)
        response.raise_for_status()
        json.loads(response.content)

    start = time.perf_counter()
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(send, payloads))
    return time.perf_counter() - start


def runner_run(home: Home, *, order: str = "prefix", concurrency: int) -> dict[str, Any]:
    start = time.perf_counter()
    outcome = evaluate(actx(home), EvaluationRequest(
        selection=Selection(model="fake", benchmarks=["pubmedqa"], order=order),
        sending=Sending(concurrency=concurrency, show_progress=False), mode=Mode.new(always_new=True), score=False))
    total = time.perf_counter() - start
    report = outcome.report
    assert report is not None and report.errors == 0, "bench runs must not fail requests"
    return {"sent": report.sent, "send_wall_s": report.wall_s, "total_wall_s": total,
            "peak_concurrency": report.peak_concurrency, "final_concurrency": report.final_concurrency,
            "concurrency_steps": report.concurrency_history[:12]}


def measure_a_c(tmp: Path, n: int, n_threads: int, latency: float) -> dict[str, Any]:
    server = FakeServer(latency=latency, slots=256, responder="hash")
    try:
        items = instances(n, tag="a")
        payloads = bodies(items)
        home = make_home(tmp / "a", server.base_url, concurrency=256)
        register(home, items)
        raw_s = asyncio.run(raw_load(server.base_url, payloads, 256))
        run = runner_run(home, concurrency=256)
        threads_s = four_threads(server.base_url, payloads[:n_threads])
    finally:
        server.stop()
    raw_tput = n / raw_s
    runner_tput = n / run["send_wall_s"]
    threads_tput = n_threads / threads_s
    return {
        "server": {"latency_s": latency, "slots": 256},
        "requests": n,
        "raw_load_generator": {"wall_s": raw_s, "throughput_rps": raw_tput},
        "runner": {**run, "throughput_rps": runner_tput, "end_to_end_rps": n / run["total_wall_s"]},
        "ratio_runner_over_raw": runner_tput / raw_tput,
        "ratio_runner_end_to_end_over_raw": (n / run["total_wall_s"]) / raw_tput,
        "four_threads": {"requests": n_threads, "wall_s": threads_s, "throughput_rps": threads_tput},
        "ratio_runner_over_four_threads": runner_tput / threads_tput,
    }


CHILD = r"""
import json, resource, subprocess, sys, time
start = time.perf_counter()
done = subprocess.run(sys.argv[1:], capture_output=True, text=True)
wall = time.perf_counter() - start
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"code": done.returncode, "stderr_tail": done.stderr[-2000:] if done.returncode else "",
                  "stdout": done.stdout, "wall_s": wall, "user_s": usage.ru_utime, "sys_s": usage.ru_stime,
                  "max_rss_mb": usage.ru_maxrss / 1024}))
"""


def measure_b(tmp: Path, n: int, *, score: bool) -> dict[str, Any]:
    server = FakeServer(latency=0.001, slots=256, responder="hash")
    try:
        home = make_home(tmp / f"b{int(score)}", server.base_url, concurrency=256)
        t = time.perf_counter()
        register(home, instances(n, tag="b"))
        register_s = time.perf_counter() - t
        cmd = [sys.executable, "-m", "medhelm_local.cli", "--home", str(home.root), "run", "--model", "fake",
               "--benchmarks", "pubmedqa", "--json", *([] if score else ["--skip-scoring"])]
        env = {k: v for k, v in os.environ.items() if not k.startswith("MEDHELM_")}
        env["MEDHELM_LOG_LEVEL"] = "WARNING"
        child = subprocess.run([sys.executable, "-c", CHILD, *cmd], capture_output=True, text=True, env=env)
        measured = json.loads(child.stdout)
    finally:
        server.stop()
    if measured["code"] != 0:
        raise RuntimeError(f"runner failed: {measured['stderr_tail']}")
    session = json.loads(measured.pop("stdout"))["session"]
    cpu = measured["user_s"] + measured["sys_s"]
    return {"instances": n, "scored": score, "register_s": register_s, "process_wall_s": measured["wall_s"],
            "send_wall_s": session["wall_s"], "cpu_s": cpu, "cpu_ms_per_instance": 1000 * cpu / n,
            "peak_rss_mb": measured["max_rss_mb"], "peak_concurrency": session["peak_concurrency"]}


def measure_d(tmp: Path, n: int, contexts: int) -> dict[str, Any]:
    # 3,000-character contexts (12 blocks of 256), shared by n/contexts questions each; the cache holds a fifth
    # of the contexts, and each uncached block costs 8 ms of "prefill".
    blocks_per_context = 3000 // 256 + 2
    server = FakeServer(latency=0.02, slots=64, responder="hash", prefix_block_chars=256, per_block_s=0.008,
                        prefix_cache_blocks=blocks_per_context * contexts // 5)
    out: dict[str, Any] = {"server": {"latency_s": 0.02, "slots": 64, "per_uncached_block_s": 0.008,
                                      "cache_blocks": blocks_per_context * contexts // 5},
                           "requests": n, "contexts": contexts}
    try:
        items = instances(n, contexts=contexts, context_chars=3000, tag="d")
        home = make_home(tmp / "d", server.base_url, concurrency=64)
        register(home, items)
        for order in ("prefix", "shuffle"):
            before = server.stats()
            run = runner_run(home, order=order, concurrency=64)
            after = server.stats()
            hits = after["prefix_cache_hits"] - before["prefix_cache_hits"]
            misses = after["prefix_cache_misses"] - before["prefix_cache_misses"]
            out[order] = {**run, "throughput_rps": n / run["send_wall_s"], "cache_hit_rate": hits / (hits + misses)}
    finally:
        server.stop()
    out["ratio_prefix_over_shuffled"] = out["prefix"]["throughput_rps"] / out["shuffle"]["throughput_rps"]
    return out


PARTS = ("a_c_throughput", "b_memory_cpu", "d_prefix_order")
PROVENANCE = ("when", "commit", "host", "cpus", "python", "quick", "load_average_at_start", "load_average_at_end")


def git_commit() -> str | None:
    """The checkout's commit, marked ``-dirty`` when code differs from it (results do not count; None outside
    git)."""
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                                check=True).stdout.strip()
        dirty = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", "medhelm_local", "bench",
                                ":(exclude)bench/results"], cwd=REPO).returncode
    except (OSError, subprocess.CalledProcessError):
        return None
    return commit + ("-dirty" if dirty else "")


def merge_into_latest(results: dict[str, Any], file_name: str) -> None:
    """Replace, in ``latest.json``, the parts this run measured; the other parts keep their own provenance."""
    path = RESULTS / "latest.json"
    latest: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    latest = {k: v for k, v in latest.items() if k in PARTS or k == "parts"}
    parts = latest.setdefault("parts", {})
    for part in PARTS:
        if part in results:
            latest[part] = results[part]
            parts[part] = {"file": file_name, **{k: results.get(k) for k in PROVENANCE}}
    path.write_text(json.dumps(latest, indent=2, default=str) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="smaller sizes (about 2 minutes)")
    parser.add_argument("--latency", type=float, default=0.25, help="server latency for (a) and (c), seconds")
    parser.add_argument("--skip", default="", help="comma-separated parts to skip: a,b,d")
    parser.add_argument("--n-a", type=int, default=None, help="requests for (a)")
    parser.add_argument("--n-threads", type=int, default=None, help="requests for (c)")
    args = parser.parse_args()
    n_a, n_threads, n_b, n_d = (6000, 200, 20_000, 1500) if args.quick else (30_000, 400, 100_000, 3000)
    n_a, n_threads = args.n_a or n_a, args.n_threads or n_threads
    skip = set(args.skip.split(","))
    results: dict[str, Any] = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"), "commit": git_commit(), "host": platform.node(),
        "cpus": os.cpu_count(), "python": platform.python_version(), "quick": args.quick,
        "load_average_at_start": os.getloadavg(),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")

    def save() -> None:  # after every part, so a long run that is cut short keeps what it measured
        results["load_average_at_end"] = os.getloadavg()
        (RESULTS / f"{stamp}.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
        merge_into_latest(results, f"{stamp}.json")

    with tempfile.TemporaryDirectory(prefix="medhelm-bench-") as tmp_s:
        tmp = Path(tmp_s)
        if "a" not in skip:
            print(f"(a)+(c) {n_a} requests, 256 slots, latency {args.latency}s ...", flush=True)
            results["a_c_throughput"] = measure_a_c(tmp, n_a, n_threads, args.latency)
            save()
            summary(results)
        if "d" not in skip:
            print(f"(d) prefix-grouped vs shuffled, {n_d} requests ...", flush=True)
            results["d_prefix_order"] = measure_d(tmp, n_d, contexts=n_d // 20)
            save()
        if "b" not in skip:
            print(f"(b) {n_b} instances through `medhelm-local run` ...", flush=True)
            results["b_memory_cpu"] = measure_b(tmp, n_b, score=False)
            save()
    summary(results)


def summary(r: dict[str, Any]) -> None:
    print("\n== medhelm-local runner benchmark ==")
    if "a_c_throughput" in r:
        a = r["a_c_throughput"]
        print(f"(a) runner / raw load generator @256 slots: {a['ratio_runner_over_raw']:.3f} "
              f"(runner {a['runner']['throughput_rps']:.0f} req/s, raw {a['raw_load_generator']['throughput_rps']:.0f}"
              f" req/s; end to end incl. planning {a['ratio_runner_end_to_end_over_raw']:.3f}; "
              f"peak concurrency {a['runner']['peak_concurrency']})")
        print(f"(c) runner / 4 threads: {a['ratio_runner_over_four_threads']:.1f}x "
              f"(4 threads {a['four_threads']['throughput_rps']:.1f} req/s)")
    if "b_memory_cpu" in r:
        b = r["b_memory_cpu"]
        print(f"(b) {b['instances']} instances: CPU {b['cpu_ms_per_instance']:.2f} ms/instance, "
              f"peak RSS {b['peak_rss_mb']:.0f} MB, process wall {b['process_wall_s']:.0f}s")
    if "d_prefix_order" in r:
        d = r["d_prefix_order"]
        print(f"(d) prefix-grouped / shuffled throughput: {d['ratio_prefix_over_shuffled']:.2f}x "
              f"(cache hit rate {d['prefix']['cache_hit_rate']:.2f} vs {d['shuffle']['cache_hit_rate']:.2f})")
    print(f"results: {RESULTS / 'latest.json'}")


if __name__ == "__main__":
    main()
