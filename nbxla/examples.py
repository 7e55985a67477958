"""Standard NumPy programs (softmax, layernorm, an MLP forward pass and training step, an LSTM
cell, Black-Scholes): plain NumPy, the way people write them in notebooks.

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
