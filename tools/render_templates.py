#!/usr/bin/python3
"""Renders chat templates with Python's jinja2 the way Hugging Face
transformers does, to make the expected outputs of
tests/tokenizer/chat_template_test.cc.

Run with Debian's python3-jinja2:  /usr/bin/python3 tools/render_templates.py
Writes tests/tokenizer/data/chat_templates/<name>.json, one file per template,
each a list of cases: the inputs and either `expected` (the rendered text) or
`error` (the exception message; `raised` is true when the template called
raise_exception).

The environment mirrors transformers' _compile_jinja_template:
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
extensions=[loopcontrols]), a tojson filter that is json.dumps(ensure_ascii=False,
indent, separators, sort_keys=False), and the globals raise_exception and
strftime_now (here fixed at 2024-07-26 12:00 so outputs are reproducible).
Like transformers, `tools` and `documents` are passed as None when absent.
"""
import copy
import datetime
import json
import os
import re
import sys

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(os.path.dirname(ROOT), "shared", "templates")
OUT = os.path.join(ROOT, "tests", "tokenizer", "data", "chat_templates")
FIXED_NOW = datetime.datetime(2024, 7, 26, 12, 0, 0)
BOS, EOS = "<BOS>", "<EOS>"


class RaisedByTemplate(jinja2.exceptions.TemplateError):
    pass


def raise_exception(message):
    raise RaisedByTemplate(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def strftime_now(fmt):
    return FIXED_NOW.strftime(fmt)


def make_env():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def builtin_templates():
    """kChatMlTemplate / kLlama2Template, read from the C++ source."""
    src = open(os.path.join(ROOT, "src", "tokenizer", "chat_template.cc")).read()
    found = dict(re.findall(r'const char\* const (k\w+Template) =\s*R"JINJA\((.*?)\)JINJA";', src, re.S))
    return {"builtin-chatml": ("builtin:chatml", found["kChatMlTemplate"]),
            "builtin-llama2": ("builtin:llama2", found["kLlama2Template"])}


SYSTEM = {"role": "system", "content": "You are a terse assistant. Answer in one line."}
USER1 = {"role": "user", "content": "  Héllo 世界 👋 — what's <2+2> & \"why\"?\n"}
ASSIST1 = {"role": "assistant", "content": "It is 4.\n\nBecause 'math'."}
USER2 = {"role": "user", "content": "And 3*3?\ttabs\tand trailing spaces   "}

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather for a city.",
    "parameters": {"type": "object", "properties": {
        "location": {"type": "string", "description": "City name, e.g. Paris"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["location"]}}}]

CALL_DICT = {"role": "assistant", "content": None, "tool_calls": [{
    "id": "call12345", "type": "function",
    "function": {"name": "get_weather", "arguments": {"location": "Paris", "unit": "celsius"}}}]}
CALL_STR = {"role": "assistant", "content": "", "tool_calls": [{
    "id": "call12345", "type": "function",
    "function": {"name": "get_weather", "arguments": "{\"location\": \"Paris\"}"}}]}
TOOL_RESULT = {"role": "tool", "tool_call_id": "call12345", "name": "get_weather",
               "content": "{\"temperature\": 21.5, \"sky\": \"clear\"}"}
FINAL = {"role": "assistant", "content": "It is 21.5 °C and clear in Paris."}


def cases_for(name):
    c = []

    def add(case_name, messages, agp=True, tools=None, extra=None):
        c.append({"name": case_name, "messages": copy.deepcopy(messages), "add_generation_prompt": agp,
                  "tools": copy.deepcopy(tools), "extra": extra or {}})

    for agp in (True, False):
        suffix = "_gen" if agp else ""
        add("system_user" + suffix, [SYSTEM, USER1], agp)
        add("user_only" + suffix, [USER1], agp)
        add("multi_turn" + suffix, [SYSTEM, USER1, ASSIST1, USER2], agp)
    add("multi_turn_no_system", [USER1, ASSIST1, USER2])
    add("assistant_last", [USER1, ASSIST1], False)
    add("empty_messages", [])
    add("not_alternating", [USER1, USER2])
    add("content_parts", [{"role": "user", "content": [{"type": "text", "text": "hi"}]}])
    add("tools", [SYSTEM, USER1], tools=TOOLS)
    add("tools_no_system", [USER1], tools=TOOLS)
    add("tool_call_dict_args", [USER1, CALL_DICT, TOOL_RESULT, FINAL], tools=TOOLS)
    add("tool_call_string_args", [SYSTEM, USER1, CALL_STR, TOOL_RESULT], tools=TOOLS)
    add("tool_call_without_tools", [USER1, CALL_DICT, TOOL_RESULT])
    add("reasoning_content", [USER1, {"role": "assistant", "content": "Four.",
                                      "reasoning_content": "2+2 is 4.\n"}, USER2, {
        "role": "assistant", "content": "Nine.", "reasoning_content": "3*3=9"}], False)
    add("think_in_content", [USER1, {"role": "assistant",
                                     "content": "<think>\nadd them\n</think>\n\nFour."}, USER2])
    add("enable_thinking_false", [USER1], extra={"enable_thinking": False})
    add("no_think_system", [{"role": "system", "content": "Be brief. /no_think"}, USER1])
    add("date_string", [USER1], tools=TOOLS, extra={"date_string": "01 Jan 2025"})
    add("documents", [USER1], extra={
        "documents": [{"doc_id": 1, "text": "Paris is in France."},
                      {"doc_id": "b", "text": "Tokyo is in Japan."}]})
    add("controls", [USER1], extra={"controls": {"citations": True, "length": "short"},
                                    "documents": [{"doc_id": 7, "text": "doc"}]})
    return c


def render(env, source, case):
    tmpl = env.from_string(source)
    kwargs = {"bos_token": BOS, "eos_token": EOS}
    kwargs.update(case["extra"])
    kwargs.setdefault("documents", None)
    return tmpl.render(messages=case["messages"], tools=case["tools"],
                       add_generation_prompt=case["add_generation_prompt"], **kwargs)


# Small templates exercising one feature each, rendered with `vars` as extra
# variables (messages=[] unless given). Written to snippets.json.
SNIPPETS = [
    # whitespace control, trim_blocks / lstrip_blocks
    "{% if true %}\n  a\n{% endif %}\n", "  {# c #}\nx", "a  {# c #}  b",
    "{{- ' x ' -}}   \n  {%- if 1 -%}  y  {%- endif -%}", "a\n    {% if 1 %}b{% endif %}\n  c",
    "a\n    {%+ if 1 %}b{% endif +%}\n  c", "{% for i in [1,2] %}\n  {{ i }}\n{% endfor %}\n",
    "  {{ 1 }}  \n  {% set x = 1 %}  z", "x\r\ny\rz\n\n", "{# multi\nline #}\n\nA",
    "{% raw %}\n  {{x}} {% if %}\n{% endraw %}\nafter", "a\n  {% raw -%}  x  {%- endraw %}  \nb",
    "{{ 'a' }}\n{{ 'b' }}\n", "\t{% if true -%}\n\tx\n{%- endif %}\t!", "{%- if true %}\n{% endif %}end",
    # literals and printing
    "{{ [1,'a',none,true,{'k':'v'}, 'it\\'s', 1.5, (1,), ()] }}", "{{ 'a' 'b' \"c\" }}",
    "{{ '\\n\\t\\x41\\u00e9\\U0001F600\\101\\q\\\\' }}", "{{ True }}{{ False }}{{ None }}{{ none }}",
    "{{ 1/2 }} {{ 4/2 }} {{ 1e-5 }} {{ 1e16 }} {{ 123456789012345678.0 }} {{ 0.1+0.2 }} {{ 1_000 }}",
    "{{ -7//2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2**10 }} {{ 2**-1 }} {{ 7.5 // 2 }} {{ -1.5 % 1 }}",
    "{{ 1 + 2 * 3 - 4 }} {{ (1 + 2) * 3 }} {{ -2 ** 2 }} {{ 'a' ~ 1 ~ none ~ undefined_x }}",
    "{{ 'ab' * 3 }} {{ [1] * 2 }} {{ 3 * 'x' }} {{ 'x' * 0 }}", "{{ {'a': {'b': [1, 2]}} }}",
    "{{ 1 if true }}|{{ 1 if false }}|{{ 'y' if 0 else 'n' }}|{{ 1 if false else 2 if true else 3 }}",
    # comparisons and logic
    "{{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' < 'b' }} {{ [1,2] == [1,2] }} {{ [1] == (1,) }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }}",
    "{{ 1 and 'x' }}|{{ 0 or 'y' }}|{{ '' or [] }}|{{ not 0 }}|{{ not 'a' in 'abc' }}|{{ 'a' not in 'abc' }}",
    "{{ 'b' in ['a','b'] }} {{ 'k' in {'k':1} }} {{ 'x' in undefined_y }} {{ 2 in [1.0, 2.0] }}",
    "{{ 1 < 'a' }}", "{{ 'a' in 1 }}", "{{ 1 in 'abc' }}", "{{ x.y }}", "{{ 'x' + y }}", "{{ 1 + 'a' }}",
    "{{ undefined_fn() }}", "{{ 1 / 0 }}", "{{ 1 // 0 }}", "{{ 5 % 0 }}",
    # tests
    "{{ x is defined }} {{ none is none }} {{ 1 is number }} {{ true is number }} {{ true is boolean }} {{ 1 is integer }} {{ 1.0 is float }}",
    "{{ u is iterable }}{{ u is sequence }}{{ u is mapping }}{{ u|length }}{{ 'a' is iterable }}{{ 1 is iterable }}{{ {} is mapping }}",
    "{{ true is true }}{{ 1 is true }}{{ false is false }}{{ 0 is false }}{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}",
    "{{ 'a' is equalto 'a' }}{{ 2 is eq 3 }}{{ 2 is ne 3 }}{{ 2 is lt 3 }}{{ 2 is ge 3 }}{{ 'a' is in 'cat' }}{{ 'x' is string }}{{ x is not string }}",
    "{{ 'àéîõüÿ ñ ĀāŁł žŽ αβγ ΣσςΆ абв ЖЁё ß'|upper }}|{{ 'ÀÉÎÕÜŸ Ñ ĀāŁł žŽ ΑΒΓ ΣσςΆ АБВ ЖЁё'|lower }}|{{ 'élan vital ωμέγα'|title }}|{{ 'éCOLE'|capitalize }}",
    "{{ 'ab' is lower }}{{ 'AB' is upper }}{{ range is callable }}{{ 1 is sameas 1 }}{{ x is undefined }}",
    "{{ 1 is nosuchtest }}",
    # attribute and item access
    "{{ d.a }}|{{ d['a'] }}|{{ d.nope }}|{{ d['nope'] }}|{{ d['items'] }}",
    "{{ l[0] }}{{ l[-1] }}{{ l[5] }}|{{ l.0 }}|{{ s[1] }}{{ s[-1] }}|{{ none.role }}|{{ none[0] }}",
    "{{ [][0] }}|{{ [][0] is defined }}", "{{ [][0].role }}", "{{ d.a.b.c }}", "{{ d.nope.x }}",
    "{{ s[1:] }}|{{ s[:-1] }}|{{ s[::-1] }}|{{ s[::2] }}|{{ l[1:2] }}|{{ l[::-1] }}|{{ l[5:] }}|{{ l[-100:100] }}|{{ (1,2,3)[1:] }}",
    "{{ l[::0] }}",
    # string methods
    "{{ '  a b  '.split() }} {{ 'a,b,,c'.split(',') }} {{ 'a b c'.split(' ', 1) }} {{ 'a b c'.rsplit(' ', 1) }} {{ ' a  b '.rsplit(None, 1) }}",
    "{{ s.startswith('hé') }}{{ s.endswith(('x', 'lo')) }}{{ s.upper() }}{{ 'ABC'.lower() }}{{ 'hello world'.title() }}{{ 'hELLO'.capitalize() }}",
    "[{{ '  x \\n'.strip() }}][{{ 'xxaxx'.strip('x') }}][{{ '\\n\\nq\\n'.lstrip('\\n') }}][{{ 'q  '.rstrip() }}][{{ '\\u3000q\\u00a0'.strip() }}]",
    "{{ 'a-b-c'.replace('-', '+') }} {{ 'a-b-c'.replace('-', '', 1) }} {{ 'abc'.replace('', '.') }} {{ 'abcb'.find('b') }} {{ 'abcb'.count('b') }}",
    "{{ ', '.join(['a', 'b']) }} {{ 'a\\nb\\r\\nc'.splitlines() }} {{ '123'.isdigit() }} {{ 'ab'.isalpha() }} {{ ' '.isspace() }}",
    "{{ '{} and {}'.format('a', 2) }} {{ '{1}{0}'.format('a', 'b') }} {{ '{x}!'.format(x=1) }}",
    "{{ '%s-%d' % ('a', 2) }} {{ '%s' % 'z' }} {{ '100%%' % () }}",
    "{{ s.nosuchmethod() }}", "{% set l2 = [1] %}{{ l2.append(2) }}", "{{ d.pop('a') }}",
    "{{ d.get('a') }}{{ d.get('zz') }}{{ d.get('zz', 'dflt') }}{{ d.keys()|list }}{{ d.values()|list }}{{ d.items()|list }}",
    "{{ [1,2,1].count(1) }}{{ [1,2,3].index(2) }}",
    # filters
    "{{ 'abc'|upper }}{{ ['a','b']|join(', ') }}{{ [3,1]|first }}{{ [3,1]|last }}{{ none|default('d') }}{{ undefined_q|default('d') }}{{ ''|default('d', true) }}{{ ''|d('e', boolean=true) }}",
    "{{ ' a '|trim }}|{{ 'xxaxx'|trim('x') }}|{{ 3.7|int }}|{{ '12'|int }}|{{ 'z'|int }}|{{ ' 4.5 '|int }}|{{ 'z'|int(7) }}|{{ 3|float }}|{{ '2.5'|float }}|{{ true|int }}",
    "{{ [{'a':1},{'a':2}]|map(attribute='a')|list }} {{ [{'a':1},{'b':2}]|selectattr('a','defined')|list }} {{ [{'a':1},{'b':2}]|rejectattr('a')|list }}",
    "{{ ['a','B']|map('upper')|list }} {{ [1,2,3,4]|select('odd')|list }} {{ [1,2,3,4]|reject('even')|list }} {{ [0,1,'',2]|select|list }}",
    "{{ ['b','a','C']|sort }} {{ ['b','a','C']|sort(case_sensitive=true) }} {{ [3,1,2]|sort(reverse=true) }} {{ [{'n':2},{'n':1}]|sort(attribute='n') }}",
    "{{ [1,2,3]|sum }} {{ [1,2,2,'A','a']|unique|list }} {{ [1,2]|reverse|list }} {{ 'abc'|reverse }} {{ [3,1,2]|max }} {{ ['b','A']|min }} {{ []|max }}",
    "{{ x|string }} {{ 5|string }} {{ none|string }} {{ 'abc'|list }} {{ {'k':1}|list }} {{ 'héllo'|length }} {{ {'a':1}|count }}",
    "{{ {'b':1,'a':2}|items|list }} {{ undefined_v|items|list }} {{ {'b':1,'a':2}|dictsort }} {{ {'b':1,'a':2}|dictsort(by='value', reverse=true) }}",
    "{{ {'b':[1,{}, []],'a':{}, 'c': 'é<>&\\'\\n\\u0001'}|tojson }}", "{{ {'b':[1,2],'a':{'x':none}}|tojson(indent=2) }}",
    "{{ {'b':1,'a':2}|tojson(sort_keys=true) }} {{ 'é'|tojson(ensure_ascii=true) }} {{ [1,2]|tojson(separators=(',', ':')) }} {{ 1.5|tojson }} {{ 1e20|tojson }}",
    "{{ undefined_t|tojson }}", "{{ 1|length }}", "{{ 1|nosuchfilter }}", "{% if false %}{{ 1|nosuchfilter }}{% endif %}ok",
    "{{ 'a<b>&\"'|e }} {{ 'x'|safe }} {{ -3|abs }} {{ 2.567|round(2) }} {{ 2.5|round }} {{ 'a b c'|replace(' ', '_') }} {{ 'hello there'|title }} {{ 'hi'|capitalize }}",
    "{{ 'a\\nb\\n\\nc'|indent(2) }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent('>', blank=true) }}",
    "{{ [{'a':{'b':5}}]|map(attribute='a.b')|list }} {{ [[1,2],[3,4]]|map(attribute='1')|list }} {{ [{'n':'x'}, {}]|map(attribute='n', default='?')|join }}",
    "{{ [1, 'a']|join }} {{ [{'n':'x'},{'n':'y'}]|join('-', attribute='n') }} {{ ''|first }}",
    # statements
    "{% set count = 0 %}{% for i in [1,2] %}{% set count = count + 1 %}{{count}}{% endfor %}{{count}}",
    "{% set c = 5 %}{% for i in [1,2,3] %}{{ c }}{% set c = i %}{% endfor %}{{c}}",
    "{% set ns = namespace(n=0, s='') %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% set ns.s = ns.s ~ i %}{% endfor %}{{ ns.n }} {{ ns.s }}",
    "{% set ns = namespace() %}{% set ns.x = 1 %}{{ ns.x }}{{ ns.y }}", "{% set d2 = {} %}{% set d2.x = 1 %}",
    "{% for i in range(3) if i != 1 %}{{ loop.index }}{{ loop.index0 }}{{ loop.length }}{{ loop.first }}{{ loop.last }}{{ loop.revindex }}{{ loop.revindex0 }};{% else %}E{% endfor %}",
    "{% for i in [] %}x{% else %}E{% endfor %}", "{% for i in undefined_list %}x{% else %}E{% endfor %}", "{% for c in 'hé' %}[{{ c }}]{% endfor %}",
    "{% for k, v in {'a':1,'b':2}.items() %}{{k}}={{v}}{{ loop.index }}{% endfor %}", "{% for k in {'b':1,'a':2} %}{{ k }}{% endfor %}",
    "{% for (a, b) in [[1,2],[3,4]] %}{{ a + b }}{% endfor %}", "{% for a, b in [[1,2,3]] %}{% endfor %}",
    "{% for i in [1,2,3] %}{{ loop.previtem }}-{{ loop.nextitem }}-{{ loop.cycle('a','b') }};{% endfor %}",
    "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %}",
    "{% for i in range(2) %}{% for j in range(2) %}{{ loop.index }}{{ i }}{{ j }} {% endfor %}{{ loop.index }}|{% endfor %}",
    "{% for m in messages %}{{ m.role }}{% endfor %}{{ range(2, 10, 3)|list }}{{ range(5, 0, -2)|list }}", "{{ range(1000000)|length }}",
    "{% set a, b = 1, 2 %}{{ a }}{{ b }}", "{% set x %}inner {{ 1 + 1 }}{% endset %}[{{ x }}]",
    "{% if 0 %}a{% elif '' %}b{% elif [1] %}c{% else %}d{% endif %}", "{% if none %}a{% else %}b{% endif %}",
    "{% macro f(a, b='d') %}[{{a}}{{b}}]{% endmacro %}{{ f(1) }}{{ f(1, b=2) }}{{ f() }}{{ f('x', 'y') }}",
    "{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(3) }}", "{% macro g(a) %}{% endmacro %}{{ g(1, 2) }}",
    "{% set top = 'T' %}{% macro h() %}{{ top }}{{ x }}{% endmacro %}{% for x in [1] %}{{ h() }}{% endfor %}",
    "{{ dict(a=1, b='x') }} {{ namespace(a=1).a }} {{ raise_exception('boom: ' ~ 42) }}", "{{ strftime_now('%Y-%m-%d %H:%M %A %j') }}",
    "{% print 'p' %}{% generation %}g{% endgeneration %}",
    # syntax errors
    "{{ 1 ", "{% if true %}x", "{% for %}", "{% endif %}", "{# unterminated", "{{ 'abc }}", "{% if 1 %}{% else %}{% elif 2 %}{% endif %}",
    "{% frobnicate %}", "{{ 1 + }}", "{{ (1, 2 }}", "{{ a is is b }}", "{% set = 1 %}", "{% include 'x' %}", "{{ 99999999999999999999 }}",
    "{% for x in y recursive %}{% endfor %}", "{% raw %}never closed", "{{ x | }}", "{{ f(*a) }}",
]
SNIPPET_VARS = {"d": {"a": {"b": {"c": "deep"}}, "items": "item-key"}, "l": [1, 2, 3], "s": "héllo",
                "x": [1, "a"], "messages": [{"role": "user"}, {"role": "assistant"}]}


def render_snippets(env):
    out = []
    for i, src in enumerate(SNIPPETS):
        case = {"name": "snippet_%03d" % i, "template": src, "vars": SNIPPET_VARS}
        try:
            case["expected"] = env.from_string(src).render(**SNIPPET_VARS)
        except RaisedByTemplate as e:
            case["error"], case["raised"] = str(e), True
        except jinja2.exceptions.TemplateAssertionError as e:  # unknown filter/test: a render error here
            case["error"], case["raised"] = "%s: %s" % (type(e).__name__, e), False
        except jinja2.exceptions.TemplateSyntaxError as e:
            case["error"], case["raised"], case["syntax"] = "%s: %s" % (type(e).__name__, e), False, True
        except Exception as e:  # noqa: BLE001
            case["error"], case["raised"] = "%s: %s" % (type(e).__name__, e), False
        out.append(case)
    with open(os.path.join(OUT, "snippets.json"), "w") as fp:
        json.dump(out, fp, ensure_ascii=False, indent=1)
        fp.write("\n")
    return len(out)


def main():
    env = make_env()
    print("snippets:", render_snippets(env))
    templates = {}
    for f in sorted(os.listdir(SHARED)):
        if f.endswith(".jinja"):
            templates[f[:-len(".jinja")]] = ("shared:templates/" + f,
                                             open(os.path.join(SHARED, f)).read())
    templates.update(builtin_templates())
    os.makedirs(OUT, exist_ok=True)
    total = errors = 0
    for name, (ref, source) in templates.items():
        out_cases = []
        for case in cases_for(name):
            case["bos_token"], case["eos_token"] = BOS, EOS
            try:
                case["expected"] = render(env, source, case)
            except RaisedByTemplate as e:
                case["error"], case["raised"] = str(e), True
                errors += 1
            except Exception as e:  # noqa: BLE001 - any template error is an expected outcome
                case["error"], case["raised"] = "%s: %s" % (type(e).__name__, e), False
                errors += 1
            out_cases.append(case)
            total += 1
        with open(os.path.join(OUT, name + ".json"), "w") as fp:
            json.dump({"template": ref, "cases": out_cases}, fp, ensure_ascii=False, indent=1)
            fp.write("\n")
    print("jinja2 %s: %d templates, %d cases (%d expected errors) -> %s"
          % (jinja2.__version__, len(templates), total, errors, OUT))


if __name__ == "__main__":
    sys.exit(main())
