#!/usr/bin/env python3
"""Writes tests/data/transform/sparsegpt_ref.bin: SparseGPT's pruning of one
small matrix computed by an independent NumPy (float64) port of the reference
implementation, IST-DASLab/sparsegpt `sparsegpt.py` SparseGPT.fasterprune
(mask selection by w^2 / diag(Hinv)^2 per block of columns or per N:M group,
error feedback through the upper Cholesky factor of H^-1, lazy block updates).

One deliberate difference from the reference: an unstructured block's mask
is the first floor(s * numel) of a stable argsort (exactly that many weights;
the reference's `tmp <= sort(tmp)[int(numel * s)]` prunes one more). ember's
transform/sparsegpt.cpp makes the same choice, and the test
(tests/transform/prune_test.cpp) compares its weights and masks with these.

    /work/venvs/hf/bin/python tools/gen_sparsegpt_fixture.py [OUT]

Layout (little-endian): int32 n_out, n_in, n_cases; f32 W[n_out, n_in];
f64 H[n_in, n_in]; per case: int32 kind (0 unstructured, 1 N:M, 2 fixed
mask), f64 sparsity, int32 n, m, block_size, f64 damp; kind 2: u8
mask_in[n_out, n_in]; f64 W_out[n_out, n_in]; u8 mask_out[n_out, n_in].
"""
import struct
import sys

import numpy as np


def sparsegpt_ref(W, H, sparsity, prunen, prunem, blocksize, percdamp, fixed_mask=None):
    W = W.astype(np.float64).copy()
    H = H.copy()
    n_out, n_in = W.shape
    dead = np.diag(H) == 0
    H[dead, dead] = 1
    W[:, dead] = 0
    damp = percdamp * np.mean(np.diag(H))
    H[np.diag_indices(n_in)] += damp
    Hinv = np.linalg.cholesky(np.linalg.inv(H)).T  # torch.linalg.cholesky(cholesky_inverse(chol(H)), upper=True)
    M = np.zeros(W.shape, dtype=bool)
    for i1 in range(0, n_in, blocksize):
        i2 = min(i1 + blocksize, n_in)
        count = i2 - i1
        W1 = W[:, i1:i2].copy()
        Q1 = np.zeros_like(W1)
        Err1 = np.zeros_like(W1)
        Hinv1 = Hinv[i1:i2, i1:i2]
        if fixed_mask is not None:
            mask1 = fixed_mask[:, i1:i2].astype(bool)
        elif prunen == 0:
            tmp = W1 ** 2 / (np.diag(Hinv1).reshape((1, -1))) ** 2
            k = int(tmp.size * sparsity)
            order = np.argsort(tmp.flatten(), kind="stable")
            flat = np.zeros(tmp.size, dtype=bool)
            flat[order[:k]] = True
            mask1 = flat.reshape(tmp.shape)
        else:
            mask1 = np.zeros(W1.shape, dtype=bool)
        for i in range(count):
            w = W1[:, i]
            d = Hinv1[i, i]
            if fixed_mask is None and prunen != 0 and i % prunem == 0:
                tmp = W1[:, i:i + prunem] ** 2 / (np.diag(Hinv1)[i:i + prunem].reshape((1, -1))) ** 2
                idx = np.argsort(tmp, axis=1, kind="stable")[:, :prunen]
                for r in range(n_out):
                    mask1[r, i + idx[r]] = True
            q = w.copy()
            q[mask1[:, i]] = 0
            Q1[:, i] = q
            err1 = (w - q) / d
            W1[:, i:] -= np.outer(err1, Hinv1[i, i:])
            Err1[:, i] = err1
        W[:, i1:i2] = Q1
        M[:, i1:i2] = mask1
        W[:, i2:] -= Err1 @ Hinv[i1:i2, i2:]
    return W, M


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/data/transform/sparsegpt_ref.bin"
    rng = np.random.default_rng(38)
    n_out, n_in, n_tok = 12, 64, 300
    W = rng.standard_normal((n_out, n_in)).astype(np.float32)
    X = rng.standard_normal((n_tok, n_in)) * np.exp(rng.standard_normal(n_in))  # uneven column scales
    X[:, 5] = 0  # a dead input
    X[:, 9] += 0.8 * X[:, 10]  # correlated inputs: the error feedback matters
    H = X.T @ X
    fixed = rng.random((n_out, n_in)) < 0.5
    cases = [
        (0, 0.5, 0, 0, 16, 0.01, None),
        (0, 0.7, 0, 0, 32, 0.01, None),
        (1, 0.5, 2, 4, 16, 0.01, None),
        (1, 0.5, 4, 8, 16, 0.05, None),
        (2, 0.0, 0, 0, 16, 0.01, fixed),
    ]
    with open(out, "wb") as f:
        f.write(struct.pack("<3i", n_out, n_in, len(cases)))
        f.write(W.astype("<f4").tobytes())
        f.write(H.astype("<f8").tobytes())
        for kind, s, n, m, b, damp, mask in cases:
            Wo, Mo = sparsegpt_ref(W, H, s, n, m, b, damp, mask)
            f.write(struct.pack("<idiiid", kind, s, n, m, b, damp))
            if mask is not None:
                f.write(mask.astype(np.uint8).tobytes())
            f.write(Wo.astype("<f8").tobytes())
            f.write(Mo.astype(np.uint8).tobytes())
    print(f"wrote {out}: {len(cases)} cases, W [{n_out}, {n_in}]")


if __name__ == "__main__":
    main()
