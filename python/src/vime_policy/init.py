"""Write a randomly initialised Qwen3 checkpoint of a preset size in Hugging Face's layout.

    python -m vime_policy.init --preset tiny --seed 0 --out DIR [--tokenizer DIR]
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from .model import PRESETS, CheckpointError, Qwen3Config, new_model, parameter_count, parse_dtype, save_pretrained

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def copy_tokenizer(src: str | Path, dst: str | Path) -> None:
    """Copy tokenizer.json (+ tokenizer_config.json) next to the weights, as a Hugging Face checkpoint has them."""
    src, dst = Path(src), Path(dst)
    if not (src / "tokenizer.json").is_file():
        raise CheckpointError(f"{src}: no tokenizer.json to copy")
    for name in TOKENIZER_FILES:
        if (src / name).is_file():
            shutil.copyfile(src / name, dst / name)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m vime_policy.init", description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", default="tiny", choices=sorted(PRESETS))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True)
    p.add_argument("--dtype", default=None, help="float32 | bfloat16 (default: the preset's)")
    p.add_argument("--tokenizer", default=None, help="directory with tokenizer.json to copy into the checkpoint")
    args = p.parse_args(argv)
    try:
        cfg = Qwen3Config.preset(args.preset)
        model = new_model(cfg, args.seed)
        dtype = parse_dtype(args.dtype or cfg.torch_dtype)
        save_pretrained(model, args.out, dtype=dtype)
        if args.tokenizer:
            copy_tokenizer(args.tokenizer, args.out)
    except (CheckpointError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"{args.out}: Qwen3 preset {args.preset!r}, {parameter_count(model) / 1e6:.2f}M parameters, seed {args.seed}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
