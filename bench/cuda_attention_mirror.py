# cuda_attention_mirror.py: the CUDA attention kernels' tile loops, causal masks, online softmax
# and two-kernel backward (trainer/cuda/ops/attention_tc.cu, attention.cu) replayed in numpy in
# double precision, against naive causal attention and its analytic gradients. It checks the
# index math and masking without a GPU (not the WMMA fragment layouts or the lane mapping).
# Run with Debian's python3 (numpy): /usr/bin/python3 bench/cuda_attention_mirror.py
import numpy as np
rng = np.random.default_rng(0)
def naive(q, k, v, scale):
    T = q.shape[0]
    s = q @ k.T * scale
    mask = np.tril(np.ones((T, T), bool))
    s = np.where(mask, s, -np.inf)
    m = s.max(1, keepdims=True)
    p = np.exp(s - m); l = p.sum(1, keepdims=True); p /= l
    return p @ v, (m + np.log(l))[:, 0], p
def naive_bwd(q, k, v, do, scale):
    o, lse, p = naive(q, k, v, scale)
    dp = do @ v.T
    D = (do * o).sum(1)
    ds = p * (dp - D[:, None])
    return ds @ k * scale, ds.T @ q * scale, p.T @ do, o, lse
TILE = 64
def fwd_tc(q, k, v, scale):
    T, HS = q.shape
    out = np.full((T, HS), np.nan, np.float32); lse = np.full(T, np.nan, np.float32)
    nqt = (T + TILE - 1) // TILE
    for qt in range(nqt):
        q0 = qt * TILE
        sQ = np.zeros((TILE, HS)); n = min(TILE, T - q0); sQ[:n] = q[q0:q0 + n]
        m = np.full(TILE, -np.inf); l = np.zeros(TILE); sO = np.zeros((TILE, HS))
        for kt in range(qt + 1):
            k0 = kt * TILE
            sK = np.zeros((TILE, HS)); sV = np.zeros((TILE, HS)); nk = min(TILE, T - k0)
            sK[:nk] = k[k0:k0 + nk]; sV[:nk] = v[k0:k0 + nk]
            sS = sQ @ sK.T
            for r in range(TILE):
                tq = q0 + r
                valid = np.array([(k0 + c <= tq) and (k0 + c < T) for c in range(TILE)])
                tmax = np.max(np.where(valid, sS[r] * scale, -np.inf))
                m_new = max(m[r], tmax); assert np.isfinite(m_new)
                corr = np.exp(m[r] - m_new)
                p = np.where(valid, np.exp(sS[r] * scale - m_new), 0.0)
                l[r] = l[r] * corr + p.sum(); m[r] = m_new
                sO[r] = sO[r] * corr + p @ sV
        for r in range(TILE):
            tq = q0 + r
            if tq < T:
                out[tq] = sO[r] / l[r]; lse[tq] = m[r] + np.log(l[r])
    return out, lse
def bwd_tc(q, k, v, do, o, lse, scale):
    T, HS = q.shape
    D = (do * o).sum(1)
    dq = np.full((T, HS), np.nan); dk = np.full((T, HS), np.nan); dv = np.full((T, HS), np.nan)
    nqt = (T + TILE - 1) // TILE
    pad = lambda x, a, n: np.concatenate([x[a:a + n], np.zeros((TILE - n, HS))]) if n < TILE else x[a:a + n].copy()
    for kt in range(nqt):  # dK dV
        k0 = kt * TILE; nk = min(TILE, T - k0)
        sK = pad(k, k0, nk); sV = pad(v, k0, nk)
        adk = np.zeros((TILE, HS)); adv = np.zeros((TILE, HS))
        for qt in range(kt, nqt):
            q0 = qt * TILE; nq = min(TILE, T - q0)
            sQ = pad(q, q0, nq); sdO = pad(do, q0, nq)
            sL = np.array([lse[q0 + i] if q0 + i < T else np.inf for i in range(TILE)])
            sD = np.array([D[q0 + i] if q0 + i < T else 0.0 for i in range(TILE)])
            sS = sK @ sQ.T; sdP = sV @ sdO.T
            P = np.zeros((TILE, TILE)); dS = np.zeros((TILE, TILE))
            for r in range(TILE):
                tk = k0 + r
                for c in range(TILE):
                    tq = q0 + c
                    valid = tq >= tk and tq < T and tk < T
                    p = np.exp(sS[r, c] * scale - sL[c]) if valid else 0.0
                    P[r, c] = p; dS[r, c] = p * (sdP[r, c] - sD[c])
            adv += P @ sdO; adk += dS @ sQ
        for r in range(TILE):
            if k0 + r < T: dv[k0 + r] = adv[r]; dk[k0 + r] = adk[r] * scale
    for qt in range(nqt):  # dQ
        q0 = qt * TILE; nq = min(TILE, T - q0)
        sQ = pad(q, q0, nq); sdO = pad(do, q0, nq)
        adq = np.zeros((TILE, HS))
        for kt in range(qt + 1):
            k0 = kt * TILE; nk = min(TILE, T - k0)
            sK = pad(k, k0, nk); sV = pad(v, k0, nk)
            sS = sQ @ sK.T; sdP = sdO @ sV.T
            dS = np.zeros((TILE, TILE))
            for r in range(TILE):
                tq = q0 + r
                lse_r = lse[tq] if tq < T else np.inf; d_r = D[tq] if tq < T else 0.0
                for c in range(TILE):
                    tk = k0 + c
                    valid = tk <= tq and tk < T and tq < T
                    p = np.exp(sS[r, c] * scale - lse_r) if valid else 0.0
                    dS[r, c] = p * (sdP[r, c] - d_r)
            adq += dS @ sK
        for r in range(TILE):
            if q0 + r < T: dq[q0 + r] = adq[r] * scale
    return dq, dk, dv
def rows_fwd(q, k, v, scale):
    T, HS = q.shape; out = np.zeros((T, HS)); lse = np.zeros(T)
    for t in range(T):
        o = np.zeros(HS); m = -np.inf; l = 0.0
        for k0 in range(0, t + 1, 32):
            j = np.arange(k0, k0 + 32); ok = j <= t
            s = np.where(ok, np.array([q[t] @ k[jj] if jj <= t else 0 for jj in j]) * scale, -np.inf)
            m_new = max(m, s.max()); corr = np.exp(m - m_new)
            p = np.where(ok, np.exp(s - m_new), 0.0)
            l = l * corr + p.sum(); m = m_new
            o = o * corr
            for jj in range(min(32, t - k0 + 1)): o += p[jj] * v[k0 + jj]
        out[t] = o / l; lse[t] = m + np.log(l)
    return out, lse
def rows_bwd(q, k, v, do, o, lse, scale):
    T, HS = q.shape; D = (do * o).sum(1)
    dq = np.zeros((T, HS)); dk = np.zeros((T, HS)); dv = np.zeros((T, HS))
    for t in range(T):
        for j in range(t + 1):
            p = np.exp(q[t] @ k[j] * scale - lse[t]); ds = p * (do[t] @ v[j] - D[t])
            dq[t] += ds * k[j]
        dq[t] *= scale
    for j in range(T):
        for i in range(j, T):
            p = np.exp(q[i] @ k[j] * scale - lse[i]); ds = p * (do[i] @ v[j] - D[i])
            dv[j] += p * do[i]; dk[j] += ds * q[i]
        dk[j] *= scale
    return dq, dk, dv
for T in (100, 37, 130):
    HS = 64; scale = 1 / np.sqrt(HS)
    q, k, v, do = (rng.standard_normal((T, HS)) for _ in range(4))
    o_ref, lse_ref, _ = naive(q, k, v, scale)
    o, lse = fwd_tc(q, k, v, scale)
    dq_r, dk_r, dv_r, _, _ = naive_bwd(q, k, v, do, scale)
    dq, dk, dv = bwd_tc(q, k, v, do, o, lse, scale)
    print("T", T, "tc fwd", np.abs(o - o_ref).max(), np.abs(lse - lse_ref).max(),
          "bwd", np.abs(dq - dq_r).max(), np.abs(dk - dk_r).max(), np.abs(dv - dv_r).max())
    o2, lse2 = rows_fwd(q, k, v, scale)
    dq2, dk2, dv2 = rows_bwd(q, k, v, do, o2, lse2, scale)
    print("T", T, "rows fwd", np.abs(o2 - o_ref).max(), np.abs(lse2 - lse_ref).max(),
          "bwd", np.abs(dq2 - dq_r).max(), np.abs(dk2 - dk_r).max(), np.abs(dv2 - dv_r).max())
