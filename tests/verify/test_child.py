"""verify.child.run_child: a check's child process answers with its marked JSON line, or says why not."""

from __future__ import annotations

import os

from toolkit.verify.child import run_child

ENV = dict(os.environ)


def test_the_marked_line_is_the_answer():
    run = run_child('print("noise"); print("ANS" + \'{"a": [1]}\')', [], "ANS", timeout=60, env=ENV)
    assert (run.hung, run.died, run.doc) == (False, False, {"a": [1]})


def test_args_reach_the_child():
    run = run_child("import json, sys; print('ANS' + json.dumps(sys.argv[1:]))", ["x", "y"], "ANS", timeout=60, env=ENV)
    assert run.doc == ["x", "y"]


def test_a_non_zero_exit_is_a_death_even_with_an_answer():
    script = "import sys; print('ANS{}'); sys.stderr.write('first\\nlast words\\n'); sys.exit(3)"
    run = run_child(script, [], "ANS", timeout=60, env=ENV)
    assert (run.died, run.returncode, run.tail, run.doc) == (True, 3, "last words", None)


def test_no_answer_and_no_stderr():
    run = run_child("pass", [], "ANS", timeout=60, env=ENV)
    assert (run.died, run.returncode, run.tail) == (True, 0, "(no output)")


def test_a_child_past_its_timeout_hung():
    run = run_child("import time; time.sleep(30)", [], "ANS", timeout=1, env=ENV)
    assert (run.hung, run.died, run.doc) == (True, False, None)
