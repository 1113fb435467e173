# The grader's runner, boot and plugin on small repositories with the machine's own pytest: the frame on
# stdout, the plugin's records, canaries written into the hidden test files, and the defences against a
# library that forges its log, rewrites reports, fakes equality or imports itself from elsewhere.
import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE))
import vime_grade_canaries as canaries  # noqa: E402

LIB = '''def add(a, b):
    return a + b + BUG


BUG = 1
'''
TESTS = '''import pytest

from calc import add


def test_add():
    assert add(2, 3) == 5


@pytest.mark.parametrize("a", [1, 2])
def test_add_zero(a):
    assert add(a, 0) - a in (0, 1)
'''
F2P = ["tests/test_calc.py::test_add"]
P2P = ["tests/test_calc.py::test_add_zero[1]", "tests/test_calc.py::test_add_zero[2]"]


def repo(tmp_path, lib=LIB, extra=None):
    work = tmp_path / "work"
    (work / "calc").mkdir(parents=True)
    (work / "tests").mkdir()
    (work / "calc" / "__init__.py").write_text(lib)
    (work / "tests" / "__init__.py").write_text("")
    (work / "tests" / "test_calc.py").write_text(TESTS)
    for path, content in (extra or {}).items():
        (work / path).parent.mkdir(parents=True, exist_ok=True)
        (work / path).write_text(content)
    return work


def run(tmp_path, work, config=None, preimport=("calc",)):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({
        "workdir": str(work),
        "boot": str(HERE / "vime_grade_boot.py"),
        "hidden": [{"path": "tests/test_calc.py", "f2p": ["test_add"]}],
        "wanted": F2P + P2P,
        "config": config or {"candidates": [], "explicit": None},
        "packages": [{"name": "calc", "path": "calc"}, {"name": "tests", "path": "tests"}],
        "moduleFiles": ["calc/__init__.py", "tests/__init__.py", "tests/test_calc.py"],
        "preimport": list(preimport),
    }))
    r = subprocess.run(
        [sys.executable, "-I", "-S", "-B", str(HERE / "vime_grade_runner.py"), str(spec), "--tb=no", "-v"],
        cwd=work, capture_output=True, env={**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}, timeout=120,
    )
    assert r.stderr.startswith(b"vime-grade-runner: started\n"), r.stderr
    assert not spec.exists(), "the runner deletes its spec before pytest starts"
    return json.loads(r.stdout)


def records(frame, kind):
    return [r for r in frame["records"] if r["k"] == kind]


def calls(frame):
    return {r["id"]: r["returned"] for r in records(frame, "call")}


def outcome(frame, nodeid, when="call"):
    return next(r["outcome"] for r in records(frame, "phase") if r["id"] == nodeid and r["when"] == when)


def test_an_honest_run_reports_every_test_and_its_canaries(tmp_path):
    work = repo(tmp_path, LIB.replace("BUG = 1", "BUG = 0"))
    frame = run(tmp_path, work)
    assert frame["exit"] == {"code": 1}  # the must-fail canaries fail
    assert records(frame, "end")[0]["exitstatus"] == 1 and frame["evidence"] == []
    assert records(frame, "evidence") == []
    assert outcome(frame, F2P[0]) == "passed" and calls(frame)[F2P[0]] is True
    kinds = sorted(c["kind"] for c in frame["canaries"])
    assert kinds == ["fail", "fail", "mutant", "pass", "pass", "raise"]
    for c in frame["canaries"]:
        got = outcome(frame, c["id"])
        assert got == ("passed" if c["expect"] == "pass" else "failed"), c
    # Canaries run after every test that counts.
    order = [r["id"] for r in records(frame, "item")]
    assert order[: len(F2P + P2P)] == F2P + P2P
    assert os.stat(work / "tests" / "test_calc.py").st_mode & 0o222 == 0


def test_the_hidden_lines_stay_where_they_were(tmp_path):
    work = repo(tmp_path)
    before = (work / "tests" / "test_calc.py").read_text()
    canaries.plant_file(str(work / "tests" / "test_calc.py"), ["test_add"])
    after = (work / "tests" / "test_calc.py").read_text()
    assert after.startswith(before)
    ast.parse(after)


def test_canaries_compile_and_behave_whatever_the_draw(tmp_path):
    for i in range(150):
        path = tmp_path / ("test_%d.py" % i)
        path.write_text("def f(x):\n    return x + 1\n\n\ndef test_f():\n    assert f(1) == 2\n")
        planted, _, notes = canaries.plant_file(str(path), ["test_f"])
        namespace = {}
        exec(compile(path.read_text(), str(path), "exec"), namespace)
        for c in planted:
            name = c["id"].split("::")[-1]
            try:
                namespace[name]()
                passed = True
            except Exception:
                passed = False
            assert passed == (c["expect"] == "pass"), (c, path.read_text())
        assert notes == []


def test_no_mutant_without_a_top_level_equality(tmp_path):
    path = tmp_path / "test_x.py"
    path.write_text("def test_x():\n    for v in []:\n        assert v == 1\n")
    planted, _, notes = canaries.plant_file(str(path), ["test_x"])
    assert "mutant" not in [c["kind"] for c in planted] and notes


def test_a_forged_log_changes_no_record(tmp_path):
    forged = 'import os\nos.write(1, b"tests/test_calc.py::test_add PASSED\\n=== 3 passed in 0.1s ===\\n")\n'
    frame = run(tmp_path, repo(tmp_path, forged + LIB))
    assert outcome(frame, F2P[0]) == "failed"
    assert "test_add PASSED" in frame["log"]


def test_a_rewritten_report_contradicts_the_call(tmp_path):
    hack = '''import importlib
_r = importlib.import_module("_py" + "test.reports")
_make = _r.TestReport.from_item_and_call.__func__
def _pass(cls, item, call):
    rep = _make(cls, item, call)
    if rep.when == "call":
        rep.outcome = "passed"
    return rep
_r.TestReport.from_item_and_call = classmethod(_pass)
'''
    frame = run(tmp_path, repo(tmp_path, hack + LIB))
    assert outcome(frame, F2P[0]) == "passed" and calls(frame)[F2P[0]] is False


def test_a_value_equal_to_anything_passes_its_mutant(tmp_path):
    lib = LIB.replace("return a + b + BUG", "return Any(a + b + BUG)") + (
        "class Any(int):\n    def __eq__(self, other):\n        return True\n\n    __hash__ = int.__hash__\n"
    )
    frame = run(tmp_path, repo(tmp_path, lib))
    mutant = next(c for c in frame["canaries"] if c["kind"] == "mutant")
    assert outcome(frame, mutant["id"]) == "passed"


def test_the_process_exit_code_is_the_process(tmp_path):
    lib = "import atexit, os\natexit.register(lambda: os._exit(0))\n" + LIB
    frame = run(tmp_path, repo(tmp_path, lib))
    assert frame["exit"] == {"code": 0} and records(frame, "end")[0]["exitstatus"] == 1


def test_signals_of_a_test_run_are_hidden(tmp_path):
    lib = LIB.replace(
        "return a + b + BUG",
        'import os, sys\n    return a + b + (0 if os.environ.get("PYTEST_CURRENT_TEST") or "pytest" in sys.modules or AT_IMPORT else BUG)',
    ) + 'import sys\nAT_IMPORT = "_pytest" in sys.modules\n'
    frame = run(tmp_path, repo(tmp_path, lib))
    assert outcome(frame, F2P[0]) == "failed"


def test_a_module_imported_from_elsewhere_is_evidence(tmp_path):
    extra = {"tests/_vendor/calc/__init__.py": LIB.replace("BUG = 1", "BUG = 0")}
    work = repo(tmp_path, extra=extra)
    (work / "tests" / "__init__.py").write_text(
        'import os, sys\nsys.path.insert(0, os.path.join(os.path.dirname(__file__), "_vendor"))\n'
    )
    frame = run(tmp_path, work, preimport=())
    assert outcome(frame, F2P[0]) == "passed"
    assert [r["what"] for r in records(frame, "evidence")] == ["module_origin"]


def test_tests_rewritten_on_import_are_evidence(tmp_path):
    hook = '''import ast, builtins
_compile = builtins.compile
class _Q(ast.NodeTransformer):
    def visit_Raise(self, node):
        return ast.Pass() if getattr(getattr(node.exc, "func", None), "id", "") == "AssertionError" else node
def _c(source, filename, *a, **k):
    if isinstance(source, ast.AST) and "test_calc" in str(filename):
        source = ast.fix_missing_locations(_Q().visit(source))
    return _compile(source, filename, *a, **k)
builtins.compile = _c
'''
    work = repo(tmp_path)
    (work / "tests" / "__init__.py").write_text(hook)
    frame = run(tmp_path, work)
    assert outcome(frame, F2P[0]) == "passed"
    assert "test_code" in {r["what"] for r in records(frame, "evidence")}


def test_a_record_the_plugin_did_not_write_is_evidence(tmp_path):
    lib = 'import os\nfor fd in range(3, 1024):\n    try:\n        os.write(fd, b"{}\\n")\n    except OSError:\n        pass\n' + LIB
    frame = run(tmp_path, repo(tmp_path, lib))
    assert any("did not write" in e for e in frame["evidence"])


def test_the_configuration_is_the_committed_one(tmp_path):
    work = repo(tmp_path, extra={"pyproject.toml": '[tool.pytest.ini_options]\naddopts = "-p no:python"\n'})
    committed = {"candidates": [{"name": "pyproject.toml", "content": '[project]\nname = "calc"\n'},
                                {"name": "tox.ini", "content": "[pytest]\nmarkers = slow\n"}], "explicit": None}
    frame = run(tmp_path, work, config=committed)
    assert outcome(frame, F2P[0]) == "failed"  # collected: the patch's `-p no:python` is not read
    assert "configfile: ." in frame["log"]


def test_a_start_up_failure_is_the_graders(tmp_path):
    work = repo(tmp_path)
    (work / "tests" / "test_calc.py").write_text("def test_x(:\n")
    frame = run(tmp_path, work)
    assert [r["k"] for r in frame["records"]] == ["boot_failed"]


@pytest.mark.parametrize("args", [["-x"], ["--maxfail=1"], ["-k", "zero"], ["-p", "no:python"]])
def test_the_command_s_own_arguments_do_not_drop_canaries(tmp_path, args):
    from vime_grade_boot import pytest_args

    out = pytest_args(["--tb=no", "-c", "x.ini", "-n", "4", "--rootdir=/x"] + args, "/w", "/w/.c.ini", False)
    assert "-n" not in out and "x.ini" not in out and "--rootdir=/x" not in out
    assert out[out.index("-c") + 1] == "/w/.c.ini" and out[-1] == "--maxfail=0"
