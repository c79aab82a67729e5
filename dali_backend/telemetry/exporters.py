"""Where ``loader.metrics()`` goes: TensorBoard scalars, a Lightning callback, a tqdm bar, or any function.

Each exporter is a callable taking the metrics dict, attached with ``loader.on_metrics(exporter,
every_s=...)`` (the Lightning callback attaches itself per training batch instead). They write the
numeric metrics of :data:`~dali_backend.telemetry.METRICS` under ``loader/<name>``; a metric that is
not measured (None) is left out, never written as 0. TensorBoard and Lightning are imported only
when their exporter is created.
"""

from __future__ import annotations

import os

from ..errors import MissingDependencyError
from . import METRICS


def numeric(metrics: dict, prefix: str = "loader/") -> dict[str, float]:
    """The measured numeric metrics as ``{prefix + name: value}`` (what the exporters write)."""
    return {prefix + k: float(metrics[k]) for k in METRICS if metrics.get(k) is not None}


class TensorBoardMetrics:
    """Writes the metrics as TensorBoard scalars, at step ``batches_total``.

    Args:
        writer: a ``torch.utils.tensorboard.SummaryWriter`` (yours, shared with the training's own
            scalars), or a log folder to open one in.
        prefix: tag prefix (default ``loader/``).

    Example: ``loader.on_metrics(TensorBoardMetrics("runs/exp1"), every_s=10)``.
    """

    def __init__(self, writer, prefix: str = "loader/"):
        if isinstance(writer, (str, os.PathLike)):
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError as e:  # torch's module needs the tensorboard package
                raise MissingDependencyError("TensorBoardMetrics needs tensorboard: pip install tensorboard "
                                             "(or pip install 'dali-backend[telemetry]')") from e
            writer = SummaryWriter(os.fspath(writer))
        self.writer, self.prefix = writer, prefix

    def __call__(self, metrics: dict) -> None:
        step = int(metrics["batches_total"])
        for tag, value in numeric(metrics, self.prefix).items():
            self.writer.add_scalar(tag, value, step)
        self.writer.flush()


class TqdmMetrics:
    """Shows the headline metrics in a tqdm progress bar's postfix (data wait, img/s, batches ahead):
    ``bar = tqdm(loader); loader.on_metrics(TqdmMetrics(bar), every_s=1)``."""

    def __init__(self, bar):
        if not hasattr(bar, "set_postfix_str"):
            from ..errors import ConfigError

            raise ConfigError(f"TqdmMetrics: {type(bar).__name__} is not a tqdm bar (it has no set_postfix_str); "
                              "pass the bar you iterate, e.g. bar = tqdm(loader)")
        self.bar = bar

    def __call__(self, metrics: dict) -> None:
        wait, rate = metrics["data_wait_fraction_recent"], metrics["img_per_s_recent"]
        self.bar.set_postfix_str(f"data wait {'-' if wait is None else f'{100 * wait:.0f}%'}, "
                                 f"{'-' if rate is None else f'{rate:.0f}'} img/s, "
                                 f"{metrics['batches_in_flight']} ahead", refresh=False)


def lightning_callback(loader, every_n_batches: int = 50, prefix: str = "loader/"):
    """A Lightning ``Callback`` that logs ``loader.metrics()`` through the Trainer's loggers (TensorBoard,
    CSV, Weights & Biases, whatever it has) every ``every_n_batches`` training batches, at the Trainer's
    global step: ``Trainer(callbacks=[lightning_callback(loader)])``."""
    try:
        import lightning.pytorch as pl
    except ImportError:
        try:
            import pytorch_lightning as pl  # the older package name
        except ImportError as e:
            raise MissingDependencyError("lightning_callback needs Lightning: pip install lightning") from e
    if isinstance(every_n_batches, bool) or not isinstance(every_n_batches, int) or every_n_batches < 1:
        from ..errors import ConfigError

        raise ConfigError(f"every_n_batches={every_n_batches!r}; must be a positive number of training batches")

    class LoaderMetricsCallback(pl.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if batch_idx % every_n_batches == 0:
                values = numeric(loader.metrics(), prefix)
                for logger in trainer.loggers:
                    logger.log_metrics(values, step=trainer.global_step)

    return LoaderMetricsCallback()
