"""How much slower is torch.matmul when an input has the same values but another layout?"""
import time, torch
def bench(f, n=30):
    f(); ts = []
    for _ in range(n):
        t = time.perf_counter(); f(); ts.append(time.perf_counter() - t)
    ts.sort(); return ts[n // 2] * 1e3
for M, K, N in [(384, 512, 320), (261, 513, 299), (512, 512, 512)]:
    A, B = torch.randn(M, K), torch.randn(K, N)
    base = bench(lambda: torch.matmul(A, B))
    colA = A.t().contiguous().t()
    big = torch.empty(M, 2 * K)[:, ::2]; big.copy_(A)
    big2 = torch.empty(2 * M, 2 * K)[::2, ::2]; big2.copy_(A)
    bigB = torch.empty(K * 2, N * 2)[::2, ::2]; bigB.copy_(B)
    off = torch.empty(M * K + 1)[1:].view(M, K); off.copy_(A)
    r = {"colA": bench(lambda: torch.matmul(colA, B)), "stride2A": bench(lambda: torch.matmul(big, B)),
         "stride2x2A": bench(lambda: torch.matmul(big2, B)), "both": bench(lambda: torch.matmul(big2, bigB)),
         "offset1": bench(lambda: torch.matmul(off, B))}
    print(M, K, N, f"base {base:.3f}ms", {k: round(v / base, 2) for k, v in r.items()})
