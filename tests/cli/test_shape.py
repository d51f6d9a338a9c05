"""One command shape and one stage protocol: shared options, the UI task, plan/execute in every stage."""

from __future__ import annotations

import importlib
import inspect
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from toolkit.cli import app
from toolkit.commands import COMMAND_MODULES
from toolkit.core import ui
from toolkit.core.config import Config
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


def test_every_command_module_registers_a_command() -> None:
    assert {c[0] for c in _leaf_commands()} == set(COMMAND_MODULES)


@pytest.mark.parametrize("command", _leaf_commands(), ids=" ".join)
def test_every_command_takes_the_shared_options(command: tuple[str, ...]) -> None:
    res = runner.invoke(app, [*command, "--help"], env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert res.exit_code == 0, res.output
    for option in ("--project", "-C", "--json", "--verbose", "-v"):
        assert option in res.output, f"{' '.join(command)} lacks {option}"


def test_variant_has_no_short_flag_that_could_mean_verbose() -> None:
    for command in ("build", "variants"):
        params = {p.name: p for p in _command(command).params}
        assert params["variant"].opts == ["--variant"]
        assert "-v" in params["verbose"].opts


def _command(name: str) -> Any:  # typer's own (vendored) click command: the test reads its params
    import typer.main

    group = typer.main.get_command(app)
    return group.commands[name]  # type: ignore[attr-defined]


@pytest.mark.parametrize("stage", STAGES)
def test_every_stage_package_has_plan_and_execute(stage: str) -> None:
    mod = importlib.import_module(f"toolkit.{stage}")
    assert callable(mod.plan) and callable(mod.execute) and inspect.isclass(mod.Request)
    assert list(inspect.signature(mod.plan).parameters)[:2] == ["config", "request"]
    assert list(inspect.signature(mod.execute).parameters)[0] == "plan"


def test_task_is_quiet_on_success_and_replays_its_log_on_a_crash(capsys: pytest.CaptureFixture[str]) -> None:
    with ui.task("quiet step") as t:
        t.log("step one")
    assert "step one" not in capsys.readouterr().err
    with pytest.raises(RuntimeError), ui.task("crashing step") as t:
        t.log("step one")
        raise RuntimeError("boom")
    err = capsys.readouterr().err
    assert "crashing step failed" in err and "step one" in err


def test_task_leaves_a_refusal_to_its_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ConfigError), ui.task("refused step") as t:
        t.log("resolving")
        raise ConfigError("bad input", "fix it")
    assert "resolving" not in capsys.readouterr().err


def test_verbose_task_shows_the_log_as_it_happens(capsys: pytest.CaptureFixture[str]) -> None:
    with ui.task("loud step", verbose=True) as t:
        t.log("step one")
    assert "step one" in capsys.readouterr().err


def test_an_error_is_one_line_and_verbose_adds_the_traceback(tmp_path: Path) -> None:
    res = runner.invoke(app, ["status", "-C", str(tmp_path)])
    assert res.exit_code == ConfigError.exit_code
    assert res.output.count("\n") == 1 and "error:" in res.output and "Traceback" not in res.output
    res = runner.invoke(app, ["status", "-C", str(tmp_path), "-v"])
    assert res.exit_code == ConfigError.exit_code  # the same exit code, with the story before the line
    assert "Traceback" in res.output and res.output.rstrip().splitlines()[-1].startswith("error:")


# ---- one exit-code table, one source for the CLI's docs, help printed literally, -C before the command ----

REPO = Path(__file__).resolve().parents[2]


def _words(text: str) -> str:
    return " ".join(text.split())


def test_exit_codes_are_defined_in_one_table_only() -> None:
    from toolkit.core.errors import ERROR_CLASSES, EXIT_CODES

    assert len({c.exit_code for c in ERROR_CLASSES}) == len(ERROR_CLASSES), "two classes share an exit code"
    assert set(EXIT_CODES) == {c.exit_code for c in ERROR_CLASSES}
    stray = [
        f"{p.relative_to(REPO)}:{n}"
        for p in (REPO / "toolkit").rglob("*.py")
        if p != REPO / "toolkit" / "core" / "errors.py"
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if re.match(r"\s+exit_code\s*=\s*\d", line)
    ]
    assert not stray, f"exit codes defined outside toolkit/core/errors.py: {stray}"


def _all_help() -> str:
    import typer.main

    from toolkit.docgen import _leaf_commands

    texts = [typer.main.get_command(app).help or ""]
    for _title, cmd in _leaf_commands():
        texts.append(cmd.help or "")
        texts += [getattr(p, "help", None) or "" for p in cmd.params]
    return "\n".join(texts)


@pytest.mark.parametrize("where", ["README.md", "docs/commands.md", "--help"])
def test_every_exit_code_mentioned_is_in_the_table_and_the_summary_is_whole(where: str) -> None:
    from toolkit.core.errors import EXIT_CODES, exit_code_summary

    text = _all_help() if where == "--help" else (REPO / where).read_text()
    assert exit_code_summary() in _words(text), f"{where} lacks the exit codes: {exit_code_summary()}"
    mentioned = {int(n) for n in re.findall(r"\bexits? (\d+)\b", text)}
    mentioned |= {int(n) for m in re.findall(r"[Ee]xit codes?:([^.]*)", text) for n in re.findall(r"\b(\d+) ", m)}
    assert mentioned - {0} <= set(EXIT_CODES), (
        f"{where} names exit codes the table lacks: {mentioned - set(EXIT_CODES)}"
    )


def test_help_text_is_printed_literally() -> None:
    res = runner.invoke(app, ["build", "--help"], env={"COLUMNS": "200"})
    assert res.exit_code == 0
    text = _words(res.output)
    for literal in ("[sources]", "[torch-index]", "build/<variant>/"):
        assert literal in text, f"`build --help` lost {literal!r}"


def test_commands_md_is_generated_from_the_app_and_current() -> None:
    from toolkit import docgen

    current = (REPO / docgen.DOC).read_text()
    assert docgen.generate(current) == current, "docs/commands.md is stale: run `python -m toolkit.docgen`"
    for title, cmd in docgen._leaf_commands():
        assert f"### `{title}`" in current
        for param in cmd.params:
            for opt in getattr(param, "opts", ()):
                if opt.startswith("-"):
                    assert f"`{opt}`" in current, f"{title}: {opt} is not in docs/commands.md"


def test_a_stale_commands_md_is_caught(tmp_path: Path) -> None:
    from toolkit import docgen

    (tmp_path / "docs").mkdir()
    stale = (REPO / docgen.DOC).read_text().replace("| `--no-wait` |", "| `--no-wai` |", 1)
    (tmp_path / docgen.DOC).write_text(stale)
    assert docgen.main(["--check"], root=tmp_path) == 6
    assert docgen.main([], root=tmp_path) == 0 and docgen.main(["--check"], root=tmp_path) == 0


def test_project_option_is_accepted_before_the_command(tmp_path: Path) -> None:
    res = runner.invoke(app, ["-C", str(tmp_path), "status"])
    assert res.exit_code == ConfigError.exit_code and str(tmp_path) in _words(res.output)
    res = runner.invoke(app, ["-C", str(tmp_path), "status", "--json", "-C", str(REPO)])  # the later one wins
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["pinned"] is True
    res = runner.invoke(app, ["--project", str(REPO), "render", "--check"])
    assert res.exit_code == 0, res.output


def test_the_cli_imports_only_the_named_command_even_after_a_project_option() -> None:
    from toolkit import cli

    assert cli._first_word(["-C", "build", "status"]) == "status"
    assert cli._first_word(["--project", "x", "build", "-v"]) == "build"
    assert cli._first_word(["--help"]) is None


# ---- the one command shape: @command + Run, driven by one runner ----


def _fake_app(report_ok: bool, crash: bool = False) -> typer.Typer:
    import typer

    from toolkit.app import Options, Run, command
    from toolkit.core.errors import VerifyError
    from toolkit.core.stage import Verdict

    class FakeReport(Verdict):
        def failure(self) -> VerifyError | None:
            return None if report_ok else VerifyError("2 checks failed", "fix them")

        def lines(self) -> list[str]:
            return ["the report's table"]

        def to_json(self) -> dict[str, object]:
            return {"ok": self.ok}

    class FakePlan:
        def lines(self) -> list[str]:
            return ["would do one thing"]

        def to_json(self) -> dict[str, object]:
            return {"steps": 1}

    def plan(cfg: Config | None, log: Callable[[str], None]) -> FakePlan:
        log("planning step")
        return FakePlan()

    def execute(p: FakePlan, log: Callable[[str], None]) -> FakeReport:
        log("executing step")
        if crash:
            raise RuntimeError("boom")
        return FakeReport()

    fake = typer.Typer()

    @command("fake", help="A fake stage.", group=fake, lock=False)
    def fake_cmd(opts: Options) -> Run[FakePlan, FakeReport]:
        return Run.alone("faking", lambda log: plan(None, log), execute=execute)

    @fake.command("other")
    def _other() -> None:  # two commands, so `fake` stays a subcommand
        pass

    return fake


def test_the_runner_maps_a_report_to_its_exit_code_and_one_line() -> None:
    ok = runner.invoke(_fake_app(True), ["fake"])
    assert ok.exit_code == 0 and "the report's table" in ok.output and "planning step" not in ok.output
    bad = runner.invoke(_fake_app(False), ["fake"])
    assert bad.exit_code == 8 and "error: 2 checks failed — fix them" in bad.output
    doc = runner.invoke(_fake_app(False), ["fake", "--json"])
    assert doc.exit_code == 8 and json.loads(doc.stdout) == {"ok": False}


def test_the_runner_prints_the_plan_under_dry_run_and_replays_the_log_on_a_crash() -> None:
    dry = runner.invoke(_fake_app(True, crash=True), ["fake", "--dry-run"])
    assert dry.exit_code == 0 and "would do one thing" in dry.output  # execute (which crashes) never ran
    dry_json = runner.invoke(_fake_app(True), ["fake", "--dry-run", "--json"])
    assert json.loads(dry_json.stdout) == {"dry_run": True, "steps": 1}
    crashed = runner.invoke(_fake_app(True, crash=True), ["fake"])
    assert crashed.exit_code != 0 and isinstance(crashed.exception, RuntimeError)
    assert "faking failed; its log" in crashed.output and "executing step" in crashed.output


@pytest.mark.parametrize("stage", ["toolkit.render", "toolkit.ci.workflow"])
def test_render_and_ci_follow_the_protocol_to_the_letter(stage: str) -> None:
    from toolkit.core import config
    from toolkit.core.stage import Plan, Report

    mod = importlib.import_module(stage)
    assert list(inspect.signature(mod.plan).parameters) == ["config", "request", "log"]
    assert list(inspect.signature(mod.execute).parameters) == ["plan", "log"]
    lines: list[str] = []
    plan = mod.plan(config.load(REPO), mod.Request(check=True), lines.append)
    report = mod.execute(plan, lines.append)
    assert isinstance(plan, Plan) and isinstance(report, Report) and lines
    assert report.ok and report.exit_code == 0 and report.lines() and report.to_json()["ok"] is True
