"""RayBackend: the planned batches generated on a pool of Ray actors, written by the driver.

`python -m engine run ... --backend ray [--ray-address ADDR|auto] [--actors N] [--gpus-per-actor G]`

- `ray.data.from_items` holds one row per planned batch (its id and pickled prompt token ids);
  `map_batches` runs them through a callable class that loads the model once, in its
  constructor, on `ActorPoolStrategy(size=N)` actors with `num_gpus=G` each.
- The driver reads with `iter_batches(batch_size=None, prefetch_batches=0)`, so a batch reaches
  the write loop (engine.running.write_loop) as soon as it is done. Order is not kept: every result
  carries its batch id, hence its run and item ids.
- Ray retries a dead actor's tasks forever by default, so a batch that always kills its worker
  would loop without end: restarts and task retries are capped (MAX_RETRIES), after which the
  pipeline raises and the write loop marks the open runs failed.
- Provenance: before anything is written a probe task loads the model on a worker as the
  actors will and reports revision, quantization, dtype, device and library versions; every
  result carries its actor's fingerprint and the write loop refuses one that differs.
- Threads: Ray starts each worker with OMP_NUM_THREADS=1 (one reserved CPU per actor), while
  the driver would compute with the machine's cores. Every actor computes with the driver's
  torch thread count (engine.generation.threads, carried in the generation config), so a batch's log-probs
  are those a local run stores, to the last bit; it reserves one CPU whatever that count is.
- Without an address Ray runs on this machine: `address="local"`, explicitly, because a bare
  `ray.init()` joins whatever cluster (or stale marker file) it finds. A given address is
  checked with a short socket timeout first: `ray.init` on an unreachable one hangs for minutes.
- The project's code travels with `runtime_env={"py_modules": [engine]}`; torch and
  transformers must already be on the cluster's image. The HF token never travels (Ray records
  runtime environments and actor arguments): nodes use their own `HF_TOKEN` or login.

Nothing here imports ray at module level: it is an optional dependency (requirements-ray.txt).
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import socket
import sys
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.errors import UserError
from engine.generation import model_check
from engine.generation.threads import use_threads
from engine.running.backends import BatchResult, PlannedBatch
from engine.running.provenance import Provenance, library_versions
from engine.running.run_request import generation_config

INSTALL_HINT = "the Ray backend needs ray[data], which is not installed: pip install -r requirements-ray.txt"
MAX_RETRIES = 2  # actor restarts and task retries: enough for a lost node, not a loop
CONNECT_TIMEOUT_S = 3.0
JOIN_WAIT_S = 3  # seconds ray.init keeps trying to reach a cluster's GCS at a given address
# Versions that must agree between driver and workers: the driver tokenizes every prompt.
_MATCHED_LIBRARIES = ("transformers", "tokenizers")


def import_ray():
    """ray and ray.data, or the one-line install hint."""
    try:
        import ray
        import ray.data  # noqa: F401 - the part we use; ray without [data] lacks its dependencies
    except ImportError:
        raise UserError(INSTALL_HINT) from None
    return ray


def check_ray_device(device: str) -> None:
    """Ray gives each actor its GPU (CUDA_VISIBLE_DEVICES), so a fixed cuda:N cannot apply."""
    if device.startswith("cuda"):
        raise UserError(
            f"--device {device} cannot be used with --backend ray: Ray assigns each actor its GPU; "
            "use --gpus-per-actor instead"
        )


def parse_address(address: str) -> tuple[str, int]:
    """('host', port) of 'HOST:PORT' or 'ray://HOST:PORT'."""
    rest = address.removeprefix("ray://")
    host, sep, port = rest.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UserError(f"--ray-address '{address}' is not HOST:PORT, ray://HOST:PORT, local or auto")
    return host, int(port)


def check_address(address: str | None, timeout: float = CONNECT_TIMEOUT_S) -> None:
    """Fail in one line, within `timeout`, when nothing listens at the cluster's address."""
    if address in (None, "local"):
        return
    if address == "auto":
        address = os.environ.get("RAY_ADDRESS") or None
        if address is None or address in ("auto", "local"):
            return  # ray.init finds (or fails to find) the cluster on this machine at once
    host, port = parse_address(address)
    try:
        with socket.create_connection((host, port), timeout=timeout) as conn:
            # A port that accepts is not yet a cluster (a proxy or another service accepts too,
            # and ray.init would then hang): Ray's GCS and client server speak gRPC, so an
            # HTTP/2 client preface must be answered with a SETTINGS frame.
            conn.settimeout(timeout)
            conn.sendall(_HTTP2_PREFACE + _HTTP2_EMPTY_SETTINGS)
            header = _read(conn, 9)
            if len(header) < 9 or header[3] != 0x4:
                raise ConnectionError("not a Ray (gRPC) endpoint")
    except OSError as err:
        reason = "timed out" if isinstance(err, TimeoutError) else (
            str(err) if isinstance(err, ConnectionError) and not err.strerror else (err.strerror or type(err).__name__))
        raise UserError(
            f"no Ray cluster answers at {address} ({reason}); start one with `ray start --head` "
            "or check --ray-address"
        ) from None


_HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_HTTP2_EMPTY_SETTINGS = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"  # length 0, type SETTINGS, stream 0


def _read(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            break
        data += chunk
    return data


@contextlib.contextmanager
def _joining(address: str | None):
    """While ray.init joins a cluster at an address: Ray tries to reach its GCS once a second
    for about 20 s. Bound that wait to JOIN_WAIT_S tries (unless the user set it:
    RAY_gcs_server_port_wait_time_s), and keep its warnings off the terminal; a local start is
    left as Ray has it."""
    if address in (None, "local"):
        yield
        return
    changed = {}
    for name, value in (("RAY_gcs_server_port_wait_time_s", str(JOIN_WAIT_S)),):
        if name not in os.environ:
            changed[name] = os.environ[name] = value
    # Each failed try is a C++ warning written to file descriptor 2 itself, which no Python or
    # Ray setting quiets here: set aside while joining. A failure becomes one line (start()).
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        for name in changed:
            os.environ.pop(name, None)


@dataclass(frozen=True)
class WorkerSettings:
    """What each actor needs to load the model; recorded by Ray, so it never holds a token."""

    model: str
    quantize: str
    device: str
    dtype: str
    generation: Any  # engine.generation.generate.GenerationConfig


def fingerprint_of(loaded: Any, threads: int) -> tuple:
    """What must be equal on every worker for results to be comparable; `threads` is the torch
    thread count the batch was computed with, read where it was computed."""
    versions = library_versions()
    return (
        ("revision", loaded.revision),
        ("quantization", loaded.quantization),
        ("dtype", loaded.dtype),
        ("device", loaded.device.split(":")[0]),  # cuda:0 on every GPU actor: Ray maps its GPU
        ("dropped_generation_defaults", tuple(loaded.dropped_generation_defaults)),
        ("libraries", tuple(sorted((k, v) for k, v in versions.items() if k != "duckdb"))),
        ("torch_threads", threads),
    )


def _threads_in_effect(settings: WorkerSettings) -> int:
    """Set the driver's thread count in this worker (Ray starts it with OMP_NUM_THREADS=1) and
    return the count in effect."""
    import torch

    wanted = settings.generation.threads
    return use_threads(wanted) if wanted is not None else torch.get_num_threads()


def _load(settings: WorkerSettings):
    from engine.generation.models import load_model

    # No token argument: from_pretrained reads this node's HF_TOKEN or login cache itself.
    return load_model(settings.model, quantize=settings.quantize, device=settings.device, dtype=settings.dtype)


class Generator:
    """The callable class `map_batches` runs: loads the model once, then generates batches.

    Its settings are a class attribute of a subclass made per pipeline (RayBackend.generate),
    not constructor arguments: those would sit in the object store, where Ray cannot restart
    an actor from them once they are gone.
    """

    settings: WorkerSettings

    def __init__(self) -> None:
        from engine.generation.models import neutralize_generation_config

        self.loaded = _load(self.settings)
        loaded = self.loaded
        neutralize_generation_config(loaded.model, loaded.stop_token_ids, loaded.pad_token_id)

    def generate(self, batch: PlannedBatch) -> BatchResult:
        from engine.generation.generate import generate_batch

        # generate_batch sets the thread count itself; it is read back here, in the thread that
        # computed, so the write loop refuses a batch computed with another count.
        outputs = generate_batch(self.loaded, [list(ids) for ids in batch.input_ids], self.settings.generation)
        fingerprint = fingerprint_of(self.loaded, _threads_in_effect(self.settings))
        return BatchResult(batch.batch_id, tuple(outputs), fingerprint)

    def __call__(self, rows: dict) -> dict:
        import numpy as np

        results = [pickle.dumps(self.generate(pickle.loads(p))) for p in rows["batch"]]
        out = np.empty(len(results), dtype=object)
        out[:] = results
        return {"batch_id": rows["batch_id"], "result": out}


def _probe(settings: WorkerSettings) -> tuple[tuple, Provenance]:
    """Runs on a worker before anything is written: how the model loads there."""
    loaded = _load(settings)
    threads = _threads_in_effect(settings)
    provenance = Provenance(
        revision=loaded.revision,
        quantization=loaded.quantization,
        dtype=loaded.dtype,
        device=loaded.device,
        dropped_generation_defaults=tuple(loaded.dropped_generation_defaults),
        library_versions=tuple(library_versions().items()),
        threads=threads,
    )
    return fingerprint_of(loaded, threads), provenance


def runtime_env() -> dict:
    """The project's engine package, shipped to every worker (heavy libraries come from the image).

    Ray takes local folders only at the job level (`ray.init`); a caller that starts Ray itself
    (the tests' shared cluster) passes this too."""
    return {"py_modules": [str(Path(__file__).resolve().parents[1])]}


class RayBackend:
    """Generates planned batches on N Ray actors; `start` before `execute_plan`, `close` after."""

    def __init__(self, request: Any, tokenizer: Any, *, address: str | None = None, actors: int = 1,
                 gpus_per_actor: float | None = None, worker: type = Generator,
                 max_retries: int = MAX_RETRIES) -> None:
        check_ray_device(request.device)
        self.address = address
        self.actors = actors
        self.gpus_per_actor = gpus_per_actor
        self.tokenizer = tokenizer
        self.worker = worker
        self.max_retries = max_retries
        self.settings = WorkerSettings(request.model, request.quantize, request.device, request.dtype,
                                       generation_config(request))
        self.provenance: Provenance | None = None
        self.fingerprint: tuple | None = None
        self._started_ray = False

    def start(self) -> RayBackend:
        """Connect (or start Ray here), then probe one worker; raises UserError in one line."""
        ray = import_ray()
        if not ray.is_initialized():
            check_address(self.address)

            # Workers' output stays in Ray's session logs; their errors reach the driver as
            # exceptions, and the command's own progress bar is the one to watch.
            try:
                with _joining(self.address):
                    ray.init(
                        address=self.address or "local",
                        include_dashboard=False,
                        # Errors only: Ray's warnings (token authentication on by default, and
                        # the like) are for its operators; they stay in the session's logs.
                        logging_level=logging.ERROR,
                        log_to_driver=False,
                        runtime_env=runtime_env(),
                    )
            except (ConnectionError, RuntimeError) as err:
                # Something answered at the address, but it is not a Ray cluster that lets us in
                # (another gRPC service, a proxy, a cluster still starting): one line, not Ray's
                # traceback.
                first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
                if self.address in (None, "local"):
                    raise UserError(f"Ray could not start on this machine ({first})") from None
                if self.address == "auto" and not os.environ.get("RAY_ADDRESS"):
                    raise UserError("--ray-address auto: no Ray cluster runs on this machine and RAY_ADDRESS is "
                                    "not set; start one with `ray start --head`, or leave --ray-address out "
                                    "to run Ray for this command only") from None
                why = "" if "Failed to connect to Ray cluster" in first else f" ({first})"
                raise UserError(f"could not join a Ray cluster at {self.address}: something answers there but "
                                f"lets no Ray driver in{why}; check --ray-address and that `ray start` runs "
                                "there") from None
            self._started_ray = True
        if self.gpus_per_actor is None:
            self.gpus_per_actor = 1.0 if ray.cluster_resources().get("GPU", 0) > 0 else 0.0
        # With a GPU, Ray ends the probe's worker after the task (max_calls defaults to 1 for GPU
        # tasks given to ray.remote itself, not to .options), so the model it loaded does not
        # hold the GPU memory an actor needs next.
        probe = ray.remote(num_cpus=1, num_gpus=self.gpus_per_actor, max_retries=MAX_RETRIES)(_probe)
        try:
            fingerprint, worker = ray.get(probe.remote(self.settings))
        except ray.exceptions.RayTaskError as err:
            cause = err.as_instanceof_cause()
            if isinstance(cause, UserError):
                raise UserError(str(cause).strip().splitlines()[-1]) from None
            raise
        self._check_versions(dict(worker.library_versions))
        driver = library_versions()
        versions = dict(worker.library_versions)
        if "duckdb" in driver:
            versions["duckdb"] = driver["duckdb"]  # the store's writer is the driver
        kind = worker.device.split(":")[0]
        self.fingerprint = fingerprint
        self.provenance = Provenance(
            revision=worker.revision,
            quantization=worker.quantization,
            dtype=worker.dtype,
            device=f"ray:{kind}×{self.actors}",
            dropped_generation_defaults=worker.dropped_generation_defaults,
            library_versions=tuple(versions.items()),
            threads=worker.threads,
        )
        return self

    def _check_versions(self, worker: dict[str, str]) -> None:
        driver = library_versions()
        for name in _MATCHED_LIBRARIES:
            if driver.get(name) != worker.get(name):
                raise UserError(
                    f"{name} {worker.get(name, 'missing')} on the Ray workers, {driver.get(name, 'missing')} here: "
                    "the driver tokenizes the prompts, so both must match"
                )

    def generate(self, batches: Sequence[PlannedBatch]) -> Iterator[BatchResult]:
        """Each finished batch as it arrives, in no particular order."""
        if self.provenance is None:
            raise RuntimeError("RayBackend.generate before start")
        import ray.data

        ctx = ray.data.DataContext.get_current()
        ctx.enable_progress_bars = False  # the command has its own bar

        # Ray Data logs each pipeline's start, and warns that progress bars are off; failures
        # reach the driver as exceptions anyway.
        logging.getLogger("ray.data").setLevel(logging.ERROR)
        # A small run (fewer batches than actors) is fine; Ray Data warns about it at run time.
        warnings.filterwarnings("ignore", message="The minimum number of concurrent actors", category=UserWarning)
        worker = type(self.worker.__name__, (self.worker,), {"settings": self.settings})
        rows = [{"batch_id": b.batch_id, "batch": pickle.dumps(b)} for b in batches]
        dataset = ray.data.from_items(rows, override_num_blocks=len(rows))
        with warnings.catch_warnings():
            # Ray 2.60 routes max_restarts/max_task_retries through its deprecated **ray_remote_args;
            # they are the only way to cap retries of a map_batches actor pool.
            warnings.simplefilter("ignore")
            mapped = dataset.map_batches(
                worker,
                batch_size=1,
                compute=ray.data.ActorPoolStrategy(size=self.actors),
                num_cpus=1,
                num_gpus=self.gpus_per_actor,
                max_restarts=self.max_retries,
                max_task_retries=self.max_retries,
            )
        try:
            for block in mapped.iter_batches(batch_size=None, prefetch_batches=0, batch_format="numpy"):
                for payload in block["result"]:
                    yield pickle.loads(payload)
        except ray.exceptions.RayTaskError as err:
            cause = err.as_instanceof_cause()
            if isinstance(cause, UserError):  # e.g. a node cannot load the model
                raise UserError(str(cause).strip().splitlines()[-1]) from None
            raise
        except ray.exceptions.RayError as err:
            # An actor that died more often than MAX_RETRIES allows: the batch kills its worker
            # (out of memory, a crash in CUDA), or nodes keep going away.
            raise UserError(
                f"a Ray worker died {self.max_retries + 1} times on one batch ({type(err).__name__}); "
                "the unfinished runs are marked failed and resume when this command runs again; "
                "see the workers' logs with `ray logs`"
            ) from None

    def close(self) -> None:
        """Stop Ray when this backend started it (a local instance's workers go with it)."""
        if self._started_ray:
            import ray

            ray.shutdown()
            self._started_ray = False


@dataclass(frozen=True)
class DriverTokenizer:
    """What the driver needs without the model: the tokenizer (it plans and measures every
    prompt) and the context length (check_prompt_lengths)."""

    tokenizer: Any
    context_length: int | None


def load_driver_tokenizer(request: Any) -> DriverTokenizer:
    """The request's tokenizer and context length, read from the model's files, no weights."""
    from transformers import AutoConfig, AutoTokenizer

    from engine.generation.models import context_length, hub_error_to_user_error

    model_check.check_model_name(request.model)  # as load_model does: at once where the Hub cannot be reached
    token = request.hf_token or os.environ.get("HF_TOKEN") or None
    try:
        tokenizer = AutoTokenizer.from_pretrained(request.model, token=token)
        config = AutoConfig.from_pretrained(request.model, token=token)
    except (OSError, ValueError) as err:
        if Path(request.model).is_dir():
            first_line = (str(err).strip().splitlines() or [type(err).__name__])[0]
            raise UserError(f"model folder '{request.model}' is not a loadable Hugging Face model: {first_line}") from None
        mapped = hub_error_to_user_error(request.model, err, has_token=token is not None)
        if mapped is None:
            raise
        raise mapped from None
    return DriverTokenizer(tokenizer, context_length(config, tokenizer))
