"""Standard NumPy programs (softmax, layernorm, an MLP forward pass and training step, an LSTM
cell, Black-Scholes; and loop programs of the polybench/npbench kind: Cholesky, LU, a
triangular solve, Durbin, an IIR filter, Jacobi and Gauss-Seidel sweeps, Newton's iteration,
Gram-Schmidt, a histogram fill, a correlation matrix, a convolution and a LeNet-5 forward pass
written as loops over output positions, an azimuthal integration over radial bins, a channel
flow solved until it settles): plain NumPy, the way people write them in notebooks.

Tests and benchmarks import them from here (one copy each), and they are handy in a notebook:
``nbxla.jit(nbxla.examples.softmax)``.
"""

import numpy as np


def softmax(x):
    z = x - x.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def logsumexp(x, axis=-1):
    m = np.max(x, axis=axis, keepdims=True)
    return np.squeeze(m, axis) + np.log(np.sum(np.exp(x - m), axis=axis))


def layernorm(x, gamma, beta, eps=1e-5):
    mu = x.mean(axis=-1, keepdims=True)
    var = x.var(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * gamma + beta


def mlp_forward(x, W1, b1, W2, b2):
    h = np.maximum(x @ W1 + b1, 0.0)
    logits = h @ W2 + b2
    return softmax(logits)


def mlp_train_step(x, y_onehot, W1, b1, W2, b2, lr):
    """Forward, cross-entropy loss, hand-written backward pass, SGD update in place."""
    n = x.shape[0]
    z1 = x @ W1 + b1
    h = np.maximum(z1, 0.0)
    p = softmax(h @ W2 + b2)
    loss = -np.sum(y_onehot * np.log(p + 1e-12)) / n
    dlogits = (p - y_onehot) / n
    dW2 = h.T @ dlogits
    db2 = dlogits.sum(axis=0)
    dh = dlogits @ W2.T
    dz1 = dh * (z1 > 0)
    dW1 = x.T @ dz1
    db1 = dz1.sum(axis=0)
    W1 -= lr * dW1
    b1 -= lr * db1
    W2 -= lr * dW2
    b2 -= lr * db2
    return loss


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def lstm_cell(x, h, c, W, U, b):
    gates = x @ W + h @ U + b
    i, f, g, o = np.split(gates, 4, axis=-1)
    c_new = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
    h_new = sigmoid(o) * np.tanh(c_new)
    return h_new, c_new


def norm_cdf(x):
    """Abramowitz & Stegun 26.2.17 normal CDF (exp/sqrt/where only; |error| < 7.5e-8)."""
    t = 1.0 / (1.0 + 0.2316419 * np.abs(x))
    poly = t * (0.319381530 + t * (-0.356563782 + t * (1.781477937 + t * (-1.821255978 + t * 1.330274429))))
    pdf = np.exp(-0.5 * x * x) * 0.3989422804014327          # 1/sqrt(2 pi), a weak Python float
    cdf = 1.0 - pdf * poly
    return np.where(x >= 0, cdf, 1.0 - cdf)


def black_scholes(S, K, T, r, sigma):
    sqrtT = np.sqrt(T)
    d1 = (np.log(S / K) + (r + 0.5 * sigma ** 2) * T) / (sigma * sqrtT)
    d2 = d1 - sigma * sqrtT
    call = S * norm_cdf(d1) - K * np.exp(-r * T) * norm_cdf(d2)
    put = K * np.exp(-r * T) * norm_cdf(-d2) - S * norm_cdf(-d1)
    return call, put


# ---- loop programs (Python loops over arrays; nbxla rolls them into HLO while loops) ----------


def cholesky(A):
    n = A.shape[0]
    for i in range(n):
        for j in range(i):
            A[i, j] -= A[i, :j] @ A[j, :j]
            A[i, j] /= A[j, j]
        A[i, i] -= A[i, :i] @ A[i, :i]
        A[i, i] = np.sqrt(A[i, i])


def lu(A):
    n = A.shape[0]
    for i in range(n):
        for j in range(i):
            A[i, j] -= A[i, :j] @ A[:j, j]
            A[i, j] /= A[j, j]
        for j in range(i, n):
            A[i, j] -= A[i, :i] @ A[:i, j]


def trisolv(L, b):
    x = np.zeros_like(b)
    for i in range(x.shape[0]):
        x[i] = (b[i] - L[i, :i] @ x[:i]) / L[i, i]
    return x


def durbin(r):
    y = np.empty_like(r)
    alpha = -r[0]
    beta = 1.0
    y[0] = -r[0]
    for k in range(1, r.shape[0]):
        beta *= 1.0 - alpha * alpha
        alpha = -(r[k] + np.dot(np.flip(r[:k]), y[:k])) / beta
        y[:k] += alpha * np.flip(y[:k])
        y[k] = alpha
    return y


def iir_filter(x, b0, b1, a1):
    y = np.zeros_like(x)
    y[0] = b0 * x[0]
    for n in range(1, x.shape[0]):
        y[n] = b0 * x[n] + b1 * x[n - 1] - a1 * y[n - 1]
    return y


def jacobi_2d(TSTEPS, A, B):
    for t in range(1, TSTEPS):
        B[1:-1, 1:-1] = 0.2 * (A[1:-1, 1:-1] + A[1:-1, :-2] + A[1:-1, 2:] + A[2:, 1:-1] + A[:-2, 1:-1])
        A[1:-1, 1:-1] = 0.2 * (B[1:-1, 1:-1] + B[1:-1, :-2] + B[1:-1, 2:] + B[2:, 1:-1] + B[:-2, 1:-1])


def seidel_2d(TSTEPS, A):
    N = A.shape[0]
    for t in range(0, TSTEPS - 1):
        for i in range(1, N - 1):
            A[i, 1:-1] += (A[i - 1, :-2] + A[i - 1, 1:-1] + A[i - 1, 2:] + A[i, 2:]
                           + A[i + 1, :-2] + A[i + 1, 1:-1] + A[i + 1, 2:])
            for j in range(1, N - 1):
                A[i, j] += A[i, j - 1]
                A[i, j] /= 9.0


def newton_sqrt(a):
    x = a.copy()
    while np.abs(x * x - a).max() > 1e-12:
        x = 0.5 * (x + a / x)
    return x


def gramschmidt(A):
    m, n = A.shape
    Q = np.zeros_like(A)
    R = np.zeros_like(A, shape=(n, n))
    for k in range(n):
        nrm = np.dot(A[:, k], A[:, k])
        R[k, k] = np.sqrt(nrm)
        Q[:, k] = A[:, k] / R[k, k]
        for j in range(k + 1, n):
            R[k, j] = np.dot(Q[:, k], A[:, j])
            A[:, j] = A[:, j] - Q[:, k] * R[k, j]
    return Q, R


def histogram_fill(values, nbins):
    counts = np.zeros(nbins, dtype=np.int64)
    for i in range(values.shape[0]):
        counts[values[i]] += 1
    return counts


# ---- npbench-style loop programs (the loop shapes of issue 30) --------------------------------


def correlation(M, float_n, data):
    mean = np.mean(data, axis=0)
    stddev = np.std(data, axis=0)
    stddev[stddev <= 0.1] = 1.0
    data -= mean
    data /= np.sqrt(float_n) * stddev
    corr = np.eye(M, dtype=data.dtype)
    for i in range(M - 1):
        corr[i + 1:M, i] = corr[i, i + 1:M] = data[:, i] @ data[:, i + 1:M]
    return corr


def conv2d(input, weights):
    """A valid convolution (NHWC input, KKCF weights, stride 1) as the usual double loop over
    output positions, each a reduction over a K x K x C window."""
    K = weights.shape[0]
    H_out = input.shape[1] - K + 1
    W_out = input.shape[2] - K + 1
    output = np.empty((input.shape[0], H_out, W_out, weights.shape[3]), dtype=np.float32)
    for i in range(H_out):
        for j in range(W_out):
            output[:, i, j, :] = np.sum(input[:, i:i + K, j:j + K, :, np.newaxis] *
                                        weights[np.newaxis, :, :, :], axis=(1, 2, 3))
    return output


def maxpool2d(x):
    output = np.empty([x.shape[0], x.shape[1] // 2, x.shape[2] // 2, x.shape[3]], dtype=x.dtype)
    for i in range(x.shape[1] // 2):
        for j in range(x.shape[2] // 2):
            output[:, i, j, :] = np.max(x[:, 2 * i:2 * i + 2, 2 * j:2 * j + 2, :], axis=(1, 2))
    return output


def lenet5(input, conv1, conv1bias, conv2, conv2bias, fc1w, fc1b, fc2w, fc2b, fc3w, fc3b, N,
           C_before_fc1):
    x = np.maximum(conv2d(input, conv1) + conv1bias, 0)
    x = maxpool2d(x)
    x = np.maximum(conv2d(x, conv2) + conv2bias, 0)
    x = maxpool2d(x)
    x = np.reshape(x, (N, C_before_fc1))
    x = np.maximum(x @ fc1w + fc1b, 0)
    x = np.maximum(x @ fc2w + fc2b, 0)
    return x @ fc3w + fc3b


def azimint_naive(data, radius, npt):
    rmax = radius.max()
    res = np.zeros(npt, dtype=np.float64)
    for i in range(npt):
        r1 = rmax * i / npt
        r2 = rmax * (i + 1) / npt
        mask_r12 = np.logical_and((r1 <= radius), (radius < r2))
        values_r12 = data[mask_r12]
        res[i] = values_r12.mean()
    return res
def covariance(M, float_n, data):
    mean = np.mean(data, axis=0)
    data -= mean
    cov = np.zeros((M, M), dtype=data.dtype)
    for i in range(M):
        cov[i:M, i] = cov[i, i:M] = data[:, i] @ data[:, i:M] / (float_n - 1.0)
    return cov


def floyd_warshall(path):
    for k in range(path.shape[0]):
        path[:] = np.minimum(path[:], np.add.outer(path[:, k], path[k, :]))


def gramschmidt_outer(A):
    """Modified Gram-Schmidt with the trailing columns updated at once (a rank-1 update)."""
    m, n = A.shape
    Q = np.zeros_like(A)
    R = np.zeros((n, n), dtype=A.dtype)
    for k in range(n):
        R[k, k] = np.linalg.norm(A[:, k])
        Q[:, k] = A[:, k] / R[k, k]
        R[k, k + 1:] = Q[:, k] @ A[:, k + 1:]
        A[:, k + 1:] -= np.outer(Q[:, k], R[k, k + 1:])
    return Q, R


def contour_integral(NR, NM, slab_per_bc, Ham, int_pts, Y):
    P0 = np.zeros((NR, NM), dtype=np.complex128)
    P1 = np.zeros((NR, NM), dtype=np.complex128)
    for z in int_pts:
        Tz = np.zeros((NR, NR), dtype=np.complex128)
        for n in range(slab_per_bc + 1):
            zz = np.power(z, slab_per_bc / 2 - n)
            Tz += zz * Ham[n]
        if NR == NM:
            X = np.linalg.inv(Tz)
        else:
            X = np.linalg.solve(Tz, Y)
        if abs(z) < 1.0:
            X = -X
        P0 += X
        P1 += z * X
    return P0, P1


def symm(alpha, beta, C, A, B):
    temp2 = np.empty((C.shape[1],), dtype=C.dtype)
    C *= beta
    for i in range(C.shape[0]):
        for j in range(C.shape[1]):
            C[:i, j] += alpha * B[i, j] * A[i, :i]
            temp2[j] = B[:i, j] @ A[i, :i]
        C[i, :] += alpha * B[i, :] * A[i, i] + alpha * temp2


def syr2k(alpha, beta, C, A, B):
    for i in range(A.shape[0]):
        C[i, :i + 1] *= beta
        for k in range(A.shape[1]):
            C[i, :i + 1] += (A[:i + 1, k] * alpha * B[i, k] + B[:i + 1, k] * alpha * A[i, k])


def trmm(alpha, A, B):
    for i in range(B.shape[0]):
        for j in range(B.shape[1]):
            B[i, j] += np.dot(A[i + 1:, i], B[i + 1:, j])
    B *= alpha


def go_fast(a):
    trace = 0.0
    for i in range(a.shape[0]):
        trace += np.tanh(a[i, i])
    return a + trace


def crc16(data, poly=0x8408):
    crc = 0xFFFF
    for b in data:
        cur_byte = 0xFF & b
        for _ in range(0, 8):
            if (crc & 0x0001) ^ (cur_byte & 0x0001):
                crc = (crc >> 1) ^ poly
            else:
                crc >>= 1
            cur_byte >>= 1
    crc = (~crc & 0xFFFF)
    crc = (crc << 8) | ((crc >> 8) & 0xFF)
    return crc & 0xFFFF



# ---- channel flow (a CFD step iterated until the velocity settles: a value-dependent while) --


def _channel_rhs(rho, dt, dx, dy, u, v):
    """The pressure equation's source term; columns 0 and -1 wrap around (periodic in x)."""
    b = np.zeros_like(u)

    def term(ue, uw, un, us, ve, vw, vn, vs):
        dudx, dvdy = (ue - uw) / (2 * dx), (vn - vs) / (2 * dy)
        return rho * (1 / dt * (dudx + dvdy) - dudx ** 2 - 2 * ((un - us) / (2 * dy) * (ve - vw) / (2 * dx))
                      - dvdy ** 2)
    b[1:-1, 1:-1] = term(u[1:-1, 2:], u[1:-1, :-2], u[2:, 1:-1], u[:-2, 1:-1],
                         v[1:-1, 2:], v[1:-1, :-2], v[2:, 1:-1], v[:-2, 1:-1])
    for c, e, w in ((-1, 0, -2), (0, 1, -1)):
        b[1:-1, c] = term(u[1:-1, e], u[1:-1, w], u[2:, c], u[:-2, c], v[1:-1, e], v[1:-1, w], v[2:, c], v[:-2, c])
    return b


def _channel_pressure(nit, p, dx, dy, b):
    scale, den = dx ** 2 * dy ** 2 / (2 * (dx ** 2 + dy ** 2)), 2 * (dx ** 2 + dy ** 2)
    for _ in range(nit):
        pn = p.copy()
        p[1:-1, 1:-1] = ((pn[1:-1, 2:] + pn[1:-1, :-2]) * dy ** 2
                         + (pn[2:, 1:-1] + pn[:-2, 1:-1]) * dx ** 2) / den - scale * b[1:-1, 1:-1]
        for c, e, w in ((-1, 0, -2), (0, 1, -1)):
            p[1:-1, c] = ((pn[1:-1, e] + pn[1:-1, w]) * dy ** 2
                          + (pn[2:, c] + pn[:-2, c]) * dx ** 2) / den - scale * b[1:-1, c]
        p[-1, :] = p[-2, :]
        p[0, :] = p[1, :]


def channel_flow(nit, u, v, dt, dx, dy, p, rho, nu, F):
    """Navier-Stokes in a channel (npbench's channel_flow, after Barba's "12 steps"): steps until
    the relative change of the total velocity is at most 1e-3; returns the step count."""
    udiff, steps = 1.0, 0
    while udiff > .001:
        un, vn = u.copy(), v.copy()
        _channel_pressure(nit, p, dx, dy, _channel_rhs(rho, dt, dx, dy, u, v))

        def advance(f, c, e, w, force, dp, h):
            # f at column(s) c from its east/west neighbours e/w, and its north/south rows
            return (f[1:-1, c] - un[1:-1, c] * dt / dx * (f[1:-1, c] - f[1:-1, w])
                    - vn[1:-1, c] * dt / dy * (f[1:-1, c] - f[:-2, c]) - dt / (2 * rho * h) * dp
                    + nu * (dt / dx ** 2 * (f[1:-1, e] - 2 * f[1:-1, c] + f[1:-1, w])
                            + dt / dy ** 2 * (f[2:, c] - 2 * f[1:-1, c] + f[:-2, c])) + force)
        inner, east, west = slice(1, -1), slice(2, None), slice(None, -2)
        u[1:-1, 1:-1] = advance(un, inner, east, west, F * dt, p[1:-1, 2:] - p[1:-1, :-2], dx)
        v[1:-1, 1:-1] = advance(vn, inner, east, west, 0.0, p[2:, 1:-1] - p[:-2, 1:-1], dy)
        for c, e, w in ((-1, 0, -2), (0, 1, -1)):
            u[1:-1, c] = advance(un, c, e, w, F * dt, p[1:-1, e] - p[1:-1, w], dx)
            v[1:-1, c] = advance(vn, c, e, w, 0.0, p[2:, c] - p[:-2, c], dy)
        u[0, :] = u[-1, :] = v[0, :] = v[-1, :] = 0
        udiff = (np.sum(u) - np.sum(un)) / np.sum(u)
        steps += 1
    return steps


# ---- more loop shapes (issue 30's styles, written anew: each found or guards a fix) -----------


def pairwise_distances(X):
    """Distances between the rows of X: the upper triangle filled row by row (a slice whose
    length shrinks with the row), mirrored into the lower one."""
    n = X.shape[0]
    D = np.zeros((n, n), dtype=X.dtype)
    for i in range(n - 1):
        d = np.sqrt(np.sum((X[i] - X[i + 1:]) ** 2, axis=1))
        D[i, i + 1:] = d
        D[i + 1:, i] = d
    return D


def widest_path(cap):
    """Maximum-bottleneck paths: Floyd-Warshall over the (max, min) semiring."""
    for k in range(cap.shape[0]):
        cap[:] = np.maximum(cap, np.minimum.outer(cap[:, k], cap[k, :]))


def gramschmidt_left(A):
    """Left-looking modified Gram-Schmidt: column j against the columns before it, one at a
    time (a vector carried through the inner loop), then normalized."""
    m, n = A.shape
    Q = np.zeros_like(A)
    R = np.zeros((n, n), dtype=A.dtype)
    for j in range(n):
        v = A[:, j].copy()
        for i in range(j):
            R[i, j] = Q[:, i] @ v
            v -= R[i, j] * Q[:, i]
        R[j, j] = np.sqrt(v @ v)
        Q[:, j] = v / R[j, j]
    return Q, R


def lu_pivot(A):
    """LU with partial pivoting in place; returns the row permutation.  The pivot row is found
    by argmax over a column's tail and swapped in with a list index."""
    n = A.shape[0]
    perm = np.arange(n)
    for i in range(n):
        p = i + np.argmax(np.abs(A[i:, i]))
        A[[i, p]] = A[[p, i]]
        perm[[i, p]] = perm[[p, i]]
        A[i + 1:, i] /= A[i, i]
        A[i + 1:, i + 1:] -= np.outer(A[i + 1:, i], A[i, i + 1:])
    return perm


def mandelbrot(c, maxiter):
    """Escape counts on a complex grid: one complex update of the whole grid per iteration."""
    z = np.zeros_like(c)
    counts = np.zeros(c.shape, dtype=np.int64)
    for _ in range(maxiter):
        live = np.abs(z) <= 2.0
        z = np.where(live, z * z + c, z)
        counts += live
    return counts


def wave_2d(steps, u, c2):
    """The wave equation by leapfrog: three time levels rotated each step, zero-gradient
    boundaries on all four sides (row and column updates after the interior)."""
    prev = u.copy()
    for _ in range(steps):
        nxt = np.empty_like(u)
        nxt[1:-1, 1:-1] = (2 * u[1:-1, 1:-1] - prev[1:-1, 1:-1]
                           + c2 * (u[2:, 1:-1] + u[:-2, 1:-1] + u[1:-1, 2:] + u[1:-1, :-2] - 4 * u[1:-1, 1:-1]))
        nxt[0, :] = nxt[1, :]
        nxt[-1, :] = nxt[-2, :]
        nxt[:, 0] = nxt[:, 1]
        nxt[:, -1] = nxt[:, -2]
        prev, u = u, nxt
    return u


def kahan_sum(x):
    """Compensated summation: a scalar recurrence of two running values (the compensation
    must survive compilation: no reassociation)."""
    s = 0.0
    c = 0.0
    for i in range(x.shape[0]):
        y = x[i] - c
        t = s + y
        c = (t - s) - y
        s = t
    return s


# ---- npbench programs as npbench writes them (helpers with returns, np.ndarray buffers,
# Python float counters, tuple targets) ------------------------------------------------------

def _pair_match(b1, b2):
    if b1 + b2 == 3:
        return 1
    else:
        return 0


def nussinov(N, seq):
    """RNA folding: a table filled by a triangular loop nest, max() of traced scalars, a helper
    that returns from both branches of an ``if`` on array values, indices that only the
    ``if``s around them keep in bounds."""
    table = np.zeros((N, N), np.int32)
    for i in range(N - 1, -1, -1):
        for j in range(i + 1, N):
            if j - 1 >= 0:
                table[i, j] = max(table[i, j], table[i, j - 1])
            if i + 1 < N:
                table[i, j] = max(table[i, j], table[i + 1, j])
            if j - 1 >= 0 and i + 1 < N:
                if i < j - 1:
                    table[i, j] = max(table[i, j], table[i + 1, j - 1] + _pair_match(seq[i], seq[j]))
                else:
                    table[i, j] = max(table[i, j], table[i + 1, j - 1])
            for k in range(i + 1, j):
                table[i, j] = max(table[i, j], table[i, k] + table[k + 1, j])
    return table


def _acceleration(pos, mass, G, softening):
    x, y, z = pos[:, 0:1], pos[:, 1:2], pos[:, 2:3]
    dx, dy, dz = x.T - x, y.T - y, z.T - z
    inv_r3 = dx**2 + dy**2 + dz**2 + softening**2
    inv_r3[inv_r3 > 0] = inv_r3[inv_r3 > 0]**(-1.5)
    return np.hstack((G * (dx * inv_r3) @ mass, G * (dy * inv_r3) @ mass, G * (dz * inv_r3) @ mass))


def _energy(pos, vel, mass, G):
    kinetic = 0.5 * np.sum(np.sum(mass * vel**2))
    x, y, z = pos[:, 0:1], pos[:, 1:2], pos[:, 2:3]
    dx, dy, dz = x.T - x, y.T - y, z.T - z
    inv_r = np.sqrt(dx**2 + dy**2 + dz**2)
    inv_r[inv_r > 0] = 1.0 / inv_r[inv_r > 0]
    potential = G * np.sum(np.sum(np.triu(-(mass * mass.T) * inv_r, 1)))
    return kinetic, potential


def nbody(mass, pos, vel, N, Nt, dt, G, softening):
    """Leapfrog N-body steps recording the energies: ``np.ndarray`` buffers filled by tuple
    targets (``KE[i + 1], PE[i + 1] = ...``), masked updates, a Python float clock."""
    vel -= np.mean(mass * vel, axis=0) / np.mean(mass)
    acc = _acceleration(pos, mass, G, softening)
    KE = np.ndarray(Nt + 1, dtype=np.float64)
    PE = np.ndarray(Nt + 1, dtype=np.float64)
    KE[0], PE[0] = _energy(pos, vel, mass, G)
    t = 0.0
    for i in range(Nt):
        vel += acc * dt / 2.0
        pos += vel * dt
        acc = _acceleration(pos, mass, G, softening)
        vel += acc * dt / 2.0
        t += dt
        KE[i + 1], PE[i + 1] = _energy(pos, vel, mass, G)
    return KE, PE


def spmv(A_row, A_col, A_val, x):
    """A sparse matrix (compressed rows) times a vector, as npbench writes it: each row's
    column indices and values are slices whose bounds are read from ``A_row``."""
    y = np.zeros(A_row.size - 1, A_val.dtype)
    for i in range(A_row.size - 1):
        cols = A_col[A_row[i]:A_row[i + 1]]
        vals = A_val[A_row[i]:A_row[i + 1]]
        y[i] = vals @ x[cols]
    return y


# ---- shapes found by hunting (issue 30): numba-style scalar loops, a float clock -------------

def k3mm_loops(A, B, C, D):
    """polybench's 3mm as its C source writes it: three triple loops reusing ``i, j, k``."""
    E = np.zeros((A.shape[0], B.shape[1]))
    F = np.zeros((C.shape[0], D.shape[1]))
    G = np.zeros((A.shape[0], D.shape[1]))
    for i in range(A.shape[0]):
        for j in range(B.shape[1]):
            for k in range(A.shape[1]):
                E[i, j] += A[i, k] * B[k, j]
    for i in range(C.shape[0]):
        for j in range(D.shape[1]):
            for k in range(C.shape[1]):
                F[i, j] += C[i, k] * D[k, j]
    for i in range(E.shape[0]):
        for j in range(F.shape[1]):
            for k in range(E.shape[1]):
                G[i, j] += E[i, k] * F[k, j]
    return G


def thomas(a, b, c, d):
    """A tridiagonal solve (Thomas's algorithm), element by element."""
    n = d.shape[0]
    cp, dp, x = np.empty(n), np.empty(n), np.empty(n)
    cp[0], dp[0] = c[0] / b[0], d[0] / b[0]
    for i in range(1, n):
        m = b[i] - a[i] * cp[i - 1]
        cp[i] = c[i] / m
        dp[i] = (d[i] - a[i] * dp[i - 1]) / m
    x[n - 1] = dp[n - 1]
    for i in range(n - 2, -1, -1):
        x[i] = dp[i] - cp[i] * x[i + 1]
    return x


def fnv1a(data):
    """The FNV-1a hash of a byte array (uint32 arithmetic that wraps)."""
    h = np.uint32(2166136261)
    for i in range(data.shape[0]):
        h = (h ^ np.uint32(data[i])) * np.uint32(16777619)
    return h


def advect_until(u, c, dx, t_end):
    """Upwind advection on a periodic line, stepped on a float clock until ``t_end``."""
    t, dt, steps = 0.0, 0.5 * dx / c, 0
    while t < t_end:
        u[1:] = u[1:] - c * dt / dx * (u[1:] - u[:-1])
        u[0] = u[-1]
        t += dt
        steps += 1
    return u, steps


def knn_smooth(X, y, k):
    """Each point's value replaced by the mean over its ``k`` nearest neighbours (an argsort per
    point)."""
    out = np.empty(X.shape[0])
    for i in range(X.shape[0]):
        out[i] = np.mean(y[np.argsort(np.abs(X - X[i]))[:k]])
    return out


def rolling_median(x, w):
    """The median of each window of ``w`` samples, by sorting the window (a sort per step)."""
    out = np.empty(x.shape[0] - w + 1)
    for i in range(x.shape[0] - w + 1):
        out[i] = np.sort(x[i:i + w])[w // 2]
    return out


def top_k_rows(A, k):
    """The columns of each row's ``k`` largest entries, largest first (argsort of -row)."""
    top = np.empty((A.shape[0], k), np.int64)
    for i in range(A.shape[0]):
        top[i] = np.argsort(-A[i], kind="stable")[:k]
    return top


def sort_rows(A):
    """Each row sorted in place, one row per step (NaNs go last, as NumPy puts them)."""
    for i in range(A.shape[0]):
        A[i] = np.sort(A[i])
    return A


def stable_ranks(labels, weights):
    """Per step, the weights ordered by their integer labels (ties keep their order: a stable
    argsort), and their running sum's largest value."""
    best = np.empty(labels.shape[0])
    for i in range(labels.shape[0]):
        best[i] = np.max(np.cumsum(weights[i][np.argsort(labels[i], kind="stable")]))
    return best
