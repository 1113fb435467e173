# pytest under the grader, started by `vime_grade_runner.py` as
# `python -I -B <this file> <set-up fd> <report fd> <pytest args>`, in the work dir, with a clean environment.
#
# Before any code of the repository is imported it reads its set-up and closes that pipe, moves the
# report descriptor to a random high number (not inherited by anything the tests start), loads the
# grader's plugin by path, compiles the hidden test files as they are on disk (the code their tests must
# run: plain, and through pytest's assertion rewriter), picks the repository's pytest configuration as
# pytest would from the files of the tests-present commit (with pytest's own parsers) and writes it to a
# file of its own in the work dir, and imports the repository's packages while pytest is out of
# `sys.modules`. Then `pytest.main` runs with the grader's arguments and plugin.
import ast
import importlib
import importlib.util
import json
import os
import re
import secrets
import sys
import tempfile
import traceback
import types
from pathlib import Path

_gettrace = sys.gettrace
_getprofile = sys.getprofile
MARK = re.compile(r"^(pytest\.)?mark\.")
XDIST_VALUED = ("-n", "--numprocesses", "--dist", "--maxprocesses", "--tx")
DROPPED_VALUED = ("-c", "--config-file", "--rootdir") + XDIST_VALUED
KEEP_ENV = ("PYTHONDONTWRITEBYTECODE", "PYTHONNOUSERSITE", "PYTEST_DISABLE_PLUGIN_AUTOLOAD")


def load_plugin_module():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "vime_grade_plugin.py")
    spec = importlib.util.spec_from_file_location("vime_grade_plugin", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Channel:
    """The report descriptor: JSON lines with the run's nonce and a sequence number."""

    def __init__(self, fd, nonce):
        target = 100 + secrets.randbelow(800)
        while True:
            try:
                os.fstat(target)
                target += 1
            except OSError:
                break
        os.dup2(fd, target, inheritable=False)
        os.close(fd)
        self.fd, self.nonce, self.seq = target, nonce, 0

    def send(self, **record):
        record["n"], record["s"] = self.nonce, self.seq
        self.seq += 1
        data = memoryview((json.dumps(record) + "\n").encode())
        while data:
            data = data[os.write(self.fd, data) :]


def _decorated(fn):
    """A decorator other than a pytest mark: what pytest collects may be a wrapper."""
    return any(not MARK.match(ast.unparse(d.func if isinstance(d, ast.Call) else d)) for d in fn.decorator_list)


class _Ini:
    """The one configuration value pytest's assertion rewriter reads."""

    def __init__(self, pass_hook):
        self.pass_hook = pass_hook

    def getini(self, name):
        return self.pass_hook if name == "enable_assertion_pass_hook" else None


def expected_code(path):
    """Code objects by qualified name of a test file as on disk: plain, and as pytest's rewriter makes it."""
    with open(path, "rb") as f:
        source = f.read()
    tree = ast.parse(source, filename=path)
    plain = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and not _decorated(n)}
    units = [compile(tree, path, "exec", dont_inherit=True)]
    try:
        from _pytest.assertion.rewrite import rewrite_asserts
    except ImportError:
        rewrite_asserts = None
    for pass_hook in (False, True) if rewrite_asserts else ():
        rewritten = ast.parse(source, filename=path)
        rewrite_asserts(rewritten, source, path, _Ini(pass_hook))
        units.append(compile(rewritten, path, "exec", dont_inherit=True))
    codes = {}
    stack = units
    while stack:
        code = stack.pop()
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                codes.setdefault(getattr(const, "co_qualname", const.co_name), []).append(const)
                stack.append(const)
    return codes, plain


def choose_config(candidates, explicit, version):
    """The file pytest would read at the tests-present commit, by pytest's own rules and parsers."""
    if explicit is not None:
        return explicit.get("content", ""), os.path.splitext(explicit.get("name", ""))[1] or ".ini"
    from _pytest.config import findpaths

    folder = tempfile.mkdtemp(prefix="vime-cfg-")
    names = ["pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg"]
    if version >= 9:
        names = ["pytest.toml", ".pytest.toml"] + names
    given = {c["name"]: c["content"] for c in candidates}
    for name in names:
        if name not in given:
            continue
        path = Path(folder, name)
        path.write_text(given[name], encoding="utf-8")
        if findpaths.load_config_dict_from_file(path) is not None:
            return given[name], os.path.splitext(name)[1]
    return "[pytest]\n", ".ini"


def pytest_args(args, workdir, config_file, autoload):
    """The test command's arguments without what the grader decides, then the grader's own."""
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a in DROPPED_VALUED:
            skip = True
        elif not (any(a.startswith(d + "=") for d in DROPPED_VALUED if d[1] == "-") or re.match(r"^-[cn]\S", a)):
            out.append(a)
    out += ["-c", config_file, "--rootdir", workdir, "-p", "no:cacheprovider", "-p", "no:stepwise"]
    out += ["-p", "no:debugging", "-p", "no:xdist", "--maxfail=0"]
    return out + (environment_plugins(workdir) if autoload else [])


def environment_plugins(workdir):
    """The pytest11 entry points installed outside the work dir (a patch can write the repo's own metadata)."""
    from importlib import metadata

    names = []
    root = os.path.realpath(workdir) + os.sep
    for ep in metadata.entry_points(group="pytest11"):
        dist = getattr(ep, "dist", None)
        where = os.path.realpath(str(dist.locate_file(""))) + os.sep if dist is not None else ""
        if where and not where.startswith(root) and not ep.name.startswith("xdist"):
            names += ["-p", ep.name]
    return names


def preimport(modules, workdir, hide_runner):
    """Import the repository's packages and the modules the patch changed while pytest is out of
    `sys.modules`, the work dir first on the path (where pytest's rootdir insertion puts it): code that
    checks for pytest at import finds none. A module that fails to import is left for pytest to import."""
    restore = hide_runner()
    sys.path.insert(0, workdir)
    try:
        for name in modules:
            before = set(sys.modules)
            try:
                importlib.import_module(name)
            except BaseException:
                for k in set(sys.modules) - before:
                    if k == name or k.startswith(name + "."):
                        del sys.modules[k]
    finally:
        if workdir in sys.path:
            sys.path.remove(workdir)
        restore()


def main():
    setup_fd, report_fd, args = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
    with os.fdopen(setup_fd, "rb") as f:
        setup = json.loads(f.read())
    channel = Channel(report_fd, setup["nonce"])
    try:
        plugin_module, hidden, config_file = prepare(setup)
    except BaseException:
        # No code of the repository has run yet: this is the grader's failure, and it says so.
        channel.send(k="boot_failed", error=traceback.format_exc()[-4000:])
        sys.exit(3)
    workdir = setup["workdir"]
    preimport(setup.get("preimport", []), workdir, plugin_module.hide_runner)
    import pytest

    plugin = plugin_module.GraderPlugin(channel, setup, hidden, (_gettrace, _getprofile))
    sys.argv = [os.path.join(os.path.dirname(pytest.__file__), "__main__.py")] + args
    code = pytest.main(pytest_args(args, workdir, config_file, setup.get("autoload")), plugins=[plugin])
    sys.exit(int(code))


def prepare(setup):
    """Everything before the repository's first line runs: environment, plugin, expected code, config."""
    workdir = setup["workdir"]
    for k in [k for k in os.environ if k.startswith(("PYTEST_", "PYTHON")) and k not in KEEP_ENV]:
        del os.environ[k]
    plugin_module = load_plugin_module()
    import _pytest.runner
    import pytest

    hidden = {}
    for p in setup["hidden"]:
        path = os.path.join(workdir, p)
        hidden[os.path.realpath(path)] = expected_code(path)
    # pytest names the running test in the environment; code that reads it behaves as under test only.
    _pytest.runner._update_current_test_var = lambda item, when: os.environ.pop("PYTEST_CURRENT_TEST", None)
    version = int(pytest.__version__.split(".")[0])
    content, suffix = choose_config(setup["config"]["candidates"], setup["config"].get("explicit"), version)
    config_file = os.path.join(workdir, ".%s%s" % (secrets.token_hex(8), suffix))
    with open(config_file, "w", encoding="utf-8") as f:
        f.write(content)
    return plugin_module, hidden, config_file


if __name__ == "__main__":
    main()
