"""Golden vectors of OpenRLHF's advantage estimators (RemoteExperienceMaker.compute_advantages_and_returns
with get_advantages_and_returns / get_cumulative_returns, models/utils.compute_reward and compute_approx_kl),
executed from the pinned source (see upstream.py) on CPU."""

import itertools
import types
from typing import List, Optional, Tuple, Union

import torch

import upstream
from common import GROUP_SETS, padded, token_batch, unpad, write

REPO = "OpenRLHF/OpenRLHF"
MAKER = "openrlhf/trainer/ppo_utils/experience_maker.py"
UTILS = "openrlhf/models/utils.py"
PENALTY = "openrlhf/trainer/ppo_utils/length_penalty.py"
FOLDER = "openrlhf"
written = []

ns = {"torch": torch, "itertools": itertools, "Experience": object, "List": List, "Tuple": Tuple, "Union": Union, "Optional": Optional,
      "logger": types.SimpleNamespace(info=lambda *a, **k: None, warning=lambda *a, **k: None)}
for rel, name in ((UTILS, "compute_reward"), (UTILS, "masked_mean"), (UTILS, "compute_approx_kl"),
                  (PENALTY, "apply_overlong_penalty"), (PENALTY, "apply_stop_properly_penalty"),
                  (PENALTY, "apply_length_penalties")):
    upstream.load_function(rel, name, ns)
methods = {name: upstream.load_function(MAKER, name, ns, cls="RemoteExperienceMaker", drop_decorators=("@torch.no_grad()",))
           for name in ("compute_advantages_and_returns", "get_advantages_and_returns", "get_cumulative_returns")}


class Maker:
    """Stands in for RemoteExperienceMaker: the three upstream methods bound to a config."""

    def __init__(self, estimator, n, gamma, lambd, no_std_norm, kl_coef, clip_range):
        advantage = types.SimpleNamespace(estimator=estimator, gamma=gamma, lambd=lambd, no_std_norm=no_std_norm)
        self.args = types.SimpleNamespace(
            algo=types.SimpleNamespace(advantage=advantage),
            rollout=types.SimpleNamespace(n_samples_per_prompt=n, max_new_tokens=None),
            reward=types.SimpleNamespace(clip_range=clip_range, overlong_buffer_len=None, stop_properly_penalty_coef=None),
        )
        self.strategy = types.SimpleNamespace(args=self.args)
        self.advantage_estimator = estimator
        self.kl_ctl = types.SimpleNamespace(value=kl_coef)

    def __getattr__(self, name):
        return methods[name].__get__(self)


def run(estimator, n, rewards, lengths, masks, *, gamma=1.0, lambd=1.0, no_std_norm=False, kl_coef=0.0, kl=None,
        values=None, clip_range=None, experiences=None, order=None, pads=None):
    """Samples listed in experience order; `order[k]` is the prompt-order position of the k-th sample."""
    B = len(rewards)
    order = order or list(range(B))
    sizes = experiences or [B]
    exps, at = [], 0
    for e, size in enumerate(sizes):
        idx = list(range(at, at + size))
        width = pads[e] if pads else max(lengths[i] for i in idx)
        am = padded([masks[i] for i in idx], width, 0, torch.int64).bool()
        exps.append(types.SimpleNamespace(
            index=[order[i] for i in idx],
            rewards=torch.tensor([rewards[i] for i in idx], dtype=torch.float32),
            action_mask=am,
            kl=padded([kl[i] for i in idx], width, 0.0) if kl else torch.zeros(size, width),
            values=padded([values[i] for i in idx], width, 0.0) if values else None,
            response_length=torch.tensor([lengths[i] for i in idx]),
            truncated=None,
            info={},
        ))
        at += size
    Maker(estimator, n, gamma, lambd, no_std_norm, kl_coef, clip_range).compute_advantages_and_returns(exps)
    advantages, returns = [], []
    at = 0
    for e, size in zip(exps, sizes):
        ls = lengths[at : at + size]
        advantages += unpad(e.advantages, ls)
        returns += unpad(e.returns, ls)
        at += size
    return advantages, returns


SRC = upstream.source_ref(REPO, MAKER, "RemoteExperienceMaker.compute_advantages_and_returns")
ESTIMATORS = ["gae", "reinforce", "rloo", "reinforce_baseline", "group_norm", "dr_grpo"]


def main():
    # ---- sequence-level: one action token per response, the shared reward sets (n > 1: OpenRLHF asserts it) ----
    for name, (n, rewards) in GROUP_SETS.items():
        if n == 1:
            continue
        for estimator in ESTIMATORS:
            if estimator == "gae":
                continue
            B = len(rewards)
            adv, ret = run(estimator, n, rewards, [1] * B, [[1]] * B)
            written.append(write(FOLDER, f"openrlhf__{estimator}__{name}", SRC,
                                 "one action token per response: the shaped scalar reward is the advantage (whitened for reinforce*)",
                                 {"estimator": estimator, "n_samples_per_prompt": n, "gamma": 1.0, "lambd": 1.0, "kl_coef": 0.0},
                                 {"rewards": rewards}, {"advantages": [a[0] for a in adv], "returns": [r[0] for r in ret]}))

    # ---- token level: the padded token batch ------------------------------------------------------------------
    TB = token_batch()
    L = TB["response_lengths"]
    masks = [m[:] for m in TB["loss_masks"]]
    masks[6] = [0, 0, 1, 0]  # OpenRLHF needs an action token per response (compute_reward places r at the last one)
    rewards = TB["scores"]
    for kind in ("k1", "k2", "k3"):
        a = padded(TB["log_probs"], 10, 0.0)
        b = padded(TB["ref_log_probs"], 10, 0.0)
        out = ns["compute_approx_kl"](a, b, kl_estimator=kind)
        written.append(write(FOLDER, f"openrlhf__compute_approx_kl__{kind}", upstream.source_ref(REPO, UTILS, "compute_approx_kl"),
                             "k1 / k2 / k3 of log_probs - log_probs_base, clamped to [-10, 10]", {"kl_estimator": kind},
                             {"log_probs": TB["log_probs"], "log_probs_base": TB["ref_log_probs"]}, {"kl": unpad(out, L)}))

    kl_k1 = unpad(ns["compute_approx_kl"](padded(TB["log_probs"], 10, 0.0), padded(TB["ref_log_probs"], 10, 0.0)), L)
    TOKEN_CASES = []
    for estimator in ESTIMATORS:
        TOKEN_CASES.append((estimator, "default", {}))
        TOKEN_CASES.append((estimator, "kl", {"kl_coef": 0.05, "kl": kl_k1}))
    TOKEN_CASES += [
        ("gae", "gamma0.99_lambd0.95", {"gamma": 0.99, "lambd": 0.95, "kl_coef": 0.05, "kl": kl_k1}),
        ("gae", "no_std_norm", {"gamma": 1.0, "lambd": 0.95, "no_std_norm": True}),
        ("reinforce", "gamma0.9", {"gamma": 0.9, "kl_coef": 0.05, "kl": kl_k1}),
        ("reinforce_baseline", "no_std_norm", {"no_std_norm": True}),
        ("reinforce_baseline", "gamma_forced", {"gamma": 0.5}),
        ("group_norm", "clip_range", {"clip_range": (-0.1, 0.6)}),
        ("reinforce", "two_experiences", {"experiences": [3, 5], "pads": [9, 10], "kl_coef": 0.05, "kl": kl_k1}),
        ("group_norm", "two_experiences_shuffled", {"experiences": [5, 3], "order": [4, 0, 6, 2, 7, 1, 5, 3]}),
        ("gae", "two_experiences", {"experiences": [4, 4], "pads": [9, 10], "lambd": 0.95}),
    ]
    for estimator, tag, opts in TOKEN_CASES:
        opts = dict(opts)
        opts.setdefault("values", TB["values"] if estimator == "gae" else None)
        order = opts.get("order")
        rs = rewards if order is None else [rewards[o] for o in order]  # experience order: the reward of each listed sample
        adv, ret = run(estimator, 4, rs, L, masks, **opts)
        params = {"estimator": estimator, "n_samples_per_prompt": 4, "gamma": opts.get("gamma", 1.0), "lambd": opts.get("lambd", 1.0),
                  "no_std_norm": opts.get("no_std_norm", False), "kl_coef": opts.get("kl_coef", 0.0),
                  "reward_clip_range": opts.get("clip_range"), "experiences": opts.get("experiences"), "pads": opts.get("pads"),
                  "order": order}
        inputs = {"rewards": rs, "response_lengths": L, "action_masks": masks, "kl": opts.get("kl"), "values": opts.get("values")}
        written.append(write(FOLDER, f"openrlhf__{estimator}__tokens__{tag}", SRC,
                             "compute_reward (r at the last action token, -kl_coef*kl), returns / GAE, whitening for gae and reinforce*",
                             params, inputs, {"advantages": adv, "returns": ret}))

    print(f"openrlhf: {len(written)} files")


if __name__ == "__main__":
    main()
