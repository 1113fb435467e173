"""Writes the .pt fixtures the reader tests use (run with a Python that has torch; outputs are committed)."""
import io
import os
import pickle
import zipfile

import torch

here = os.path.dirname(os.path.abspath(__file__))

base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
payload = {
    "transposed": base.t(),  # non-contiguous view, stride (1, 6)
    "stepped": base[1:, ::2],  # offset 6, stride (6, 2)
    "column": base[:, 3],  # offset 3, stride (6,)
    "scalar_view": base[2, 5],  # 0-d view at offset 17
    "bf16": torch.tensor([1.5, -2.25, 3.0e-3, 65504.0], dtype=torch.bfloat16),
    "f16": torch.tensor([1.5, -2.25, 6.1e-5, 65504.0], dtype=torch.float16),
    "f64": torch.tensor([[0.1, 0.2], [0.3, 0.4]], dtype=torch.float64),
    "i64": torch.tensor([2**40, -3, 7], dtype=torch.int64),
    "i32": torch.tensor([1, -2, 3], dtype=torch.int32),
    "mask": torch.tensor([True, False, True]),
    "empty": torch.zeros(0, dtype=torch.float32),
    "nested": {"list": [1, 2.5, None, True, "s"], "tuple": (1, (2, 3)), "big": 2**70, "neg": -(2**40)},
}
torch.save(payload, os.path.join(here, "views.pt"))


class Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


buf = io.BytesIO()
with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
    z.writestr("evil/data.pkl", pickle.dumps({"x": Evil()}, protocol=2))
    z.writestr("evil/version", "3\n")
with open(os.path.join(here, "evil.pt"), "wb") as f:
    f.write(buf.getvalue())
