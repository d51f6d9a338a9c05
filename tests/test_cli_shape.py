"""One command shape and one stage protocol: shared options, the UI task, plan/execute in every stage."""

from __future__ import annotations

import importlib
import inspect

import pytest
from typer.testing import CliRunner

from toolkit.cli import COMMAND_MODULES, app
from toolkit.core import ui
from toolkit.core.errors import ConfigError

runner = CliRunner()
STAGES = ("sync", "render", "build", "verify", "publish")


def _leaf_commands() -> list[tuple[str, ...]]:
    import typer.main

    out: list[tuple[str, ...]] = []
    for name, cmd in typer.main.get_command(app).commands.items():  # type: ignore[attr-defined]
        subs = getattr(cmd, "commands", {})  # a command group (patch save | list | drop)
        out += [(name, sub) for sub in subs] if subs else [(name,)]
    return sorted(out)


def test_every_command_module_registers_a_command():
    assert {c[0] for c in _leaf_commands()} == set(COMMAND_MODULES)


@pytest.mark.parametrize("command", _leaf_commands(), ids=" ".join)
def test_every_command_takes_the_shared_options(command):
    res = runner.invoke(app, [*command, "--help"], env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert res.exit_code == 0, res.output
    for option in ("--project", "-C", "--json", "--verbose", "-v"):
        assert option in res.output, f"{' '.join(command)} lacks {option}"


def test_variant_has_no_short_flag_that_could_mean_verbose():
    for command in ("build", "variants"):
        params = {p.name: p for p in _command(command).params}
        assert params["variant"].opts == ["--variant"]
        assert "-v" in params["verbose"].opts


def _command(name: str):  # type: ignore[no-untyped-def]
    import typer.main

    group = typer.main.get_command(app)
    return group.commands[name]  # type: ignore[attr-defined]


@pytest.mark.parametrize("stage", STAGES)
def test_every_stage_package_has_plan_and_execute(stage):
    mod = importlib.import_module(f"toolkit.{stage}")
    assert callable(mod.plan) and callable(mod.execute) and inspect.isclass(mod.Request)
    assert list(inspect.signature(mod.plan).parameters)[:2] == ["config", "request"]
    assert list(inspect.signature(mod.execute).parameters)[0] == "plan"


def test_task_is_quiet_on_success_and_replays_its_log_on_a_crash(capsys):
    with ui.task("quiet step") as t:
        t.log("step one")
    assert "step one" not in capsys.readouterr().err
    with pytest.raises(RuntimeError), ui.task("crashing step") as t:
        t.log("step one")
        raise RuntimeError("boom")
    err = capsys.readouterr().err
    assert "crashing step failed" in err and "step one" in err


def test_task_leaves_a_refusal_to_its_one_line(capsys):
    with pytest.raises(ConfigError), ui.task("refused step") as t:
        t.log("resolving")
        raise ConfigError("bad input", "fix it")
    assert "resolving" not in capsys.readouterr().err


def test_verbose_task_shows_the_log_as_it_happens(capsys):
    with ui.task("loud step", verbose=True) as t:
        t.log("step one")
    assert "step one" in capsys.readouterr().err


def test_an_error_is_one_line_and_verbose_adds_the_traceback(tmp_path):
    res = runner.invoke(app, ["status", "-C", str(tmp_path)])
    assert res.exit_code == ConfigError.exit_code
    assert res.output.count("\n") == 1 and "error:" in res.output and "Traceback" not in res.output
    res = runner.invoke(app, ["status", "-C", str(tmp_path), "-v"])
    assert res.exit_code == ConfigError.exit_code  # the same exit code, with the story before the line
    assert "Traceback" in res.output and res.output.rstrip().splitlines()[-1].startswith("error:")
