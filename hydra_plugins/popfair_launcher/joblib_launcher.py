"""`hydra/launcher=joblib` (conf/hydra/launcher/joblib.yaml): cases side by side on one machine, each in
a worker process of its own, so that a worker that dies takes down only its own case.

Hydra's joblib launcher runs the cases in one loky pool. When one worker dies (kill -9, the
out-of-memory killer), loky declares the whole pool broken, kills the other workers and raises
`TerminatedWorkerError` out of the sweep: the cases in flight die with it and the sweep ends without
its summary. This launcher keeps that launcher's settings (`n_jobs` cases at once, -1 = one per CPU)
and runs every case in a fresh process forked from a `forkserver` that has already imported popfair
(a case starts in milliseconds; no fork of this multi-threaded process). A case whose process ends
without reporting is recorded as failed with the reason ("worker killed by SIGKILL, possibly out of
memory; rerun to resume"), the others go on, and the sweep callback exits non-zero after its summary.
The rerun resumes it from the response cache."""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import signal
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import cloudpickle
from hydra.core.hydra_config import HydraConfig
from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, configure_log, filter_overrides, run_job, setup_globals
from hydra_plugins.hydra_joblib_launcher.joblib_launcher import JoblibLauncher
from omegaconf import DictConfig, open_dict

from popfair.sweep.fork_server import runs_cases_here, start_fork_server

log = logging.getLogger(__name__)


def _run_in_worker(payload: bytes, results: Connection) -> None:
    """In the case's own process: run the Hydra job, send back its JobReturn."""
    hydra_context, sweep_config, task_function, singleton_state = cloudpickle.loads(payload)
    setup_globals()
    Singleton.set_state(singleton_state)
    HydraConfig.instance().set_config(sweep_config)
    returned = run_job(
        hydra_context=hydra_context,
        config=sweep_config,
        task_function=task_function,
        job_dir_key="hydra.sweep.dir",
        job_subdir_key="hydra.sweep.subdir",
    )
    results.send_bytes(cloudpickle.dumps(returned))
    results.close()


def death_reason(exitcode: int | None) -> str:
    """Why a case's process ended without reporting, for the case record and the summary."""
    if exitcode is not None and exitcode < 0:
        name = signal.Signals(-exitcode).name if -exitcode in signal.valid_signals() else f"signal {-exitcode}"
        likely = ", possibly out of memory" if -exitcode == signal.SIGKILL else ""
        return f"worker killed by {name}{likely}; rerun to resume"
    return f"worker exited with status {exitcode} before reporting; rerun to resume"


class PopfairJoblibLauncher(JoblibLauncher):
    """Hydra's joblib launcher settings; every case in its own process, whose death fails only that case.

    SIGTERM or Ctrl-C to the sweep: no further case starts (each is recorded "not started"), the
    running ones stop as a case stops on its own signal (SIGTERM is passed on to them; Ctrl-C from a
    terminal reaches them already), and the sweep ends with its summary. A second signal stops waiting."""

    def setup(self, *, hydra_context: Any, task_function: Any, config: DictConfig) -> None:
        super().setup(hydra_context=hydra_context, task_function=task_function, config=config)
        if runs_cases_here(config):  # started by the sweep callback already, unless there is none
            start_fork_server(config)

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from joblib import effective_n_jobs

        assert self.config is not None and self.task_function is not None and self.hydra_context is not None
        setup_globals()
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        Path(str(self.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
        workers = max(1, min(effective_n_jobs(int(self.joblib.get("n_jobs", -1))), len(job_overrides)))
        log.info("popfair joblib launcher: %d jobs, %d at a time, each in its own process", len(job_overrides), workers)
        for idx, overrides in enumerate(job_overrides):
            log.info("\t#%d : %s", initial_job_idx + idx, " ".join(filter_overrides(overrides)))
        context = multiprocessing.get_context("forkserver")  # started by setup, or here with its defaults
        singleton_state = Singleton.get_state()
        jobs = [(initial_job_idx + idx, list(overrides)) for idx, overrides in enumerate(job_overrides)]
        self._running: dict[int, Any] = {}  # job -> its live worker process
        self._stopping = getattr(self, "_stopping", None) or threading.Event()  # kept across batches
        previous = {signum: signal.signal(signum, self._stop) for signum in (signal.SIGTERM, signal.SIGINT)}
        try:
            with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="popfair-case") as pool:
                return list(pool.map(lambda job: self._run_case(context, job[0], job[1], singleton_state), jobs))
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    def _stop(self, signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        if self._stopping.is_set():  # the second signal: stop waiting for the cases
            signal.signal(signum, signal.SIG_DFL)
            raise KeyboardInterrupt
        self._stopping.set()
        log.warning("popfair: %s: no further case starts; running cases stop, answers kept (rerun to resume)", name)
        if signum == signal.SIGTERM:  # sent to this process only: pass it on (Ctrl-C reaches the group)
            for worker in list(self._running.values()):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(worker.pid, signal.SIGTERM)

    def _run_case(self, context: Any, idx: int, overrides: list[str], singleton_state: Any) -> JobReturn:
        from popfair.sweep.run_case import record_lost_case

        assert self.config is not None and self.hydra_context is not None
        # composed here (the sweeper composed every case already: this takes its copy)
        sweep_config = self.hydra_context.config_loader.load_sweep_config(self.config, overrides)
        with open_dict(sweep_config):
            sweep_config.hydra.job.id = f"{sweep_config.hydra.job.name}_{idx}"
            sweep_config.hydra.job.num = idx
        if self._stopping.is_set():
            record_lost_case(sweep_config, "not started: the sweep was stopped; rerun to resume")
            return _handled(overrides, sweep_config)
        payload = cloudpickle.dumps((self.hydra_context, sweep_config, self.task_function, singleton_state))
        receive, send = context.Pipe(duplex=False)
        worker = context.Process(target=_run_in_worker, args=(payload, send), name=f"popfair-case-{idx}")
        worker.start()
        send.close()  # the worker holds the only sending end: its death ends the wait below
        self._running[idx] = worker
        log.info("case #%d runs in process %s", idx, worker.pid)
        try:
            returned = cloudpickle.loads(receive.recv_bytes())
        except EOFError:
            returned = None
        finally:
            receive.close()
            worker.join()
            self._running.pop(idx, None)
        if returned is not None:
            return returned
        reason = death_reason(worker.exitcode)
        log.error("popfair: case %d (%s) lost: %s", idx, " ".join(overrides), reason)
        record_lost_case(sweep_config, reason)
        return _handled(overrides, sweep_config)


def _handled(overrides: list[str], sweep_config: DictConfig) -> JobReturn:
    """The return of a case recorded as failed here, as a case that raises is recorded by itself
    (sweep/run_case.py): the sweep goes on and its summary lists it."""
    return JobReturn(
        overrides=overrides,
        cfg=sweep_config,
        hydra_cfg=sweep_config,
        task_name=str(sweep_config.hydra.job.name),
        status=JobStatus.COMPLETED,
        _return_value=None,
    )
