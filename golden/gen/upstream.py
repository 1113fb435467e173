"""Loads the pinned upstream trainer code so the golden generators call it, not a re-statement of it.

Each trainer's files are read from a checkout at the pinned commit (never committed here). A file whose
git blob id differs from the pinned one is refused, so a wrong checkout cannot produce golden vectors.
Heavy dependencies the loaded code imports but the golden functions never use (omegaconf, ray,
transformers, tensordict, deepspeed, ...) are replaced by empty stand-ins; everything a golden function
computes with is the upstream source itself.
"""

import ast
import hashlib
import importlib.util
import os
import sys
import textwrap
import types

HERE = os.path.dirname(os.path.abspath(__file__))
UPSTREAM = os.environ.get("VIME_UPSTREAM", os.path.abspath(os.path.join(HERE, "..", ".upstream")))

COMMITS = {
    "volcengine/verl": "b178a3cd56f58b2d502255daba591e92833930a7",
    "huggingface/trl": "f2cd57710ae345ea6428ae95363267fcf38a3dc8",
    "OpenRLHF/OpenRLHF": "3c3be6234e0cb353e76bb8019947db9dfe99fca7",
}

# git blob ids of the files read, at the commits above (`git ls-tree <commit> <path>`).
BLOBS = {
    "verl/trainer/ppo/core_algos.py": "2039fe56f62f52190846fbf8b8b31dc0df160929",
    "verl/trainer/ppo/rollout_corr_helper.py": "6f770b38274d0692f32273d96edd1d2a35602a24",
    "verl/utils/device.py": "24df2bdab7e63724e95b54a3c6ca9b0faec1bea9",
    "verl/utils/groupwise.py": "173872aa9031527a785525590f8b6e28bba60b1f",
    "verl/utils/torch_functional.py": "8f870837bd34bb5bc977975f383d000286e384ac",
    "verl/trainer/ppo/ray_trainer.py": "462715079343f75dc173c13612d25907d49aab41",
    "trl/trainer/grpo_trainer.py": "b2e927e0110b0c4c3a0e6d5d5c874d42ce8ae377",
    "trl/trainer/utils.py": "82f1ff63de7596c878d3c16b9f4698e8a4780d36",
    "openrlhf/models/utils.py": "48c4972e937724b6198bf30a05047ce553e687fc",
    "openrlhf/trainer/ppo_utils/experience_maker.py": "1e86c9cc4a86d42942300a9734ebe264c38f8786",
    "openrlhf/trainer/ppo_utils/length_penalty.py": "6ca34624da4af257d16d354e1bf6c8d164b04f90",
}

ROOTS = {"verl": "verl", "trl": "trl", "openrlhf": "openrlhf"}


def path_of(rel):
    root = os.path.join(UPSTREAM, ROOTS[rel.split("/")[0]])
    return os.path.join(root, rel)


def read_pinned(rel):
    with open(path_of(rel), "rb") as f:
        data = f.read()
    blob = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
    if blob != BLOBS[rel]:
        raise SystemExit(f"{rel}: blob {blob} is not the pinned {BLOBS[rel]}; check out the pinned commit")
    return data.decode()


def source_ref(repo, rel, function):
    return f"{repo}@{COMMITS[repo]}:{rel}::{function}"


def _stub(name, **attrs):
    module = sys.modules.get(name) or types.ModuleType(name)
    module.__path__ = []  # lets submodules be registered under it
    for k, v in attrs.items():
        setattr(module, k, v)
    sys.modules[name] = module
    return module


def _load_file(name, rel):
    source = read_pinned(rel)
    spec = importlib.util.spec_from_loader(name, loader=None, origin=path_of(rel))
    module = importlib.util.module_from_spec(spec)
    module.__file__ = path_of(rel)
    sys.modules[name] = module
    exec(compile(source, path_of(rel), "exec"), module.__dict__)
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, module)
    return module


class ConfigStub(dict):
    """Attribute-and-key access, like the omegaconf / dataclass configs verl passes around."""

    def __getattr__(self, key):
        try:
            return self[key]
        except KeyError as e:
            raise AttributeError(key) from e


class ActorConfig(ConfigStub):
    pass


class AlgoConfig(ConfigStub):
    pass


class DataProtoStub:
    def __init__(self, tensors):
        self.batch = tensors

    @classmethod
    def from_dict(cls, tensors):
        return cls(dict(tensors))


_verl = None


def verl():
    """verl's core_algos (+ groupwise, torch_functional, rollout_corr_helper), executed from the pinned files."""
    global _verl
    if _verl is not None:
        return _verl
    os.environ.setdefault("VERL_FORCE_DEVICE", "cpu")

    class DictConfig(dict):
        pass

    class _Any:
        def __init__(self, *a, **k):
            pass

    _stub("omegaconf", DictConfig=DictConfig, OmegaConf=_Any)
    _stub("tensordict", TensorDict=_Any)
    _stub("transformers", PreTrainedTokenizer=_Any)
    for pkg in ["verl", "verl.utils", "verl.trainer", "verl.trainer.ppo", "verl.workers"]:
        _stub(pkg)

    def deprecated(replacement=""):
        return lambda obj: obj

    _stub("verl.utils.import_utils", deprecated=deprecated)
    _stub("verl.trainer.config", AlgoConfig=AlgoConfig)
    _stub("verl.trainer.config.algorithm", RolloutCorrectionConfig=ConfigStub)
    _stub("verl.workers.config", ActorConfig=ActorConfig)
    _stub("verl.workers.config.actor", PolicyLossConfig=ConfigStub)
    _stub("verl.protocol", DataProto=DataProtoStub)
    _load_file("verl.utils.device", "verl/utils/device.py")
    _load_file("verl.utils.torch_functional", "verl/utils/torch_functional.py")
    groupwise = _load_file("verl.utils.groupwise", "verl/utils/groupwise.py")
    sys.modules["verl.utils"].as_torch_index = groupwise.as_torch_index
    sys.modules["verl.utils"].group_mean_std = groupwise.group_mean_std
    core = _load_file("verl.trainer.ppo.core_algos", "verl/trainer/ppo/core_algos.py")
    _load_file("verl.trainer.ppo.rollout_corr_helper", "verl/trainer/ppo/rollout_corr_helper.py")
    _verl = types.SimpleNamespace(
        core=core,
        groupwise=groupwise,
        F=sys.modules["verl.utils.torch_functional"],
        ActorConfig=ActorConfig,
        AlgoConfig=AlgoConfig,
    )
    return _verl


def _function_source(rel, name, cls=None):
    """The source of one top-level function (or method of `cls`) of a pinned file."""
    source = read_pinned(rel)
    tree = ast.parse(source)
    scope = tree.body
    if cls is not None:
        scope = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls).body
    node = next(n for n in scope if isinstance(n, ast.FunctionDef) and n.name == name)
    lines = source.splitlines()
    start = node.lineno - 1 if not node.decorator_list else node.decorator_list[0].lineno - 1
    return textwrap.dedent("\n".join(lines[start : node.end_lineno]))


def load_function(rel, name, namespace, cls=None, drop_decorators=()):
    """Execute one upstream function definition in `namespace` and return it."""
    src = _function_source(rel, name, cls)
    kept = [line for line in src.splitlines() if line.strip() not in drop_decorators]
    exec(compile("\n".join(kept), path_of(rel), "exec"), namespace)
    return namespace[name]


def statements_between(rel, cls, method, first, last):
    """The statements of `cls.method` from the one whose source starts with `first` through the one
    starting with `last` (inclusive), dedented, as one code block to exec."""
    source = read_pinned(rel)
    tree = ast.parse(source)
    klass = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
    fn = next(n for n in klass.body if isinstance(n, ast.FunctionDef) and n.name == method)
    lines = source.splitlines()
    body = fn.body

    def text(n):
        return lines[n.lineno - 1].strip()

    i = next(k for k, n in enumerate(body) if text(n).startswith(first))
    j = next(k for k, n in enumerate(body) if k >= i and text(n).startswith(last))
    block = "\n".join(lines[body[i].lineno - 1 : body[j].end_lineno])
    return compile(textwrap.dedent(block), path_of(rel), "exec")
