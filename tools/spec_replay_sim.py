#!/usr/bin/env python3
"""Replay of n-gram speculation on a recorded greedy output (no model run).

Greedy output does not depend on speculation, so given the token ids of
prompt + output (ember tokenize of prompt text + `ember run` output) this
replays ember's n-gram lookup (ngram_proposer.cpp: longest suffix first,
most recent earlier occurrence) step by step, counts target steps and
verified positions, and models the cost of a step as 1 + c_verify * drafts
target decode steps. Prints the modelled speed-up for fixed k and for
--ngram-k-by-match (at most 2^(n-1) drafts for a match of n).

  tools/spec_replay_sim.py IDS_JSON PROMPT_IDS_JSON [N_GEN] [C_VERIFY...]
"""
import json
import sys


def lookup(t, n, max_k, min_n=1, max_n=4):
    for ln in range(min(max_n, n - 1), min_n - 1, -1):
        suf = t[n - ln:n]
        for s in range(n - ln - 1, -1, -1):
            if t[s:s + ln] == suf:
                fr = s + ln
                return t[fr:fr + min(max_k, n - fr)], ln
    return [], 0


def replay(t, p, policy, cv, n_gen):
    n, steps, cost, drafts, acc = p, 0, 0.0, 0, 0
    end = min(len(t), p + n_gen)
    while n < end:
        prop = policy(t, n)[:max(0, end - n - 1)]
        a = 0
        while a < len(prop) and t[n + a] == prop[a]:
            a += 1
        steps += 1
        cost += 1 + cv * len(prop)
        drafts += len(prop)
        acc += a
        n += a + 1
    return (end - p) / cost, steps, drafts, acc


def main():
    t = json.load(open(sys.argv[1]))
    p = len(json.load(open(sys.argv[2])))
    n_gen = int(sys.argv[3]) if len(sys.argv) > 3 else 128
    cvs = [float(x) for x in sys.argv[4:]] or [0.05, 0.15, 0.3]
    policies = {
        "k4": lambda t, n: lookup(t, n, 4)[0],
        "k8": lambda t, n: lookup(t, n, 8)[0],
        "k8 by-match": lambda t, n: (lambda r: r[0][:2 ** (r[1] - 1)] if r[1] else [])(lookup(t, n, 8)),
    }
    for cv in cvs:
        for name, pol in policies.items():
            s, steps, d, a = replay(t, p, pol, cv, n_gen)
            print(f"c_verify {cv:.2f} {name:12s}: modelled {s:.2f}x, {steps} steps, {a}/{d} drafts accepted")


if __name__ == "__main__":
    main()
