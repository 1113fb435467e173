"""Writes the .pt fixtures the reader tests use (run with a Python that has torch; outputs are committed)."""
import io
import json
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

# float32 sums and group stats as torch 1.13 computes them on CPU, for the summation-order emulation.
g = torch.Generator().manual_seed(7)
sums = []
for n in [1, 2, 3, 5, 7, 8, 9, 13, 16, 31, 32, 33, 64, 100, 255, 256, 257, 511, 1000, 4099, 9000]:
    x = (torch.randn(n, generator=g) * 10 ** torch.randint(-3, 4, (1,), generator=g).item()).float()
    sums.append({"values": x.tolist(), "sum": x.reshape(1, -1).sum(-1).item(), "mean": x.reshape(1, -1).mean(-1).item()})
uniform = []
for v in [0.1, 0.3, 0.7, 1 / 3]:
    for n in [4, 7, 12, 16]:
        r = torch.tensor([v] * n, dtype=torch.float).reshape(1, -1)
        r = r - r.mean(-1, keepdim=True)
        uniform.append({"value": v, "n": n, "advantage": (r / (r.std(-1, keepdim=True) + 1e-6))[0, 0].item()})
groups = []
for i in range(120):
    n = int(torch.randint(2, 65, (1,), generator=g))
    scale = 10.0 ** int(torch.randint(-4, 4, (1,), generator=g))
    raw = (torch.rand(n, generator=g) * scale).float()
    if i % 4 == 0:
        raw = (raw > raw.mean()).float()  # binary
    r = raw.reshape(1, -1)
    r = r - r.mean(-1, keepdim=True)
    adv = r / (r.std(-1, keepdim=True) + 1e-6)  # slime _post_process_rewards, one group
    groups.append({"rewards": raw.tolist(), "advantages": adv[0].tolist()})
with open(os.path.join(here, "torch_sums.json"), "w") as f:
    json.dump({"torch": torch.__version__, "sums": sums, "uniform_groups": uniform, "groups": groups}, f)
