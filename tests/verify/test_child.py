"""verify.child.run_child: a check's child process answers with its marked JSON line, or says why not."""

from __future__ import annotations

import os

from toolkit.verify.child import run_child

ENV = dict(os.environ)  # the child gets PYTHONDONTWRITEBYTECODE on top of it


def test_the_marked_line_is_the_answer() -> None:
    run = run_child('print("noise"); print("ANS" + \'{"a": [1]}\')', [], marker="ANS", timeout=60, env=ENV)
    assert (run.timed_out, run.returncode, run.doc) == (False, 0, {"a": [1]})


def test_args_reach_the_child() -> None:
    run = run_child(
        "import json, sys; print('ANS' + json.dumps(sys.argv[1:]))", ["x", "y"], marker="ANS", timeout=60, env=ENV
    )
    doc: object = run.doc  # the child printed a JSON list: Child.doc is typed for the dict the checks print
    assert doc == ["x", "y"]


def test_a_non_zero_exit_is_a_death_even_with_an_answer() -> None:
    script = "import sys; print('ANS{}'); sys.stderr.write('first\\nlast words\\n'); sys.exit(3)"
    run = run_child(script, [], marker="ANS", timeout=60, env=ENV)
    assert (run.timed_out, run.returncode, run.tail, run.doc) == (False, 3, "last words", None)


def test_no_answer_and_no_stderr() -> None:
    run = run_child("pass", [], marker="ANS", timeout=60, env=ENV)
    assert (run.doc, run.returncode, run.tail) == (None, 0, "(no output)")


def test_a_child_past_its_timeout_hung() -> None:
    run = run_child("import time; time.sleep(30)", [], marker="ANS", timeout=1, env=ENV)
    assert (run.timed_out, run.doc) == (True, None)
