#!/usr/bin/env python3
"""Tests `ember serve` through the official `openai` Python client.

Covers /v1/models, chat and text completions (streaming and not), n > 1,
stop strings, max_tokens, logprobs, seeded sampling, streaming == non-
streaming under greedy decoding, usage numbers against /tokenize, the final
usage chunk of stream_options.include_usage, echo, prompts given as token
ids and as a list of strings, and the client-visible error types.

  python3 tests/server/openai_client_test.py --base-url http://127.0.0.1:PORT --api-key KEY

Run by tests/server/server_test.sh. Exit status 0 passed, 1 failed,
77 skipped (the openai package is missing). The model is a tiny base model,
so the checks compare outputs with each other, never with expected text.
"""

import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import server_util  # noqa: E402

try:
    import openai
except ImportError:
    print("openai package missing: skipped")
    sys.exit(77)

PROMPT = "The capital of France is"
CHAT = [{"role": "user", "content": "Name three colors of the rainbow."}]
GREEDY = {"temperature": 0.0}
NO_EOS = {"ignore_eos": True}


def test_models(client, srv):
    models = client.models.list()
    ids = [m.id for m in models.data]
    assert len(ids) >= 1, "no models listed"
    assert ids[0] == srv.model_id()
    m = models.data[0]
    assert m.object == "model", m
    assert isinstance(m.created, int) and m.created > 0, m
    assert isinstance(m.owned_by, str) and m.owned_by, m
    # Retrieving one model by id.
    st, js = srv.get_json("/v1/models")
    assert st == 200 and js["object"] == "list", js


def test_chat_basic(client, srv):
    r = client.chat.completions.create(model=srv.model_id(), messages=CHAT, max_tokens=8,
                                       **GREEDY)
    assert r.object == "chat.completion", r.object
    assert r.id.startswith("chatcmpl-"), r.id
    assert r.model == srv.model_id(), r.model
    assert len(r.choices) == 1
    c = r.choices[0]
    assert c.index == 0
    assert c.message.role == "assistant"
    assert isinstance(c.message.content, str)
    assert c.finish_reason in ("stop", "length"), c.finish_reason
    assert r.usage.completion_tokens <= 8
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    # The same request again gives the same text (greedy).
    r2 = client.chat.completions.create(model=srv.model_id(), messages=CHAT, max_tokens=8,
                                        **GREEDY)
    assert r2.choices[0].message.content == c.message.content
    assert r2.id != r.id, "response ids must be unique"


def test_completion_basic(client, srv):
    r = client.completions.create(model=srv.model_id(), prompt=PROMPT, max_tokens=8, **GREEDY)
    assert r.object == "text_completion", r.object
    assert r.id.startswith("cmpl-"), r.id
    assert len(r.choices) == 1 and r.choices[0].index == 0
    assert isinstance(r.choices[0].text, str) and r.choices[0].text
    assert r.choices[0].finish_reason in ("stop", "length")
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def collect_chat_stream(client, srv, **kw):
    chunks = list(client.chat.completions.create(model=srv.model_id(), stream=True, **kw))
    text, finish, roles, ids = "", None, [], set()
    for ch in chunks:
        ids.add(ch.id)
        assert ch.object == "chat.completion.chunk", ch.object
        for c in ch.choices:
            assert c.index == 0
            if c.delta.role:
                roles.append(c.delta.role)
            if c.delta.content:
                text += c.delta.content
            if c.finish_reason:
                assert finish is None, "two finish_reasons"
                finish = c.finish_reason
    assert len(ids) == 1, f"chunks carry different ids: {ids}"
    assert roles and roles[0] == "assistant", f"no assistant role delta: {roles}"
    return text, finish, chunks


def collect_completion_stream(client, srv, **kw):
    chunks = list(client.completions.create(model=srv.model_id(), stream=True, **kw))
    texts, finishes = {}, {}
    for ch in chunks:
        assert ch.object == "text_completion", ch.object
        for c in ch.choices:
            texts[c.index] = texts.get(c.index, "") + (c.text or "")
            if c.finish_reason:
                assert c.index not in finishes, "two finish_reasons"
                finishes[c.index] = c.finish_reason
    return texts, finishes, chunks


def test_stream_equals_nonstream_chat(client, srv):
    kw = dict(messages=CHAT, max_tokens=16, **GREEDY)
    r = client.chat.completions.create(model=srv.model_id(), **kw)
    text, finish, chunks = collect_chat_stream(client, srv, **kw)
    assert len(chunks) >= 2, f"only {len(chunks)} chunks"
    assert text == r.choices[0].message.content, f"{text!r} != {r.choices[0].message.content!r}"
    assert finish == r.choices[0].finish_reason, (finish, r.choices[0].finish_reason)


def test_stream_equals_nonstream_completion(client, srv):
    kw = dict(prompt=PROMPT, max_tokens=16, extra_body=NO_EOS, **GREEDY)
    r = client.completions.create(model=srv.model_id(), **kw)
    texts, finishes, chunks = collect_completion_stream(client, srv, **kw)
    assert len(chunks) >= 2, f"only {len(chunks)} chunks"
    assert texts.get(0) == r.choices[0].text, f"{texts.get(0)!r} != {r.choices[0].text!r}"
    assert finishes.get(0) == "length" == r.choices[0].finish_reason, (finishes, r.choices[0])


def test_n2(client, srv):
    # top_p < 1 keeps sampling cheap; plain temperature sampling is covered by test_seed.
    kw = dict(model=srv.model_id(), prompt=PROMPT, max_tokens=12, n=2, temperature=1.0, top_p=0.95,
              seed=1234, extra_body=NO_EOS)
    r = client.completions.create(**kw)
    assert sorted(c.index for c in r.choices) == [0, 1], [c.index for c in r.choices]
    assert r.usage.completion_tokens == 24, r.usage
    r2 = client.completions.create(**kw)
    t1 = {c.index: c.text for c in r.choices}
    t2 = {c.index: c.text for c in r2.choices}
    assert t1 == t2, f"n=2 with a seed is not reproducible: {t1} vs {t2}"
    # Chat with n=2.
    rc = client.chat.completions.create(model=srv.model_id(), messages=CHAT, max_tokens=8, n=2,
                                        temperature=1.0, top_p=0.95, seed=99)
    assert sorted(c.index for c in rc.choices) == [0, 1]
    rc2 = client.chat.completions.create(model=srv.model_id(), messages=CHAT, max_tokens=8, n=2,
                                         temperature=1.0, top_p=0.95, seed=99)
    assert [c.message.content for c in sorted(rc.choices, key=lambda c: c.index)] == \
        [c.message.content for c in sorted(rc2.choices, key=lambda c: c.index)]
    # Streaming with n=2: both indices appear, each with a finish_reason, and
    # the texts equal the non-streaming ones.
    texts, finishes, _ = collect_completion_stream(client, srv, **{k: v for k, v in kw.items()
                                                                   if k != "model"})
    assert texts == t1, f"streamed n=2 texts differ: {texts} vs {t1}"
    assert finishes == {0: "length", 1: "length"}, finishes
    # Streaming chat with n=2: deltas for both indices, each ending once, and
    # a final usage chunk counting both.
    chunks = list(client.chat.completions.create(
        model=srv.model_id(), messages=CHAT, max_tokens=8, n=2, temperature=1.0, top_p=0.95, seed=99,
        stream=True, stream_options={"include_usage": True}))
    ctexts, cfin = {}, {}
    for ch in chunks:
        for c in ch.choices:
            ctexts[c.index] = ctexts.get(c.index, "") + (c.delta.content or "")
            if c.finish_reason:
                assert c.index not in cfin, "two finish_reasons"
                cfin[c.index] = c.finish_reason
    assert sorted(cfin) == [0, 1], cfin
    assert ctexts == {c.index: c.message.content for c in rc.choices}, (ctexts, rc.choices)
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == \
        rc.usage.completion_tokens, (chunks[-1].usage, rc.usage)


def pick_stop(text):
    """A substring of `text` starting after its first few characters (so the
    cut output is not empty) made of whole words."""
    words = text.split(" ")
    # Try each word from the third on; a word that occurs first at a position > 0.
    for w in words[2:]:
        w = w.strip()
        if len(w) >= 3 and text.find(w) > 0:
            return w
    for L in (4, 3, 2):
        for i in range(3, len(text) - L):
            s = text[i:i + L]
            if text.find(s) == i:
                return s
    raise AssertionError(f"no usable stop string in {text!r}")


def test_stop(client, srv):
    base = client.completions.create(model=srv.model_id(), prompt=PROMPT, max_tokens=24,
                                     extra_body=NO_EOS, **GREEDY).choices[0].text
    stop = pick_stop(base)
    expected = base[:base.find(stop)]
    r = client.completions.create(model=srv.model_id(), prompt=PROMPT, max_tokens=24, stop=[stop],
                                  extra_body=NO_EOS, **GREEDY)
    c = r.choices[0]
    assert stop not in c.text, f"stop {stop!r} in output {c.text!r}"
    assert c.finish_reason == "stop", c.finish_reason
    assert c.text == expected, f"stop={stop!r}: {c.text!r} != {expected!r} (greedy: {base!r})"
    # A single string (not a list) works too, and streaming gives the same cut.
    texts, finishes, _ = collect_completion_stream(client, srv, prompt=PROMPT, max_tokens=24,
                                                   stop=stop, extra_body=NO_EOS, **GREEDY)
    assert texts.get(0, "") == expected, f"streamed {texts!r} != {expected!r}"
    assert finishes.get(0) == "stop", finishes
    # Several stop strings: the earliest occurrence wins.
    second = pick_stop(expected) if len(expected.split(" ")) > 3 else None
    if second:
        exp2 = expected[:expected.find(second)]
        r = client.completions.create(model=srv.model_id(), prompt=PROMPT, max_tokens=24,
                                      stop=[stop, second], extra_body=NO_EOS, **GREEDY)
        assert r.choices[0].text == exp2, f"{r.choices[0].text!r} != {exp2!r}"
    # Chat: stop on a substring of the greedy answer.
    cbase = client.chat.completions.create(model=srv.model_id(), messages=CHAT, max_tokens=24,
                                           extra_body=NO_EOS, **GREEDY).choices[0].message.content
    cstop = pick_stop(cbase)
    rc = client.chat.completions.create(model=srv.model_id(), messages=CHAT, max_tokens=24,
                                        stop=[cstop], extra_body=NO_EOS, **GREEDY)
    assert rc.choices[0].message.content == cbase[:cbase.find(cstop)], \
        f"chat stop {cstop!r}: {rc.choices[0].message.content!r} (greedy {cbase!r})"
    assert rc.choices[0].finish_reason == "stop"
    text, finish, _ = collect_chat_stream(client, srv, messages=CHAT, max_tokens=24, stop=[cstop],
                                          extra_body=NO_EOS, **GREEDY)
    assert text == cbase[:cbase.find(cstop)] and finish == "stop", (text, finish)


def test_stop_across_tokens(client, srv):
    # A stop string spanning a token boundary (end of one token + start of the next).
    base = client.completions.create(model=srv.model_id(), prompt=PROMPT, max_tokens=24, logprobs=1,
                                     extra_body=NO_EOS, **GREEDY).choices[0]
    toks, text = base.logprobs.tokens, base.text
    stop = None
    for i in range(1, len(toks) - 1):
        if len(toks[i]) >= 3 and len(toks[i + 1]) >= 3:
            cand = toks[i][-2:] + toks[i + 1][:2]
            if text.find(cand) > 0:
                stop = cand
                break
    assert stop, f"no two adjacent multi-character tokens in {toks}"
    expected = text[:text.find(stop)]
    r = client.completions.create(model=srv.model_id(), prompt=PROMPT, max_tokens=24, stop=stop,
                                  extra_body=NO_EOS, **GREEDY)
    assert r.choices[0].text == expected and r.choices[0].finish_reason == "stop", \
        f"stop {stop!r}: {r.choices[0].text!r} != {expected!r}"
    texts, finishes, chunks = collect_completion_stream(client, srv, prompt=PROMPT, max_tokens=24,
                                                        stop=stop, extra_body=NO_EOS, **GREEDY)
    assert texts.get(0) == expected and finishes.get(0) == "stop", (texts, finishes, stop)


def test_utf8_output(client, srv):
    # Characters the tokenizer spells with byte-fallback tokens (several tokens
    # per character): streamed pieces must never split a character, and the
    # text must equal the non-streamed text.
    for prompt in ("\U0001F9A9" * 6, "".join(chr(0x13000 + i) for i in range(5)), "\uA66E" * 4):
        kw = dict(prompt=prompt, max_tokens=12, extra_body=NO_EOS, **GREEDY)
        full = client.completions.create(model=srv.model_id(), **kw).choices[0].text
        assert "\ufffd" not in full, f"replacement character in {full!r}"
        texts, _, _ = collect_completion_stream(client, srv, **kw)
        assert texts.get(0) == full, f"streamed {texts.get(0)!r} != {full!r}"
        msgs = [{"role": "user", "content": prompt}]
        cfull = client.chat.completions.create(model=srv.model_id(), messages=msgs, max_tokens=12,
                                               extra_body=NO_EOS, **GREEDY).choices[0].message.content
        ctext, _, _ = collect_chat_stream(client, srv, messages=msgs, max_tokens=12,
                                          extra_body=NO_EOS, **GREEDY)
        assert ctext == cfull and "\ufffd" not in cfull, (ctext, cfull)
        # A stop string that is one of those characters, found after the start.
        for ch in dict.fromkeys(full):
            if full.find(ch) > 0:
                r = client.completions.create(model=srv.model_id(), stop=[ch], **kw).choices[0]
                assert r.text == full[:full.find(ch)] and r.finish_reason == "stop", (ch, r.text, full)
                texts, _, _ = collect_completion_stream(client, srv, stop=[ch], **kw)
                assert texts.get(0) == full[:full.find(ch)], (ch, texts, full)
                break


def test_max_tokens(client, srv):
    for mt in (1, 5, 17):
        r = client.completions.create(model=srv.model_id(), prompt=PROMPT, max_tokens=mt,
                                      extra_body=NO_EOS, **GREEDY)
        assert r.usage.completion_tokens == mt, (mt, r.usage)
        assert r.choices[0].finish_reason == "length", r.choices[0].finish_reason
    r = client.chat.completions.create(model=srv.model_id(), messages=CHAT,
                                       max_completion_tokens=6, extra_body=NO_EOS, **GREEDY)
    assert r.usage.completion_tokens == 6 and r.choices[0].finish_reason == "length", r
    # Prefixes: greedy with fewer tokens gives a prefix of the longer output.
    short = client.completions.create(model=srv.model_id(), prompt=PROMPT, max_tokens=4,
                                      extra_body=NO_EOS, **GREEDY).choices[0].text
    long = client.completions.create(model=srv.model_id(), prompt=PROMPT, max_tokens=12,
                                     extra_body=NO_EOS, **GREEDY).choices[0].text
    assert long.startswith(short), f"{short!r} is not a prefix of {long!r}"


def test_chat_logprobs(client, srv):
    r = client.chat.completions.create(model=srv.model_id(), messages=CHAT, max_tokens=8,
                                       logprobs=True, top_logprobs=3, extra_body=NO_EOS, **GREEDY)
    c = r.choices[0]
    content = c.logprobs.content
    assert len(content) == r.usage.completion_tokens == 8, (len(content), r.usage)
    assert "".join(e.token for e in content) == c.message.content, \
        f"tokens {[e.token for e in content]} do not spell {c.message.content!r}"
    for e in content:
        assert isinstance(e.token, str)
        assert e.logprob <= 0 and math.isfinite(e.logprob), e
        assert len(e.top_logprobs) == 3, e
        lps = [t.logprob for t in e.top_logprobs]
        assert lps == sorted(lps, reverse=True), f"top_logprobs not sorted: {lps}"
        assert e.top_logprobs[0].token == e.token, (e.token, e.top_logprobs[0].token)
        assert abs(e.top_logprobs[0].logprob - e.logprob) < 1e-5, e
        if e.bytes is not None:
            try:
                assert bytes(e.bytes).decode("utf-8") == e.token, (e.bytes, e.token)
            except UnicodeDecodeError:
                pass  # a token holding part of a UTF-8 character
        # Probabilities of distinct tokens sum to at most 1.
        assert sum(math.exp(x) for x in lps) <= 1.0 + 1e-4, lps
    # logprobs=True without top_logprobs: entries with empty top lists.
    r = client.chat.completions.create(model=srv.model_id(), messages=CHAT, max_tokens=4,
                                       logprobs=True, **GREEDY)
    for e in r.choices[0].logprobs.content:
        assert e.logprob <= 0 and len(e.top_logprobs or []) == 0, e
    # No logprobs requested: none reported.
    r = client.chat.completions.create(model=srv.model_id(), messages=CHAT, max_tokens=4, **GREEDY)
    assert r.choices[0].logprobs is None, r.choices[0].logprobs
    # Streaming chunks carry the same logprobs.
    chunks = list(client.chat.completions.create(
        model=srv.model_id(), messages=CHAT, max_tokens=8, logprobs=True, top_logprobs=3,
        extra_body=NO_EOS, stream=True, **GREEDY))
    streamed = [e for ch in chunks for c in ch.choices if c.logprobs and c.logprobs.content
                for e in c.logprobs.content]
    assert [e.token for e in streamed] == [e.token for e in content], "streamed logprob tokens differ"
    assert all(abs(a.logprob - b.logprob) < 1e-5 for a, b in zip(streamed, content))


def test_completion_logprobs(client, srv):
    r = client.completions.create(model=srv.model_id(), prompt=PROMPT, max_tokens=8, logprobs=3,
                                  extra_body=NO_EOS, **GREEDY)
    c = r.choices[0]
    lp = c.logprobs
    n = r.usage.completion_tokens
    assert n == 8
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == n, lp
    assert "".join(lp.tokens) == c.text, f"{lp.tokens} do not spell {c.text!r}"
    for i in range(n):
        assert lp.token_logprobs[i] <= 0, lp.token_logprobs[i]
        top = lp.top_logprobs[i]
        assert len(top) == 3, f"top_logprobs[{i}] has {len(top)} entries: {top}"
        assert lp.tokens[i] in top, (lp.tokens[i], top)
        assert abs(max(top.values()) - lp.token_logprobs[i]) < 1e-5, (top, lp.token_logprobs[i])
        if i + 1 < n:
            assert lp.text_offset[i + 1] - lp.text_offset[i] == len(lp.tokens[i]), lp.text_offset
    # logprobs=0: sampled token only, no alternatives beyond it.
    r = client.completions.create(model=srv.model_id(), prompt=PROMPT, max_tokens=3, logprobs=0,
                                  **GREEDY)
    lp = r.choices[0].logprobs
    assert lp is not None and len(lp.token_logprobs) == r.usage.completion_tokens, lp
    # Streaming: the same tokens and logprobs.
    chunks = list(client.completions.create(model=srv.model_id(), prompt=PROMPT, max_tokens=8,
                                            logprobs=3, extra_body=NO_EOS, stream=True, **GREEDY))
    toks = [t for ch in chunks for cc in ch.choices if cc.logprobs for t in cc.logprobs.tokens]
    assert toks == c.logprobs.tokens, f"{toks} != {c.logprobs.tokens}"


def test_seed(client, srv):
    def gen(seed, chat=False, top_p=1.0, max_tokens=16):
        kw = dict(model=srv.model_id(), max_tokens=max_tokens, temperature=1.0, top_p=top_p,
                  seed=seed, extra_body=NO_EOS)
        if chat:
            return client.chat.completions.create(messages=CHAT, **kw).choices[0].message.content
        return client.completions.create(prompt=PROMPT, **kw).choices[0].text
    # Plain temperature sampling over the whole vocabulary.
    a, b = gen(42, max_tokens=8), gen(42, max_tokens=8)
    assert a == b, f"same seed, different text: {a!r} vs {b!r}"
    c = gen(43, max_tokens=8)
    # With top_p (a different sampler path).
    d, e = gen(42, top_p=0.95), gen(42, top_p=0.95)
    assert d == e, f"same seed, different text (top_p): {d!r} vs {e!r}"
    others = {gen(s, top_p=0.95) for s in (43, 44)}
    assert a != c or len(others | {d}) >= 2, "different seeds all gave the same text"
    assert len(others | {d}) >= 2, f"different seeds all gave {d!r} (top_p)"
    assert gen(7, chat=True, top_p=0.95) == gen(7, chat=True, top_p=0.95), \
        "chat: same seed, different text"
    # The seed still applies with top_k / min_p.
    kw = dict(model=srv.model_id(), prompt=PROMPT, max_tokens=12, temperature=0.9, top_p=0.9,
              seed=5, extra_body={"ignore_eos": True, "top_k": 20, "min_p": 0.02})
    t1 = client.completions.create(**kw).choices[0].text
    t2 = client.completions.create(**kw).choices[0].text
    assert t1 == t2, (t1, t2)


def test_usage_matches_tokenize(client, srv):
    r = client.completions.create(model=srv.model_id(), prompt=PROMPT, max_tokens=5,
                                  extra_body=NO_EOS, **GREEDY)
    tok = srv.tokenize(prompt=PROMPT)
    assert r.usage.prompt_tokens == tok["count"] == len(tok["tokens"]), (r.usage, tok)
    assert r.usage.completion_tokens == 5
    msgs = [{"role": "system", "content": "You are terse."}] + CHAT
    rc = client.chat.completions.create(model=srv.model_id(), messages=msgs, max_tokens=5,
                                        extra_body=NO_EOS, **GREEDY)
    tokc = srv.tokenize(messages=msgs)
    assert rc.usage.prompt_tokens == tokc["count"], (rc.usage, tokc)
    assert tokc["max_model_len"] == srv.max_model_len()
    # /detokenize inverts /tokenize.
    st, js = srv.post_json("/detokenize", {"tokens": srv.tokenize(prompt=PROMPT,
                                                                 add_special_tokens=False)["tokens"]})
    assert st == 200 and js["prompt"] == PROMPT, (st, js)


def test_include_usage(client, srv):
    chunks = list(client.completions.create(model=srv.model_id(), prompt=PROMPT, max_tokens=6,
                                            stream=True, stream_options={"include_usage": True},
                                            extra_body=NO_EOS, **GREEDY))
    last = chunks[-1]
    assert last.usage is not None, "no usage in the last chunk"
    assert last.choices == [], f"usage chunk has choices: {last.choices}"
    assert last.usage.completion_tokens == 6, last.usage
    assert last.usage.prompt_tokens == srv.tokenize(prompt=PROMPT)["count"]
    assert all(ch.usage is None for ch in chunks[:-1]), "usage before the final chunk"
    cchunks = list(client.chat.completions.create(model=srv.model_id(), messages=CHAT,
                                                  max_tokens=6, stream=True,
                                                  stream_options={"include_usage": True},
                                                  extra_body=NO_EOS, **GREEDY))
    assert cchunks[-1].usage is not None and cchunks[-1].choices == []
    assert cchunks[-1].usage.completion_tokens == 6
    assert cchunks[-1].usage.prompt_tokens == srv.tokenize(messages=CHAT)["count"]
    # Without include_usage there is no usage chunk.
    plain = list(client.completions.create(model=srv.model_id(), prompt=PROMPT, max_tokens=3,
                                           stream=True, **GREEDY))
    assert all(ch.usage is None for ch in plain), "usage sent without include_usage"


def test_echo(client, srv):
    plain = client.completions.create(model=srv.model_id(), prompt=PROMPT, max_tokens=6,
                                      extra_body=NO_EOS, **GREEDY).choices[0].text
    r = client.completions.create(model=srv.model_id(), prompt=PROMPT, max_tokens=6, echo=True,
                                  extra_body=NO_EOS, **GREEDY)
    assert r.choices[0].text == PROMPT + plain, f"{r.choices[0].text!r} != {PROMPT + plain!r}"
    # echo with max_tokens=0 returns just the prompt (OpenAI's way to score a prompt).
    r0 = client.completions.create(model=srv.model_id(), prompt=PROMPT, max_tokens=0, echo=True,
                                   logprobs=1, **GREEDY)
    assert r0.choices[0].text == PROMPT, r0.choices[0].text
    assert r0.usage.completion_tokens == 0, r0.usage
    # echo + logprobs: the prompt's tokens come first (the first has no logprob).
    n_prompt = srv.tokenize(prompt=PROMPT, add_special_tokens=False)["count"]
    r = client.completions.create(model=srv.model_id(), prompt=PROMPT, max_tokens=6, echo=True,
                                  logprobs=1, extra_body=NO_EOS, **GREEDY)
    lp = r.choices[0].logprobs
    assert r.choices[0].text == PROMPT + plain, r.choices[0].text
    assert len(lp.tokens) in (n_prompt + 6, n_prompt + 7), (len(lp.tokens), n_prompt)  # with/without BOS
    assert "".join(lp.tokens).endswith(PROMPT + plain), lp.tokens
    assert lp.token_logprobs[0] is None, lp.token_logprobs[:2]
    assert all(x is not None and x <= 0 for x in lp.token_logprobs[1:]), lp.token_logprobs
    assert len(lp.text_offset) == len(lp.tokens)
    # Streaming with echo: the prompt comes first.
    texts, _, _ = collect_completion_stream(client, srv, prompt=PROMPT, max_tokens=6, echo=True,
                                            extra_body=NO_EOS, **GREEDY)
    assert texts.get(0) == PROMPT + plain, f"streamed echo {texts.get(0)!r}"


def test_token_prompts(client, srv):
    ids = srv.tokenize(prompt=PROMPT)["tokens"]
    ref = client.completions.create(model=srv.model_id(), prompt=PROMPT, max_tokens=8,
                                    extra_body=NO_EOS, **GREEDY)
    r = client.completions.create(model=srv.model_id(), prompt=ids, max_tokens=8,
                                  extra_body=NO_EOS, **GREEDY)
    assert r.choices[0].text == ref.choices[0].text, (r.choices[0].text, ref.choices[0].text)
    assert r.usage.prompt_tokens == len(ids)
    # Two prompts as strings -> two choices, each equal to its own single run.
    p2 = "Once upon a time"
    ref2 = client.completions.create(model=srv.model_id(), prompt=p2, max_tokens=8,
                                     extra_body=NO_EOS, **GREEDY).choices[0].text
    r = client.completions.create(model=srv.model_id(), prompt=[PROMPT, p2], max_tokens=8,
                                  extra_body=NO_EOS, **GREEDY)
    got = {c.index: c.text for c in r.choices}
    assert got == {0: ref.choices[0].text, 1: ref2}, got
    assert r.usage.completion_tokens == 16, r.usage
    assert r.usage.prompt_tokens == len(ids) + srv.tokenize(prompt=p2)["count"], r.usage
    # Two prompts as token id lists.
    ids2 = srv.tokenize(prompt=p2)["tokens"]
    r = client.completions.create(model=srv.model_id(), prompt=[ids, ids2], max_tokens=8,
                                  extra_body=NO_EOS, **GREEDY)
    assert {c.index: c.text for c in r.choices} == got
    # Streamed, the two prompts keep their indices.
    texts, finishes, _ = collect_completion_stream(client, srv, prompt=[PROMPT, p2], max_tokens=8,
                                                   extra_body=NO_EOS, **GREEDY)
    assert texts == got and finishes == {0: "length", 1: "length"}, (texts, finishes)
    # Two prompts with n=2: four choices, indices 0..3.
    r = client.completions.create(model=srv.model_id(), prompt=[PROMPT, p2], max_tokens=4, n=2,
                                  **GREEDY)
    assert sorted(c.index for c in r.choices) == [0, 1, 2, 3], [c.index for c in r.choices]


def test_errors(client, srv):
    try:
        client.completions.create(model=srv.model_id(), prompt=PROMPT, max_tokens=4,
                                  temperature=-1)
        raise AssertionError("temperature=-1 accepted")
    except openai.BadRequestError as e:
        assert e.status_code == 400
    bad = openai.OpenAI(base_url=srv.base_url + "/v1", api_key="wrong-" + (srv.api_key or "x"),
                        max_retries=0)
    if srv.api_key:
        try:
            bad.models.list()
            raise AssertionError("wrong API key accepted")
        except openai.AuthenticationError as e:
            assert e.status_code == 401
    try:
        client.completions.create(model=srv.model_id(), prompt=PROMPT,
                                  max_tokens=srv.max_model_len() + 1)
        raise AssertionError("max_tokens > max_model_len accepted")
    except openai.BadRequestError as e:
        assert e.status_code == 400


def test_unknown_model(client, srv):
    # OpenAI and vLLM answer 404 model_not_found for a model the server does not serve.
    for call in (lambda: client.completions.create(model="no-such-model", prompt=PROMPT, max_tokens=2),
                 lambda: client.chat.completions.create(model="no-such-model", messages=CHAT,
                                                        max_tokens=2)):
        try:
            call()
            raise AssertionError("unknown model accepted")
        except openai.NotFoundError as e:
            assert e.status_code == 404
    # No model field at all is fine (the served model is used).
    st, js = srv.post_json("/v1/completions", {"prompt": PROMPT, "max_tokens": 2})
    assert st == 200, (st, js)


def test_penalties_and_stop_tokens(client, srv):
    kw = dict(model=srv.model_id(), prompt=PROMPT, max_tokens=16, extra_body=NO_EOS, **GREEDY)
    base = client.completions.create(logprobs=1, **kw)
    btext = base.choices[0].text
    words = btext.split()
    assert len(set(words)) < len(words), f"greedy output has no repeats to penalize: {btext!r}"
    for pen in ({"frequency_penalty": 1.5}, {"presence_penalty": 1.5},
                {"extra_body": {"ignore_eos": True, "repetition_penalty": 1.5}}):
        args = dict(kw)
        args.update(pen)
        t1 = client.completions.create(**args).choices[0].text
        if "frequency_penalty" in pen:
            assert client.completions.create(**args).choices[0].text == t1, f"{pen}: not deterministic"
        assert t1 != btext, f"{pen} did not change a repetitive greedy output {btext!r}"
    # stop_token_ids: stop at the id of the 4th generated token.
    toks = base.choices[0].logprobs.tokens
    ids = srv.tokenize(prompt=PROMPT + "".join(toks[:4]))["tokens"]
    stop_id = ids[-1]
    assert srv.post_json("/detokenize", {"tokens": [stop_id]})[1]["prompt"] == toks[3], \
        "cannot map the 4th token back to its id"
    first = next(i for i, t in enumerate(toks) if t == toks[3])
    args = dict(kw)
    args["extra_body"] = {"ignore_eos": True, "stop_token_ids": [stop_id]}
    r = client.completions.create(**args)
    c = r.choices[0]
    assert c.finish_reason == "stop", c.finish_reason
    assert r.usage.completion_tokens == first + 1, (r.usage, first)
    # vLLM keeps a (non-special) stop token in the text; accept either convention.
    assert c.text in ("".join(toks[:first + 1]), "".join(toks[:first])), (c.text, toks[:first + 1])
    # user is accepted.
    assert client.completions.create(user="test-user", **kw).choices[0].text == btext


def test_idle_after(srv):
    srv.wait_idle(timeout=5)


def main():
    args = server_util.parse_args(__doc__)
    srv = server_util.Server(args.base_url, args.api_key, args.pid)
    client = openai.OpenAI(base_url=srv.base_url + "/v1", api_key=args.api_key or "none",
                           max_retries=0, timeout=120)
    checks = server_util.Checks("openai_client", args.only)
    for name, fn in [
        ("models_list", test_models),
        ("chat_basic", test_chat_basic),
        ("completion_basic", test_completion_basic),
        ("stream_equals_nonstream_chat", test_stream_equals_nonstream_chat),
        ("stream_equals_nonstream_completion", test_stream_equals_nonstream_completion),
        ("n2_seeded", test_n2),
        ("stop_strings", test_stop),
        ("stop_across_tokens", test_stop_across_tokens),
        ("utf8_output", test_utf8_output),
        ("max_tokens", test_max_tokens),
        ("chat_logprobs", test_chat_logprobs),
        ("completion_logprobs", test_completion_logprobs),
        ("seed_reproducible", test_seed),
        ("usage_matches_tokenize", test_usage_matches_tokenize),
        ("stream_include_usage", test_include_usage),
        ("echo", test_echo),
        ("token_and_list_prompts", test_token_prompts),
        ("client_errors", test_errors),
        ("unknown_model_404", test_unknown_model),
        ("penalties_and_stop_token_ids", test_penalties_and_stop_tokens),
    ]:
        checks.run(name, fn, client, srv)
    checks.run("idle_after", test_idle_after, srv)
    checks.finish()


if __name__ == "__main__":
    main()
