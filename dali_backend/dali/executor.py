"""The DALI executor behind the facade: planned batches in, uint8 batches out, through a runner that it
rebuilds when DALI fails; when DALI's decoder refuses a file it finds which one."""

from __future__ import annotations

import logging

import numpy as np

from ..core.boundary import Kind, SampleSet
from ..formats import registry
from ..errors import BadImageError, ConfigError, ExecutorFailed, LoaderWorkerError, TargetError
from ..util.procstats import dali_operator_cpu_seconds
from ..core.reading import ClipTable
from .failures import parse_dali_failure, worker_config_error
from .runner import ClipChanged, DaliRunner
from .wire import Col

log = logging.getLogger("dali_backend")
CLIP_REPLAYS = 2  # runs again of one batch for a frame that changed while its clip was read


class DaliExecutor:
    """The DALI executor: planned batches in, uint8 batches out, through a :class:`DaliRunner`.

    The runner is rebuilt when it fails (a dead worker, DALI's error, an interruption at an unknown
    point). When DALI raises, ``run`` raises :class:`ExecutorFailed`; ``recover`` finds the file
    DALI's decoder refused among the draws in flight and marks it refused for the reader (``on_error``
    then applies to it), and the facade resumes at the batch that failed.
    """

    def __init__(self, samples: SampleSet, on_error: str, runner_args: dict, clips: ClipTable | None = None):
        self.samples, self.on_error, self._runner_args = samples, on_error, runner_args
        self.clips = clips if on_error == "skip" else None  # clips: whole clips are replaced under skip
        self._clip_replays: dict[tuple, int] = {}  # (frame, epoch): batches run again for it
        self.runner: DaliRunner | None = DaliRunner(samples, **runner_args)
        self.device = self.runner.device

    def run(self, rows: np.ndarray, key, plan_next):
        """Batches of ``rows``; see :meth:`DaliRunner.run`."""
        return self._live_runner().run(key, rows, plan_next)

    def worker_pids(self) -> list[int]:
        """The pids of the current pipeline's Python reader workers."""
        return list(self.runner.worker_pids) if self.runner is not None else []

    def engine_cpu_s(self) -> float | None:
        """CPU seconds of DALI's operator threads in this process so far (decoding and the operations;
        :func:`~dali_backend.util.procstats.dali_operator_cpu_seconds`), None where not measurable."""
        return dali_operator_cpu_seconds()

    def recover(self, failure: ExecutorFailed) -> None:
        """Close the failed pipeline and mark the file its decoder refused (or raise DALI's error); or, for
        a clip whose frame changed while its readers read it, run the batch again (at most
        :data:`CLIP_REPLAYS` times for one frame: then its error is raised)."""
        if self.runner is not None:
            self.runner.close()
        if isinstance(failure, ClipChanged):
            bad = failure.bad
            key = (bad.index, bad.epoch)
            self._clip_replays[key] = self._clip_replays.get(key, 0) + 1
            if self._clip_replays[key] > CLIP_REPLAYS:
                raise bad.error() from failure
            log.warning("DaliLoader: %s; its batch runs again, and its clip is chosen again", failure)
            return
        self._refuse_files_dali_failed_on(failure)

    def _live_runner(self) -> DaliRunner:
        runner = self.runner
        if runner is None or runner.broken is not None:
            if runner is not None:
                log.info("DaliLoader: starting a new DALI pipeline (the previous one failed: %s)",
                         str(runner.broken).splitlines()[0] if str(runner.broken) else type(runner.broken).__name__)
                runner.close()
            self.runner = runner = DaliRunner(self.samples, **self._runner_args)
        return runner

    def _refuse_files_dali_failed_on(self, failure: ExecutorFailed) -> None:
        """Find the file(s) DALI's decoder refused among the draws in flight and mark them refused.

        DALI's pipeline cannot skip a sample, and its error names only the position in some prefetched
        batch ("Failed to decode sample #3"). The draws in flight at that position (then all of them)
        are served again here as the worker served them and decoded with OpenCV, the fallback's decoder.
        If none is refused, the error is DALI's own, and it is raised.
        """
        reader, text = self.samples.reader, str(failure.error)
        what = parse_dali_failure(text)
        config = worker_config_error(text)
        if config:  # a reader refused the spec for a file (a 16-bit image, no Window): the user's error, typed
            raise ConfigError(config) from failure.error
        target = worker_config_error(text, "TargetError")
        if target:  # a reader refused a sample's mask (values outside the declared classes): typed, as on torch
            raise TargetError(target) from failure.error
        if not what.from_decoder:  # a reader callback raised, another operator failed: DALI's own error
            raise LoaderWorkerError(f"DALI's pipeline failed: {text.strip()[:3000]}; the next pass starts a new "
                                    "pipeline") from failure.error
        rows = np.concatenate(failure.in_flight)
        rows = rows[rows[:, Col.KIND] == Kind.DRAW]
        k = what.sample
        ordered = [rows]
        if k is not None and self.clips is None:  # the sample DALI named in each batch first (a clip: all)
            ordered.insert(0, np.concatenate([b[k:k + 1] for b in failure.in_flight]))
        colour = self.samples.spec.color
        detail = what.reason
        for candidates in ordered:
            refused = []
            for served, data in self._served(candidates):
                if served not in reader.refused and registry.opencv_decode(data, colour) is None:
                    reader.refused[served] = registry.decoder_refusal(data, detail)
                    refused.append(reader.path(served))
            if refused:
                log.warning("DaliLoader: DALI's decoder refused %s; on_error=%r applies to it from now on, and the "
                            "pass resumes at the batch that failed with a new pipeline", ", ".join(refused), self.on_error)
                return
        raise LoaderWorkerError(f"DALI's pipeline failed and none of the {len(rows)} files in flight fails OpenCV's "
                                f"decoder, so the file cannot be named: {text.strip()[:1500]}. The next iteration "
                                "starts a new pipeline; backend='torch' decodes with OpenCV instead") from failure.error

    def _served(self, rows: np.ndarray):
        """``(served index, checked bytes)`` of each draw of ``rows`` (slot rows) as the reader workers
        served it: by the single-sample rule, or for clips under ``on_error="skip"`` by the clip rule
        (``rows`` then hold whole clips: every frame of the clip, or of the clip replacing it)."""
        reader = self.samples.reader
        if self.clips is None:
            for _, index, epoch, position, kind in rows.tolist():
                if kind != Kind.DRAW:
                    continue
                try:
                    yield reader.serve(index, epoch, position, self.on_error, lambda j: reader.read(j, epoch))
                except BadImageError:
                    continue  # served as a marker; not what DALI decoded
            return
        T = self.clips.clip_len
        for start in range(0, len(rows) - T + 1, T):
            _, _, epoch, position, _ = (int(v) for v in rows[start])
            read = lambda fr: [reader.read(int(j), epoch) for j in fr]  # noqa: E731
            try:
                served, data = reader.serve_clip(self.clips, rows[start:start + T, Col.INDEX], epoch, position, read)
            except BadImageError:
                continue
            yield from zip((int(i) for i in served), data)

    def abandon(self) -> None:
        """A pass ended with an error: nothing to stop (the runner keeps or rebuilds its pipeline)."""

    def close(self) -> None:
        if self.runner is not None:
            self.runner.close()
            self.runner = None


