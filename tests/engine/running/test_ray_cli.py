"""`python -m engine run --backend ray` as a user runs it, in subprocesses: a bad address fails in
one line within seconds and leaves the store alone; a driver killed with -9 mid-run leaves no
Ray worker behind for long, and running the command again completes without duplicates."""

from __future__ import annotations

import os
import re
import resource
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("ray", reason="pip install -r requirements-ray.txt")
psutil = pytest.importorskip("psutil")

from engine.__main__ import main  # noqa: E402
from store import connect  # noqa: E402
from tests.engine.running.test_run_experiments import make_dataset  # noqa: E402

pytestmark = pytest.mark.ray
ROOT = Path(__file__).resolve().parents[3]


def _env(tmp_path: Path) -> dict:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PATTRIEVAL_CACHE": str(tmp_path / "cache"),
            "PYTHONPATH": str(ROOT)}


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_bad_ray_address_exits_2_in_one_line_within_seconds_and_leaves_the_store_alone(tmp_path, tiny_llama_dir):
    data = make_dataset(tmp_path / "d.jsonl", 2)
    db = tmp_path / "r.duckdb"
    address = f"127.0.0.1:{_closed_port()}"
    # CPU seconds, not wall time: a loaded 2-core machine stretches the wall clock many times over,
    # while what the user must not pay for (Ray started, retried or waited on) costs CPU here too.
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(
        [sys.executable, "-m", "engine", "run", "--model", str(tiny_llama_dir), "--dataset", str(data),
         "--db", str(db), "--backend", "ray", "--ray-address", address],
        cwd=ROOT, env=_env(tmp_path), capture_output=True, text=True, timeout=600,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    took = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"error: no Ray cluster answers at {address} (Connection refused); start one with `ray start --head` "
        "or check --ray-address"
    ]
    assert took < 10
    assert not db.exists()


def _http2_listener() -> tuple[socket.socket, int, list[int]]:
    """A port that speaks HTTP/2 but is no Ray cluster, like a web server or proxy: every request
    gets `404`. It passes the socket pre-check, so ray.init itself is refused there. The list
    counts the requests it answered: each of ray.init's tries to reach a GCS there is one."""
    import struct
    import threading

    def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
        return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload

    def read(conn: socket.socket, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = conn.recv(n - len(data))
            if not chunk:
                raise OSError("closed")
            data += chunk
        return data

    def serve_one(conn: socket.socket) -> None:
        with conn:
            try:
                conn.settimeout(30)
                read(conn, 24)  # the client preface
                conn.sendall(frame(0x4, 0, 0))  # our SETTINGS
                while True:
                    head = read(conn, 9)
                    length, kind, flags = int.from_bytes(head[:3], "big"), head[3], head[4]
                    stream = int.from_bytes(head[5:], "big") & 0x7FFFFFFF
                    payload = read(conn, length)
                    if kind == 0x4 and not flags & 0x1:
                        conn.sendall(frame(0x4, 0x1, 0))  # SETTINGS ACK
                    elif kind == 0x6 and not flags & 0x1:
                        conn.sendall(frame(0x6, 0x1, 0, payload))  # PING ACK
                    elif kind == 0x1:
                        requests.append(stream)
                        # HEADERS ":status: 404" (HPACK static index 13), END_STREAM | END_HEADERS
                        conn.sendall(frame(0x1, 0x5, stream, b"\x8d"))
            except OSError:
                pass

    requests: list[int] = []
    server = socket.socket()
    # Every interface: Ray rewrites 127.0.0.1 in an address to this machine's own IP.
    server.bind(("0.0.0.0", 0))
    server.listen(16)

    def serve():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:  # closed by the test
                return
            threading.Thread(target=serve_one, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    return server, server.getsockname()[1], requests


def test_an_address_that_answers_but_is_no_ray_cluster_is_one_line_too(tmp_path, tiny_llama_dir):
    from engine.running.backend_ray import JOIN_WAIT_S

    data = make_dataset(tmp_path / "d.jsonl", 2)
    db = tmp_path / "r.duckdb"
    server, port, requests = _http2_listener()
    env = _env(tmp_path)
    env.pop("RAY_gcs_server_port_wait_time_s", None)  # the command's own bound, not the caller's
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "engine", "run", "--model", str(tiny_llama_dir), "--dataset", str(data),
             "--db", str(db), "--backend", "ray", "--ray-address", f"127.0.0.1:{port}"],
            # A guard against a hang, not the measure: imports alone take a minute on a loaded machine.
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
        )
    finally:
        server.close()
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"error: could not join a Ray cluster at 127.0.0.1:{port}: something answers there but lets no Ray driver "
        "in; check --ray-address and that `ray start` runs there"
    ]
    # How long the user waits is ray.init's tries, one second apart: bounded by JOIN_WAIT_S (Ray's
    # own default is 20 tries). Counted where they arrive, so load cannot stretch the measure.
    assert 1 <= len(requests) <= JOIN_WAIT_S, requests
    assert not db.exists()


def _ray_processes(root: psutil.Process) -> list[psutil.Process]:  # type: ignore[name-defined]
    return [p for p in root.children(recursive=True)]


def _is_worker(proc: psutil.Process) -> bool:  # type: ignore[name-defined]
    """A Ray worker process (an actor, the probe, an idle worker); not the raylet's agents, which
    the test ends by PID with the GCS and raylet."""
    try:
        name = proc.name()
        return name.startswith("ray::") and not name.endswith("Agent")
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        return False


def test_kill_9_of_the_driver_mid_run_then_a_rerun_completes_without_duplicates(tmp_path, tiny_llama_dir):
    data = make_dataset(tmp_path / "d.jsonl", 30)
    db = tmp_path / "r.duckdb"
    args = ["run", "--model", str(tiny_llama_dir), "--dataset", str(data), "--db", str(db), "--quantize", "none",
            "--max-new-tokens", "8", "--batch-size", "1"]
    driver = subprocess.Popen(
        [sys.executable, "-m", "engine", *args, "--backend", "ray", "--actors", "2"],
        cwd=ROOT, env=_env(tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    leftovers: list[psutil.Process] = []
    try:
        # The progress bar says when the first answers are stored; kill the driver then. Ray's
        # start and the workers' model load take minutes on a loaded machine: the wait is long,
        # and a wait that ends without a stored answer fails here, not as "0 answers kept" below.
        seen = b""
        stored = 0
        deadline = time.monotonic() + 600
        os.set_blocking(driver.stderr.fileno(), False)
        while time.monotonic() < deadline and driver.poll() is None:
            chunk = driver.stderr.read() or b""
            seen += chunk
            stored = max([int(n) for n in re.findall(rb"\| *(\d+)/90 \[", seen)], default=0)
            if stored >= 1:
                break
            time.sleep(0.05)
        assert driver.poll() is None, seen.decode(errors="replace")[-2000:]
        assert stored >= 1, "no answer stored within 600 s: " + seen.decode(errors="replace")[-2000:]
        leftovers = _ray_processes(psutil.Process(driver.pid))
        workers = [p for p in leftovers if _is_worker(p)]
        assert workers, [p.name() for p in leftovers]
        driver.send_signal(signal.SIGKILL)
        driver.wait(timeout=10)

        # The workers notice their raylet or driver is gone and exit.
        gone, alive = psutil.wait_procs(workers, timeout=30)
        assert not alive, [(p.pid, p.name()) for p in alive]
    finally:
        if driver.poll() is None:
            driver.kill()
        # Whatever Ray left (its GCS and raylet of that session), ended by PID.
        for proc in leftovers:
            try:
                proc.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(leftovers, timeout=10)

    with connect(db, read_only=True) as conn:
        kept = conn.execute("SELECT count(*) FROM generations").fetchone()[0]
        assert conn.execute("SELECT DISTINCT status FROM runs").fetchall() == [("running",)]
    assert 1 <= kept < 90

    # The run of the killed process is not owned any more; the same command resumes it (here on
    # the local backend: a run resumes across backends) and generates only what is missing.
    assert main(args) == 0
    with connect(db, read_only=True) as conn:
        assert conn.execute("SELECT count(*), count(DISTINCT (run_id, item_id)) FROM generations").fetchall() == [(90, 90)]
        assert conn.execute("SELECT DISTINCT status FROM runs").fetchall() == [("complete",)]
