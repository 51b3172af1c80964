// The desk's page: each widget sends its knobs to the desk's server and draws what comes back.
// Plain JavaScript, no library: the server (minillm) computes every figure shown here.
"use strict";

const $ = (selector, root = document) => root.querySelector(selector);
const $$ = (selector, root = document) => Array.from(root.querySelectorAll(selector));
const SVG = "http://www.w3.org/2000/svg";
let INFO = null;
let running = 0; // requests in flight, for the busy flag in the header

// -- talking to the server --------------------------------------------------------------------

// POST body to path for `widget` (a section): its busy class is on while the request runs, its
// error line shows a refusal. A newer request of the same widget and key aborts the older.
const inFlight = new Map();
async function api(widget, path, body, key = path) {
  const id = widget.id + key;
  if (inFlight.has(id)) inFlight.get(id).abort();
  const control = new AbortController();
  inFlight.set(id, control);
  const error = $(".error", widget);
  widget.classList.add("busy");
  $("#busy").hidden = ++running === 0;
  try {
    const response = await fetch(path, {method: "POST", body: JSON.stringify(body),
      headers: {"Content-Type": "application/json"}, signal: control.signal});
    const answer = await response.json();
    if (!response.ok) throw new Error(answer.error || `HTTP ${response.status}`);
    error.hidden = true;
    return answer;
  } catch (e) {
    if (e.name === "AbortError") return null;
    error.textContent = e.message;
    error.hidden = false;
    return null;
  } finally {
    if (inFlight.get(id) === control) {
      inFlight.delete(id);
      widget.classList.remove("busy");
    }
    $("#busy").hidden = --running === 0;
  }
}

// fn, called once `wait` ms after the last of a burst of calls (a slider being dragged).
function debounce(fn, wait = 120) {
  let timer = null;
  return (...args) => { clearTimeout(timer); timer = setTimeout(() => fn(...args), wait); };
}

const number = (selector) => Number($(selector).value);
const percent = (p) => (100 * p).toFixed(2) + "%";
const visible = (text) => text.replace(/\n/g, "\u21b5\n");

// Tokens as spans (title: the token id), each given the classes `classes(token)` returns.
function tokenSpans(target, tokens, classes = () => []) {
  target.replaceChildren(...tokens.map((t) => {
    const span = document.createElement("span");
    span.textContent = visible(t.text);
    span.title = `token ${t.id}`;
    span.className = ["token", ...classes(t)].join(" ");
    return span;
  }));
}

// -- the sampling desk --------------------------------------------------------------------------

const sampling = {drawn: [], drawnText: "", view: "log", last: null};

function samplingKnobs() {
  return {temperature: number("#temperature"), top_k: number("#top_k"),
          top_p: number("#top_p"), min_p: number("#min_p"),
          repetition_penalty: number("#repetition_penalty"),
          frequency_penalty: number("#frequency_penalty"),
          presence_penalty: number("#presence_penalty")};
}

function showKnobValues() {
  for (const output of $$("output")) {
    const value = Number($("#" + output.htmlFor).value);
    const off = {top_k: 0, top_p: 1, min_p: 0, repetition_penalty: 1, frequency_penalty: 0,
                 presence_penalty: 0, frequency: 0, presence: 0}[output.htmlFor];
    output.textContent = value === off ? "off" : String(value);
  }
}

async function updateSampling() {
  showKnobValues();
  const widget = $("#sampling");
  const answer = await api(widget, "/api/next",
    {prompt: $("#sampling-prompt").value, drawn: sampling.drawn, ...samplingKnobs()});
  if (!answer) return;
  sampling.last = answer;
  $("#sampling-text").textContent = $("#sampling-prompt").value;
  $("#sampling-drawn").textContent = answer.drawn_text;
  $("#survivors").textContent = answer.survivors;
  $("#vocabulary").textContent = answer.vocabulary;
  $("#effective").textContent = answer.effective.toFixed(1);
  $("#effective-kept").textContent = answer.effective_kept.toFixed(1);
  drawBars(answer);
  drawCurve(answer);
}

// One row per top token: the model's probability (T = 1) as a pale bar, what the knobs give it
// as a dark one, both as numbers; then one row for all the others.
function drawBars(answer) {
  const rows = answer.top.map((t) => ({label: JSON.stringify(t.text), p: t.p, kept: t.kept,
                                       id: t.id}));
  rows.push({label: `the other ${answer.rest.count}`, p: answer.rest.p, kept: answer.rest.kept,
             id: "rest"});
  $("#bars").replaceChildren(...rows.map((row) => {
    const div = document.createElement("div");
    div.className = "bar-row" + (row.kept > 0 ? "" : " cut");
    div.dataset.id = row.id;
    div.innerHTML = `<span class="label"></span><span class="track">
      <span class="bar model" style="width:${100 * row.p}%"></span>
      <span class="bar kept" style="width:${100 * row.kept}%"></span></span>
      <span class="share model">${percent(row.p)}</span><span class="share kept">${
        row.kept > 0 ? percent(row.kept) : "cut"}</span>`;
    $(".label", div).textContent = row.label;
    return div;
  }));
}

// The ranked distribution after the penalties and the temperature (before the cuts), by rank on a
// log axis: its probabilities on a log axis too, or its running total with the top-p line
// (horizontal) and the top-k line (vertical).
function drawCurve(answer) {
  const svg = $("#curve");
  const W = 640, H = 240, left = 48, bottom = 24, top = 8, right = 8;
  const ranks = answer.curve.rank, total = sampling.view === "total";
  const values = total ? answer.curve.total : answer.curve.p;
  const x = (r) => left + (W - left - right) * Math.log(r) / Math.log(answer.vocabulary);
  const floor = Math.max(1e-12, Math.min(...values.filter((v) => v > 0)));
  const y = total ? (v) => top + (H - top - bottom) * (1 - v)
    : (v) => top + (H - top - bottom) * Math.log(Math.max(v, floor) / 1)
      / Math.log(floor);
  const parts = [];
  const line = (x1, y1, x2, y2, cls) => parts.push(
    `<line x1="${x1}" y1="${y1}" x2="${x2}" y2="${y2}" class="${cls}"/>`);
  const text = (tx, ty, s, cls = "tick") => parts.push(
    `<text x="${tx}" y="${ty}" class="${cls}">${s}</text>`);
  line(left, H - bottom, W - right, H - bottom, "axis");
  line(left, top, left, H - bottom, "axis");
  for (let r = 1; r <= answer.vocabulary; r *= 10) {
    line(x(r), H - bottom, x(r), H - bottom + 4, "axis");
    text(x(r) - 4, H - 6, r);
  }
  if (total) {
    for (const v of [0, 0.5, 1]) text(8, y(v) + 4, v);
    const p = number("#top_p"), k = number("#top_k");
    if (p < 1) { line(left, y(p), W - right, y(p), "cutline"); text(W - 80, y(p) - 4, `top-p ${p}`, "cutlabel"); }
    if (k > 0) { line(x(k), top, x(k), H - bottom, "cutline"); text(x(k) + 4, top + 12, `top-k ${k}`, "cutlabel"); }
  } else {
    for (let e = 0; 10 ** -e >= floor; e += 2) text(4, y(10 ** -e) + 4, e ? `1e-${e}` : "1");
  }
  const s = answer.survivors;
  const xs = x(Math.max(s, 1));
  line(xs, top, xs, H - bottom, "survivors");
  text(xs > W / 2 ? xs - 80 : xs + 4, H - bottom - 6, `${s} survive`, "cutlabel");
  const points = ranks.map((r, i) => `${x(r).toFixed(1)},${y(values[i]).toFixed(1)}`);
  parts.push(`<polyline points="${points.join(" ")}" class="curve"/>`);
  svg.innerHTML = parts.join("");
}

async function drawToken() {
  const widget = $("#sampling");
  const answer = await api(widget, "/api/draw",
    {prompt: $("#sampling-prompt").value, drawn: sampling.drawn, seed: number("#sampling-seed"),
     ...samplingKnobs()}, "draw");
  if (!answer) return;
  sampling.drawn.push(answer.id);
  $("#last-draw").textContent = `${JSON.stringify(answer.text)} (p = ${percent(answer.p)})` +
    (answer.end ? ", an end token" : "");
  $("#sampling-seed").value = number("#sampling-seed") + 1; // the next draw, the next seed
  await updateSampling();
}

// -- four temperatures --------------------------------------------------------------------------

async function writeColumns() {
  const widget = $("#temperatures");
  const temperatures = $$(".temperature", widget).map((input) => Number(input.value));
  const answer = await api(widget, "/api/temperatures",
    {prompt: $("#temperatures-prompt").value, temperatures, seed: number("#temperatures-seed"),
     max_new_tokens: number("#temperatures-n")});
  if (!answer) return;
  $("#columns").replaceChildren(...answer.columns.map((column) => {
    const div = document.createElement("div");
    div.className = "column";
    div.innerHTML = `<h3>T = ${column.temperature}</h3><p class="text"></p>
      <p class="surprise">surprise <b>${column.surprise.toFixed(2)}</b> nats/token</p>`;
    $(".text", div).textContent = column.text;
    return div;
  }));
}

// -- repetition ----------------------------------------------------------------------------------

async function writeGreedy() {
  showKnobValues();
  const widget = $("#repetition");
  const penalty = number("#penalty"), f = number("#frequency"), p = number("#presence");
  const answer = await api(widget, "/api/repetition",
    {prompt: $("#repetition-prompt").value, repetition_penalty: penalty,
     frequency_penalty: f, presence_penalty: p, max_new_tokens: number("#repetition-n")});
  if (!answer) return;
  const marks = (t) => (t.repeat ? ["repeat"] : []);
  tokenSpans($("#greedy-text"), answer.greedy.tokens, marks);
  tokenSpans($("#penalised-text"), answer.penalised.tokens, marks);
  $("#greedy-repeats").textContent = answer.greedy.repeats;
  $("#penalised-repeats").textContent = answer.penalised.repeats;
  $("#penalty-shown").textContent = `r = ${penalty}` + (f ? `, \u03b1f = ${f}` : "") +
    (p ? `, \u03b1p = ${p}` : "");
}

// -- the cache race ------------------------------------------------------------------------------

async function race() {
  const widget = $("#race");
  const answer = await api(widget, "/api/race",
    {prompt: $("#race-prompt").value, max_new_tokens: number("#race-n"),
     temperature: number("#race-temperature"), seed: number("#race-seed")});
  if (!answer) return;
  for (const key of ["cached", "uncached"]) {
    const run = answer[key];
    tokenSpans($(`#${key}-text`), run.tokens);
    $(`#${key}-stats`).textContent = `${run.passes} token passes counted ` +
      `(formula: ${answer.formula[key]}), ${(1000 * run.seconds).toFixed(0)} ms`;
  }
  const speedup = answer.uncached.seconds / answer.cached.seconds;
  $("#race-verdict").textContent = (answer.identical ? "identical tokens" : "DIFFERENT tokens") +
    `: P = ${answer.P}, n = ${answer.n}; the cache read ` +
    `${(answer.uncached.passes / answer.cached.passes).toFixed(1)}x fewer token passes ` +
    `and ran ${speedup.toFixed(1)}x faster here`;
  $("#race-verdict").className = "verdict " + (answer.identical ? "same" : "differ");
}

// -- bits ------------------------------------------------------------------------------------------

async function squeeze() {
  const widget = $("#bits");
  const body = $("#bits-table tbody");
  body.replaceChildren();
  for (const bits of [32, 8, 6, 4, 3, 2]) { // one width at a time: one squeezed copy at once
    const answer = await api(widget, "/api/bits",
      {prompt: $("#bits-prompt").value, bits, max_new_tokens: number("#bits-n")}, "bits");
    if (!answer) return;
    const row = document.createElement("tr");
    row.dataset.bits = bits;
    row.innerHTML = `<td>${bits === 32 ? "float32" : bits}</td>
      <td class="num">${answer.surprise.toFixed(3)} nats</td>
      <td class="num">${(answer.bytes / 2 ** 20).toFixed(2)} MiB</td><td class="text"></td>`;
    $(".text", row).textContent = answer.text;
    body.append(row);
  }
}

// -- speculative decoding --------------------------------------------------------------------------

async function speculate() {
  showKnobValues();
  const widget = $("#speculative");
  const answer = await api(widget, "/api/speculative",
    {prompt: $("#speculative-prompt").value, drafter: $("#drafter").value, k: number("#k"),
     temperature: number("#speculative-temperature"), seed: number("#speculative-seed"),
     max_new_tokens: number("#speculative-n")});
  if (!answer) return;
  $("#speculative-stats").textContent =
    `${answer.accepted} of ${answer.proposed} guesses accepted ` +
    `(${(100 * answer.acceptance_rate).toFixed(0)}%); ${answer.new_tokens} tokens in ` +
    `${answer.target_calls} passes of the model instead of ${answer.new_tokens}: ` +
    `${answer.saved} passes saved; ${answer.draft_calls} draft passes`;
  $("#rounds").replaceChildren(...answer.rounds.map((round) => {
    const li = document.createElement("li");
    const tokens = [...round.guesses.map((g) => ({...g, cls: g.fate})),
                    ...round.extra.map((e) => ({...e, cls: e.kind}))];
    tokenSpans(li, tokens, (t) => [t.cls]);
    return li;
  }));
}

// -- start ------------------------------------------------------------------------------------------

async function start() {
  const response = await fetch("/api/info");
  INFO = await response.json();
  $("#model-line").textContent = `${INFO.model}: ${INFO.arch}, ${INFO.layers} layers, ` +
    `${INFO.vocabulary} tokens, context ${INFO.context}` +
    (INFO.chat ? "; prompts go through its chat template" : "");
  for (const box of $$(".beginnings")) {
    const target = $("#" + box.dataset.for);
    target.value = INFO.beginnings[0];
    target.maxLength = INFO.max_prompt_chars;
    for (const beginning of INFO.beginnings) {
      const button = document.createElement("button");
      button.textContent = beginning;
      button.addEventListener("click", () => { target.value = beginning; target.dispatchEvent(new Event("change")); });
      box.append(button);
    }
  }
  $("#repetition-prompt").value = INFO.beginnings[1] || INFO.beginnings[0];
  $("#passage").textContent = INFO.passage;
  for (const input of $$("input[type=number]")) if (input.id.endsWith("-n")) input.max = INFO.max_new_tokens;
  if (!INFO.draft) $("#drafter option[value=model]").disabled = true;

  const samplingUpdate = debounce(updateSampling);
  for (const id of ["temperature", "top_k", "top_p", "min_p", "repetition_penalty",
                    "frequency_penalty", "presence_penalty"]) {
    $("#" + id).addEventListener("input", samplingUpdate);
  }
  $("#sampling-prompt").addEventListener("change", () => { sampling.drawn = []; updateSampling(); });
  $("#sampling-prompt").addEventListener("input", debounce(() => { sampling.drawn = []; updateSampling(); }, 400));
  $("#draw").addEventListener("click", drawToken);
  $("#restart").addEventListener("click", () => { sampling.drawn = []; $("#last-draw").textContent = "–"; updateSampling(); });
  for (const tab of $$(".tabs button")) {
    tab.addEventListener("click", () => {
      sampling.view = tab.dataset.view;
      $$(".tabs button").forEach((b) => b.classList.toggle("on", b === tab));
      if (sampling.last) drawCurve(sampling.last);
    });
  }
  $("#write").addEventListener("click", writeColumns);
  $("#new-seed").addEventListener("click", () => { $("#temperatures-seed").value = number("#temperatures-seed") + 1; writeColumns(); });
  $("#temperatures-prompt").addEventListener("change", writeColumns);
  const greedyUpdate = debounce(writeGreedy, 200);
  for (const id of ["penalty", "frequency", "presence"]) {
    $("#" + id).addEventListener("input", greedyUpdate);
  }
  $("#repeat").addEventListener("click", writeGreedy);
  $("#repetition-prompt").addEventListener("change", writeGreedy);
  $("#run-race").addEventListener("click", race);
  $("#squeeze").addEventListener("click", squeeze);
  $("#k").addEventListener("input", debounce(speculate, 200));
  $("#drafter").addEventListener("change", speculate);
  $("#run-speculative").addEventListener("click", speculate);

  showKnobValues();
  await Promise.all([updateSampling(), writeColumns(), writeGreedy()]);
  document.body.dataset.ready = "yes";
}

start();
