"""Golden vectors of huggingface/trl's GRPOTrainer: the advantage block of `_generate_and_score_completions`,
the loss of `_compute_loss` and `nanstd`, executed from the pinned source (see upstream.py) on CPU."""

import math
import types

import torch

import upstream
from common import GROUP_SETS, padded, token_batch, unpad, write

REPO = "huggingface/trl"
TRAINER = "trl/trainer/grpo_trainer.py"
UTILS = "trl/trainer/utils.py"
FOLDER = "trl"
written = []

ns = {"torch": torch, "math": math}
nanstd = upstream.load_function(UTILS, "nanstd", ns)
get_off_policy_mask = upstream.load_function(TRAINER, "get_off_policy_mask", dict(ns), cls="GRPOTrainer",
                                             drop_decorators=("@staticmethod",))
get_gamma_weights = upstream.load_function(TRAINER, "get_gamma_weights", dict(ns), cls="GRPOTrainer",
                                           drop_decorators=("@staticmethod", "@torch.no_grad()"))
ADVANTAGE_BLOCK = upstream.statements_between(TRAINER, "GRPOTrainer", "_generate_and_score_completions",
                                              "unscorable_mask =", "advantages = torch.nan_to_num(")
LOSS_BLOCK = upstream.statements_between(TRAINER, "GRPOTrainer", "_compute_loss",
                                         'advantages = inputs["advantages"]', 'if self.loss_type in ["grpo", "sapo"]:')


def trl_advantages(rewards_per_func, num_generations, weights, scale_rewards, aggregation):
    self = types.SimpleNamespace(multi_objective_aggregation=aggregation, scale_rewards=scale_rewards,
                                 reward_weights=torch.tensor(weights, dtype=torch.float32), reward_funcs=[None] * len(weights))
    scope = {"torch": torch, "nanstd": nanstd, "self": self, "device": "cpu", "num_generations": num_generations,
             "rewards_per_func": rewards_per_func}
    exec(ADVANTAGE_BLOCK, scope)
    return scope["advantages"]


# ---- the loss -----------------------------------------------------------------------------------------------
TB = token_batch()
L = TB["response_lengths"]
T = TB["padded_length"]
SRC_LOSS = upstream.source_ref(REPO, TRAINER, "GRPOTrainer._compute_loss")


def trl_loss(loss_type, *, level="token", beta=0.0, epsilon=0.2, epsilon_high=None, delta=None, bias_kl=False,
             off_policy=None, vllm_is=False, accumulation=1, processes=1, num_items=None, max_completion_length=12,
             sapo=(1.0, 1.05), vespo=(2.0, 3.0, 3.0, 2.0), tool_mask=False):
    mask_c = padded(TB["loss_masks"], T, 0, torch.int64) if not tool_mask else padded([[1] * n for n in L], T, 0, torch.int64)
    tmask = padded(TB["loss_masks"], T, 0, torch.int64)
    logps = padded(TB["log_probs"], T, 0.0)
    old = padded(TB["old_log_probs"], T, 0.0)
    ref = padded(TB["ref_log_probs"], T, 0.0)
    isr = torch.exp(torch.clamp(padded(TB["ref_log_probs"], T, 0.0) - old, -2, 2)).clamp(max=2.0)
    adv = torch.tensor([1.2, -0.4, -0.4, 0.8, 0.0, -1.1, 0.6, 0.5])
    mask = mask_c if not tool_mask else mask_c * tmask
    args = types.SimpleNamespace(delta=delta, sapo_temperature_pos=sapo[0], sapo_temperature_neg=sapo[1],
                                 vespo_k_pos=vespo[0], vespo_lambda_pos=vespo[1], vespo_k_neg=vespo[2], vespo_lambda_neg=vespo[3],
                                 use_bias_correction_kl=bias_kl)
    self = types.SimpleNamespace(
        loss_type=loss_type, epsilon_low=epsilon, epsilon_high=epsilon if epsilon_high is None else epsilon_high, args=args,
        beta=beta, off_policy_mask_threshold=off_policy, importance_sampling_level=level, use_vllm=vllm_is,
        vllm_importance_sampling_correction=vllm_is, current_gradient_accumulation_steps=accumulation,
        max_completion_length=max_completion_length, accelerator=types.SimpleNamespace(num_processes=processes),
        model=types.SimpleNamespace(training=True), get_off_policy_mask=get_off_policy_mask, get_gamma_weights=get_gamma_weights)
    items = torch.tensor(float(num_items if num_items is not None else int(mask.sum())))
    inputs = {"advantages": adv, "old_per_token_logps": old, "ref_per_token_logps": ref, "num_items_in_batch": items,
              "importance_sampling_ratio": isr, "sampling_per_token_logps": ref}
    scope = {"torch": torch, "self": self, "inputs": inputs, "per_token_logps": logps, "mask": mask, "entropy_mask": None}
    exec(LOSS_BLOCK, scope)
    params = {"loss_type": loss_type, "importance_sampling_level": level, "beta": beta, "epsilon": epsilon,
              "epsilon_high": self.epsilon_high, "delta": delta, "use_bias_correction_kl": bias_kl,
              "off_policy_mask_threshold": off_policy, "vllm_importance_sampling_correction": vllm_is,
              "gradient_accumulation_steps": accumulation, "num_processes": processes, "num_items_in_batch": float(items),
              "max_completion_length": max_completion_length, "sapo_temperature_pos": sapo[0], "sapo_temperature_neg": sapo[1],
              "vespo_k_pos": vespo[0], "vespo_lambda_pos": vespo[1], "vespo_k_neg": vespo[2], "vespo_lambda_neg": vespo[3]}
    inputs_out = {"per_token_logps": TB["log_probs"], "old_per_token_logps": TB["old_log_probs"],
                  "ref_per_token_logps": TB["ref_log_probs"], "sampling_per_token_logps": TB["ref_log_probs"],
                  "importance_sampling_ratio": unpad(isr, L), "advantages": adv.tolist(), "response_lengths": L,
                  "padded_length": T, "completion_mask": unpad(mask_c, L), "tool_mask": unpad(tmask, L) if tool_mask else None}
    expected = {"loss": scope["loss"].item(), "policy_loss": scope["policy_loss"].item(),
                "per_token_loss": unpad(scope["per_token_loss"].expand(len(L), T) if scope["per_token_loss"].shape[1] == 1
                                        else scope["per_token_loss"], L)}
    return params, inputs_out, expected


def main():
    # ---- nanstd --------------------------------------------------------------------------------------------
    nan = float("nan")
    for label, values, dim in (
        ("plain", [0.1, 0.5, 0.9, 0.3, -1.0, 2.5], None),
        ("with_nan", [0.1, nan, 0.9, 0.3, nan, 2.5, 0.75], None),
        ("one_value", [nan, 0.4, nan], None),
        ("all_nan", [nan, nan], None),
        ("rows", [[1.0, 0.0, nan, 1.0], [nan, nan, 0.5, nan], [0.25, 0.5, 0.75, 1.0]], 1),
        ("large_offset", [1e6, 1e6 + 1, 1e6 + 2, nan, 1e6 + 3], None),
    ):
        t = torch.tensor(values, dtype=torch.float32)
        out = nanstd(t, dim=dim) if dim is not None else nanstd(t)
        written.append(write(FOLDER, f"trl__nanstd__{label}", upstream.source_ref(REPO, UTILS, "nanstd"),
                             "Bessel-corrected std ignoring NaN (float32 nanmean two-pass; fewer than 2 values give NaN)",
                             {"dim": dim}, {"tensor": values}, {"std": out}))

    # ---- advantages: one reward function over the shared sets ------------------------------------------------
    SRC_ADV = upstream.source_ref(REPO, TRAINER, "GRPOTrainer._generate_and_score_completions")
    for name, (n, rewards) in GROUP_SETS.items():
        for scale in ("group", "batch", "none"):
            rpf = torch.tensor(rewards, dtype=torch.float32).unsqueeze(1)
            adv = trl_advantages(rpf, n, [1.0], scale, "sum_then_normalize")
            written.append(write(FOLDER, f"trl__advantages__sum_then_normalize__{scale}__{name}", SRC_ADV,
                                 "one reward function; scale_rewards as given; nanmean/nanstd per block of num_generations, eps 1e-4",
                                 {"num_generations": n, "reward_weights": [1.0], "scale_rewards": scale,
                                  "multi_objective_aggregation": "sum_then_normalize"},
                                 {"rewards_per_func": [[r] for r in rewards]}, {"advantages": adv}))
        rpf = torch.tensor(rewards, dtype=torch.float32).unsqueeze(1)
        adv = trl_advantages(rpf, n, [1.0], "group", "normalize_then_sum")
        written.append(write(FOLDER, f"trl__advantages__normalize_then_sum__{name}", SRC_ADV,
                             "GDPO with one reward function: group normalization, then batch normalization",
                             {"num_generations": n, "reward_weights": [1.0], "scale_rewards": "group",
                              "multi_objective_aggregation": "normalize_then_sum"},
                             {"rewards_per_func": [[r] for r in rewards]}, {"advantages": adv}))

    # ---- advantages: several reward functions, some returning None -------------------------------------------
    N = None
    MULTI = {
        # 3 groups of 4, functions: accuracy, format, length. Sample 5 is unscorable (every function None);
        # in group 2 the format function scores a single sample; group 1's length function scores nobody.
        "three_funcs": (4, [1.0, 0.5, 2.0], [
            [1.0, 0.5, 0.3], [0.0, 0.5, 0.1], [0.0, N, 0.7], [1.0, 1.0, 0.2],
            [0.0, 0.0, N], [N, N, N], [1.0, 0.5, N], [1.0, 1.0, N],
            [0.0, N, 0.9], [1.0, 0.25, 0.4], [0.0, N, 0.4], [0.0, N, 0.6],
        ]),
        "two_funcs_g2": (2, [1.0, 1.0], [[1.0, N], [0.0, 0.3], [N, 0.8], [N, 0.2], [1.0, 1.0], [1.0, 1.0]]),
        "uniform_with_none": (4, [1.0, 0.1], [[1.0, 0.2], [1.0, N], [1.0, 0.2], [1.0, 0.2], [0.0, N], [1.0, N], [0.5, N], [0.0, N]]),
    }
    for name, (n, weights, rows) in MULTI.items():
        rpf = torch.tensor([[nan if v is None else v for v in r] for r in rows], dtype=torch.float32)
        for aggregation in ("sum_then_normalize", "normalize_then_sum"):
            for scale in (("group", "batch", "none") if aggregation == "sum_then_normalize" else ("group",)):
                adv = trl_advantages(rpf.clone(), n, weights, scale, aggregation)
                written.append(write(FOLDER, f"trl__advantages__{aggregation}__{scale}__{name}", SRC_ADV,
                                     "several reward functions, None -> NaN; an all-None row is unscorable (NaN reward, advantage 0)",
                                     {"num_generations": n, "reward_weights": weights, "scale_rewards": scale,
                                      "multi_objective_aggregation": aggregation},
                                     {"rewards_per_func": rows}, {"advantages": adv}))

    CASES = [
        ("grpo", {}), ("bnpo", {}), ("dr_grpo", {}), ("dapo", {}), ("cispo", {"epsilon_high": 5.0}), ("sapo", {}),
        ("luspo", {"level": "sequence"}), ("vespo", {}),
        ("grpo", {"level": "sequence", "tag": "sequence"}), ("dapo", {"level": "sequence", "tag": "gspo"}),
        ("dapo", {"epsilon_high": 0.28, "delta": 1.05, "tag": "clip_higher_delta"}),
        ("dapo", {"beta": 0.04, "tag": "kl"}), ("bnpo", {"beta": 0.04, "bias_kl": True, "tag": "kl_bias_corrected"}),
        ("dapo", {"processes": 2, "num_items": 90, "tag": "global_tokens"}),
        ("grpo", {"accumulation": 4, "tag": "accumulation"}), ("dr_grpo", {"accumulation": 2, "max_completion_length": 32, "tag": "accumulation"}),
        ("dapo", {"off_policy": 0.15, "tag": "off_policy_mask"}), ("grpo", {"vllm_is": True, "tag": "vllm_is"}),
        ("vespo", {"vllm_is": True, "tag": "vllm_is"}), ("sapo", {"sapo": (2.0, 3.0), "level": "sequence", "tag": "sequence_temps"}),
        ("dapo", {"tool_mask": True, "tag": "tool_mask"}), ("cispo", {"epsilon_high": 0.9, "level": "sequence", "tag": "sequence"}),
    ]
    for loss_type, opts in CASES:
        opts = dict(opts)
        tag = opts.pop("tag", "default")
        params, inputs, expected = trl_loss(loss_type, **opts)
        written.append(write(FOLDER, f"trl__loss__{loss_type}__{tag}", SRC_LOSS,
                             "per-token loss and its aggregation by loss_type (train mode, no entropy bonus)",
                             params, inputs, expected))

    print(f"trl: {len(written)} files")


if __name__ == "__main__":
    main()
