"""A deterministic synthetic corpus: no download, same tokens on every host.

Text is drawn from a fixed random "bigram language": each token has a few
likely successors, so a model can learn it and the loss falls well below
log(vocab). Sample i is a pure function of (seed, i), and the samples of a
step are a pure function of the step, so a resumed run sees exactly the data
an uninterrupted run would.
"""

from __future__ import annotations

import numpy as np
import torch


class SyntheticCorpus:
    def __init__(self, vocab: int, seq_len: int, seed: int = 1234, fanout: int = 4) -> None:
        self.vocab, self.seq_len, self.seed = vocab, seq_len, seed
        g = torch.Generator().manual_seed(seed)
        succ = torch.randint(0, vocab, (vocab, fanout), generator=g)
        probs = torch.full((vocab, vocab), 0.02 / vocab)
        w = torch.softmax(torch.randn(vocab, fanout, generator=g), dim=1) * 0.98
        probs.scatter_add_(1, succ, w)
        self.probs = probs / probs.sum(dim=1, keepdim=True)
        cdf = self.probs.double().cumsum(dim=1)
        self._cdf = (cdf / cdf[:, -1:]).numpy()

    def sample(self, index: int) -> torch.Tensor:
        """Sample `index`: seq_len + 1 tokens (inputs plus shifted targets)."""
        rng = np.random.default_rng([self.seed, index])
        u = rng.random(self.seq_len)
        out = np.empty(self.seq_len + 1, dtype=np.int64)
        out[0] = rng.integers(0, self.vocab)
        for t in range(self.seq_len):
            out[t + 1] = min(int(np.searchsorted(self._cdf[out[t]], u[t])), self.vocab - 1)
        return torch.from_numpy(out)

    def batch(self, step: int, micro: int, rank: int, world: int, ga: int,
              mbs: int) -> torch.Tensor:
        """The micro batch of (1-based) optimizer step `step`, micro step `micro`, rank `rank`."""
        first = (((step - 1) * ga + micro) * world + rank) * mbs
        return torch.stack([self.sample(first + i) for i in range(mbs)])
