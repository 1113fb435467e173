# The grader's pytest plugin, loaded by `vime_grade_boot.py` (by path, before any code of the repository)
# and handed to `pytest.main(plugins=[...])`. It writes to the grader's report descriptor only:
# - `item` for every test that counts (the task's F2P/P2P tests and the canaries), with its parser key;
# - `phase` for each of their setup/call/teardown reports (outcome, and whether pytest marked it xfail);
# - `call` for each call of one of their test functions: whether the function returned or raised, as seen
#   around pytest's own call (a report rewritten afterwards does not change it);
# - `collect` for each collector that failed; `evidence` for tampering it sees; `end` with the exit status.
# It also keeps canaries collected (whatever `-k`, `-m` or the configuration select) and runs them after
# the other tests, hides pytest from `sys.modules` while a test function runs, checks that the tests run
# the code of the hidden test files, that no trace or profile function is active when they start, and
# that the repository's modules were imported from where the repository keeps them.
import importlib.abc
import importlib.util
import os
import re
import sys
import types

import pytest

RUNNER_MODULES = re.compile(r"^(pytest|_pytest|pluggy|iniconfig|py)(\.|$)")


def key_of(nodeid):
    """The id a log parser gives this test: the node id cut at its first whitespace (SWE-smith, SWE-bench)."""
    m = re.match(r"\S+", nodeid)
    return m.group(0) if m else nodeid


class Restorer(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves the saved pytest modules on import, so code that imports pytest gets the one running."""

    def __init__(self, saved):
        self.saved = saved
        self.specs = {k: getattr(v, "__spec__", None) for k, v in saved.items()}

    def find_spec(self, name, path=None, target=None):
        return importlib.util.spec_from_loader(name, self) if name in self.saved else None

    def create_module(self, spec):
        return self.saved[spec.name]

    def exec_module(self, module):
        if self.specs.get(module.__name__) is not None:
            module.__spec__ = self.specs[module.__name__]


def hide_runner():
    """Take pytest out of `sys.modules` (served back on import); returns the call that puts it back."""
    saved = {k: v for k, v in list(sys.modules.items()) if RUNNER_MODULES.match(k)}
    restorer = Restorer(saved)
    for k in saved:
        del sys.modules[k]
    sys.meta_path.insert(0, restorer)

    def restore():
        if restorer in sys.meta_path:
            sys.meta_path.remove(restorer)
        sys.modules.update(saved)

    return restore


def same_code(a, b):
    if a.co_code != b.co_code or a.co_names != b.co_names or len(a.co_consts) != len(b.co_consts):
        return False
    for x, y in zip(a.co_consts, b.co_consts):
        if isinstance(x, types.CodeType) and isinstance(y, types.CodeType):
            if not same_code(x, y):
                return False
        elif type(x) is not type(y) or repr(x) != repr(y):
            return False
    return True


def _code(f):
    f = getattr(f, "__func__", f)
    code = getattr(f, "__code__", None)
    return code if isinstance(code, types.CodeType) else None


def _chain(obj):
    """The object and what it wraps (`__wrapped__`), as far as that goes."""
    out, seen = [], set()
    while obj is not None and id(obj) not in seen and len(out) < 32:
        seen.add(id(obj))
        out.append(obj)
        obj = getattr(obj, "__wrapped__", None)
    return out


class GraderPlugin:
    def __init__(self, channel, setup, hidden, tracers):
        self.ch = channel
        self.workdir = os.path.realpath(setup["workdir"])
        self.wanted = set(setup["wanted"])
        self.prefixes = tuple(w for w in setup["wanted"] if w.count("[") > w.count("]"))
        self.canaries = {(c["file"], c["cls"], c["name"]) for c in setup["canaries"]}
        self.canary_ids = {"::".join(x for x in c if x) for c in self.canaries}
        self.canary_names = {c[2] for c in self.canaries}
        self.hidden = hidden
        self.tracers = tracers
        self.validated = {}
        self.packages = {p["name"]: p["path"] for p in setup.get("packages", [])}
        self.module_files = set(setup.get("moduleFiles", []))

    # --- what counts --------------------------------------------------------------------------------
    def canary(self, nodeid):
        return re.sub(r"\[.*$", "", nodeid) in self.canary_ids

    def wants(self, nodeid):
        return (
            key_of(nodeid) in self.wanted
            or nodeid in self.wanted
            or (bool(self.prefixes) and nodeid.startswith(self.prefixes))
            or self.canary(nodeid)
        )

    def evidence(self, what, detail):
        self.ch.send(k="evidence", what=what, detail=detail[:2000])

    # --- collection ---------------------------------------------------------------------------------
    @pytest.hookimpl(tryfirst=True)
    def pytest_pycollect_makeitem(self, collector, name, obj):
        if name not in self.canary_names or not isinstance(obj, types.FunctionType):
            return None
        module = collector.getparent(pytest.Module)
        if module is None:
            return None
        rel = os.path.relpath(os.path.realpath(str(module.path)), self.workdir)
        cls = collector.obj.__name__ if isinstance(collector, pytest.Class) else None
        if (rel, cls, name) not in self.canaries:
            return None
        return list(collector._genfunctions(name, obj))

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_collection_modifyitems(self, session, config, items):
        canaries = [i for i in items if self.canary(i.nodeid)]
        yield
        present = {id(i) for i in items}
        items.extend(i for i in canaries if id(i) not in present)
        real = [i for i in items if not self.canary(i.nodeid)]
        rest = [i for i in items if self.canary(i.nodeid)]
        # Canaries last: a mutant that fails midway cannot leave state behind for a test that counts.
        items[:] = real + rest
        for item in items:
            if self.wants(item.nodeid):
                fn = type(item).runtest is pytest.Function.runtest
                self.ch.send(k="item", id=item.nodeid, key=key_of(item.nodeid), fn=fn)
                self.check_code(item)

    def pytest_collectreport(self, report):
        if report.failed:
            self.ch.send(k="collect", id=report.nodeid)

    def check_code(self, item):
        """The test runs the code of its hidden test file, as that file is on disk."""
        try:
            self._check_code(item)
        except Exception:  # an object pytest itself cannot use fails its test; nothing to verify here
            pass

    def _check_code(self, item):
        path = os.path.realpath(str(getattr(item, "path", getattr(item, "fspath", ""))))
        if path not in self.hidden or not callable(getattr(item, "obj", None)):
            return
        codes, plain = self.hidden[path]
        name = getattr(item, "originalname", None) or item.name
        cls = getattr(item, "cls", None)
        qual = "%s.%s" % (cls.__qualname__, name) if cls is not None else name
        found = [c for c in map(_code, _chain(item.obj)) if c is not None]
        # Code objects compiled from this very file, checked against the file under their own names.
        own = [(c, codes.get(getattr(c, "co_qualname", c.co_name))) for c in found]
        own = [(c, e) for c, e in own if e and os.path.realpath(c.co_filename) == path]
        checks = own + ([(c, codes[qual]) for c in found] if qual in codes else [])
        for code, expected in checks:
            if any(same_code(code, e) for e in expected):
                self.validated[item.nodeid] = code
                return
        # A test under a decorator that hides what it wraps cannot be checked; any other must match.
        if own or (qual in codes and qual in plain):
            self.evidence("test_code", "%s does not run the code of its hidden test file" % item.nodeid)

    # --- running ------------------------------------------------------------------------------------
    def check_running(self, item, when):
        try:
            self._check_running(item, when)
        except Exception:  # pytest's own use of the same object fails the test
            pass

    def _check_running(self, item, when):
        gettrace, getprofile = self.tracers
        if gettrace() is not None or getprofile() is not None:
            self.evidence("tracer", "a trace or profile function is set %s %s runs" % (when, item.nodeid))
        expected = self.validated.get(item.nodeid)
        if expected is not None and not any(c is expected for c in map(_code, _chain(item.obj))):
            self.evidence("test_code", "the code of %s was replaced %s it ran" % (item.nodeid, when))

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_pyfunc_call(self, pyfuncitem):
        wanted = self.wants(pyfuncitem.nodeid)
        if wanted:
            self.check_running(pyfuncitem, "before")
        restore = hide_runner()
        try:
            outcome = yield
        finally:
            restore()
        if wanted:
            self.check_running(pyfuncitem, "after")
            exc = outcome.excinfo
            self.ch.send(k="call", id=pyfuncitem.nodeid, returned=exc is None, exc=None if exc is None else exc[0].__name__)

    def pytest_runtest_logreport(self, report):
        if self.wants(report.nodeid) and report.outcome == "rerun":
            # pytest-rerunfailures runs the test again: its next reports replace these.
            self.ch.send(k="rerun", id=report.nodeid)
        elif self.wants(report.nodeid):
            xfail = hasattr(report, "wasxfail")
            self.ch.send(k="phase", id=report.nodeid, when=report.when, outcome=report.outcome, xfail=xfail)

    # --- the end ------------------------------------------------------------------------------------
    def check_origins(self):
        """Every module of the repository's packages comes from where the repository keeps it."""
        for name, module in list(sys.modules.items()):
            top = name.split(".")[0]
            if top not in self.packages:
                continue
            file = vars(module).get("__file__") if hasattr(module, "__dict__") else None
            if not isinstance(file, str):
                continue
            real = os.path.realpath(file)
            home = self.packages[top]
            if home.endswith(".py"):
                expected = [home] if name == top else []
                inside = None
            else:
                rel = "/".join([home] + name.split(".")[1:])
                expected = [p for p in (rel + "/__init__.py", rel + ".py") if p in self.module_files]
                inside = os.path.join(self.workdir, home) + os.sep
            if expected:
                ok = real in {os.path.realpath(os.path.join(self.workdir, p)) for p in expected}
            else:
                ok = inside is not None and real.startswith(inside)
            if not ok:
                self.evidence("module_origin", "%s was imported from %s, not from the repository's %s" % (name, file, home))

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session, exitstatus):
        self.check_origins()
        self.ch.send(k="end", exitstatus=int(exitstatus), collected=session.testscollected, failed=session.testsfailed)
