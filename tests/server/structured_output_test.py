#!/usr/bin/env python3
"""Tests structured output of `ember serve` through the official `openai` client.

Covers client.beta.chat.completions.parse with a pydantic model,
response_format json_object / json_schema (streamed and not, n > 1),
vLLM's guided_regex / guided_grammar / guided_choice, logit_bias, unsupported
schemas (400 with param), forced-token jumps (usage.forced_tokens > 0 on a
schema with fixed keys, more with json_whitespace "compact", none when
turned off; outputs valid either way), and a schema suite: over 100 JSON schemas of
real-world shapes plus regexes and GBNF grammars, each sampled with a seed;
every output must parse and validate (Python `jsonschema` as the
independent validator, `re.fullmatch` for regexes). The default model is a
base model: the grammar guarantees validity whatever it would say.

  python3 tests/server/structured_output_test.py --base-url http://127.0.0.1:PORT --api-key KEY

Run by tests/server/server_test.sh. Exit 0 passed, 1 failed, 77 skipped
(openai or jsonschema missing).
"""

import concurrent.futures
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import server_util  # noqa: E402

try:
    import jsonschema
    import openai
    import pydantic
except ImportError as e:
    print(f"{e.name} package missing: skipped")
    sys.exit(77)

CHAT = [{"role": "user", "content": "Describe a person as JSON."}]


class Person(pydantic.BaseModel):
    name: str = pydantic.Field(max_length=16)
    age: int = pydantic.Field(ge=0, le=120)
    email: str | None = None


def test_pydantic_parse(client, srv):
    r = client.beta.chat.completions.parse(model=srv.model_id(), messages=CHAT, response_format=Person,
                                           max_tokens=96, temperature=0.7, seed=3)
    msg = r.choices[0].message
    assert r.choices[0].finish_reason == "stop", r.choices[0].finish_reason
    assert isinstance(msg.parsed, Person), msg
    assert 0 <= msg.parsed.age <= 120


def test_json_object(client, srv):
    r = client.chat.completions.create(model=srv.model_id(), messages=CHAT, max_tokens=200, temperature=0.8, seed=5,
                                       response_format={"type": "json_object"})
    c = r.choices[0]
    if c.finish_reason == "stop":
        assert isinstance(json.loads(c.message.content), dict), c.message.content
    else:  # an unbounded object may run out of tokens; what there is must be a JSON prefix
        assert c.message.content.lstrip().startswith("{"), c.message.content


SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                           "temp_c": {"type": "integer", "minimum": -50, "maximum": 50},
                                           "sky": {"enum": ["clear", "cloudy", "rain"]}},
          "required": ["city", "temp_c", "sky"], "additionalProperties": False}
RF = {"type": "json_schema", "json_schema": {"name": "weather", "schema": SCHEMA, "strict": True}}


def test_json_schema_n2_and_stream(client, srv):
    r = client.chat.completions.create(model=srv.model_id(), messages=CHAT, max_tokens=80, temperature=1.0, seed=11,
                                       n=2, response_format=RF)
    assert len(r.choices) == 2
    for c in r.choices:
        assert c.finish_reason == "stop", c
        jsonschema.validate(json.loads(c.message.content), SCHEMA)
    # Streaming gives the same text as the non-streamed request (same seed).
    one = client.chat.completions.create(model=srv.model_id(), messages=CHAT, max_tokens=80, temperature=1.0,
                                         seed=12, response_format=RF)
    text = "".join(ch.choices[0].delta.content or "" for ch in client.chat.completions.create(
        model=srv.model_id(), messages=CHAT, max_tokens=80, temperature=1.0, seed=12, response_format=RF,
        stream=True) if ch.choices)
    assert text == one.choices[0].message.content, (text, one.choices[0].message.content)
    jsonschema.validate(json.loads(text), SCHEMA)


def test_forced_jumps(client, srv):
    def run(seed, **extra):
        r = client.chat.completions.create(model=srv.model_id(), messages=CHAT, max_tokens=80, temperature=1.0,
                                           seed=seed, response_format=RF, extra_body=extra)
        c = r.choices[0]
        assert c.finish_reason == "stop", c
        jsonschema.validate(json.loads(c.message.content), SCHEMA)
        return r.usage.forced_tokens, r.usage.completion_tokens, c.message.content

    jobs = [(seed, mode) for seed in (21, 22) for mode in ("flexible", "compact", "off")]
    extra = {"flexible": {}, "compact": {"json_whitespace": "compact"}, "off": {"forced_tokens": False}}
    with concurrent.futures.ThreadPoolExecutor(len(jobs)) as ex:
        out = dict(zip(jobs, ex.map(lambda j: run(j[0], **extra[j[1]]), jobs)))
    for seed in (21, 22):
        f_flex, _, _ = out[(seed, "flexible")]
        f_compact, n_compact, text = out[(seed, "compact")]
        assert out[(seed, "off")][0] == 0, out[(seed, "off")]
        assert f_flex > 0, out[(seed, "flexible")]  # the keys' bodies after their opening quote
        assert f_compact > f_flex and f_compact * 3 > n_compact, (out[(seed, "compact")], out[(seed, "flexible")])
        assert " " not in text.replace(json.loads(text)["city"], ""), text  # compact: no whitespace between tokens
    # /metrics counts them; json_whitespace needs a JSON constraint.
    assert srv.metrics().get("ember:forced_tokens_total", 0) > 0
    try:
        client.chat.completions.create(model=srv.model_id(), messages=CHAT, max_tokens=4,
                                       extra_body={"json_whitespace": "compact"})
        raise AssertionError("json_whitespace without a JSON constraint was accepted")
    except openai.BadRequestError as e:
        assert e.body.get("param") == "json_whitespace", e.body


def test_guided_regex_choice_grammar(client, srv):
    r = client.completions.create(model=srv.model_id(), prompt="Phone:", max_tokens=20, temperature=1.0, seed=1,
                                  extra_body={"guided_regex": r"\(\d{3}\) \d{3}-\d{4}"})
    assert re.fullmatch(r"\(\d{3}\) \d{3}-\d{4}", r.choices[0].text), r.choices[0].text
    assert r.choices[0].finish_reason == "stop"
    r = client.chat.completions.create(model=srv.model_id(), messages=CHAT, max_tokens=10, temperature=1.0, seed=2,
                                       extra_body={"guided_choice": ["positive", "negative", "neutral"]})
    assert r.choices[0].message.content in ("positive", "negative", "neutral"), r.choices[0].message.content
    gbnf = 'root ::= "(" expr ")"\nexpr ::= term ([+*] term){0,3}\nterm ::= [0-9]{1,2}\n'
    r = client.completions.create(model=srv.model_id(), prompt="Math:", max_tokens=30, temperature=1.0, seed=3,
                                  extra_body={"guided_grammar": gbnf})
    assert re.fullmatch(r"\(\d{1,2}([+*]\d{1,2}){0,3}\)", r.choices[0].text), r.choices[0].text


def test_logit_bias(client, srv):
    base = client.completions.create(model=srv.model_id(), prompt="The capital of France is", max_tokens=3,
                                     temperature=0, logprobs=1)
    first = base.choices[0].logprobs.tokens[0]
    ids = srv.post_json("/tokenize", {"prompt": first, "add_special_tokens": False})[1]["tokens"]
    banned = client.completions.create(model=srv.model_id(), prompt="The capital of France is", max_tokens=3,
                                       temperature=0, logprobs=1, logit_bias={str(ids[0]): -100})
    assert banned.choices[0].logprobs.tokens[0] != first, banned.choices[0].logprobs.tokens
    st, js = srv.post_json("/tokenize", {"prompt": " zebra", "add_special_tokens": False})
    forced = client.completions.create(model=srv.model_id(), prompt="The capital of France is", max_tokens=2,
                                       temperature=0, logit_bias={str(js["tokens"][0]): 100})
    assert forced.choices[0].text.startswith(srv.post_json("/detokenize", {"tokens": js["tokens"][:1]})[1]["prompt"])


def test_unsupported_schema_400(client, srv):
    bad = {"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "object", "properties": {"a": {"type": "string", "patternProperties": {}}}}}}
    try:
        client.chat.completions.create(model=srv.model_id(), messages=CHAT, max_tokens=5, response_format=bad)
    except openai.BadRequestError as e:
        assert e.status_code == 400
        assert e.body["param"] == "response_format.json_schema.schema", e.body
        assert "patternProperties" in e.body["message"], e.body
    else:
        raise AssertionError("an unsupported schema keyword was accepted")
    for extra, param in [({"guided_regex": "(a)\\1"}, "guided_regex"), ({"guided_grammar": "root ::= x"}, "guided_grammar"),
                         ({"logit_bias": {"99999999": 1}}, "logit_bias")]:
        try:
            client.completions.create(model=srv.model_id(), prompt="x", max_tokens=2, extra_body=extra)
        except openai.BadRequestError as e:
            assert e.body["param"] == param, e.body
        else:
            raise AssertionError(f"{extra} was accepted")


# ---- the schema suite ----

def suite_schemas():
    """Over 100 bounded schemas of real-world shapes (strings and arrays are
    bounded so that a sampled answer always fits in max_tokens)."""
    s = lambda n=12, **kw: {"type": "string", "maxLength": n, **kw}  # noqa: E731
    obj = lambda props, req=None, **kw: {"type": "object", "properties": props,  # noqa: E731
                                         "required": list(props) if req is None else req,
                                         "additionalProperties": False, **kw}
    base = [
        obj({"name": s(), "age": {"type": "integer", "minimum": 0, "maximum": 120}}),
        obj({"title": s(20), "year": {"type": "integer", "minimum": 1900, "maximum": 2030}, "rating": {"type": "number", "minimum": 0, "maximum": 10}}),
        obj({"sentiment": {"enum": ["positive", "negative", "neutral"]}, "confidence": {"type": "number", "minimum": 0, "maximum": 1}}),
        obj({"city": s(), "country": {"enum": ["US", "FR", "JP", "BR"]}, "population": {"type": "integer", "minimum": 0, "maximum": 40000000}}),
        obj({"id": {"type": "string", "format": "uuid"}, "created": {"type": "string", "format": "date-time"}}),
        obj({"date": {"type": "string", "format": "date"}, "time": {"type": "string", "format": "time"}}),
        obj({"email": {"type": "string", "format": "email"}, "ip": {"type": "string", "format": "ipv4"}}),
        obj({"sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"}, "qty": {"type": "integer", "minimum": 1, "maximum": 99}}),
        obj({"tags": {"type": "array", "items": s(8), "maxItems": 3}}),
        obj({"point": {"type": "array", "prefixItems": [{"type": "number", "minimum": 0, "maximum": 100}, {"type": "number", "minimum": 0, "maximum": 100}], "items": False}}),
        obj({"ok": {"type": "boolean"}, "error": {"anyOf": [s(), {"type": "null"}]}}),
        obj({"user": obj({"id": {"type": "integer", "minimum": 1, "maximum": 9999}, "handle": s(10)}), "active": {"type": "boolean"}}),
        obj({"items": {"type": "array", "items": obj({"name": s(8), "price": {"type": "number", "minimum": 0, "maximum": 999}}), "minItems": 1, "maxItems": 2}}),
        obj({"answer": s(24), "sources": {"type": "array", "items": {"type": "string", "format": "uri"}, "maxItems": 2}}),
        obj({"color": {"type": "string", "pattern": "^#[0-9a-f]{6}$"}, "name": s(10)}),
        obj({"level": {"type": "integer", "enum": [1, 2, 3]}, "label": {"const": "severity"}}),
        obj({"first": s(10), "last": s(10), "middle": s(10)}, req=["first", "last"]),
        obj({"a": {"type": "integer", "minimum": -10, "maximum": 10}, "b": {"type": "integer", "exclusiveMinimum": 0, "maximum": 500}}),
        obj({"status": {"enum": ["open", "closed", "merged"]}, "number": {"type": "integer", "minimum": 1, "maximum": 99999}, "draft": {"type": "boolean"}}),
        obj({"lat": {"type": "number", "minimum": 0, "maximum": 90}, "lon": {"type": "number", "minimum": 0, "maximum": 180}}),
        obj({"zip": {"type": "string", "pattern": "^[0-9]{5}(-[0-9]{4})?$"}, "state": {"type": "string", "pattern": "^[A-Z]{2}$"}}),
        obj({"phone": {"type": "string", "pattern": "^\\+?[0-9]{7,12}$"}}),
        obj({"matrix": {"type": "array", "items": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9}, "maxItems": 3}, "maxItems": 2}}),
        obj({"kind": {"const": "event"}, "payload": {"oneOf": [obj({"click": {"type": "integer", "minimum": 0, "maximum": 99}}), obj({"key": s(1)})]}}),
        obj({"meta": {"type": "object", "additionalProperties": False}, "n": {"type": "integer", "minimum": 0, "maximum": 9}}),
        obj({"tool": {"enum": ["search", "calc"]}, "args": obj({"query": s(16)})}),
        obj({"steps": {"type": "array", "items": s(16), "minItems": 1, "maxItems": 3}, "done": {"type": "boolean"}}),
        obj({"value": {"type": ["integer", "null"], "minimum": 0, "maximum": 100}}),
        obj({"code": {"type": "string", "pattern": "^(GET|POST|PUT|DELETE) /[a-z]{1,8}$"}}),
        obj({"word": {"type": "string", "minLength": 2, "maxLength": 6}}),
    ]
    schemas = list(base)
    # Variants: each base shape under $defs/$ref, wrapped in a list, and with every property optional.
    for b in base:
        schemas.append({"$defs": {"thing": b}, "$ref": "#/$defs/thing"})
        schemas.append(obj({"results": {"type": "array", "items": b, "maxItems": 2}}))
        opt = dict(b)
        opt["required"] = []
        schemas.append(opt)
    return schemas


REGEXES = [r"\d{3}-\d{4}", r"[A-Z][a-z]{2,8}( [A-Z][a-z]{2,8})?", r"(yes|no|maybe)", r"0x[0-9a-f]{2,8}",
           r"[a-z]{1,12}@[a-z]{1,12}\.(com|org)", r"\d{1,2}:\d{2} (AM|PM)", r"#[0-9A-F]{6}", r"v\d{1,3}\.\d{1,3}\.\d{1,3}"]
GRAMMARS = [
    ('root ::= "[" item ("," item){0,3} "]"\nitem ::= [0-9]{1,3}\n', r"\[\d{1,3}(,\d{1,3}){0,3}\]"),
    ('root ::= ("a" | "b")+ "!"\n', None),
    ('root ::= greeting " " name\ngreeting ::= "Hello" | "Hi"\nname ::= [A-Z] [a-z]{1,6}\n', r"(Hello|Hi) [A-Z][a-z]{1,6}"),
]


def test_schema_suite(client, srv):
    schemas = suite_schemas()
    assert len(schemas) >= 100, len(schemas)

    def run_schema(k):
        sc = schemas[k]
        # Every other schema in compact whitespace: more forced-token jumps,
        # fewer engine steps (the suite stays fast on a small CI machine).
        r = client.chat.completions.create(
            model=srv.model_id(), messages=[{"role": "user", "content": "Answer in JSON."}], max_tokens=400,
            temperature=0.8, seed=100 + k,
            response_format={"type": "json_schema", "json_schema": {"name": f"s{k}", "schema": sc, "strict": True}},
            extra_body={"json_whitespace": "compact"} if k % 2 else None)
        c = r.choices[0]
        if c.finish_reason != "stop":
            return f"schema {k}: finish_reason {c.finish_reason}: {c.message.content!r}"
        try:
            v = jsonschema.Draft202012Validator(sc, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
            v.validate(json.loads(c.message.content))
        except Exception as e:  # noqa: BLE001
            return f"schema {k}: {type(e).__name__}: {str(e)[:200]} in {c.message.content!r}"
        return None

    def run_regex(k):
        r = client.completions.create(model=srv.model_id(), prompt="Value:", max_tokens=40, temperature=1.0,
                                      seed=k, extra_body={"guided_regex": REGEXES[k]})
        t = r.choices[0].text
        if r.choices[0].finish_reason != "stop":
            return f"regex {REGEXES[k]}: finish {r.choices[0].finish_reason}: {t!r}"
        return None if re.fullmatch(REGEXES[k], t) else f"regex {REGEXES[k]}: {t!r}"

    def run_grammar(k):
        g, check = GRAMMARS[k]
        r = client.completions.create(model=srv.model_id(), prompt="Output:", max_tokens=60, temperature=1.0,
                                      seed=k, extra_body={"guided_grammar": g})
        t = r.choices[0].text
        if r.choices[0].finish_reason != "stop":
            return None if check is None else f"grammar {k}: finish {r.choices[0].finish_reason}: {t!r}"
        pat = check or r"[ab]+!"
        return None if re.fullmatch(pat, t) else f"grammar {k}: {t!r}"

    jobs = [(run_schema, k) for k in range(len(schemas))] + [(run_regex, k) for k in range(len(REGEXES))] + \
           [(run_grammar, k) for k in range(len(GRAMMARS))]
    with concurrent.futures.ThreadPoolExecutor(16) as ex:
        problems = [p for p in ex.map(lambda j: j[0](j[1]), jobs) if p]
    assert not problems, f"{len(problems)} of {len(jobs)} outputs invalid:\n" + "\n".join(problems[:10])
    print(f"  schema suite: {len(schemas)} schemas, {len(REGEXES)} regexes, {len(GRAMMARS)} grammars: all valid")


def main():
    args = server_util.parse_args(__doc__)
    srv = server_util.Server(args.base_url, args.api_key, args.pid)
    client = openai.OpenAI(base_url=srv.base_url + "/v1", api_key=args.api_key or "none", max_retries=0, timeout=300)
    checks = server_util.Checks("structured_output", args.only)
    for name, fn in [
        ("pydantic_parse", test_pydantic_parse),
        ("json_object", test_json_object),
        ("json_schema_n2_and_stream", test_json_schema_n2_and_stream),
        ("guided_regex_choice_grammar", test_guided_regex_choice_grammar),
        ("logit_bias", test_logit_bias),
        ("forced_jumps", test_forced_jumps),
        ("unsupported_schema_400", test_unsupported_schema_400),
        ("schema_suite", test_schema_suite),
    ]:
        checks.run(name, fn, client, srv)
    checks.finish()


if __name__ == "__main__":
    main()
