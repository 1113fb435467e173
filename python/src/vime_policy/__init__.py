"""A Qwen3 policy served on SGLang's native wire, its checkpoints, and its supervised warm start."""
