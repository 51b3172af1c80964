"""The desk's page in a real browser: `minillm desk` started on a free port, the page driven in
headless Chromium (Debian's package, through Playwright; nothing is downloaded), and what the
page shows compared with what the library computes for the same knobs.

These tests carry the `browser` marker and skip, saying why, without Playwright's Python
package or a Chromium at /usr/bin/chromium ($MINILLM_CHROMIUM). With MINILLM_DESK_SCREENSHOTS
set to a folder they save a picture of each widget there (docs/desk/ holds the ones shown in
docs/DESK.md).
"""
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import minillm
from minillm.desk import PASSAGE
from minillm.study.explain import repeats, surprise

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("MINILLM_CHROMIUM", "/usr/bin/chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]
PROMPT = "In the beginning"


@pytest.fixture(scope="module")
def model():
    return minillm.load(ROOT / "weights" / "target.npz")


@pytest.fixture(scope="module")
def desk_url():
    """`minillm desk` on a free port; its URL, read from the line it prints."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    process = subprocess.Popen([sys.executable, "-m", "minillm", "desk", "--port", "0",
                                "--no-browser"], cwd=ROOT, env=env, stderr=subprocess.PIPE,
                               text=True)
    line = process.stderr.readline()
    match = re.search(r"http://127\.0\.0\.1:\d+/", line)
    if match is None:
        process.kill()
        pytest.fail(f"minillm desk did not print its address: {line!r}")
    yield match.group(0)
    process.terminate()
    process.wait(timeout=10)


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip(
        "playwright.sync_api",
        reason="the browser tests drive Chromium with Playwright: pip install playwright")
    if not Path(CHROMIUM).is_file():
        pytest.skip(f"no Chromium at {CHROMIUM}: apt-get install chromium (or set "
                    "MINILLM_CHROMIUM)")
    try:  # an unpacked Chromium without its libraries cannot start: say so
        subprocess.run([CHROMIUM, "--version"], check=True, capture_output=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as e:  # there, but broken: not a skip
        pytest.fail(f"Chromium at {CHROMIUM} does not run: {e}")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield browser
        browser.close()


@pytest.fixture
def page(browser, desk_url):
    page = browser.new_page(viewport={"width": 1100, "height": 900})
    errors = []
    page.on("pageerror", lambda error: errors.append(error))
    page.goto(desk_url)
    page.wait_for_selector("body[data-ready=yes]", timeout=60_000)
    yield page
    assert not errors, errors  # no script error on the page
    page.close()


def settle(page, widget):
    """Wait until the widget's requests are answered and drawn."""
    page.wait_for_function(f"!document.querySelector('#{widget}').classList.contains('busy')",
                           timeout=60_000)


def set_value(page, selector, value, endpoint):
    """Set a control as a user would (an input event), and wait for the answer it asks for."""
    with page.expect_response(lambda r: r.url.endswith(endpoint), timeout=60_000):
        page.eval_on_selector(selector, "(e, v) => { e.value = v; "
                              "e.dispatchEvent(new Event('input')); "
                              "e.dispatchEvent(new Event('change')); }", str(value))


def click(page, selector, endpoint):
    with page.expect_response(lambda r: r.url.endswith(endpoint), timeout=60_000):
        page.click(selector)


def screenshot(page, widget):
    folder = os.environ.get("MINILLM_DESK_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.locator(f"#{widget}").screenshot(path=str(Path(folder) / f"{widget}.png"))


def text(page, selector) -> str:
    return page.locator(selector).inner_text()


def percent(p) -> str:
    return f"{100 * p:.2f}%"


def test_sampling_desk_shows_what_filtered_probs_keeps(page, model):
    set_value(page, "#temperature", 1.2, "/api/next")
    set_value(page, "#top_p", 0.9, "/api/next")
    set_value(page, "#top_k", 40, "/api/next")
    settle(page, "sampling")
    ids = model.tokenizer.encode(PROMPT)
    logits = model.forward(np.array([ids]), last=1)[0, -1]
    kept = minillm.filtered_probs(logits, temperature=1.2, top_p=0.9, top_k=40,
                                  history=[ids])
    plain = minillm.filtered_probs(logits)
    assert text(page, "#survivors") == str(int((kept > 0).sum()))
    rows = page.locator("#bars .bar-row")
    order = np.argsort(-plain, kind="stable")[:12]
    assert rows.count() == 13  # the top twelve and everything else
    for i, token in enumerate(order):
        row = rows.nth(i)
        assert row.locator(".share.model").inner_text() == percent(plain[token])
        shown = row.locator(".share.kept").inner_text()
        assert shown == (percent(kept[token]) if kept[token] > 0 else "cut")
    p = kept[kept > 0]
    assert text(page, "#effective-kept") == f"{np.exp(-(p * np.log(p)).sum()):.1f}"
    page.click(".tabs button[data-view=total]")
    assert page.locator("#curve .cutline").count() == 2  # top-p and top-k lines
    screenshot(page, "sampling")

    # The button draws the token sample_next_token draws with the seed shown, and appends it.
    with page.expect_response(lambda r: r.url.endswith("/api/next"), timeout=60_000):
        page.click("#draw")
    settle(page, "sampling")
    token = int(minillm.sample_next_token(logits, temperature=1.2, top_p=0.9, top_k=40,
                                          history=[ids], rng=np.random.default_rng(0)))
    assert text(page, "#sampling-drawn") == model.tokenizer.decode([token])
    assert page.input_value("#sampling-seed") == "1"


def test_penalty_sliders_show_what_filtered_probs_keeps(page, model):
    # Three drawn tokens give the penalties a history beyond the prompt; then each slider moves.
    for _ in range(3):
        with page.expect_response(lambda r: r.url.endswith("/api/next"), timeout=60_000):
            page.click("#draw")
        settle(page, "sampling")
    drawn = page.evaluate("sampling.drawn")
    ids = model.tokenizer.encode(PROMPT) + drawn
    logits = model.forward(np.array([ids]), last=1)[0, -1]
    plain = minillm.filtered_probs(logits)
    order = np.argsort(-plain, kind="stable")[:12]
    shown_before = None
    for knobs in (dict(frequency_penalty=1.5), dict(frequency_penalty=1.5, presence_penalty=-1.2),
                  dict(frequency_penalty=0.0, presence_penalty=2.0)):
        for name, value in knobs.items():
            set_value(page, f"#{name}", value, "/api/next")
        settle(page, "sampling")
        kept = minillm.filtered_probs(logits, **knobs, history=[ids])
        rows = page.locator("#bars .bar-row")
        shown = [rows.nth(i).locator(".share.kept").inner_text() for i in range(12)]
        assert shown == [percent(kept[t]) for t in order]
        p = kept[kept > 0]
        assert text(page, "#effective-kept") == f"{np.exp(-(p * np.log(p)).sum()):.1f}"
        assert text(page, "output[for=frequency_penalty]") == (
            "off" if knobs["frequency_penalty"] == 0 else f"{knobs['frequency_penalty']:g}")
        assert shown != shown_before  # each move changed what the page shows
        shown_before = shown


def test_four_temperatures_show_generate_and_repeat_with_the_seed(page, model):
    temperatures = [0.0, 0.5, 1.0, 1.5]
    page.fill("#temperatures-seed", "5")
    page.fill("#temperatures-n", "24")
    click(page, "#write", "/api/temperatures")
    settle(page, "temperatures")
    ids = model.tokenizer.encode(PROMPT)
    shown = [page.locator("#columns .column").nth(i) for i in range(4)]
    first = [column.locator(".text").inner_text() for column in shown]
    for column, T, seen in zip(shown, temperatures, first):
        new = minillm.generate(model, ids, max_new_tokens=24, temperature=T, seed=5,
                               stop_tokens=[0])[len(ids):]
        assert seen.strip() == model.tokenizer.decode(new).strip()
        expected = (surprise(model, ids + new) * (len(ids + new) - 1)
                    - surprise(model, ids) * (len(ids) - 1)) / len(new)
        assert abs(float(column.locator(".surprise b").inner_text()) - expected) <= 0.0051
    click(page, "#write", "/api/temperatures")
    settle(page, "temperatures")
    assert [page.locator("#columns .column .text").nth(i).inner_text()
            for i in range(4)] == first  # the same seed writes every column again
    screenshot(page, "temperatures")


def shows_greedy_and_penalised(page, model, penalties):
    """The two columns of the repetition widget are generate's text without and with the
    penalties, every repeat marked as the library finds it."""
    ids = model.tokenizer.encode(page.input_value("#repetition-prompt"))
    for box, knobs in (("#greedy-text", {}), ("#penalised-text", penalties)):
        out = minillm.generate(model, ids, max_new_tokens=64, temperature=0, **knobs,
                               stop_tokens=[0])
        marks = repeats(out, len(ids))
        shown = page.locator(f"{box} .token")
        assert [shown.nth(i).get_attribute("title") for i in range(shown.count())] == [
            f"token {t}" for t in out[len(ids):]]
        assert [("repeat" in (shown.nth(i).get_attribute("class") or ""))
                for i in range(shown.count())] == marks


def test_repetition_marks_the_repeats_the_library_finds(page, model):
    set_value(page, "#penalty", 1.6, "/api/repetition")
    settle(page, "repetition")
    shows_greedy_and_penalised(page, model, dict(repetition_penalty=1.6))
    assert text(page, "#penalty-shown") == "r = 1.6"
    screenshot(page, "repetition")
    set_value(page, "#penalty", 1, "/api/repetition")
    set_value(page, "#frequency", 0.8, "/api/repetition")
    set_value(page, "#presence", 0.5, "/api/repetition")
    settle(page, "repetition")
    shows_greedy_and_penalised(page, model, dict(frequency_penalty=0.8, presence_penalty=0.5))
    assert text(page, "#penalty-shown") == "r = 1, \u03b1f = 0.8, \u03b1p = 0.5"


def test_cache_race_shows_identical_tokens(page, model):
    page.fill("#race-n", "40")
    click(page, "#run-race", "/api/race")
    settle(page, "race")
    cached, uncached = text(page, "#cached-text"), text(page, "#uncached-text")
    ids = model.tokenizer.encode(PROMPT)
    out = minillm.generate(model, ids, max_new_tokens=40, temperature=0.8, seed=0, stop_tokens=[0])
    assert cached.strip() == uncached.strip() == model.tokenizer.decode(out[len(ids):]).strip()
    assert text(page, "#race-verdict").startswith("identical tokens")
    n, P = len(out) - len(ids), len(ids)
    assert text(page, "#cached-stats").startswith(f"{P + n - 1} token passes")
    assert text(page, "#uncached-stats").startswith(f"{n * P + n * (n - 1) // 2} token passes")
    screenshot(page, "race")


def test_bits_table_shows_each_width(page, model):
    page.fill("#bits-n", "16")
    page.click("#squeeze")
    page.wait_for_selector("#bits-table tbody tr[data-bits='2']", timeout=120_000)
    ids = model.tokenizer.encode(PROMPT)
    passage = model.tokenizer.encode(PASSAGE.read_text())[:model.config.context_length]
    for bits in (32, 4):
        squeezed = model if bits == 32 else minillm.quantize(model, skip=(), bits=bits,
                                                             embeddings=True)
        row = page.locator(f"#bits-table tbody tr[data-bits='{bits}']")
        out = minillm.generate(squeezed, ids, max_new_tokens=16, temperature=0, stop_tokens=[0])
        assert row.locator("td.text").inner_text().strip() == model.tokenizer.decode(
            out[len(ids):]).strip()
        assert row.locator("td.num").first.inner_text() == \
            f"{surprise(squeezed, passage):.3f} nats"
    screenshot(page, "bits")


def test_speculative_rounds_spell_the_greedy_text(page, model):
    for drafter in ("model", "ngram"):
        page.select_option("#drafter", drafter)
        page.wait_for_function("!document.querySelector('#speculative').classList"
                               ".contains('busy') && document.querySelector('#rounds li')",
                               timeout=60_000)
        click(page, "#run-speculative", "/api/speculative")
        settle(page, "speculative")
        kept = page.locator("#rounds .accepted, #rounds .resampled, #rounds .bonus, "
                            "#rounds .target")
        spelled = "".join(kept.nth(i).inner_text() for i in range(kept.count()))
        ids = model.tokenizer.encode(PROMPT)
        out = minillm.generate(model, ids, max_new_tokens=48, temperature=0, stop_tokens=[0])
        assert spelled.replace("\u21b5", "").strip() == model.tokenizer.decode(
            out[len(ids):]).strip()
        draft = minillm.load(ROOT / "weights" / "draft.npz") if drafter == "model" else "ngram"
        _, stats = minillm.speculative_generate(model, draft, ids, max_new_tokens=48, k=4,
                                                temperature=0, stop_tokens=[0])
        shown = re.match(r"(\d+) of (\d+) guesses accepted \((\d+)%\); \d+ tokens in (\d+) "
                         r"passes", text(page, "#speculative-stats"))
        accepted, proposed, rate, passes = map(int, shown.groups())
        assert rate == round(100 * stats.acceptance_rate) and passes == stats.target_calls
        assert accepted == page.locator("#rounds .accepted").count()
        assert proposed == page.locator("#rounds .accepted, #rounds .rejected, "
                                        "#rounds .unchecked").count()
    screenshot(page, "speculative")


def test_a_refused_request_is_shown_and_the_page_goes_on(page):
    with page.expect_response(lambda r: r.url.endswith("/api/next"), timeout=60_000):
        page.fill("#sampling-prompt", "word " * 300)
        page.dispatch_event("#sampling-prompt", "change")
    settle(page, "sampling")
    error = page.locator("#sampling .error")
    assert error.is_visible() and "exceed the context" in error.inner_text()
    with page.expect_response(lambda r: r.url.endswith("/api/next"), timeout=60_000):
        page.fill("#sampling-prompt", PROMPT)
        page.dispatch_event("#sampling-prompt", "change")
    settle(page, "sampling")
    assert not error.is_visible()
    assert text(page, "#survivors") == "2048"
