"""The desk's page in a real browser: `minillm desk` started on a free port, the page driven in
headless Chromium (Debian's package, through Playwright; nothing is downloaded), and what the
page shows compared with what the library computes for the same knobs.

These tests carry the `browser` marker and skip, saying why, without Playwright's Python
package or a Chromium at /usr/bin/chromium ($MINILLM_CHROMIUM). With MINILLM_DESK_SCREENSHOTS
set to a folder they save a picture of each widget there (docs/desk/ holds the ones shown in
docs/DESK.md).
"""
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import minillm
from minillm.constrain import json_schema
from minillm.constrain.constraint import DONE, advance, allowed
from minillm.desk import PASSAGE
from minillm.desk.packing import stored_bytes
from minillm.serving import Engine
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
    # The two columns of percentages have their heading, right above them.
    heads = page.locator(".bar-head .share")
    assert [heads.nth(i).inner_text().replace("\xa0", " ") for i in range(2)] == [
        "model at T = 1", "after the knobs"]
    for i, column in enumerate(("model", "kept")):
        head, cell = heads.nth(i).bounding_box(), rows.nth(0).locator(f".share.{column}")
        assert abs(head["x"] + head["width"] - cell.bounding_box()["x"]
                   - cell.bounding_box()["width"]) < 1
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


CHART = """() => {
  const svg = document.querySelector("#curve");
  const points = svg.querySelector("polyline").getAttribute("points").trim().split(" ")
    .filter((p) => p).map((p) => p.split(",").map(Number));
  const labels = [...svg.querySelectorAll("text.cutlabel, text.tail")].map((t) => {
    const b = t.getBBox();
    return {text: t.textContent, box: [b.x, b.y, b.x + b.width, b.y + b.height]};
  });
  const lines = [...svg.querySelectorAll("line.survivors, line.cutline")]
    .map((l) => ["x1", "y1", "x2", "y2"].map((a) => Number(l.getAttribute(a))));
  return {points, labels, lines, dots: svg.querySelectorAll("circle.dot").length,
          curve: sampling.last.curve,
          titles: [...svg.querySelectorAll("text.axis-title")].map((t) => t.textContent)};
}"""
BOTTOM = 260 - 44  # the chart's x axis


def crosses(segment, box, step=0.25) -> bool:
    """Whether a segment passes inside a box (shrunk by half a pixel), sampled every `step`
    pixels."""
    (x1, y1, x2, y2), (bx1, by1, bx2, by2) = segment, box
    n = max(1, int(math.hypot(x2 - x1, y2 - y1) / step))
    return any(bx1 + 0.5 < x1 + (x2 - x1) * i / n < bx2 - 0.5 and
               by1 + 0.5 < y1 + (y2 - y1) * i / n < by2 - 0.5 for i in range(n + 1))


@pytest.mark.parametrize("knobs,view", [
    (dict(temperature=1.0), "log"), (dict(temperature=0.3), "log"),
    (dict(temperature=0.0), "log"), (dict(temperature=1.2, top_k=40, top_p=0.9), "log"),
    (dict(temperature=1.2, top_k=40, top_p=0.9), "total"),
    (dict(temperature=0.6, top_p=0.5), "total")])
def test_the_chart_stops_at_its_floor_and_its_labels_clear_every_line(page, model, knobs,
                                                                       view):
    for name, value in knobs.items():
        if page.input_value(f"#{name}") != str(value):
            set_value(page, f"#{name}", value, "/api/next")
    settle(page, "sampling")
    page.click(f".tabs button[data-view={view}]")
    chart = page.evaluate(CHART)
    ids = model.tokenizer.encode(PROMPT)
    logits = model.forward(np.array([ids]), last=1)[0, -1].astype(np.float64)
    scaled = np.sort(minillm.filtered_probs(logits, temperature=knobs["temperature"]))[::-1]
    above = int((scaled >= 1e-12).sum())  # the ranks above the floor, from the library
    assert chart["curve"]["above"] == above
    assert chart["titles"] == ["rank (log scale)", "probability (log scale)" if view == "log"
                               else "running total"]  # each axis says what it counts
    points, V = chart["points"], model.config.vocab_size
    if view == "log":
        # One point a rank sent whose probability reaches 1e-12, the last one at rank `above`:
        # the curve never runs along the floor, and a note counts the ranks under it.
        ranks = [r for r, p in zip(chart["curve"]["rank"], chart["curve"]["p"]) if p >= 1e-12]
        assert len(points) == len(ranks) and ranks[-1] == above
        assert sum(y >= BOTTOM - 1 for _, y in points) <= 1
        notes = [label["text"] for label in chart["labels"] if "not drawn" in label["text"]]
        assert notes == ([f"{V - above} ranks below 1e-12: not drawn"] if above < V else [])
        assert chart["dots"] == (len(points) == 1)
    survive = [label for label in chart["labels"] if "surviv" in label["text"]]
    assert len(survive) == 1 and survive[0]["text"].startswith(text(page, "#survivors"))
    segments = [(*a, *b) for a, b in zip(points, points[1:])] + chart["lines"]
    for label in chart["labels"]:
        assert not any(crosses(segment, label["box"]) for segment in segments), label
        for other in chart["labels"]:  # nor each other
            a, b = label["box"], other["box"]
            assert other is label or a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1]


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


def test_quick_new_seeds_show_the_last_seeds_columns(page, model):
    """Four quick "New seed" clicks: each request names itself (X-Desk-Request: the page's
    session, the widget, a growing count), each replaces the one before, and the columns are
    those of the last seed."""
    page.fill("#temperatures-seed", "5")
    page.fill("#temperatures-n", "24")
    sent = []
    page.on("request", lambda r: sent.append(r.headers.get("x-desk-request"))
            if r.url.endswith("/api/temperatures") else None)
    for _ in range(4):
        page.click("#new-seed")
    page.wait_for_function("document.querySelector('#temperatures-seed').value === '9'")
    settle(page, "temperatures")
    assert len(sent) == 4
    names = [name.split(" ") for name in sent]
    assert {(session, widget) for session, widget, _ in names} == {
        (names[0][0], "temperatures/api/temperatures")}
    counts = [int(n) for _, _, n in names]
    assert counts == sorted(set(counts))  # growing
    assert page.locator("#temperatures .error").is_hidden()
    ids = model.tokenizer.encode(PROMPT)
    for i, T in enumerate([0.0, 0.5, 1.0, 1.5]):
        new = minillm.generate(model, ids, max_new_tokens=24, temperature=T, seed=9,
                               stop_tokens=[0])[len(ids):]
        seen = page.locator("#columns .column .text").nth(i).inner_text()
        assert seen.strip() == model.tokenizer.decode(new).strip()


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


def size(n: int) -> str:
    """Bytes as the page shows them: MiB from one MiB on, else KiB."""
    return f"{n / 2**20:.2f} MiB" if n >= 2**20 else f"{n / 2**10:.2f} KiB"


def test_bits_table_shows_each_width(page, model):
    page.fill("#bits-n", "16")
    page.click("#squeeze")
    page.wait_for_selector("#bits-table tbody tr[data-bits='2']", timeout=120_000)
    widths = [int(page.locator("#bits-table tbody tr").nth(i).get_attribute("data-bits"))
              for i in range(page.locator("#bits-table tbody tr").count())]
    assert widths == [32, 8, 6, 5, 4, 3, 2]
    ids = model.tokenizer.encode(PROMPT)
    passage = model.tokenizer.encode(PASSAGE.read_text())[:model.config.context_length]
    shown = []
    for bits in widths:
        squeezed = model if bits == 32 else minillm.quantize(model, skip=(), bits=bits,
                                                             embeddings=True)
        row = page.locator(f"#bits-table tbody tr[data-bits='{bits}']")
        stored = stored_bytes(squeezed)
        assert row.locator("td.weights .total").inner_text() == size(stored["total"])
        shown.append(stored["total"])
        if bits in (32, 5, 4):
            out = minillm.generate(squeezed, ids, max_new_tokens=16, temperature=0,
                                   stop_tokens=[0])
            assert row.locator("td.text").inner_text().strip() == model.tokenizer.decode(
                out[len(ids):], skip_special_tokens=True).strip()
            assert row.locator("td.num").first.inner_text() == \
                f"{surprise(squeezed, passage):.3f} nats"
    assert shown == sorted(shown, reverse=True) and len(set(shown)) == len(shown)
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


def engine_steps(model, prompts, n, block_size, num_blocks, budget):
    """Each step of the requests run through minillm.serving.Engine directly: the running
    requests, each request's state and table, every block's holders."""
    engine = Engine(model, block_size=block_size, num_blocks=num_blocks,
                    max_batch_tokens=budget)
    requests = {}
    for i, ids in enumerate(prompts):
        rid = engine.add_request(ids, max_new_tokens=n, temperature=0.0, stop_tokens=[0])
        requests[rid] = engine.requests[rid]

    def shot():
        running = {r.id for r in engine.scheduler.running}
        owners = {}
        for r in engine.scheduler.running:
            for b in r.table:
                owners.setdefault(b, []).append(r.id)
        return {"states": ["running" if rid in running else "waiting" if rid in engine.requests
                           else "finished" for rid in requests],
                "tables": [list(r.table) for r in requests.values()],
                "owners": [sorted(owners.get(b, [])) for b in range(num_blocks)],
                "preemptions": engine.stats.preemptions}

    shots = [shot()]
    while engine.has_unfinished():
        engine.step()
        shots.append(shot())
    return shots


def test_serving_widget_steps_through_the_engine(page, model):
    settle(page, "serving")  # the page serves the default prompts as it opens
    prompts = [model.tokenizer.encode(line)
               for line in page.input_value("#serving-prompts").split("\n")]
    n, bs, pool, budget = (int(page.input_value(f"#serving-{name}"))
                           for name in ("n", "block", "pool", "budget"))
    want = engine_steps(model, prompts, n, bs, pool, budget)
    assert page.get_attribute("#serving-step", "max") == str(len(want) - 1)
    for k, shot in enumerate(want):
        page.eval_on_selector("#serving-step", "(e, v) => { e.value = v; "
                              "e.dispatchEvent(new Event('input')); }", str(k))
        assert text(page, "#serving-step-shown") == f"step {k} of {len(want) - 1}"
        cells = page.locator("#pool .cell")
        assert cells.count() == pool
        shown = page.evaluate("() => [...document.querySelectorAll('#pool .cell')].map((c) => "
                              "[c.dataset.owners, c.classList.contains('shared')])")
        assert shown == [[" ".join(map(str, owners)), len(owners) > 1]
                         for owners in shot["owners"]]
        rows = page.locator("#serving-requests tbody tr")
        for i, (state, table) in enumerate(zip(shot["states"], shot["tables"])):
            row = rows.nth(i)
            assert row.locator(".state").inner_text().startswith(state)
            chips = row.locator(".chip")
            assert [int(chips.nth(j).inner_text()) for j in range(chips.count())] == table
        preempted = shot["preemptions"] - want[k - 1]["preemptions"] if k else 0
        assert text(page, "#serving-events").count("is preempted") == preempted
    assert any(len(owners) == 3 for shot in want for owners in shot["owners"])  # shared by 3
    assert want[-1]["preemptions"] > 0
    # The buttons step back and forth; the picture: the step of the first preemption.
    first = next(k for k, shot in enumerate(want) if shot["preemptions"])
    page.eval_on_selector("#serving-step", "(e, v) => { e.value = v; "
                          "e.dispatchEvent(new Event('input')); }", str(first - 1))
    page.click("#serving-next")
    assert page.input_value("#serving-step") == str(first)
    assert "is preempted" in text(page, "#serving-events")
    screenshot(page, "serving")
    page.click("#serving-back")
    assert page.input_value("#serving-step") == str(first - 1)
    # A pool too small for the longest request is refused, and said so under the widget.
    page.fill("#serving-pool", "4")
    click(page, "#run-serving", "/api/serving")
    settle(page, "serving")
    error = page.locator("#serving .error")
    assert error.is_visible() and "num_blocks: prompt 1 needs" in error.inner_text()


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


def shown_share(text_shown: str) -> float:
    """A probability as the page writes it (12.34%, 2.9e-8 or 0) as a number."""
    return float(text_shown[:-1]) / 100 if text_shown.endswith("%") else float(text_shown)


def close_to(text_shown: str, p: float) -> bool:
    """Whether the page's rounding of p reads `text_shown` (two decimals of a percentage, or two
    significant digits below 0.01%), up to the last digit shown."""
    got = shown_share(text_shown)
    return abs(got - p) <= (0.00005 + 1e-9 if text_shown.endswith("%") else 0.06 * p + 1e-12)


def test_mask_shows_the_state_the_allowed_set_and_the_distribution(page, model):
    settle(page, "mask")  # the page writes the default schema's text as it opens
    tokenizer, V = model.tokenizer, model.config.vocab_size
    prompt, spec = page.input_value("#mask-prompt"), page.input_value("#mask-spec")
    c = json_schema(json.loads(spec), tokenizer)
    ids = tokenizer.encode(prompt)
    new = minillm.generate(model, ids, max_new_tokens=32, temperature=0.8, seed=0,
                           stop_tokens=[0], constraint=c)[len(ids):]
    tokens = page.locator("#mask-path .token")
    assert [tokens.nth(i).get_attribute("title") for i in range(tokens.count())] == [
        f"token {t}" for t in new]  # generate's own text under the constraint
    states = [c.automaton.walk(b"".join(tokenizer.token_bytes(t) for t in new[:i]))
              for i in range(len(new))]
    assert new[-1] == 0  # the default schema's JSON is whole, and the end token drawn
    chips = page.locator("#mask-path .state")
    assert [chips.nth(i).inner_text() for i in range(chips.count())] == [
        *map(str, states), "done"]
    for i in range(len(new)):
        assert ("accepting" in chips.nth(i).get_attribute("class")) == bool(
            c.automaton.accepting[states[i]])
    json.loads(tokenizer.decode(new, skip_special_tokens=True))
    for k in (0, 1, len(new) // 2, len(new) - 1):
        page.eval_on_selector("#mask-step", "(e, v) => { e.value = v; "
                              "e.dispatchEvent(new Event('input')); }", str(k))
        assert text(page, "#mask-step-shown") == f"token {k + 1} of {len(new)}"
        mask = allowed(c, states[k], V)
        assert text(page, "#mask-stats .mask-state") == str(states[k])
        assert text(page, "#mask-stats .mask-accepting") == (
            "accepting" if c.automaton.accepting[states[k]] else "not accepting")
        assert text(page, "#mask-stats .mask-allowed") == str(int(mask.sum()))
        after = advance(c, states[k], new[k])
        assert text(page, "#mask-stats .mask-after") == ("done" if after == DONE else str(after))
        z = model.forward(np.array([ids + new[:k]]), last=1)[0, -1].astype(np.float64)
        p = minillm.filtered_probs(z)
        kept = minillm.filtered_probs(np.where(mask, z, -np.inf), temperature=0.8)
        assert close_to(text(page, "#mask-stats .mask-held"), p[mask].sum())
        rows = page.locator("#mask-bars .mask-row")
        order = np.argsort(-p, kind="stable")[:8]
        assert [int(rows.nth(i).get_attribute("data-id")) for i in range(rows.count())] == \
            order.tolist()
        for i, t in enumerate(order):  # the model's favourites, the masked ones struck through
            row = rows.nth(i)
            assert ("masked" in row.get_attribute("class")) == (not mask[t])
            assert close_to(row.locator(".share.model").inner_text(), p[t])
            if mask[t]:
                assert close_to(row.locator(".share.kept").inner_text(), kept[t])
                assert row.locator(".next").inner_text() == "\u2192 " + (
                    "done" if t == 0 else str(advance(c, states[k], int(t))))
            else:
                assert row.locator(".share.kept").inner_text() == "masked"
                assert row.locator(".next").inner_text() == "\u2013"  # nowhere: -1
        left = page.locator("#mask-kept tbody tr")  # what the mask leaves, most likely first
        want = np.argsort(-kept, kind="stable")[:min(8, int((kept > 0).sum()))]
        assert [int(left.nth(i).get_attribute("data-id")) for i in range(left.count())] == \
            want.tolist()
        for i, t in enumerate(want):
            assert close_to(left.nth(i).locator(".kept").inner_text(), kept[t])
        if k == 1:
            screenshot(page, "mask")
    # A regular expression: its example is (yes|no), and the text is one of them.
    with page.expect_response(lambda r: r.url.endswith("/api/mask"), timeout=60_000):
        page.select_option("#mask-kind", "regex")
    settle(page, "mask")
    assert page.input_value("#mask-spec") == "(yes|no)"
    tokens = page.locator("#mask-path .token")
    spelled = "".join(tokens.nth(i).inner_text() for i in range(tokens.count() - 1))
    assert spelled in ("yes", "no") and tokens.nth(tokens.count() - 1).get_attribute(
        "title") == "token 0"
    # Bad input: the library's one-line reason under the widget, nothing stale left on show.
    error = page.locator("#mask .error")
    for kind, bad, reason in (
            ("regex", "(ab", "spec: regex '(ab', at 3: a group is not closed"),
            ("json_schema", '{"type": "string", "format": "date"}',
             "spec: json_schema: the keyword 'format' is not supported")):
        if page.input_value("#mask-kind") != kind:
            with page.expect_response(lambda r: r.url.endswith("/api/mask"), timeout=60_000):
                page.select_option("#mask-kind", kind)
            settle(page, "mask")
        page.fill("#mask-spec", bad)
        click(page, "#run-mask", "/api/mask")
        settle(page, "mask")
        assert error.is_visible() and error.inner_text().startswith(reason)
        assert "\n" not in error.inner_text() and "Traceback" not in error.inner_text()
        assert page.locator("#mask-path .token").count() == 0
    page.fill("#mask-spec", spec)
    click(page, "#run-mask", "/api/mask")
    settle(page, "mask")
    assert not error.is_visible() and page.locator("#mask-path .token").count() == len(new)
