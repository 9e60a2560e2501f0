#!/usr/bin/env python3
"""Tests reasoning output and thinking budgets of `ember serve` through the official `openai` client.

The server runs the default model with DeepSeek-R1-Distill-Qwen's chat
template (--chat-template tests/data/template/templates/deepseek-ai-...jinja),
whose generation prompt opens the thinking section ("<think>\\n"), with
--reasoning-budget 12 and --reasoning-budget-message " Time is up." Gemma
3 270M never ends its thinking by itself, so every answer shows the budget at
work: exactly N thinking tokens, the message and "</think>" forced, then the
answer. Checked: message.reasoning_content and message.reasoning (and the
delta fields, streamed deltas concatenating to the non-streamed answer),
usage.completion_tokens_details.reasoning_tokens, per-request budgets
(thinking_budget, reasoning.max_tokens, reasoning_effort, reasoning.enabled),
the answer reserve under a small max_tokens, reasoning_format "none",
reasoning.exclude, structured output and tool calls after thinking (the
template has no tool format: the generic one), the same output with
logprobs (forced tokens taken one by one through the mask) as without, and
prefix caching across turns when the template drops earlier thinking.

  python3 tests/server/reasoning_test.py --base-url http://127.0.0.1:PORT --api-key KEY

With --harmony the server runs gpt-oss's template instead (the harmony
format; the default model spells its markers in text tokens): a forced tool
call (tool_choice "required", a named function) goes through the analysis
message and comes out as a call whose arguments validate, streamed and not
alike, and structured output lands in the final channel.

Run by tests/server/server_test.sh. Exit 0 passed, 1 failed, 77 skipped
(openai or jsonschema missing).
"""

import concurrent.futures
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import server_util  # noqa: E402

try:
    import jsonschema
    import openai
except ImportError as e:
    print(f"{e.name} package missing: skipped")
    sys.exit(77)

BUDGET = 12          # the server's --reasoning-budget
MESSAGE = " Time is up."  # the server's --reasoning-budget-message
CHAT = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]


def close_tokens(srv):
    """Tokens of the forced end of thinking: the message and </think>."""
    return len(srv.tokenize(prompt=MESSAGE + "</think>", add_special_tokens=False)["tokens"])


def extra(msg, name):
    """A field the openai client does not model (reasoning_content, reasoning)."""
    v = getattr(msg, name, None)
    if v is None and getattr(msg, "model_extra", None):
        v = msg.model_extra.get(name)
    return v


def ask(client, srv, **kw):
    args = dict(model=srv.model_id(), messages=CHAT, max_tokens=48, temperature=0)
    args.update(kw)
    return client.chat.completions.create(**args)


def check_budget_answer(r, srv, n):
    c = r.choices[0]
    reasoning = extra(c.message, "reasoning_content")
    assert reasoning and reasoning == extra(c.message, "reasoning"), c.message
    assert reasoning.endswith(MESSAGE.strip()), reasoning
    assert "</think>" not in reasoning, c.message  # (the answer is the model's: a base model may echo anything)
    assert c.message.content, f"empty content after thinking: {c.message}"
    details = r.usage.completion_tokens_details
    assert details is not None and details.reasoning_tokens == n + close_tokens(srv), (details, n)
    return reasoning, c.message.content


def stream_parts(client, srv, **kw):
    args = dict(model=srv.model_id(), messages=CHAT, max_tokens=48, temperature=0, stream=True,
                stream_options={"include_usage": True})
    args.update(kw)
    reasoning, reasoning_alias, content, usage, finish = "", "", "", None, None
    calls = {}
    for chunk in client.chat.completions.create(**args):
        if chunk.usage:
            usage = chunk.usage
        for ch in chunk.choices:
            d = ch.delta
            reasoning += extra(d, "reasoning_content") or ""
            reasoning_alias += extra(d, "reasoning") or ""
            content += d.content or ""
            for t in d.tool_calls or []:
                cur = calls.setdefault(t.index, {"name": "", "arguments": ""})
                cur["name"] += t.function.name or ""
                cur["arguments"] += t.function.arguments or ""
            if ch.finish_reason:
                finish = ch.finish_reason
    assert reasoning == reasoning_alias, (reasoning, reasoning_alias)
    return reasoning, content, usage, finish, calls


def test_server_budget_plain_and_stream(client, srv):
    r = ask(client, srv)
    reasoning, content = check_budget_answer(r, srv, BUDGET)
    s_reasoning, s_content, usage, finish, _ = stream_parts(client, srv)
    assert (s_reasoning, s_content) == (reasoning, content), ((s_reasoning, s_content), (reasoning, content))
    assert usage.completion_tokens_details.reasoning_tokens == r.usage.completion_tokens_details.reasoning_tokens
    assert finish == r.choices[0].finish_reason


def test_request_budgets(client, srv):
    # thinking_budget, reasoning.max_tokens and an effort level (a share of max_tokens).
    check_budget_answer(ask(client, srv, extra_body={"thinking_budget": 4}), srv, 4)
    check_budget_answer(ask(client, srv, extra_body={"reasoning": {"max_tokens": 20}}), srv, 20)
    check_budget_answer(ask(client, srv, max_tokens=60, reasoning_effort="low"), srv, 12)
    # Thinking off: the end is forced at once.
    for kw in ({"reasoning_effort": "none"}, {"extra_body": {"reasoning": {"enabled": False}}}):
        r = ask(client, srv, **kw)
        c = r.choices[0]
        assert c.message.content and r.usage.completion_tokens_details.reasoning_tokens == close_tokens(srv), r
        assert (extra(c.message, "reasoning_content") or "") == MESSAGE.strip(), c.message


def test_answer_reserve(client, srv):
    # A budget larger than max_tokens allows: thinking leaves the forced end
    # and a quarter of max_tokens to the answer, which is never empty.
    r = ask(client, srv, max_tokens=40, extra_body={"thinking_budget": 100})
    c = r.choices[0]
    assert c.message.content and c.finish_reason in ("length", "stop"), c
    assert r.usage.completion_tokens_details.reasoning_tokens == 40 - 10, r.usage
    # Without a limit asked for (-1), thinking may take everything.
    r = ask(client, srv, max_tokens=20, extra_body={"thinking_budget": -1})
    assert r.usage.completion_tokens_details.reasoning_tokens == 20 and not r.choices[0].message.content, r


def test_format_none_and_exclude(client, srv):
    r = ask(client, srv, extra_body={"reasoning_format": "none"})
    m = r.choices[0].message
    assert extra(m, "reasoning_content") is None, m
    assert MESSAGE.strip() + "</think>" in m.content, m.content
    r = ask(client, srv, extra_body={"reasoning": {"exclude": True}})
    m = r.choices[0].message
    assert extra(m, "reasoning_content") is None and m.content, m
    assert r.usage.completion_tokens_details.reasoning_tokens == BUDGET + close_tokens(srv)


def test_logprobs_same_output(client, srv):
    # With logprobs the engine takes no forced-token jumps: the forced end
    # comes token by token through the mask, and the output is the same.
    a = ask(client, srv, seed=3)
    b = ask(client, srv, seed=3, logprobs=True)
    assert a.choices[0].message.content == b.choices[0].message.content
    assert extra(a.choices[0].message, "reasoning_content") == extra(b.choices[0].message, "reasoning_content")
    assert len(b.choices[0].logprobs.content) == b.usage.completion_tokens


SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
          "required": ["city"], "additionalProperties": False}


def test_structured_output_after_thinking(client, srv):
    for stream in (False, True):
        kw = dict(response_format={"type": "json_schema", "json_schema": {"name": "c", "schema": SCHEMA}},
                  max_tokens=64)
        if stream:
            reasoning, content, usage, finish, _ = stream_parts(client, srv, **kw)
        else:
            r = ask(client, srv, **kw)
            reasoning, content = check_budget_answer(r, srv, BUDGET)
            finish = r.choices[0].finish_reason
        assert reasoning.endswith(MESSAGE.strip()), reasoning
        assert finish == "stop", finish
        jsonschema.validate(json.loads(content), SCHEMA)


TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",  # (gpt-oss's template needs a description)
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
                   "required": ["city"], "additionalProperties": False}}}]


def test_tool_calls_after_thinking(client, srv):
    r = ask(client, srv, tools=TOOLS, tool_choice="required", parallel_tool_calls=False, max_tokens=64)
    c = r.choices[0]
    assert c.finish_reason == "tool_calls" and c.message.content is None, c
    assert extra(c.message, "reasoning_content").endswith(MESSAGE.strip())
    call = c.message.tool_calls[0]
    jsonschema.validate(json.loads(call.function.arguments), TOOLS[0]["function"]["parameters"])
    reasoning, content, _, finish, calls = stream_parts(client, srv, tools=TOOLS, tool_choice="required",
                                                        parallel_tool_calls=False, max_tokens=64)
    assert finish == "tool_calls" and content == "", (finish, content)
    assert reasoning == extra(c.message, "reasoning_content")
    assert [(x["name"], x["arguments"]) for _, x in sorted(calls.items())] == \
        [(t.function.name, t.function.arguments) for t in c.message.tool_calls]
    # The round trip: the call and its result go back, the model answers.
    msgs = CHAT + [{"role": "assistant", "content": None, "reasoning_content": extra(c.message, "reasoning_content"),
                    "tool_calls": [{"id": call.id, "type": "function",
                                    "function": {"name": call.function.name, "arguments": call.function.arguments}}]},
                   {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21 C"}]
    r = ask(client, srv, messages=msgs, tools=TOOLS, max_tokens=48)
    assert r.choices[0].message.content, r


def test_prefix_cache_across_turns(client, srv):
    # The template drops an earlier answer's thinking: the next turn's prompt
    # still starts with the first turn's prompt, whose cached blocks are hit.
    first = ask(client, srv, max_tokens=32)
    turn2 = CHAT + [{"role": "assistant", "content": first.choices[0].message.content},
                    {"role": "user", "content": "And of Italy?"}]
    p1 = srv.tokenize(messages=CHAT)["tokens"]
    p2 = srv.tokenize(messages=turn2)["tokens"]
    common = 0
    while common < min(len(p1), len(p2)) and p1[common] == p2[common]:
        common += 1
    assert common >= len(p1) - 8, (common, len(p1))
    before = srv.metric_sum(srv.wait_idle(), "ember:prefix_cache_hits_total")
    ask(client, srv, messages=turn2, max_tokens=4)
    hits = srv.metric_sum(srv.wait_idle(), "ember:prefix_cache_hits_total") - before
    assert hits >= (common // 16) * 16 > 0, (hits, common)


def test_harmony_forced_calls(client, srv):
    tools = [dict(TOOLS[0], function=dict(TOOLS[0]["function"]))]
    for choice in ("required", {"type": "function", "function": {"name": "get_weather"}}):
        kw = dict(messages=CHAT, tools=tools, tool_choice=choice, max_tokens=96)
        r = ask(client, srv, **kw)
        c = r.choices[0]
        assert c.finish_reason == "tool_calls" and len(c.message.tool_calls) == 1, c
        call = c.message.tool_calls[0]
        assert call.function.name == "get_weather", call
        jsonschema.validate(json.loads(call.function.arguments), tools[0]["function"]["parameters"])
        assert r.usage.completion_tokens_details.reasoning_tokens > 0, r.usage
        _, content, _, finish, calls = stream_parts(client, srv, **kw)
        assert finish == "tool_calls" and content == "", (finish, content)
        assert [(x["name"], x["arguments"]) for _, x in sorted(calls.items())] == \
            [(call.function.name, call.function.arguments)]


def test_harmony_structured_output(client, srv):
    r = ask(client, srv, max_tokens=96,
            response_format={"type": "json_schema", "json_schema": {"name": "c", "schema": SCHEMA}})
    c = r.choices[0]
    assert c.finish_reason == "stop", c
    jsonschema.validate(json.loads(c.message.content), SCHEMA)
    assert r.usage.completion_tokens_details.reasoning_tokens > 0, r.usage


def main():
    harmony = "--harmony" in sys.argv
    if harmony:
        sys.argv.remove("--harmony")
    args = server_util.parse_args(__doc__)
    srv = server_util.Server(args.base_url, args.api_key, args.pid)
    client = openai.OpenAI(base_url=srv.base_url + "/v1", api_key=args.api_key or "none", max_retries=0, timeout=300)
    checks = server_util.Checks("reasoning", args.only)
    if harmony:
        checks.run("harmony_forced_calls", test_harmony_forced_calls, client, srv)
        checks.run("harmony_structured_output", test_harmony_structured_output, client, srv)
        checks.finish()
    with concurrent.futures.ThreadPoolExecutor(6) as ex:
        list(ex.map(lambda nf: checks.run(nf[0], nf[1], client, srv), [
            ("server_budget_plain_and_stream", test_server_budget_plain_and_stream),
            ("request_budgets", test_request_budgets),
            ("answer_reserve", test_answer_reserve),
            ("format_none_and_exclude", test_format_none_and_exclude),
            ("logprobs_same_output", test_logprobs_same_output),
            ("structured_output_after_thinking", test_structured_output_after_thinking),
            ("tool_calls_after_thinking", test_tool_calls_after_thinking),
        ]))
    # Alone: it reads the prefix-cache counter.
    checks.run("prefix_cache_across_turns", test_prefix_cache_across_turns, client, srv)
    checks.finish()


if __name__ == "__main__":
    main()
