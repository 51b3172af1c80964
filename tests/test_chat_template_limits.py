"""A chat template is a program from a model's files: its render is bounded in time, loop steps,
size and call depth (minillm/text/template_limits.py), and whatever stops it is one line naming
the template, in the library, at `minillm chat` and at the desk. Each hostile template below
would hang, fill the memory or end in a RecursionError without the bounds; the tests assert the
error, not a duration."""
import io
import json

import pytest

import minillm
from minillm.cli import main
from minillm.text.chat_template import render_chat
from minillm.text.template_limits import (MAX_DEPTH, MAX_LOOP_STEPS, MAX_SECONDS, MAX_SIZE,
                                          Limits)

jinja2 = pytest.importorskip("jinja2")

USER = [{"role": "user", "content": "What is 2+2?"}]
NESTED_LOOP = ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}"
               "{% endfor %}")
HOSTILE = {  # template: what the one-line error says
    "nested loop": (NESTED_LOOP, f"stopped: more than {MAX_LOOP_STEPS:,} loop steps"),
    "string bomb": ("{{ 'x' * 4000000000 }}", f"stopped: a repetition: more than {MAX_SIZE:,}"),
    "list bomb": ("{{ [0] * 10**10 }}", f"stopped: a repetition: more than {MAX_SIZE:,}"),
    "range bomb": ("{{ range(10**12) | list }}", "OverflowError: Range too big"),
    "doubling": ("{% set ns = namespace(s='x') %}{% for i in range(64) %}"
                 "{% set ns.s = ns.s ~ ns.s %}{% endfor %}", "stopped: a ~ join: more than"),
    "padding": ("{{ 'x'.ljust(10**10) }}", "stopped: str.ljust: more than"),
    "width": ("{{ '%999999999s' % 'x' }}", "stopped: a % format: more than"),
    "shared rows": ("{% set row = ['x' * 1000] * 1000 %}{% set rows = [row, row, row] %}"
                    "{{ [rows] * 1000 }}", "stopped: a repetition: more than"),
    "many large items": ("{{ range(100000) | map('center', 1000000) | join }}",
                         "stopped: the items of the map filter: more than"),
    "lipsum": ("{{ lipsum(10**7) }}", "stopped: lipsum: more than"),
    "self-holding namespace": ("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}",
                               "stopped: the output of {{ }}: more than"),
    "long output": ("{% for i in range(100000) %}{{ 'x' * 100 }}{% endfor %}",
                    "stopped: the rendered text: more than"),
    "squaring": ("{% set ns = namespace(x=3) %}{% for i in range(64) %}"
                 "{% set ns.x = ns.x * ns.x %}{% endfor %}", "an integer of more than"),
    "recursive macro": ("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
                        f"stopped: calls nested more than {MAX_DEPTH} deep"),
    "recursive loop": ("{% for m in messages recursive %}{{ loop(messages) }}{% endfor %}",
                       f"stopped: calls nested more than {MAX_DEPTH} deep"),
    "recursive block": ("{% block a %}{{ self.a() }}{% endblock %}",
                        f"stopped: calls nested more than {MAX_DEPTH} deep"),
    "deep JSON": ("{% set ns = namespace(x=[]) %}{% for i in range(20000) %}"
                  "{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x | tojson }}", "RecursionError"),
    "Python TypeError": ("{{ messages[0].content + 1 }}", "TypeError: can only concatenate"),
    "TypeError in a call": ("{{ messages[0].content.startswith(1) }}", "TypeError: "),
    "Jinja syntax error": ("{% for m in messages %}{{ m.content }}",
                           "TemplateSyntaxError: Unexpected end of template"),
    "undefined": ("{{ nothing() }}", "UndefinedError: 'nothing' is undefined"),
}


def one_line_error(template, **options):
    with pytest.raises(ValueError) as error:
        render_chat(USER, template, **options)
    message = str(error.value)
    assert "\n" not in message and len(message) < 700
    return message


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_hostile_template_is_one_line_naming_it(name):
    template, says = HOSTILE[name]
    message = one_line_error(template, template_name="hostile.jinja")
    assert message.startswith("chat template of hostile.jinja: ") and says in message


def test_the_error_names_the_templates_line():
    template = "{% for m in messages %}\n{{ m.content }}\n{{ m.content - 1 }}\n{% endfor %}"
    assert one_line_error(template) == (
        "chat template: line 3: TypeError: unsupported operand type(s) for -: 'str' and 'int'")


def test_raise_exception_is_the_templates_own_words():
    assert one_line_error("{{ raise_exception('roles must alternate') }}") == (
        "chat template: roles must alternate")


def test_the_time_bound_stops_a_render_the_other_bounds_allow():
    message = one_line_error(NESTED_LOOP, limits=Limits(seconds=0.2, loop_steps=10**12))
    assert "stopped: took more than 0.2 s (the time limit, MAX_SECONDS)" in message
    assert Limits().seconds == MAX_SECONDS


@pytest.mark.parametrize("bound, value, template", [
    ("loop_steps", 10, "{% for i in range(11) %}{% endfor %}"),
    ("size", 100, "{{ 'x' * 101 }}"),
    ("size", 100, "{% for i in range(101) %}x{% endfor %}"),
    ("depth", 3, "{% macro f(n) %}{% if n %}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(3) }}"),
])
def test_a_caller_sets_each_bound(bound, value, template):
    """The template needs one more than `value`: refused at `value`, rendered at one more."""
    assert "stopped: " in one_line_error(template, limits=Limits(**{bound: value}))
    assert isinstance(render_chat(USER, template, limits=Limits(**{bound: value + 1})), str)


ORDINARY = [
    "{% for m in messages %}{{ loop.index }}/{{ loop.length }} "
    "{{ (m.role ~ ': ' ~ m.content) | center(30) }}{% if not loop.last %}\n{% endif %}"
    "{% endfor %}",
    "{{ '|' + ['a', 'b'] | join(', ') * 2 }}{{ '%5s' % 'x' }}{{ 2 ** 10 }}{{ 7 % 3 }}"
    "{{ [1, 2] + [3] }}{{ 'ab'.replace('a', 'xyz').ljust(6, '.') }}{{ '{:>4}'.format(1) }}"
    "{{ '%s of 12345678901, %5.2f' % ('one', 3.14159) }}",
    "{% for m in messages if m.role != 'system' recursive %}{{ m.content | tojson(indent=2) }}"
    "{% else %}none{% endfor %}{% set ns = namespace(n=0) %}{% for m in messages %}"
    "{% set ns.n = ns.n + 1 %}{% if loop.first %}{% continue %}{% endif %}{% endfor %}{{ ns }}",
    "{% macro f(n) %}{% if n %}({{ f(n - 1) }}){% endif %}{% endmacro %}{{ f(5) }}"
    "{{ messages | map(attribute='content') | map('upper') | join('; ') | indent(2) }}"
    "{% filter upper %}{{ range(3) | list }}{% endfilter %}{{ messages | batch(3, '-') | list }}",
]


@pytest.mark.parametrize("template", ORDINARY)
def test_within_the_bounds_a_template_renders_as_jinjas_own_sandbox(template):
    """The counting changes nothing a template writes: the text of Jinja's immutable sandbox
    with the same options and transformers' tojson (loops, ~, filters, operators, macros,
    namespaces, loop controls)."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    plain = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                          extensions=["jinja2.ext.loopcontrols"])
    plain.filters["tojson"] = lambda x, indent=None: json.dumps(x, ensure_ascii=False,
                                                                indent=indent)  # transformers'
    messages = [{"role": "system", "content": "Be brief."}, *USER,
                {"role": "assistant", "content": "4 <b>\"4\"</b>"}]
    expected = plain.from_string(template).render(messages=messages, add_generation_prompt=True,
                                                  tools=None, documents=None)
    assert render_chat(messages, template) == expected and len(expected) > 20


def chat_model(tmp_path, template):
    """A tiny model whose file carries `template` as its chat template."""
    from tests.test_chat import chatml_tokenizer

    cfg = minillm.ModelConfig(arch="modern", vocab_size=258, context_length=16, d_model=16,
                              n_layers=1, n_heads=2)
    model = minillm.random_model(cfg, seed=5)
    model.tokenizer = chatml_tokenizer().with_chat_template(template)
    path = tmp_path / "hostile.npz"
    minillm.save(model, path)
    return path


@pytest.mark.parametrize("name", ["nested loop", "string bomb", "recursive macro",
                                  "Python TypeError"])
def test_minillm_chat_refuses_a_hostile_template_in_one_line(tmp_path, capsys, monkeypatch,
                                                             name):
    template, says = HOSTILE[name]
    path = chat_model(tmp_path, template)
    monkeypatch.setattr("sys.stdin", io.StringIO("Hello\n\n"))
    assert main(["chat", "--model_path", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"minillm chat: error: chat template of {path}: ") and says in err


def test_minillm_chat_names_a_hostile_template_file(tmp_path, capsys, monkeypatch):
    from tests.test_chat import SMOLLM2_TEMPLATE

    path = chat_model(tmp_path, SMOLLM2_TEMPLATE)
    template = tmp_path / "bad.jinja"
    template.write_text(HOSTILE["recursive loop"][0], encoding="utf-8")
    monkeypatch.setattr("sys.stdin", io.StringIO("Hello\n\n"))
    assert main(["chat", "--model_path", str(path), "--template", str(template)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"minillm chat: error: chat template of {template}: line 1: "
                          f"stopped: calls nested more than {MAX_DEPTH} deep") and (
        err.count("\n") == 1)


def test_the_desk_reads_prompts_as_text_when_the_template_cannot_render(tmp_path):
    """The desk, given a model whose template passes a bound, starts (no traceback, no hang),
    says why in one line (`minillm desk` prints it, /api/info carries it) and reads its prompts
    as plain text, as for any template it cannot render."""
    from minillm.desk.widgets import make_desk, prompt_ids

    model = minillm.load(chat_model(tmp_path, NESTED_LOOP))
    desk = make_desk(model, "hostile")
    assert desk.chat is False
    assert desk.template_refused.startswith("chat template") and "stopped" in \
        desk.template_refused and "\n" not in desk.template_refused
    assert prompt_ids(desk, "Hi") == model.tokenizer.encode("Hi", add_special_tokens=True)
