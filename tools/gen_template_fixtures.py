#!/usr/bin/env python3
"""Generates the reference outputs for ember's Jinja chat-template interpreter.

Renders every (template x conversation) pair from
tests/data/template/conversations.json, and every small feature case from
tests/data/template/features.json, with Python jinja2 configured exactly as
Hugging Face transformers' apply_chat_template configures it (the environment
is built by transformers' own `_compile_jinja_template`, and the messages go
through transformers' own normalisation), and writes:

  tests/data/template/expected_chat.json
  tests/data/template/expected_features.json

Rerun after editing the inputs:  python3 tools/gen_template_fixtures.py
"""
import json
import os
import sys

from transformers.utils import chat_template_utils as ctu

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "tests", "data", "template")


def load_json(name):
    with open(os.path.join(DATA, name), encoding="utf-8") as f:
        return json.load(f)


def template_text(entry_file):
    if entry_file.startswith("builtin:"):
        entry_file = "builtin-" + entry_file.split(":", 1)[1] + ".jinja"
    with open(os.path.join(DATA, "templates", entry_file), encoding="utf-8", newline="") as f:
        return f.read()


class FixedClock:
    """Stands in for datetime in transformers' strftime_now (templates that print today's date)."""
    now_ts = None

    @classmethod
    def now(cls):
        return REAL_DATETIME.fromtimestamp(cls.now_ts)


REAL_DATETIME = ctu.datetime


def render_chat(tpl, messages, tools, add_generation_prompt, bos, eos, extra):
    """Mirrors PreTrainedTokenizerBase.apply_chat_template(tokenize=False)."""
    conversation = ctu._normalize_chat_messages(messages)
    kwargs = {"bos_token": bos, "eos_token": eos}
    kwargs.update(extra)
    rendered, _ = ctu.render_jinja_template(
        conversations=[conversation],
        tools=tools,
        documents=None,
        chat_template=tpl,
        add_generation_prompt=add_generation_prompt,
        **kwargs,
    )
    return rendered[0]


def error_text(e):
    return f"{type(e).__name__}: {e}"


def gen_chat():
    spec = load_json("conversations.json")
    out = []
    for t in spec["templates"]:
        tpl = template_text(t["file"])
        # "now": the clock strftime_now() reads (seconds since the epoch; noon
        # UTC gives the same date in every time zone within 11 hours).
        FixedClock.now_ts = t.get("now")
        ctu.datetime = FixedClock if "now" in t else REAL_DATETIME
        for case in spec["cases"]:
            tools = spec["tools"][case["tools"]] if case.get("tools") else None
            extra = dict(t.get("extra", {}))
            extra.update(case.get("extra", {}))
            for agp in (False, True):
                rec = {"template": t["file"], "case": case["name"], "add_generation_prompt": agp}
                try:
                    rec["output"] = render_chat(tpl, case["messages"], tools, agp,
                                                t["bos_token"], t["eos_token"], extra)
                except Exception as e:  # noqa: BLE001 - errors are fixtures too
                    rec["error"] = error_text(e)
                out.append(rec)
    return out


def gen_features():
    spec = load_json("features.json")
    out = []
    for case in spec:
        rec = {"name": case["name"]}
        try:
            tmpl = ctu._compile_jinja_template(case["template"])
            rec["output"] = tmpl.render(**case.get("context", {}))
        except Exception as e:  # noqa: BLE001
            rec["error"] = error_text(e)
            lineno = getattr(e, "lineno", None)
            if lineno is not None:
                rec["lineno"] = lineno
        out.append(rec)
    return out


def write(name, data):
    path = os.path.join(DATA, name)
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        json.dump(data, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {path} ({len(data)} records)")


def main():
    write("expected_chat.json", gen_chat())
    write("expected_features.json", gen_features())
    return 0


if __name__ == "__main__":
    sys.exit(main())
