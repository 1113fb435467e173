"""Import paths: this example's `vime_megatron` and the policy's `vime_policy` (examples/closed-loop), the
same PYTHONPATH the loop trainer is documented to run with."""

from __future__ import annotations

import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[1]
POLICY = EXAMPLE.parent / "closed-loop"
PYTHONPATH = f"{EXAMPLE}:{POLICY}"
for path in (EXAMPLE, POLICY):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))
