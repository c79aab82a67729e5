"""Executors are known by their registry entry, not by their names compared as strings: the command
line's ``--backend`` choices and the telemetry's GPU rules follow the registry
(:mod:`dali_backend.facade.executors`), so an executor registered later is offered and judged as the
built-in one of its kind."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from dali_backend.cli.commands import build_parser
from dali_backend.facade.executors import REGISTRY, Engine, backend_choices, executor_kind, on_gpu, register
from dali_backend.telemetry import HOW, LoaderTelemetry, verdict

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def gpu_toy():
    """A second GPU executor, registered for one test (as a plug-in module would register it)."""
    kind = register(dataclasses.replace(executor_kind(Engine.DALI_GPU), name="toy-gpu"))
    yield kind
    del REGISTRY[kind.name]


def backend_option(command: str):
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command" or getattr(a, "choices", None) and command in a.choices)
    return next(a for a in sub.choices[command]._actions if a.dest == "backend")


@pytest.mark.parametrize("command", ["demo", "diagnose"])
def test_the_command_lines_backend_choices_are_the_registered_executors(command, gpu_toy):
    option = backend_option(command)
    assert list(option.choices) == backend_choices() == ["auto", "dali", *REGISTRY]
    assert {"torch", "dali-cpu", "dali-gpu", "toy-gpu"} <= set(option.choices)


def test_the_verdict_treats_any_gpu_executor_as_the_gpu_one(gpu_toy):
    metrics = {"backend": "toy-gpu", "images": 64, "img_per_s": 100.0, "wall_s": 0.64, "data_wait_fraction": 0.5,
               "stage_ms.decode+augment": 9.0}
    assert on_gpu("toy-gpu") and not on_gpu("dali-cpu") and not on_gpu("not-registered")
    assert "the GPU decoder is the likely limit" in verdict(metrics)  # not CPU time on a GPU
    assert "the GPU decoder is the likely limit" not in verdict({**metrics, "backend": "dali-cpu"})


def test_the_telemetry_says_how_each_kind_of_executor_times_its_stages(gpu_toy):
    assert LoaderTelemetry("torch", None).snapshot()["how"] == HOW["torch"]
    assert LoaderTelemetry("toy-gpu", None).snapshot()["how"] == HOW["dali"]
    assert LoaderTelemetry("dali-cpu", None).snapshot()["how"] == HOW["dali"]


def test_no_module_compares_an_executor_name_as_a_string_outside_the_registry():
    pattern = re.compile(r"""(==|!=)\s*["'](dali-gpu|dali-cpu|torch)["']|["'](dali-gpu|dali-cpu|torch)["']\s*(==|!=)""")
    found = [f"{p.relative_to(ROOT)}:{n}" for folder in ("dali_backend", "fallback")
             for p in sorted((ROOT / folder).rglob("*.py"))
             for n, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert found == [], found
