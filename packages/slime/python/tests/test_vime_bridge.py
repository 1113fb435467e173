"""The bridge's pure functions on small batches of the stand-in `Sample` (the vitest suites in src/e2e drive
`generate` end to end against a rollout server)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import generate
import vime_bridge
from stand_in_sample import Sample
from vime_bridge import (
    INFRA_FAILURE,
    RolloutServerError,
    drop_infra_failed_groups,
    infra_failure,
    normalize_rewards_by_group,
    rollout_metrics,
)

GRPO = SimpleNamespace(advantage_estimator="grpo")


def row(group: int, rollout: int, reward: float | None, **metadata) -> Sample:
    return Sample(group_index=group, rollout_id=rollout, reward=reward, metadata=dict(metadata))


def test_generate_module_is_the_bridges_generate() -> None:
    assert generate.generate is vime_bridge.generate


def test_rewards_are_normalised_per_group_over_rollouts_not_rows() -> None:
    # Group 0: rollouts 1.0 and 0.0, the first forked into two rows; group 1: a single rollout.
    samples = [row(0, 0, 1.0), row(0, 0, 1.0), row(0, 1, 0.0), row(1, 2, 0.5)]
    raw, normalised = normalize_rewards_by_group(GRPO, samples)
    assert raw == [1.0, 1.0, 0.0, 0.5]
    # Centred: +-0.5; the std of the centred pair is sqrt(0.5); one rollout alone has std 0.
    half = 0.5 / (0.5**0.5 + 1e-6)
    assert normalised == pytest.approx([half, half, -half, 0.0], abs=1e-6)


def test_rewards_are_only_centred_without_std_normalisation_and_raw_for_other_estimators() -> None:
    samples = [row(0, 0, 1.0), row(0, 1, 0.0), row(0, 2, 0.0), row(0, 3, 0.0)]
    centred = SimpleNamespace(advantage_estimator="grpo", grpo_std_normalization=False)
    assert normalize_rewards_by_group(centred, samples)[1] == pytest.approx([0.75, -0.25, -0.25, -0.25])
    ppo = SimpleNamespace(advantage_estimator="ppo")
    assert normalize_rewards_by_group(ppo, samples) == ([1.0, 0.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0])


def test_a_row_without_reward_names_the_filter_that_drops_it() -> None:
    failed = row(0, 0, None, **{INFRA_FAILURE: {"code": "sandbox_start", "message": "no sandbox"}})
    with pytest.raises(RolloutServerError, match="sandbox_start.*--dynamic-sampling-filter-path"):
        normalize_rewards_by_group(GRPO, [failed])


def test_groups_with_an_infrastructure_failure_are_dropped_and_counted() -> None:
    cause = {"code": "sandbox_start", "message": "no sandbox", "attempts": 3}
    failed = row(0, 1, None, **{INFRA_FAILURE: cause})
    assert infra_failure(failed) == cause
    assert infra_failure(row(0, 0, 1.0)) is None
    # Without slime installed the filter answers with a bool, as slime before DynamicFilterOutput expects.
    assert drop_infra_failed_groups(GRPO, [row(0, 0, 1.0), [row(0, 2, 0.0), row(0, 2, 0.0)]]) is True
    assert drop_infra_failed_groups(GRPO, [row(0, 0, 1.0), failed]) is False
    metrics = rollout_metrics([row(1, 0, 1.0)])
    assert metrics["vime/infra_failed_groups"] == 1.0
    assert metrics["vime/infra_failure/sandbox_start"] == 1.0
    assert rollout_metrics([row(1, 0, 1.0)])["vime/infra_failed_groups"] == 0.0


def test_rollout_metrics_count_each_rollout_once() -> None:
    samples = [
        row(0, 0, 1.0, grade_outcome="resolved", hacks=["test_config_changed"]),
        row(0, 0, 1.0, grade_outcome="resolved", hacks=["test_config_changed"]),
        row(0, 1, 0.0, grade_outcome="unresolved"),
        row(1, 2, 0.0, grade_outcome="unresolved"),
        row(1, 3, 0.0, grade_outcome="unresolved"),
    ]
    metrics = rollout_metrics(samples)
    assert metrics["vime/rollouts"] == 4.0
    assert metrics["vime/reward_mean"] == 0.25
    assert metrics["vime/pass@1"] == pytest.approx(0.25)
    assert metrics["vime/pass@2"] == pytest.approx(0.5)
    assert metrics["vime/grade_outcome/resolved"] == 1.0
    assert metrics["vime/hacks/test_config_changed"] == 1.0


def test_the_stand_in_sample_round_trips_through_to_dict() -> None:
    sample = Sample(group_index=2, tokens=[1, 2], status=Sample.Status.TRUNCATED, metadata={"a": 1})
    data = sample.to_dict()
    assert data["status"] == "truncated"
    back = Sample.from_dict({**data, "extra": 7})
    assert back.status is Sample.Status.TRUNCATED and back.tokens == [1, 2] and back.extra == 7


def test_top_k_heads_ride_from_dict_as_attributes() -> None:
    # slime's Sample declares no top-k field: from_dict sets the keys as attributes and to_dict returns them.
    heads = {"rollout_topk_token_ids": [[5, 9], [0, 1]], "rollout_topk_log_probs": [[-0.1, -2.5], [-0.69, -0.69]]}
    data = {**Sample(tokens=[1, 2, 3], response_length=2, status=Sample.Status.COMPLETED).to_dict(), **heads}
    back = Sample.from_dict(data)
    assert back.rollout_topk_token_ids == [[5, 9], [0, 1]]
    assert back.rollout_topk_log_probs == [[-0.1, -2.5], [-0.69, -0.69]]
    assert {k: back.to_dict()[k] for k in heads} == heads
