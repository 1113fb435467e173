"""Token ids -> text for byte-level BPE tokenizers (Qwen's `tokenizer.json`), with no PyPI package.

The server takes token ids and needs text only for the `text` field of its answers and for `stop`
strings. Decoding a byte-level BPE is a table look-up: every vocabulary entry is a string of the 256
"byte characters" of GPT-2's byte-to-unicode map, and added tokens (`<|im_end|>`, `<think>`, ...) stand
for their literal content. Encoding (text -> ids) needs the pre-tokenizer's Unicode regex and the BPE
merges; the server does not encode (clients send `input_ids`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path


def _byte_chars() -> dict[str, int]:
    """GPT-2's byte-to-unicode table, inverted: printable bytes map to themselves, the rest to 256+."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    chars = {b: b for b in printable}
    extra = 0
    for b in range(256):
        if b not in chars:
            chars[b] = 256 + extra
            extra += 1
    return {chr(c): b for b, c in chars.items()}


class TokenizerError(ValueError):
    pass


class Detokenizer:
    """Decodes ids as Hugging Face `tokenizers` does for a ByteLevel BPE (ids without a token are dropped)."""

    def __init__(self, path: str | os.PathLike):
        path = Path(path)
        file = path / "tokenizer.json" if path.is_dir() else path
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as e:
            raise TokenizerError(f"{file}: cannot read a tokenizer.json ({e})") from None
        model, decoder = data.get("model") or {}, data.get("decoder") or {}
        if model.get("type") != "BPE" or decoder.get("type") != "ByteLevel":
            raise TokenizerError(
                f"{file}: model {model.get('type')!r} with decoder {decoder.get('type')!r}; only byte-level BPE "
                "tokenizers (GPT-2, Qwen, Llama 3 style) can be decoded here"
            )
        byte_of = _byte_chars()
        self.path = str(file)
        self._pieces: dict[int, bytes] = {}
        for token, i in model["vocab"].items():
            self._pieces[i] = bytes(byte_of[c] for c in token) if all(c in byte_of for c in token) else token.encode("utf-8")
        self.special: set[int] = set()
        for added in data.get("added_tokens") or []:
            self._pieces[added["id"]] = added["content"].encode("utf-8")
            if added.get("special"):
                self.special.add(added["id"])
        self.size = max(self._pieces) + 1

    def decode_bytes(self, ids: list[int], skip_special_tokens: bool = False) -> bytes:
        pieces = self._pieces
        if skip_special_tokens:
            special = self.special
            return b"".join(pieces.get(i, b"") for i in ids if i not in special)
        return b"".join(pieces.get(i, b"") for i in ids)

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return self.decode_bytes(ids, skip_special_tokens).decode("utf-8", errors="replace")

    def token_text(self, i: int) -> str:
        """One token's text (`return_text_in_logprobs`)."""
        return self.decode([i])
