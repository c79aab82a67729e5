"""Every decision of the telemetry verdict (``loader.report()``), pinned by made-up metrics on each side of
each threshold (issue 32, "tests that would have caught them": the bottleneck threshold moved from 10 % to
25 % went unnoticed, as no real run lands between)."""

from __future__ import annotations

import pytest

from dali_backend import telemetry
from dali_backend.telemetry import STAGE_ADVICE, WAITING_IS_FINE, verdict

PACE = "the training loop sets the pace"
BOTTLENECK = "the loader is the bottleneck"


def metrics(wait: float | None = 0.5, backend: str = "torch", images: int = 64, total: float | None = None,
            workers: int = 0, busy: float | None = None, **stages: float | None) -> dict:
    """Made-up metrics as ``LoaderTelemetry.snapshot()`` has them; ``stages``: ms/img by stage name
    (``decode_augment`` for ``decode+augment``)."""
    m = {"backend": backend, "images": images, "img_per_s": 100.0, "wall_s": 0.64, "data_wait_fraction": wait,
         "data_wait_fraction_total": total, "workers": workers, "workers_cpu_percent": busy}
    m.update({f"stage_ms.{k.replace('decode_augment', 'decode+augment')}": v for k, v in stages.items()})
    return m


def test_the_threshold_is_ten_percent():
    assert WAITING_IS_FINE == 0.10


@pytest.mark.parametrize("wait, pace", [(0.0, True), (0.0999, True), (0.10, False), (0.1001, False), (0.12, False),
                                        (0.2499, False), (0.25, False), (1.0, False)])
def test_the_loader_is_the_bottleneck_from_ten_percent_of_waiting_on(wait, pace):
    text = verdict(metrics(wait, decode=3.0, augment=1.0))
    assert (PACE in text, BOTTLENECK in text) == (pace, not pace), text
    assert f"waited for data {100 * wait:.0f}% of the time" in text


def test_the_threshold_is_read_where_it_is_defined(monkeypatch):
    monkeypatch.setattr(telemetry, "WAITING_IS_FINE", 0.25)
    assert PACE in verdict(metrics(0.12, decode=3.0)) and "less than 25%" in verdict(metrics(0.12, decode=3.0))


@pytest.mark.parametrize("images, wait, total, says", [
    (0, 0.5, None, "No batch yet"),  # no image: nothing to judge
    (1, 0.5, None, BOTTLENECK),
    (64, None, None, "No batch yet"),  # no pass measured at all
    (64, None, 0.05, PACE),  # between passes: the total of the passes so far decides
    (64, None, 0.5, BOTTLENECK),
    (64, 0.05, 0.5, PACE),  # the running pass wins over the total
])
def test_which_wait_is_judged(images, wait, total, says):
    assert says in verdict(metrics(wait, images=images, total=total, decode=2.0))


def test_a_bottleneck_without_measured_stages_says_so():
    assert "its stages were not measured" in verdict(metrics(0.5))
    assert "its stages were not measured" in verdict(metrics(0.5, decode=None))  # a stage without a figure


@pytest.mark.parametrize("stage", STAGE_ADVICE)
def test_the_largest_stage_is_blamed_with_its_advice(stage):
    costs = {name.replace("+", "_"): 1.0 for name in STAGE_ADVICE}
    costs[stage.replace("+", "_")] = 1.01  # just above the others
    text = verdict(metrics(0.5, backend="dali-cpu", **costs))
    what, advice = STAGE_ADVICE[stage]
    assert f"its largest cost is {what}: 1.01 ms per image" in text and f"What to change: {advice}." in text


def test_on_the_gpu_decode_and_augment_is_not_cpu_time():
    text = verdict(metrics(0.5, backend="dali-gpu", decode_augment=9.0, read=0.5))
    assert STAGE_ADVICE["read"][0] in text
    text = verdict(metrics(0.5, backend="dali-cpu", decode_augment=9.0, read=0.5))
    assert STAGE_ADVICE["decode+augment"][0] in text


def test_on_the_gpu_with_only_decode_and_augment_measured_no_stage_is_blamed():
    text = verdict(metrics(0.5, backend="dali-gpu", decode_augment=9.0))
    assert "not in these CPU figures" in text and "largest cost" not in text


@pytest.mark.parametrize("worst, hint", [(0.99, True), (1.0, False), (1.01, False)])
def test_the_gpu_decoder_hint_below_one_ms_per_image(worst, hint):
    text = verdict(metrics(0.5, backend="dali-gpu", read=worst, normalize=0.1))
    assert ("hw_decoder_load=0.9" in text) == hint, text
    assert "hw_decoder_load" not in verdict(metrics(0.5, backend="dali-cpu", read=worst, normalize=0.1))


@pytest.mark.parametrize("workers, busy, cores, line", [
    (0, 150.0, 2, None),  # no worker process: no line
    (2, None, 2, None),  # not measured
    (2, 150.0, None, "Its 2 worker process(es) used 150% CPU (100% = one core)."),
    (2, 150.0, 2, "Its 2 worker process(es) used 150% CPU (100% = one core) of 2 cores."),
])
def test_the_workers_cpu_line(workers, busy, cores, line):
    text = verdict(metrics(0.5, workers=workers, busy=busy, decode=2.0), cores)
    assert ("worker process(es)" in text) == (line is not None) and (line is None or line in text), text


def test_the_training_loop_verdict_lists_the_costs_in_order():
    text = verdict(metrics(0.05, decode=1.5, read=3.25, augment=0.5))
    assert "(ms/img): read 3.25, decode 1.50, augment 0.50." in text
    assert "(ms/img): -." in verdict(metrics(0.05))
