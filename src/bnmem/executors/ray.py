"""Ray executor: the same jobs as the local executor, as plain Ray tasks on a cluster.

Each job is one Ray task with its own resource request (CPUs, a GPU fraction so
several small-model ensembles share one GPU). Jobs write their own results into
the run directory, so the directory must sit on a filesystem every node sees;
the driver only collects the small summaries, in the order of the specs.

Failure semantics:

* A worker that dies mid-job (SIGKILL, OOM killer, lost node) is retried up to
  ``max_retries`` times. That is safe because jobs are idempotent: they skip
  when their ``DONE`` marker exists and write everything through temp files.
* A job that raises is a real failure, never retried: the remaining jobs are
  cancelled and one :class:`JobFailedError` names the job.

Ray is an optional extra (``pip install 'bnmem[ray]'``); this module is imported
only when the ``ray`` executor is asked for, never by ``import bnmem``.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
import os
import socket
import sys
import time
from typing import Any, Sequence

from tqdm.auto import tqdm

from bnmem.errors import BnmemError
from bnmem.executors.base import Executor, JobFn

try:  # The import is the availability check; keep it out of ``import bnmem``.
    import ray
    from ray import exceptions as ray_exceptions
except ImportError:  # pragma: no cover - exercised by the "ray missing" test in a clean interpreter
    ray = None  # type: ignore[assignment]
    ray_exceptions = None  # type: ignore[assignment]

RAY_MISSING = "ray is not installed; pip install 'bnmem[ray]'"

# Keys of a per-call ``resources`` dict that are Ray task options; any other key
# is a custom resource (e.g. ``{"accelerator_type_a100": 1}``).
_TASK_OPTION_KEYS = ("num_cpus", "num_gpus", "memory")


def _call(fn: JobFn, spec: Any) -> dict[str, Any]:
    """A Ray task running a job callable that is not a plain function (a ``functools.partial``)."""
    return fn(spec)


def _job_name(fn: Any) -> str:
    """The name of the job function ``fn`` runs: its own, or the innermost of a ``functools.partial``
    (``partial(guarded, train_chunk_job)``: ``train_chunk_job``)."""
    while isinstance(fn, functools.partial):
        inner = [a for a in fn.args if callable(a)]
        fn = inner[-1] if inner else fn.func
    return getattr(fn, "__name__", "job")


class JobFailedError(BnmemError):
    """One job of a ``map`` failed; the message names it.

    Attributes:
        index: position of the failed job in ``specs``.
        spec: the failed job's spec.
        remote_traceback: the worker-side traceback, when the job raised.
    """

    def __init__(self, message: str, index: int, spec: Any, remote_traceback: str | None = None) -> None:
        super().__init__(message)
        self.index = index
        self.spec = spec
        self.remote_traceback = remote_traceback


def _short_spec(spec: Any, limit: int = 160) -> str:
    """A one-line, length-capped rendering of a spec (a dataclass's fields, or a dict) for error messages."""
    if dataclasses.is_dataclass(spec) and not isinstance(spec, type):
        spec = {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec)}
    try:
        text = json.dumps(spec, sort_keys=True, default=str)
    except (TypeError, ValueError):
        text = repr(spec)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _check_reachable(address: str, timeout: float = 5.0) -> None:
    """Fail fast when a ``HOST:PORT`` cluster address does not answer.

    ``ray.init`` retries an unreachable address for minutes before giving up;
    one TCP connect tells the user at once. ``auto`` and ``ray://`` addresses
    are left to Ray (``auto`` already fails fast when no cluster runs here).

    Raises:
        BnmemError: nothing accepts connections at ``address``.
    """
    host, sep, port = address.rpartition(":")
    if not sep or "://" in address or not port.isdigit():
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as e:
        raise BnmemError(f"cannot reach the Ray cluster at {address} ({e.strerror or e}); "
                         "is `ray start --head` running there?") from e


class RayExecutor(Executor):
    """Runs jobs as Ray tasks, locally or on an existing cluster.

    Ray is started lazily (first :meth:`map`, or :meth:`start`), so building the
    executor is cheap and a run with nothing left to do never touches Ray.

    Args:
        address: ``None`` starts a private single-node Ray on this machine (no
            dashboard, no usage stats) and :meth:`close` stops it; ``"auto"`` or
            ``"HOST:PORT"`` connects to a running cluster, which :meth:`close`
            leaves running. If Ray is already initialized in this process (for
            example by the caller), that session is used and left alone.
        num_cpus_per_job: CPUs each job reserves. Match it to the job's torch
            thread count so jobs do not oversubscribe a node.
        num_gpus_per_job: GPUs each job reserves; fractions below 1 pack several
            jobs on one GPU (``1/k`` for k jobs per GPU).
        max_retries: how often a job whose worker died is resubmitted.
        progress: show a tqdm bar driven by completions.
        init_kwargs: extra keyword arguments for ``ray.init`` (override ours).

    Raises:
        BnmemError: ray is not installed, or an argument is out of range.
    """

    name = "ray"

    def __init__(self, address: str | None = None, num_cpus_per_job: float = 1, num_gpus_per_job: float = 0.0,
                 max_retries: int = 3, progress: bool = True, init_kwargs: dict[str, Any] | None = None) -> None:
        if ray is None:
            raise BnmemError(RAY_MISSING)
        if num_cpus_per_job < 0 or num_gpus_per_job < 0:
            raise BnmemError("num_cpus_per_job and num_gpus_per_job must be >= 0")
        if max_retries < 0:
            raise BnmemError("max_retries must be >= 0")
        self.address = address or None
        self.num_cpus_per_job = num_cpus_per_job
        self.num_gpus_per_job = num_gpus_per_job
        self.max_retries = max_retries
        self.progress = progress
        self.init_kwargs = dict(init_kwargs or {})
        # What close() must undo: "started" (our own local Ray: shut it down),
        # "connected" (disconnect the driver only), None (not ours to touch).
        self._owns: str | None = None
        self._started = False
        self.startup_seconds: float | None = None

    # -- connection ---------------------------------------------------------------

    def start(self) -> None:
        """Start or connect to Ray now (idempotent); records ``startup_seconds``.

        Raises:
            BnmemError: the cluster address cannot be reached, or no cluster runs
                here for ``auto``.
        """
        if self._started:
            return
        t0 = time.perf_counter()
        if ray.is_initialized():
            # Someone in this process already owns a Ray session; use it as is.
            self._owns = None
        else:
            # Usage stats would phone home from every fresh cluster; opt out unless told otherwise.
            os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
            kwargs: dict[str, Any] = {
                # Job output goes to Ray's session logs, not through our progress
                # bar; a failing job's traceback is printed by map() anyway.
                "log_to_driver": False,
                "configure_logging": True,
                "logging_level": "warning",
            }
            if self.address is None:
                # address="local" forces a fresh private instance instead of
                # silently joining whatever `ray start` left running on this host.
                # Loopback is asked for, but on Linux Ray maps 127.0.0.1 to the
                # node's routable IP and its services listen on all interfaces;
                # the token authentication Ray enables for such instances is what
                # keeps other hosts out.
                kwargs.update(address="local", include_dashboard=False, _node_ip_address="127.0.0.1")
            else:
                _check_reachable(self.address)
                kwargs.update(address=self.address)
            kwargs.update(self.init_kwargs)
            try:
                ray.init(**kwargs)
            except ConnectionError as e:
                raise BnmemError(f"cannot connect to the Ray cluster at {self.address!r}: {e}") from e
            self._owns = "started" if self.address is None else "connected"
        self._started = True
        self.startup_seconds = time.perf_counter() - t0

    def close(self) -> None:
        """Stop the Ray instance this executor started, or disconnect from a cluster.

        A cluster reached through an address keeps running (``ray.shutdown`` in a
        connected driver only disconnects it); a session that was already open
        in this process before the executor is left untouched.
        """
        if self._started and self._owns is not None and ray.is_initialized():
            ray.shutdown()
        self._started = False
        self._owns = None

    def __enter__(self) -> "RayExecutor":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- jobs ---------------------------------------------------------------------

    def _task_options(self, resources: dict[str, float] | None) -> dict[str, Any]:
        """Ray task options from the defaults and a per-call ``resources`` override."""
        req: dict[str, Any] = {"num_cpus": self.num_cpus_per_job, "num_gpus": self.num_gpus_per_job}
        custom: dict[str, float] = {}
        for key, value in (resources or {}).items():
            if key in _TASK_OPTION_KEYS:
                req[key] = value
            else:
                custom[key] = value
        gpus = req["num_gpus"]
        # Ray accepts fractions only below one GPU; say so before Ray does, in our words.
        if gpus > 1 and float(gpus) != int(gpus):
            raise BnmemError(f"num_gpus per job must be a fraction below 1 or a whole number, not {gpus}")
        options: dict[str, Any] = {
            **req,
            "max_retries": self.max_retries,
            # Only worker deaths are retried; a Python exception is a real failure.
            "retry_exceptions": False,
        }
        if custom:
            options["resources"] = custom
        return options

    def _check_fits(self, options: dict[str, Any]) -> None:
        """Fail fast when no node could ever run one job (Ray would wait forever).

        Raises:
            BnmemError: the cluster lacks a resource one job asks for.
        """
        total = ray.cluster_resources()
        wanted = {"CPU": options.get("num_cpus", 0), "GPU": options.get("num_gpus", 0),
                  "memory": options.get("memory", 0) or 0, **options.get("resources", {})}
        missing = [f"{k}={v} (cluster has {total.get(k, 0):g})" for k, v in wanted.items()
                   if v and total.get(k, 0) < v]
        if missing:
            raise BnmemError("the Ray cluster cannot run a single job: it lacks " + ", ".join(missing))

    def map(self, fn: JobFn, specs: Sequence[Any], desc: str = "jobs",
            resources: dict[str, float] | None = None) -> list[dict[str, Any]]:
        """Run ``fn`` over ``specs`` as Ray tasks; summaries come back in spec order.

        Args:
            fn: module-level job function, importable on every worker (bnmem is
                installed in the workers' environment).
            specs: one spec per job (a frozen dataclass or a dict; plain data and typed configs; it pickles).
            desc: progress-bar label, also used in task names and errors.
            resources: per-call override of ``num_cpus``/``num_gpus``/``memory``;
                other keys are custom Ray resources.

        Returns:
            One summary per spec, in the order of ``specs``.

        Raises:
            JobFailedError: a job raised, or its worker died more than ``max_retries`` times.
            BnmemError: the cluster cannot run a job with the requested resources.
        """
        specs = list(specs)
        if not specs:
            return []
        options = self._task_options(resources)
        self.start()
        self._check_fits(options)
        name = _job_name(fn)
        if inspect.isfunction(fn):
            remote_fn = ray.remote(**options)(fn)
            refs = [remote_fn.options(name=f"{desc}:{name}[{i}]").remote(spec) for i, spec in enumerate(specs)]
        else:  # e.g. a graph's functools.partial(guarded, job): Ray makes tasks of functions only
            remote_call = ray.remote(**options)(_call)
            refs = [remote_call.options(name=f"{desc}:{name}[{i}]").remote(fn, spec) for i, spec in enumerate(specs)]
        index_of = {ref: i for i, ref in enumerate(refs)}
        results: list[dict[str, Any] | None] = [None] * len(specs)
        pending = list(refs)
        bar = tqdm(total=len(specs), desc=desc, disable=not self.progress or len(specs) < 2, leave=False)
        try:
            while pending:
                # Results are small dicts; no need to pull them to this node early.
                ready, pending = ray.wait(pending, num_returns=1, fetch_local=False)
                for ref in ready:
                    i = index_of[ref]
                    try:
                        results[i] = ray.get(ref)
                    except ray_exceptions.RayError as e:
                        raise self._job_error(e, i, specs[i], len(specs), desc) from e
                    bar.update(1)
        except BaseException:
            # Stop the rest: a failed study is rerun after the fix, and finished
            # jobs are skipped then. Cancelled jobs leave only temp files behind.
            for ref in pending:
                ray.cancel(ref, force=False)
            raise
        finally:
            bar.close()
        return results  # type: ignore[return-value]

    def _job_error(self, err: Exception, i: int, spec: Any, n: int, desc: str) -> JobFailedError:
        """One clear error for job ``i``; prints the worker traceback when there is one."""
        where = f"job {i + 1}/{n} of {desc!r} (spec {_short_spec(spec)})"
        if isinstance(err, ray_exceptions.RayTaskError):
            cause = err.cause
            # str() of a RayTaskError is the worker's formatted traceback (the
            # dual-class instance ray.get raises has no traceback_str attribute).
            tb = str(err)
            if isinstance(cause, BnmemError):
                # The job hit a user error (e.g. data missing on that node): no traceback needed.
                return JobFailedError(f"{where} failed: {cause}", i, spec)
            if tb:
                tqdm.write(f"--- traceback of {where} ---\n{tb.rstrip()}", file=sys.stderr)
            first = str(cause).strip().splitlines()[0] if str(cause).strip() else ""
            return JobFailedError(f"{where} failed: {type(cause).__name__}: {first}", i, spec, tb)
        if isinstance(err, (ray_exceptions.WorkerCrashedError, ray_exceptions.OutOfMemoryError,
                            ray_exceptions.NodeDiedError, ray_exceptions.LocalRayletDiedError)):
            return JobFailedError(
                f"{where}: its worker died and the retries are used up (max_retries={self.max_retries}): "
                f"{type(err).__name__}: {str(err).strip().splitlines()[0]}", i, spec)
        if isinstance(err, ray_exceptions.TaskCancelledError):
            return JobFailedError(f"{where} was cancelled", i, spec)
        return JobFailedError(f"{where} failed in Ray: {type(err).__name__}: {str(err).strip()[:300]}", i, spec)
