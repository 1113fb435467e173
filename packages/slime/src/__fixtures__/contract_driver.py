"""Drives vime_bridge.generate the way slime does (many concurrent coroutines) and prints what came back."""
import asyncio
import json
import types

import vime_bridge
from stand_in_sample import Sample


async def main() -> None:
    args = types.SimpleNamespace()
    params = {"temperature": 1.0, "top_p": 0.95, "max_new_tokens": 64}
    prompts = [f"task-{i}" for i in range(8)] + ["fork-me"]
    samples = [Sample(group_index=i // 4, index=i, prompt=p, label="x", metadata={"instance_id": p}) for i, p in enumerate(prompts)]
    results = await asyncio.gather(*(vime_bridge.generate(args, s, params) for s in samples))
    out = []
    for r in results:
        rows = r if isinstance(r, list) else [r]
        out.append([
            {
                "cls": type(row).__name__,
                "status": row.status.value,
                "group_index": row.group_index,
                "index": row.index,
                "rollout_id": row.rollout_id,
                "tokens": row.tokens,
                "response_length": row.response_length,
                "loss_mask": row.loss_mask,
                "rollout_log_probs": row.rollout_log_probs,
                "reward": row.reward,
                "metadata": row.metadata,
                "session_id": row.session_id,
                "extra_attr": getattr(row, "vime_note", None),
            }
            for row in rows
        ])
    # A rollout the server fails: the error names the server's code and message.
    try:
        await vime_bridge.generate(args, Sample(index=99, prompt="fail"), params)
        failure = None
    except vime_bridge.RolloutServerError as e:
        failure = str(e)
    # Cancelling the coroutine (what slime does on abort) disconnects and aborts the rollout server-side.
    task = asyncio.ensure_future(vime_bridge.generate(args, Sample(index=100, prompt="slow"), params))
    await asyncio.sleep(0.5)
    task.cancel()
    try:
        await task
        cancelled = False
    except asyncio.CancelledError:
        cancelled = True
    await asyncio.sleep(0.3)
    print(json.dumps({"results": out, "failure": failure, "cancelled": cancelled}))


asyncio.run(main())
