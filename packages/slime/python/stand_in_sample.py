"""A stand-in for slime's `Sample` (slime/utils/types.py), built from its documented fields, so the bridge's
contract can be tested without slime installed. Same field names, defaults, `Status` values, `to_dict()`
(status as its string, nested info as dicts) and `from_dict()` (unknown keys set as attributes)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from enum import Enum
from typing import Any, Optional, Union


@dataclass
class SpecInfo:
    spec_accept_token_num: int = 0
    spec_draft_token_num: int = 0
    spec_verify_ct: int = 0
    completion_token_num: int = 0


@dataclass
class PrefixCacheInfo:
    cached_tokens: int = 0
    total_prompt_tokens: int = 0


@dataclass
class Sample:
    class Status(Enum):
        PENDING = "pending"
        COMPLETED = "completed"
        TRUNCATED = "truncated"
        ABORTED = "aborted"
        FAILED = "failed"

    group_index: Optional[int] = None
    index: Optional[int] = None
    rollout_id: Optional[int] = None
    prompt: Union[str, list[dict[str, str]]] = ""
    tokens: list[int] = field(default_factory=list)
    multimodal_inputs: Optional[dict[str, Any]] = None
    multimodal_train_inputs: Optional[dict[str, Any]] = None
    multimodal_train_input_id: Optional[str] = None
    apply_chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    response: str = ""
    response_length: int = 0
    label: Optional[str] = None
    reward: Optional[Union[float, dict[str, Any]]] = None
    loss_mask: Optional[list[int]] = None
    weight_versions: list[str] = field(default_factory=list)
    rollout_log_probs: Optional[list[float]] = None
    rollout_top_p_token_ids: Optional[list[int]] = None
    rollout_top_p_token_offsets: Optional[list[int]] = None
    rollout_routed_experts: Optional[list[list[list[int]]]] = None
    remove_sample: bool = False
    teacher_log_probs: Optional[list[float]] = None
    status: "Sample.Status" = Status.PENDING
    metadata: dict[str, Any] = field(default_factory=dict)
    generate_function_path: Optional[str] = None
    custom_rm_path: Optional[str] = None
    train_metadata: Optional[dict[str, Any]] = None
    session_id: Optional[str] = None
    non_generation_time: float = 0.0
    spec_info: SpecInfo = field(default_factory=SpecInfo)
    prefix_cache_info: PrefixCacheInfo = field(default_factory=PrefixCacheInfo)

    def get_reward_value(self, args: Any) -> Any:
        return self.reward if not getattr(args, "reward_key", None) else self.reward[args.reward_key]

    def to_dict(self) -> dict[str, Any]:
        # As slime's: a copy of the instance's attributes, so keys from_dict set as attributes come back.
        out = dict(vars(self))
        out["status"] = self.status.value
        out["spec_info"] = vars(self.spec_info).copy()
        out["prefix_cache_info"] = vars(self.prefix_cache_info).copy()
        return out

    @staticmethod
    def from_dict(data: dict[str, Any]) -> "Sample":
        data = dict(data)
        data["status"] = Sample.Status(data.get("status", "pending"))
        data["spec_info"] = SpecInfo(**data.get("spec_info", {}))
        data["prefix_cache_info"] = PrefixCacheInfo(**data.get("prefix_cache_info", {}))
        known = {f.name for f in fields(Sample)}
        sample = Sample(**{k: v for k, v in data.items() if k in known})
        for k, v in data.items():
            if k not in known:
                setattr(sample, k, v)
        return sample
