"""Golden vectors of volcengine/verl (core_algos.py, groupwise.py, torch_functional.py, rollout_corr_helper.py),
computed by calling the pinned upstream functions (see upstream.py) on CPU."""

import types

import numpy as np
import torch

import upstream
from common import GROUP_SETS, error_of, padded, token_batch, unpad, write

REPO = "volcengine/verl"
CORE = "verl/trainer/ppo/core_algos.py"
FOLDER = "verl"
DTYPES = {"float32": torch.float32, "float64": torch.float64}

V = upstream.verl()
C = V.core
written = []


def src(fn, rel=CORE):
    return upstream.source_ref(REPO, rel, fn)


def seq_inputs(name, dtype):
    """A reward set as verl sees it: one token per response carrying the score, mask 1, uid per group."""
    n, rewards = GROUP_SETS[name]
    scores = torch.tensor(rewards, dtype=DTYPES[dtype]).unsqueeze(-1)
    mask = torch.ones_like(scores, dtype=torch.int64)
    index = np.array([i // n for i in range(len(rewards))])
    return n, rewards, scores, mask, index


def outcome(name, dtype, fn, params, description, **kwargs):
    n, rewards, scores, mask, index = seq_inputs(name, dtype)
    adv, ret = getattr(C, fn)(token_level_rewards=scores, response_mask=mask, index=index, **kwargs)
    written.append(
        write(
            FOLDER,
            f"verl__{fn}__{params['tag']}__{name}__{dtype}",
            src(fn),
            description,
            {**params, "group_size": n},
            {"rewards": rewards, "index": index.tolist()},
            {"advantages": adv[:, 0], "returns": ret[:, 0]},
            dtype,
        )
    )


# ---- sequence-level estimators over the shared reward sets -----------------------------------------
for dtype in DTYPES:
    for name in GROUP_SETS:
        for norm in (True, False):
            tag = "std" if norm else "no_std"
            outcome(name, dtype, "compute_grpo_outcome_advantage", {"tag": tag, "norm_adv_by_std_in_grpo": norm, "epsilon": 1e-6},
                    "GRPO loop version: torch.mean / torch.std per uid; a group of one gets mean 0 and std 1 (float32 tensors)",
                    norm_adv_by_std_in_grpo=norm)
            outcome(name, dtype, "compute_grpo_vectorized_outcome_advantage", {"tag": tag, "norm_adv_by_std_in_grpo": norm, "epsilon": 1e-6},
                    "GRPO vectorized: groupwise.group_mean_std (float32 one-pass moments, variance floored at eps)",
                    norm_adv_by_std_in_grpo=norm)
        outcome(name, dtype, "compute_rloo_outcome_advantage", {"tag": "default"}, "RLOO loop version: a group of one keeps its score")
        outcome(name, dtype, "compute_rloo_vectorized_outcome_advantage", {"tag": "default"}, "RLOO vectorized (bincount): a group of one gets 0")
        outcome(name, dtype, "compute_gpg_outcome_advantage", {"tag": "default", "f_norm": 1.0},
                "GPG: alpha = B / max(count_nonzero(scores), 1) (a float32 tensor), (s - mean) * alpha / f_norm")
        outcome(name, dtype, "compute_reinforce_plus_plus_baseline_outcome_advantage", {"tag": "default"},
                "REINFORCE++-baseline: s - group mean, masked_whiten over the batch")
        n, rewards, scores, mask, index = seq_inputs(name, dtype)
        for norm in (True, False):
            cfg = V.AlgoConfig(norm_adv_by_std_in_grpo=norm)
            tag = "std" if norm else "no_std"
            base = f"verl__compute_grpo_passk_outcome_advantage__{tag}__{name}__{dtype}"
            err = error_of(lambda: C.compute_grpo_passk_outcome_advantage(scores, mask, index, config=cfg))
            if err:
                expected = err
            else:
                adv, ret = C.compute_grpo_passk_outcome_advantage(scores, mask, index, config=cfg)
                expected = {"advantages": adv[:, 0], "returns": ret[:, 0]}
            written.append(write(FOLDER, base, src("compute_grpo_passk_outcome_advantage"),
                                 "GRPO pass@k: only the best of each group gets r_max - r_2nd (torch.topk); groups of one are rejected",
                                 {"norm_adv_by_std_in_grpo": norm, "epsilon": 1e-6, "group_size": n},
                                 {"rewards": rewards, "index": index.tolist()}, expected, dtype))

# ---- token-level estimators on the padded token batch ------------------------------------------------
TB = token_batch()
L = TB["response_lengths"]
T = TB["padded_length"]


def token_tensors(dtype):
    dt = DTYPES[dtype]
    mask = padded(TB["loss_masks"], T, 0, torch.int64)
    rewards = torch.zeros(len(L), T, dtype=dt)
    for i, n in enumerate(L):
        rewards[i, n - 1] = TB["scores"][i]  # verl's reward manager: the score on the last response token
    return {
        "mask": mask,
        "token_level_rewards": rewards,
        "values": padded(TB["values"], T, 0, dt),
        "old_log_probs": padded(TB["old_log_probs"], T, 0, dt),
        "log_probs": padded(TB["log_probs"], T, 0, dt),
        "ref_log_probs": padded(TB["ref_log_probs"], T, 0, dt),
        "sum_pi_squared": padded(TB["sum_pi_squared"], T, 0, dt),
        "index": np.array(TB["uid"], dtype=object),
    }


def token_inputs(t):
    return {
        "response_lengths": L,
        "padded_length": T,
        "loss_masks": TB["loss_masks"],
        "token_level_rewards": unpad(t["token_level_rewards"], L),
        "index": TB["uid"],
    }


def token_case(fn, tag, dtype, description, params, extra_inputs, call):
    t = token_tensors(dtype)
    err = error_of(lambda: call(t))
    expected = err if err else dict(zip(("advantages", "returns"), (unpad(x, L) for x in call(t))))
    inputs = {**token_inputs(t), **{k: unpad(t[k], L) for k in extra_inputs}}
    written.append(write(FOLDER, f"verl__{fn}__tokens__{tag}__{dtype}", src(fn), description, params, inputs, expected, dtype))


for dtype in DTYPES:
    for gamma, lam in ((1.0, 1.0), (0.99, 0.95)):
        token_case("compute_gae_advantage_return", f"gamma{gamma}_lam{lam}", dtype,
                   "GAE skipping mask-0 tokens (values and TD error pass through), then masked_whiten",
                   {"gamma": gamma, "lam": lam}, ["values"],
                   lambda t, g=gamma, lm=lam: C.compute_gae_advantage_return(t["token_level_rewards"], t["values"], t["mask"], g, lm))
    for norm in (True, False):
        tag = "std" if norm else "no_std"
        token_case("compute_grpo_outcome_advantage", tag, dtype, "GRPO loop, scores = row sums of the padded token rewards",
                   {"norm_adv_by_std_in_grpo": norm, "epsilon": 1e-6}, [],
                   lambda t, nm=norm: C.compute_grpo_outcome_advantage(t["token_level_rewards"], t["mask"], t["index"], norm_adv_by_std_in_grpo=nm))
        token_case("compute_grpo_vectorized_outcome_advantage", tag, dtype, "GRPO vectorized on string uids",
                   {"norm_adv_by_std_in_grpo": norm, "epsilon": 1e-6}, [],
                   lambda t, nm=norm: C.compute_grpo_vectorized_outcome_advantage(t["token_level_rewards"], t["mask"], t["index"], norm_adv_by_std_in_grpo=nm))
        token_case("compute_grpo_passk_outcome_advantage", tag, dtype, "GRPO pass@k",
                   {"norm_adv_by_std_in_grpo": norm, "epsilon": 1e-6}, [],
                   lambda t, nm=norm: C.compute_grpo_passk_outcome_advantage(t["token_level_rewards"], t["mask"], t["index"], config=V.AlgoConfig(norm_adv_by_std_in_grpo=nm)))
    for fn in ("compute_rloo_outcome_advantage", "compute_rloo_vectorized_outcome_advantage", "compute_opo_outcome_advantage",
               "compute_gpg_outcome_advantage", "compute_reinforce_plus_plus_baseline_outcome_advantage"):
        token_case(fn, "default", dtype, f"{fn} on the token batch (one response fully masked)", {}, [],
                   lambda t, f=fn: getattr(C, f)(t["token_level_rewards"], t["mask"], t["index"]))
    for gamma in (1.0, 0.9):
        token_case("compute_reinforce_plus_plus_outcome_advantage", f"gamma{gamma}", dtype,
                   "REINFORCE++: discounted returns reset at mask 0, masked_whiten, x mask", {"gamma": gamma}, [],
                   lambda t, g=gamma: C.compute_reinforce_plus_plus_outcome_advantage(t["token_level_rewards"], t["mask"], config=V.AlgoConfig(gamma=g)))
    baselines = [0.5, 0.0, 1.0, 0.25, 0.5, 0.0, 0.3, 0.7]
    t = token_tensors(dtype)
    rb = torch.tensor(baselines, dtype=DTYPES[dtype])
    adv, ret = C.compute_remax_outcome_advantage(t["token_level_rewards"], rb, t["mask"])
    written.append(write(FOLDER, f"verl__compute_remax_outcome_advantage__tokens__default__{dtype}", src("compute_remax_outcome_advantage"),
                         "ReMax: reverse cumsum of masked token rewards minus the greedy baseline on mask-1 tokens",
                         {}, {**token_inputs(t), "reward_baselines": baselines},
                         {"advantages": unpad(adv, L), "returns": unpad(ret, L)}, dtype))
    for fn in ("compute_optimal_token_baseline_advantage", "compute_multi_turn_optimal_token_baseline_advantage"):
        for zero_tail in (False, True):
            for with_is in (False, True):
                tag = f"zero_tail_{str(zero_tail).lower()}__is_{str(with_is).lower()}"
                def call(t, f=fn, z=zero_tail, w=with_is):
                    isw = (torch.exp(torch.clamp(t["log_probs"] - t["old_log_probs"], -20, 20)).clamp(max=2.0) * t["mask"]) if w else None
                    return getattr(C, f)(t["token_level_rewards"], t["mask"], t["index"], t["old_log_probs"], t["sum_pi_squared"],
                                         rollout_is_weights=isw, handle_zero_tail=z)
                t = token_tensors(dtype)
                isw = (torch.exp(torch.clamp(t["log_probs"] - t["old_log_probs"], -20, 20)).clamp(max=2.0) * t["mask"]) if with_is else None
                extra = {"rollout_is_weights": unpad(isw, L)} if with_is else {}
                adv, ret = call(t)
                written.append(write(FOLDER, f"verl__{fn}__tokens__{tag}__{dtype}", src(fn),
                                     "optimal token baseline (per-step baseline weighted by the cumulative path-variance proxy)",
                                     {"handle_zero_tail": zero_tail, "epsilon": 1e-8},
                                     {**token_inputs(t), "old_log_probs": TB["old_log_probs"], "sum_pi_squared": TB["sum_pi_squared"], **extra},
                                     {"advantages": unpad(adv, L), "returns": unpad(ret, L)}, dtype))

# ---- groupwise statistics ---------------------------------------------------------------------------
GW = "verl/utils/groupwise.py"
for name in GROUP_SETS:
    n, rewards = GROUP_SETS[name]
    for dtype in DTYPES:
        scores = torch.tensor(rewards, dtype=DTYPES[dtype])
        g = V.groupwise.as_torch_index(np.array([i // n for i in range(len(rewards))]))
        mean, std, count = V.groupwise.group_mean_std(scores, g, eps=1e-6)
        written.append(write(FOLDER, f"verl__group_mean_std__{name}__{dtype}", upstream.source_ref(REPO, GW, "group_mean_std"),
                             "per-group mean/std/count in float32 (index_add_ sums, variance floored at eps, singleton mean 0 std 1)",
                             {"eps": 1e-6, "group_size": n}, {"scores": rewards, "gidx": g.tolist()},
                             {"mean": mean, "std": std, "count": count}, dtype))
for label, index in (("strings", ["p2", "p10", "p2", "p1", "p10", "p1"]), ("numeric_strings", ["3", "1", "3", "1", "0", "0"]),
                     ("near_integer_floats", [2.0, 2.0000001, 7.0, 7.0, 5.0, 5.0]), ("floats", [0.5, 0.5, 1.25, 1.25, 2.5, 2.5]),
                     ("gapped_ints", [4, 4, 9, 9, 0, 0])):
    scores = torch.tensor([0.25, 1.0, 0.5, 0.0, 0.75, 0.125])
    g = V.groupwise.as_torch_index(np.array(index, dtype=object) if isinstance(index[0], str) else np.array(index))
    mean, std, count = V.groupwise.group_mean_std(scores, g, eps=1e-6)
    written.append(write(FOLDER, f"verl__as_torch_index__{label}", upstream.source_ref(REPO, GW, "as_torch_index"),
                         "group labels to contiguous ids (ints as is, near-integer floats rounded, numeric strings coerced, else sorted unique), then group_mean_std",
                         {"eps": 1e-6}, {"index": index, "scores": scores.tolist()},
                         {"gidx": g, "mean": mean, "std": std, "count": count}))

# ---- agg_loss -----------------------------------------------------------------------------------------
TF = "verl/utils/torch_functional.py"
MODES = ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
for dtype in DTYPES:
    t = token_tensors(dtype)
    loss_mat = t["log_probs"] * 1.5 - t["values"]
    bool_mask = t["mask"].bool()
    for mode in MODES:
        for label, info in (("local", {}), ("global", {"dp_size": 4, "batch_num_tokens": 61, "global_batch_size": 16, "loss_scale_factor": 12})):
            value = C.agg_loss(loss_mat, bool_mask, mode, **info)
            written.append(write(FOLDER, f"verl__agg_loss__{mode}__{label}__{dtype}", src("agg_loss"),
                                 "agg_loss over the padded batch; response 6 has an all-zero mask (excluded from the sequence count)",
                                 {"loss_agg_mode": mode, **info},
                                 {"loss_mat": unpad(loss_mat, L), "response_lengths": L, "padded_length": T, "loss_masks": TB["loss_masks"]},
                                 {"loss": value.item()}, dtype))
    zero = torch.zeros_like(bool_mask)
    for mode in MODES:
        value = C.agg_loss(loss_mat, zero, mode)
        written.append(write(FOLDER, f"verl__agg_loss__{mode}__all_masked__{dtype}", src("agg_loss"),
                             "every mask 0: token-mean divides 0 by 0 (NaN), the sequence means divide by 0 sequences",
                             {"loss_agg_mode": mode},
                             {"loss_mat": unpad(loss_mat, L), "response_lengths": L, "padded_length": T, "loss_masks": [[0] * n for n in L]},
                             {"loss": value.item()}, dtype))
    for shift in (True, False):
        w = V.F.masked_whiten(t["values"], t["mask"], shift_mean=shift)
        written.append(write(FOLDER, f"verl__masked_whiten__shift_mean_{str(shift).lower()}__{dtype}", upstream.source_ref(REPO, TF, "masked_whiten"),
                             "masked_mean /(sum + 1e-8), masked_var two-pass with Bessel, (x - mean) * rsqrt(var + 1e-8) on every position",
                             {"shift_mean": shift},
                             {"values": TB["values"], "response_lengths": L, "padded_length": T, "loss_masks": TB["loss_masks"]},
                             {"whitened": unpad(w, L)}, dtype))

# ---- kl_penalty ---------------------------------------------------------------------------------------
lp = [-0.5, -1.25, -30.0, -0.01, -2.0, 0.0, -4.5, -0.3]
ref = [-1.0, -1.25, -0.5, -25.0, -0.25, -0.7, -4.0, -12.0]
for kind in ["kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3", "kl+", "k1+", "abs+", "mse+", "k2+", "low_var_kl+", "k3+", "full"]:
    for dtype in DTYPES:
        a = torch.tensor(lp, dtype=DTYPES[dtype], requires_grad=True)
        b = torch.tensor(ref, dtype=DTYPES[dtype])
        err = error_of(lambda: C.kl_penalty(a, b, kind))
        if err:
            expected = err
        else:
            out = C.kl_penalty(a, b, kind)
            out.sum().backward()
            expected = {"kl": out.detach(), "grad_logprob": a.grad}
        written.append(write(FOLDER, f"verl__kl_penalty__{kind.replace('+', '_plus')}__{dtype}", src("kl_penalty"),
                             "kl_penalty value and its gradient w.r.t. logprob (k3 clamps the log-ratio to +-20 and the result to +-10)",
                             {"kl_penalty": kind}, {"logprob": lp, "ref_logprob": ref}, expected, dtype))

# ---- policy losses ------------------------------------------------------------------------------------
def actor(**overrides):
    policy_loss = upstream.ConfigStub(loss_mode="vanilla", clip_cov_ratio=0.0002, clip_cov_lb=1.0, clip_cov_ub=5.0,
                                      kl_cov_ratio=0.0002, ppo_kl_coef=0.1)
    policy_loss.update(overrides.pop("policy_loss", {}))
    cfg = V.ActorConfig(clip_ratio=0.2, clip_ratio_low=0.2, clip_ratio_high=0.2, clip_ratio_c=3.0, tau_pos=1.0, tau_neg=1.05,
                        loss_scale_factor=None, policy_loss=policy_loss, global_batch_info={})
    cfg.update(overrides)
    return cfg


def loss_case(mode, tag, description, cfg, dtype="float32", agg="token-mean", info=None, seed=None, rollout_is=False):
    t = token_tensors(dtype)
    adv, _ = C.compute_grpo_outcome_advantage(t["token_level_rewards"], t["mask"], t["index"])
    mask = t["mask"].bool()
    cfg["global_batch_info"] = dict(info or {})
    isw = None
    if rollout_is:
        isw = (torch.exp(torch.clamp(t["log_probs"] - t["ref_log_probs"], -20, 20)).clamp(max=2.0) * t["mask"]).to(DTYPES[dtype])
    fn = C.get_policy_loss_fn(mode)
    if seed is not None:
        torch.manual_seed(seed)
    loss, metrics = fn(old_log_prob=t["old_log_probs"], log_prob=t["log_probs"], advantages=adv, response_mask=mask,
                       loss_agg_mode=agg, config=cfg, rollout_is_weights=isw)
    inputs = {"old_log_probs": TB["old_log_probs"], "log_probs": TB["log_probs"], "advantages": unpad(adv, L),
              "response_lengths": L, "padded_length": T, "loss_masks": TB["loss_masks"]}
    if isw is not None:
        inputs["rollout_is_weights"] = unpad(isw, L)
    params = {"loss_mode": mode, "loss_agg_mode": agg, "global_batch_info": dict(info or {}),
              "config": {k: v for k, v in cfg.items() if k not in ("global_batch_info",)}}
    if seed is not None:
        # clip_cov draws torch.randperm(#candidates) from the global generator; record the permutation drawn.
        torch.manual_seed(seed)
        params["seed"] = seed
        params["randperm"] = {str(n): (torch.manual_seed(seed), torch.randperm(n).tolist())[1] for n in range(1, 81)}
    metrics = {k: v for k, v in metrics.items()}
    written.append(write(FOLDER, f"verl__policy_loss__{mode}__{tag}__{dtype}", src(fn.__name__), description, params, inputs,
                         {"loss": loss.item(), "metrics": metrics}, dtype))


for dtype in DTYPES:
    for agg in MODES:
        loss_case("vanilla", f"{agg}", "PPO clip, dual clip c=3 (verl default on)", actor(), dtype, agg)
        loss_case("vanilla", f"{agg}__global", "PPO clip with the global-batch denominators", actor(), dtype, agg,
                  {"dp_size": 2, "batch_num_tokens": 70, "global_batch_size": 12, "loss_scale_factor": 16})
    loss_case("vanilla", "clip_higher_c10", "clip-higher 0.28, dual clip c=10", actor(clip_ratio_high=0.28, clip_ratio_c=10.0), dtype)
    loss_case("vanilla", "rollout_is_weights", "PPO clip times rollout IS weights", actor(), dtype, rollout_is=True)
    loss_case("gspo", "default", "GSPO: sequence-level ratio, always seq-mean-token-mean", actor(clip_ratio_low=3e-4, clip_ratio_high=4e-4), dtype)
    loss_case("gspo", "global", "GSPO with global-batch denominators", actor(clip_ratio_low=3e-4, clip_ratio_high=4e-4), dtype,
              info={"dp_size": 2, "global_batch_size": 12})
    loss_case("sapo", "default", "SAPO soft gate (tau_pos 1.0, tau_neg 1.05), always seq-mean-token-mean", actor(), dtype)
    loss_case("sapo", "taus", "SAPO with tau_pos 2, tau_neg 4", actor(tau_pos=2.0, tau_neg=4.0), dtype)
    loss_case("gpg", "token-mean", "GPG policy loss: -logp * A", actor(), dtype)
    loss_case("gpg", "seq-mean-token-sum", "GPG policy loss: -logp * A", actor(), dtype, "seq-mean-token-sum")
    loss_case("cispo", "default", "CISPO: -sg(clip(ratio)) * A * logp", actor(clip_ratio_low=10.0, clip_ratio_high=0.28), dtype)
    loss_case("geo_mean", "default", "GMPO: geometric mean of token ratios with sign-aware clipping", actor(clip_ratio_low=0.4, clip_ratio_high=0.4), dtype)
    loss_case("kl_cov", "default", "KL-Cov: top covariance tokens get an |log ratio| penalty", actor(policy_loss={"kl_cov_ratio": 0.1, "ppo_kl_coef": 1.0}), dtype)
    loss_case("kl_cov", "defaults", "KL-Cov with the default ratio 2e-4 (one token)", actor(), dtype)
    loss_case("clip_cov", "default", "Clip-Cov: random covariance tokens in (lb, ub) lose their gradient",
              actor(policy_loss={"clip_cov_ratio": 0.05, "clip_cov_lb": -0.5, "clip_cov_ub": 5.0}), dtype, seed=7)
    loss_case("clip_cov", "all_candidates", "Clip-Cov with more slots than candidates (no randomness)",
              actor(policy_loss={"clip_cov_ratio": 0.5, "clip_cov_lb": 0.05, "clip_cov_ub": 5.0}), dtype, seed=3)
    for label, rc in (
        ("ppo_clip", {"loss_type": "ppo_clip"}),
        ("reinforce", {"loss_type": "reinforce"}),
        ("reinforce__is_token", {"loss_type": "reinforce", "rollout_is": "token", "rollout_is_threshold": 1.5}),
        ("reinforce__is_sequence_norm", {"loss_type": "reinforce", "rollout_is": "sequence", "rollout_is_threshold": 3.0, "rollout_is_batch_normalize": True}),
        ("reinforce__is_token_norm", {"loss_type": "reinforce", "rollout_is": "token", "rollout_is_threshold": 2.0, "rollout_is_batch_normalize": True}),
        ("ppo_clip__rs_token_k1", {"loss_type": "ppo_clip", "rollout_rs": "token_k1", "rollout_rs_threshold": "0.5_1.6"}),
        ("reinforce__rs_token_k2_k3", {"loss_type": "reinforce", "rollout_rs": "token_k2,token_k3", "rollout_rs_threshold": "0.3,0.2"}),
        ("reinforce__rs_seq_sum", {"loss_type": "reinforce", "rollout_rs": "seq_sum_k1,seq_sum_k2,seq_sum_k3", "rollout_rs_threshold": "0.1_8.0,2.0,1.5"}),
        ("reinforce__rs_seq_mean", {"loss_type": "reinforce", "rollout_rs": "seq_mean_k1,seq_mean_k2,seq_mean_k3", "rollout_rs_threshold": "0.6_1.8,0.3,0.25"}),
        ("reinforce__rs_seq_max__is", {"loss_type": "reinforce", "rollout_is": "token", "rollout_is_threshold": 2.0, "rollout_rs": "seq_max_k2,seq_max_k3", "rollout_rs_threshold": "1.0,0.9"}),
        ("ppo_clip__rs_k1_single", {"loss_type": "ppo_clip", "rollout_rs": "seq_mean_k1", "rollout_rs_threshold": 1.5}),
    ):
        for agg in ("token-mean", "seq-mean-token-sum"):
            loss_case("bypass_mode", f"{label}__{agg}", "bypass mode (old = rollout log-probs): IS weights and rejection masks",
                      actor(policy_loss={"rollout_correction": {"rollout_is_threshold": 2.0, **rc}}), dtype, agg)

# ---- the trainer's dispatch (ray_trainer.compute_advantage) ---------------------------------------------
RT = "verl/trainer/ppo/ray_trainer.py"
from typing import Optional  # noqa: E402

dispatch = upstream.load_function(RT, "compute_advantage", {"core_algos": C, "AdvantageEstimator": C.AdvantageEstimator,
                                                            "Optional": Optional, "AlgoConfig": V.AlgoConfig, "DataProto": object})
for estimator, norm in (("grpo", False), ("grpo_vectorized", False), ("grpo_passk", False), ("rloo", True),
                        ("optimal_token_baseline", True), ("reinforce_plus_plus", True)):
    t = token_tensors("float32")
    data = types.SimpleNamespace(batch={"token_level_rewards": t["token_level_rewards"], "response_mask": t["mask"],
                                        "values": t["values"], "sum_pi_squared": t["sum_pi_squared"],
                                        "old_log_probs": t["old_log_probs"]},
                                 non_tensor_batch={"uid": t["index"]})
    cfg = V.AlgoConfig(norm_adv_by_std_in_grpo=norm, gamma=1.0, lam=1.0, use_pf_ppo=False)
    err = error_of(lambda: dispatch(data, estimator, gamma=1.0, lam=1.0, norm_adv_by_std_in_grpo=norm, config=cfg))
    expected = err or {"advantages": unpad(data.batch["advantages"], L), "returns": unpad(data.batch["returns"], L)}
    written.append(write(FOLDER, f"verl__compute_advantage__{estimator}__norm_{str(norm).lower()}",
                         upstream.source_ref(REPO, RT, "compute_advantage"),
                         "the trainer's dispatch: which arguments each estimator really receives from algorithm.*",
                         {"adv_estimator": estimator, "norm_adv_by_std_in_grpo": norm, "gamma": 1.0, "lam": 1.0},
                         token_inputs(t), expected))

print(f"verl: {len(written)} files")
