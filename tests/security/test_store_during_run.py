"""Issue 12 §6 and issue 15 item 12: read-only commands work while a run holds the store, writers wait with a
bounded timeout, a failed registration leaves nothing behind, and `doctor` never takes the write lock.

Before the fix a run held the store's write lock from start to end: `doctor` (the container HEALTHCHECK),
`leaderboard`, `runs list` and `datasets list` failed (after the lock wait), and `datasets register --spec`
that lost the lock had already written or replaced the custom spec."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

import pytest

from medhelm_local.home import Home
from medhelm_local.store import Store
from medhelm_local.store.store import StoredVersion
from medhelm_local.testing.fake_openai import FakeOpenAIServer, hash_responder
from tests.runner.helpers import make_home, register, synthetic_instances

SAMPLES = Path(str(resources.files("medhelm_local.data") / "samples"))


@pytest.fixture(autouse=True)
def _private_umask() -> Iterator[None]:
    previous = os.umask(0o077)  # the store is created in this process (helpers), as the CLI would create it
    try:
        yield
    finally:
        os.umask(previous)


def _env(lock_timeout_s: float) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEDHELM_")}
    env["MEDHELM_LOG_LEVEL"] = "WARNING"
    env["MEDHELM_LOCK_TIMEOUT_S"] = str(lock_timeout_s)
    return env


def _cmd(home: Home, *args: str) -> list[str]:
    return [sys.executable, "-m", "medhelm_local.cli", "--home", str(home.root), *args]


def test_readers_and_a_writer_work_while_a_run_is_sending(tmp_path: Path) -> None:
    n = 480
    with FakeOpenAIServer(responder=hash_responder(), latency_s=0.1, slots=4) as server:
        home = make_home(tmp_path / "home", [server.base_url])
        register(home, synthetic_instances(n))
        run = subprocess.Popen(_cmd(home, "run", "--model", "fake", "--benchmarks", "pubmedqa", "--concurrency", "4",
                                    "--json"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=_env(60))
        try:
            deadline = time.monotonic() + 120
            while server.stats()["requests_seen"] < 20:
                assert run.poll() is None, run.communicate()
                assert time.monotonic() < deadline, "the run never started sending"
                time.sleep(0.05)
            extract = tmp_path / "followup.csv"
            extract.write_bytes((SAMPLES / "followup_needed.csv").read_bytes())
            # A reader waits at most 5 s for the lock: before the fix each of these failed while the run went on.
            commands = {
                "doctor": _cmd(home, "doctor", "--json"),
                "leaderboard": _cmd(home, "leaderboard", "--json"),
                "runs list": _cmd(home, "runs", "list", "--json"),
                "datasets list": _cmd(home, "datasets", "list", "--json"),
                "register": _cmd(home, "datasets", "register", "followup_needed", str(extract), "--spec",
                                 str(SAMPLES / "followup_needed.yaml"), "--json"),
            }
            started = {name: subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                              env=_env(5 if name != "register" else 60))
                       for name, cmd in commands.items()}
            results = {name: (*proc.communicate(timeout=180), proc.returncode) for name, proc in started.items()}
            during = run.poll() is None  # everything above finished while the run was still sending
            for name, (out, err, code) in results.items():
                assert code == 0, f"{name}: {out} {err}"
            assert during, "the run finished before the readers: make it longer"
            runs = json.loads(results["runs list"][0])
            assert [r["status"] for r in runs] == ["running"]
            doctor = {c["check"]: c["status"] for c in json.loads(results["doctor"][0])["checks"]}
            assert doctor["store"] == "ok"
            out, err = run.communicate(timeout=300)
            assert run.returncode == 0, err
        finally:
            if run.poll() is None:
                run.kill()
                run.wait()
        assert server.stats()["requests_seen"] == n  # nothing sent twice, nothing lost
    payload = json.loads(out)
    assert payload["status"] == "finished"
    with Store.open(home, read_only=True) as store:
        row = store.conn.execute("SELECT count(*), count(output) FROM responses").fetchone()
        assert row == (n, n)
        assert {d.benchmark for d in store.list_datasets()} == {"pubmedqa", "followup_needed"}


def test_doctor_never_takes_the_write_lock(tmp_path: Path) -> None:
    home = make_home(tmp_path / "home", ["http://127.0.0.1:9/v1"])
    register(home, synthetic_instances(3))
    with Store.open(home, read_only=True) as reader:  # a reader's shared lock: any writer is shut out
        reader.list_datasets()
        started = time.monotonic()
        doctor = subprocess.run(_cmd(home, "doctor", "--json"), capture_output=True, text=True, env=_env(2),
                                timeout=120)
        assert doctor.returncode == 0, doctor.stdout + doctor.stderr
        assert {c["check"]: c["status"] for c in json.loads(doctor.stdout)["checks"]}["store"] == "ok"
        assert time.monotonic() - started < 60


def test_a_registration_that_cannot_take_the_lock_leaves_no_spec(tmp_path: Path) -> None:
    home = make_home(tmp_path / "home", ["http://127.0.0.1:9/v1"])
    spec = tmp_path / "followup_needed.yaml"
    spec.write_bytes((SAMPLES / "followup_needed.yaml").read_bytes())
    extract = tmp_path / "followup.csv"
    extract.write_bytes((SAMPLES / "followup_needed.csv").read_bytes())
    register_cmd = _cmd(home, "datasets", "register", "followup_needed", str(extract), "--spec", str(spec))
    target = home.root / "benchmarks" / "followup_needed.yaml"
    with Store.open(home):  # another process's registration or run holds the store
        lost = subprocess.run(register_cmd, capture_output=True, text=True, env=_env(1), timeout=120)
    assert lost.returncode == 1 and "waited 1s" in lost.stderr
    assert not target.exists(), "a failed registration wrote its custom spec"
    assert not any(p.name.startswith(".staging") for p in home.root.iterdir())

    first = subprocess.run(register_cmd, capture_output=True, text=True, env=_env(30), timeout=120)
    assert first.returncode == 0, first.stderr
    installed = target.read_bytes()
    spec.write_text(spec.read_text().replace("name: Follow-up Needed", "name: Follow-up Needed v2"))
    with Store.open(home):
        lost = subprocess.run(register_cmd, capture_output=True, text=True, env=_env(1), timeout=120)
    assert lost.returncode == 1
    assert target.read_bytes() == installed, "a failed registration replaced the custom spec"


def test_a_registration_whose_commit_fails_restores_the_previous_spec(tmp_path: Path) -> None:
    from medhelm_local.application.datasets import register_file
    from medhelm_local.benchmarks.registry import load_custom_spec
    from medhelm_local.context import AppContext

    home = make_home(tmp_path / "home", ["http://127.0.0.1:9/v1"])
    app_ctx = AppContext(home=home, actor="tester")
    spec_file = tmp_path / "followup_needed.yaml"
    spec_file.write_bytes((SAMPLES / "followup_needed.yaml").read_bytes())
    extract = SAMPLES / "followup_needed.csv"
    register_file(app_ctx, load_custom_spec(spec_file), extract, spec_file=spec_file)
    target = home.root / "benchmarks" / "followup_needed.yaml"
    installed = target.read_bytes()
    spec_file.write_text(spec_file.read_text().replace("max_tokens: 8", "max_tokens: 9"))

    original = Store.register_dataset

    def failing(self: Store, *args: object, **kwargs: object) -> StoredVersion:
        before = kwargs["before_commit"]

        def then_fail() -> None:
            before()  # type: ignore[operator]
            raise OSError("disk full at commit")

        kwargs["before_commit"] = then_fail
        return original(self, *args, **kwargs)  # type: ignore[arg-type]

    Store.register_dataset = failing  # type: ignore[method-assign]
    try:
        try:
            register_file(app_ctx, load_custom_spec(spec_file), extract, spec_file=spec_file)
            raise AssertionError("the registration should have failed")
        except OSError:
            pass
    finally:
        Store.register_dataset = original  # type: ignore[method-assign]
    assert target.read_bytes() == installed
