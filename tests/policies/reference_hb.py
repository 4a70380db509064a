"""An independent, deliberately plain re-implementation of SPEC §3 (lists and math
only) that the tests compare the vectorised policy against."""
import math


class PlainHarnessBandit:
    def __init__(self, H, window=32, alpha=0.5, q_decay=0.7, c=0.2, tau=0.3, eps=0.15, eta=0.3,
                 warmup_rounds=5, fusion="mean", degenerate=0.5):
        self.H, self.window, self.alpha, self.q_decay = H, window, alpha, q_decay
        self.c, self.tau, self.eps, self.eta, self.warm = c, tau, eps, eta, warmup_rounds
        self.fusion, self.deg = fusion, degenerate
        self.WL, self.WT = [], []
        self.Q = [None] * H
        self.n = [0] * H
        self.mem = [None] * H
        self.t = 0

    def probs(self):
        H = self.H
        if self.t < self.warm * H:
            return [1.0 if h == self.t % H else 0.0 for h in range(H)]
        defined = [q for q in self.Q if q is not None]
        fill = max(defined) if defined else 0.0
        U = [(q if q is not None else fill) + self.c / math.sqrt(n + 1) for q, n in zip(self.Q, self.n)]
        e = [math.exp(u / self.tau) for u in U]
        s = sum(e)
        return [(1 - self.eps) * x / s + self.eps / H for x in e]

    def _norm(self, x, W):
        if len(W) < 2 or max(W) == min(W):
            return self.deg
        return min(1.0, max(0.0, (x - min(W)) / (max(W) - min(W))))

    def update(self, h, L=None, g=None):
        T = None
        if g is not None:
            gn = math.sqrt(sum(v * v for v in g))
            if gn > 0 and all(math.isfinite(v) for v in g):
                u = [v / gn for v in g]
                cos = []
                for j in range(self.H):
                    m = self.mem[j]
                    if j == h or m is None:
                        continue
                    mn = math.sqrt(sum(v * v for v in m))
                    if mn > 0:
                        cos.append(sum(a * b for a, b in zip(u, m)) / mn)
                T = sum(cos) / len(cos) if cos else None
                if self.mem[h] is None:
                    self.mem[h] = u
                else:
                    self.mem[h] = [(1 - self.eta) * a + self.eta * b for a, b in zip(self.mem[h], u)]
        if L is not None and not math.isfinite(L):
            L = None
        if self.fusion == "learnability":
            T = None
        ln = tn = None
        if L is not None:
            self.WL = (self.WL + [L])[-self.window:]
            ln = self._norm(L, self.WL)
        if T is not None:
            self.WT = (self.WT + [T])[-self.window:]
            tn = self._norm(T, self.WT)
        if self.fusion == "learnability":
            S = ln
        elif self.fusion == "transfer":
            S = tn
        elif ln is not None and tn is not None:
            S = {"mean": self.alpha * ln + (1 - self.alpha) * tn, "product": ln * tn, "min": min(ln, tn)}[self.fusion]
        else:
            S = ln if ln is not None else tn
        if S is not None:
            self.Q[h] = S if self.Q[h] is None else self.q_decay * self.Q[h] + (1 - self.q_decay) * S
        self.n[h] += 1
        self.t += 1
        return T, ln, tn, S
