"""Convention dumps for `vime-grpo check --preset auto`: one rollout batch whose advantages were computed by
another trainer's pinned upstream code (verl, TRL, OpenRLHF), written in slime's debug-dump format
(`rollout_data/<id>.pt`, `train_data/<id>.pt`, format_version 2) so the check can read them.

slime's own conventions are covered by the real slime dumps in ../trainer-dumps."""

import json
import os

import numpy as np
import torch

import openrlhf_golden as orlhf
import trl_golden as trl
import upstream
from common import GOLDEN, padded, unpad

ROLLOUT_ID = 7
V = upstream.verl()
C = V.core

# 4 prompts x 4 samples: continuous, binary, tiny-spread (variance below verl's 1e-6 floor), large offsets.
REWARDS = [0.1, 0.5, 0.9, 0.3, 1.0, 0.0, 0.0, 1.0, 2e-4, 1e-4, 3e-4, 1e-4, 10.0, 12.5, 9.0, 11.0]
LENGTHS = [5, 8, 3, 10, 6, 4, 9, 7, 5, 6, 4, 8, 7, 3, 6, 9]
N = 4


def mask_of(i, n):
    """Tool-observation spans inside some responses, trailing masked tokens in others."""
    m = [1] * n
    if i % 3 == 1 and n > 5:
        m[2:4] = [0, 0]
    if i % 4 == 3:
        m[-1] = 0
    if i % 5 == 2 and n > 3:
        m[-2:] = [0, 0]
    return m


MASKS = [mask_of(i, n) for i, n in enumerate(LENGTHS)]
B = len(REWARDS)
T = max(LENGTHS)
INDEX = np.array([i // N for i in range(B)])


def token_rewards(dtype=torch.float32):
    r = torch.zeros(B, T, dtype=dtype)
    for i, n in enumerate(LENGTHS):
        r[i, n - 1] = REWARDS[i]
    return r


def verl_case(fn, **kwargs):
    mask = padded(MASKS, T, 0, torch.int64)
    adv, ret = getattr(C, fn)(token_rewards(), mask, INDEX, **kwargs)
    one, _ = getattr(C, fn)(torch.tensor(REWARDS).unsqueeze(-1), torch.ones(B, 1, dtype=torch.int64), INDEX, **kwargs)
    return unpad(adv, LENGTHS), unpad(ret, LENGTHS), one[:, 0].tolist()


# ReMax's greedy-rollout reward per prompt (one per group, as verl's trainer computes it per prompt).
BASELINES = [0.4, 0.0, 2e-4, 11.5]
# Critic values per token (GAE).
VALUES = [[round(0.1 * ((i + t) % 5) - 0.2, 2) for t in range(n)] for i, n in enumerate(LENGTHS)]


def verl_reinforce_plus_plus():
    mask = padded(MASKS, T, 0, torch.int64)
    config = V.AlgoConfig(gamma=1.0)
    adv, ret = C.compute_reinforce_plus_plus_outcome_advantage(token_rewards(), mask, config=config)
    one, _ = C.compute_reinforce_plus_plus_outcome_advantage(torch.tensor(REWARDS).unsqueeze(-1),
                                                             torch.ones(B, 1, dtype=torch.int64), config=config)
    return unpad(adv, LENGTHS), unpad(ret, LENGTHS), one[:, 0].tolist()


def verl_remax():
    mask = padded(MASKS, T, 0, torch.int64)
    rb = torch.tensor([BASELINES[g] for g in INDEX], dtype=torch.float32)
    adv, ret = C.compute_remax_outcome_advantage(token_rewards(), rb, mask)
    one, _ = C.compute_remax_outcome_advantage(torch.tensor(REWARDS).unsqueeze(-1), rb, torch.ones(B, 1, dtype=torch.int64))
    return unpad(adv, LENGTHS), unpad(ret, LENGTHS), one[:, 0].tolist()


def verl_gae():
    mask = padded(MASKS, T, 0, torch.int64)
    values = padded(VALUES, T, 0.0)
    adv, ret = C.compute_gae_advantage_return(token_rewards(), values, mask, 1.0, 1.0)
    one, _ = C.compute_gae_advantage_return(torch.tensor(REWARDS).unsqueeze(-1), torch.tensor([[v[0]] for v in VALUES]),
                                            torch.ones(B, 1, dtype=torch.int64), 1.0, 1.0)
    return unpad(adv, LENGTHS), unpad(ret, LENGTHS), one[:, 0].tolist()


def trl_case(scale):
    adv = trl.trl_advantages(torch.tensor(REWARDS).unsqueeze(1), N, [1.0], scale, "sum_then_normalize")
    rows = [[a] * n for a, n in zip(adv.tolist(), LENGTHS)]
    return rows, rows, adv.tolist()


def openrlhf_case(estimator):
    values = VALUES if estimator == "gae" else None
    adv, ret = orlhf.run(estimator, N, REWARDS, LENGTHS, MASKS, values=values)
    one, _ = orlhf.run(estimator, N, REWARDS, [1] * B, [[1]] * B, values=[[v[0]] for v in values] if values else None)
    return adv, ret, [a[0] for a in one]


CASES = {
    "verl_grpo": ("volcengine/verl", "verl/trainer/ppo/core_algos.py", "compute_grpo_outcome_advantage",
                  lambda: verl_case("compute_grpo_outcome_advantage")),
    "verl_grpo_no_std": ("volcengine/verl", "verl/trainer/ppo/core_algos.py", "compute_grpo_outcome_advantage",
                         lambda: verl_case("compute_grpo_outcome_advantage", norm_adv_by_std_in_grpo=False)),
    "verl_grpo_vectorized": ("volcengine/verl", "verl/trainer/ppo/core_algos.py", "compute_grpo_vectorized_outcome_advantage",
                             lambda: verl_case("compute_grpo_vectorized_outcome_advantage")),
    "verl_grpo_passk": ("volcengine/verl", "verl/trainer/ppo/core_algos.py", "compute_grpo_passk_outcome_advantage",
                        lambda: verl_case("compute_grpo_passk_outcome_advantage", config=V.AlgoConfig(norm_adv_by_std_in_grpo=True))),
    "verl_rloo": ("volcengine/verl", "verl/trainer/ppo/core_algos.py", "compute_rloo_outcome_advantage",
                  lambda: verl_case("compute_rloo_outcome_advantage")),
    "verl_rloo_vectorized": ("volcengine/verl", "verl/trainer/ppo/core_algos.py", "compute_rloo_vectorized_outcome_advantage",
                             lambda: verl_case("compute_rloo_vectorized_outcome_advantage")),
    "verl_opo": ("volcengine/verl", "verl/trainer/ppo/core_algos.py", "compute_opo_outcome_advantage",
                 lambda: verl_case("compute_opo_outcome_advantage")),
    "verl_gpg": ("volcengine/verl", "verl/trainer/ppo/core_algos.py", "compute_gpg_outcome_advantage",
                 lambda: verl_case("compute_gpg_outcome_advantage")),
    "verl_reinforce_plus_plus_baseline": ("volcengine/verl", "verl/trainer/ppo/core_algos.py",
                                          "compute_reinforce_plus_plus_baseline_outcome_advantage",
                                          lambda: verl_case("compute_reinforce_plus_plus_baseline_outcome_advantage")),
    "verl_reinforce_plus_plus": ("volcengine/verl", "verl/trainer/ppo/core_algos.py",
                                 "compute_reinforce_plus_plus_outcome_advantage",
                                 verl_reinforce_plus_plus),
    "verl_remax": ("volcengine/verl", "verl/trainer/ppo/core_algos.py", "compute_remax_outcome_advantage", verl_remax),
    "verl_gae": ("volcengine/verl", "verl/trainer/ppo/core_algos.py", "compute_gae_advantage_return", verl_gae),
    "trl_group": ("huggingface/trl", "trl/trainer/grpo_trainer.py", "GRPOTrainer._generate_and_score_completions",
                  lambda: trl_case("group")),
    "trl_batch": ("huggingface/trl", "trl/trainer/grpo_trainer.py", "GRPOTrainer._generate_and_score_completions",
                  lambda: trl_case("batch")),
    "trl_none": ("huggingface/trl", "trl/trainer/grpo_trainer.py", "GRPOTrainer._generate_and_score_completions",
                 lambda: trl_case("none")),
    "openrlhf_group_norm": ("OpenRLHF/OpenRLHF", "openrlhf/trainer/ppo_utils/experience_maker.py",
                            "RemoteExperienceMaker.compute_advantages_and_returns", lambda: openrlhf_case("group_norm")),
    "openrlhf_dr_grpo": ("OpenRLHF/OpenRLHF", "openrlhf/trainer/ppo_utils/experience_maker.py",
                         "RemoteExperienceMaker.compute_advantages_and_returns", lambda: openrlhf_case("dr_grpo")),
    "openrlhf_rloo": ("OpenRLHF/OpenRLHF", "openrlhf/trainer/ppo_utils/experience_maker.py",
                      "RemoteExperienceMaker.compute_advantages_and_returns", lambda: openrlhf_case("rloo")),
    "openrlhf_reinforce_baseline": ("OpenRLHF/OpenRLHF", "openrlhf/trainer/ppo_utils/experience_maker.py",
                                    "RemoteExperienceMaker.compute_advantages_and_returns",
                                    lambda: openrlhf_case("reinforce_baseline")),
    "openrlhf_reinforce": ("OpenRLHF/OpenRLHF", "openrlhf/trainer/ppo_utils/experience_maker.py",
                           "RemoteExperienceMaker.compute_advantages_and_returns", lambda: openrlhf_case("reinforce")),
    "openrlhf_gae": ("OpenRLHF/OpenRLHF", "openrlhf/trainer/ppo_utils/experience_maker.py",
                     "RemoteExperienceMaker.compute_advantages_and_returns", lambda: openrlhf_case("gae")),
}
# The dumps of a critic-based estimator carry the critic's values, as a PPO trainer's dump does.
WITH_VALUES = {"verl_gae", "openrlhf_gae"}


def write_dumps(name, advantages, returns, scalars, values=None):
    root = os.path.join(GOLDEN, "convention-dumps", name)
    os.makedirs(os.path.join(root, "rollout_data"), exist_ok=True)
    os.makedirs(os.path.join(root, "train_data"), exist_ok=True)
    tokens = [list(range(100 + i, 104 + i)) + list(range(200, 200 + n)) for i, n in enumerate(LENGTHS)]
    rollout = {"rollout_id": ROLLOUT_ID, "samples": [
        {"group_index": i // N, "index": i, "rollout_id": None, "tokens": tokens[i], "response_length": n,
         "reward": REWARDS[i], "loss_mask": MASKS[i], "status": "completed", "remove_sample": False, "session_id": None}
        for i, n in enumerate(LENGTHS)]}
    train = {"format_version": 2, "rollout_id": ROLLOUT_ID, "rank": 0, "samples": [
        {"data_parallel_rank": 0, "sample_index": i, "rollout_position": i, "tokens": torch.tensor(tokens[i]),
         "response_lengths": n, "rewards": float(np.float32(scalars[i])), "loss_masks": torch.tensor(MASKS[i], dtype=torch.int32),
         "advantages": torch.tensor(advantages[i], dtype=torch.float32), "returns": torch.tensor(returns[i], dtype=torch.float32),
         **({"values": torch.tensor(values[i], dtype=torch.float32)} if values else {})}
        for i, n in enumerate(LENGTHS)], "raw_reward": REWARDS}
    torch.save(rollout, os.path.join(root, "rollout_data", f"{ROLLOUT_ID}.pt"))
    torch.save(train, os.path.join(root, "train_data", f"{ROLLOUT_ID}.pt"))


manifest = {}
for name, (repo, rel, fn, make) in CASES.items():
    adv, ret, scalars = make()
    write_dumps(name, adv, ret, scalars, VALUES if name in WITH_VALUES else None)
    manifest[name] = {"source": upstream.source_ref(repo, rel, fn), "rollout_id": ROLLOUT_ID}
with open(os.path.join(GOLDEN, "convention-dumps", "manifest.json"), "w") as f:
    json.dump({"rewards": REWARDS, "response_lengths": LENGTHS, "loss_masks": MASKS, "n_samples_per_prompt": N,
               "remax_reward_baselines": BASELINES, "gae_values": VALUES, "gamma": 1.0, "lam": 1.0,
               "cases": manifest}, f, indent=1)
    f.write("\n")
print(f"dumps: {len(CASES)} conventions")
