# The grading probe on small work dirs: run as in the grading sandbox (`python3 -I <probe> <runner modules>`
# in the work dir, the patch's added and changed paths on stdin), its verdicts read back from stdout.
import json
import subprocess
import sys
from pathlib import Path

import pytest

PROBE = Path(__file__).resolve().parent.parent / "vime_patch_probe.py"
RUNNER_MODULES = ["pytest", "_pytest", "py", "pluggy", "iniconfig", "unittest", "doctest", "nose", "xdist"]


def probe(workdir, files, added=(), changed=()):
    for path, content in files.items():
        target = workdir / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
    r = subprocess.run(
        [sys.executable, "-I", str(PROBE), json.dumps(RUNNER_MODULES)],
        input=json.dumps({"added": list(added), "changed": list(changed)}),
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(r.stdout)


def kinds(flags):
    return [f["kind"] for f in flags]


def test_nothing_to_say_about_ordinary_files(tmp_path):
    files = {"calc/__init__.py": "", "calc/ops.py": "x = 1\n", "README.md": "hi\n"}
    assert probe(tmp_path, files, added=["calc/ops.py"], changed=["README.md"]) == []


@pytest.mark.parametrize("path", ["json.py", "tests/json.py", "collections/__init__.py"])
def test_a_new_module_shadowing_the_standard_library(tmp_path, path):
    flags = probe(tmp_path, {path: ""}, added=[path])
    assert kinds(flags) == ["module_shadowing"]
    assert "shadows the standard library" in flags[0]["detail"] and path in flags[0]["detail"]


@pytest.mark.parametrize("path", ["pytest.py", "_pytest/__init__.py", "conf/pluggy.py"])
def test_a_new_module_shadowing_the_test_runner(tmp_path, path):
    flags = probe(tmp_path, {path: ""}, added=[path])
    assert kinds(flags) == ["module_shadowing"]
    assert "shadows the test runner" in flags[0]["detail"]


def test_a_module_inside_a_package_shadows_nothing(tmp_path):
    files = {"calc/__init__.py": "", "calc/json.py": "", "calc/sub/__init__.py": "", "calc/sub/pytest.py": ""}
    assert probe(tmp_path, files, added=["calc/json.py", "calc/sub/pytest.py"]) == []


def test_a_changed_file_is_not_a_new_module(tmp_path):
    assert probe(tmp_path, {"json.py": "x = 2\n"}, changed=["json.py"]) == []


def test_a_path_the_patch_removed_again_is_skipped(tmp_path):
    assert probe(tmp_path, {}, added=["json.py"], changed=["tox.ini"]) == []


def test_a_file_that_is_not_python_defines_no_module(tmp_path):
    assert probe(tmp_path, {"json.txt": "", "data/os": ""}, added=["json.txt", "data/os"]) == []


@pytest.mark.parametrize(
    ("path", "content", "says"),
    [
        ("tox.ini", "[tox]\n[pytest]\naddopts = -p no:python\n", "has a [pytest] section"),
        ("setup.cfg", "[metadata]\nname = x\n[tool:pytest]\naddopts = -q\n", "has a [tool:pytest] section"),
        ("sub/pyproject.toml", "[tool.pytest.ini_options]\naddopts = '-q'\n", "configures pytest"),
        ("setup.cfg", "[metadata\nbroken", "no longer parses"),
    ],
)
def test_runner_configuration_after_the_patch(tmp_path, path, content, says):
    flags = probe(tmp_path, {path: content}, changed=[path])
    assert kinds(flags) == ["test_config_changed"]
    assert says in flags[0]["detail"]


def test_runner_configuration_without_a_pytest_section_is_fine(tmp_path):
    files = {"tox.ini": "[tox]\nenvlist = py311\n", "setup.cfg": "[metadata]\nname = x\n",
             "pyproject.toml": "[project]\nname = 'x'\n"}
    assert probe(tmp_path, files, changed=list(files)) == []


def test_every_flag_is_reported(tmp_path):
    files = {"json.py": "", "tox.ini": "[pytest]\n"}
    assert sorted(kinds(probe(tmp_path, files, added=["json.py"], changed=["tox.ini"]))) == [
        "module_shadowing",
        "test_config_changed",
    ]


@pytest.mark.parametrize(
    "content",
    [
        "[tool.\"\\u0070ytest\".ini_options]\n\"\\u0061ddopts\" = \"-p x\"\n",
        "tool = { \"\\u0070ytest\" = { ini_options = { addopts = \"-q\" } } }\n",
        "tool.\"pytest\".ini_options.addopts = \"-q\"\n",
    ],
)
def test_pytest_configuration_in_toml_however_the_keys_are_written(tmp_path, content):
    flags = probe(tmp_path, {"pyproject.toml": content}, changed=["pyproject.toml"])
    assert kinds(flags) == ["test_config_changed"]


@pytest.mark.parametrize(
    ("name", "target"),
    [("tox.ini", "/dev/zero"), ("setup.cfg", "/dev/urandom"), ("pyproject.toml", "/proc/self/fd/1"),
     ("pyproject.toml", "/proc/self/fd/0")],
)
def test_a_configuration_file_that_is_a_symlink_is_flagged_without_being_read(tmp_path, name, target):
    (tmp_path / name).symlink_to(target)
    flags = probe(tmp_path, {}, added=[name])
    assert kinds(flags) == ["test_config_changed"]
    assert "symlink" in flags[0]["detail"]


def test_a_configuration_file_too_large_to_read_is_flagged(tmp_path):
    flags = probe(tmp_path, {"tox.ini": "[tox]\n" + "x = 1\n" * 300000}, changed=["tox.ini"])
    assert kinds(flags) == ["test_config_changed"] and "larger than" in flags[0]["detail"]


def test_a_configuration_folder_is_flagged_not_read(tmp_path):
    (tmp_path / "setup.cfg").mkdir()
    flags = probe(tmp_path, {}, added=["setup.cfg"])
    assert kinds(flags) == ["test_config_changed"] and "not a regular file" in flags[0]["detail"]


def test_work_beyond_its_bounds_is_a_flag_not_a_wait(tmp_path):
    deep = "/".join(["d"] * 70) + "/x.py"
    many = ["f%d.txt" % i for i in range(20001)]
    assert kinds(probe(tmp_path, {}, added=[deep])) == ["oversized_change"]
    assert kinds(probe(tmp_path, {}, added=many)) == ["oversized_change"]
