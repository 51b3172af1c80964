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
// error line shows a refusal. A newer request of the same widget and key aborts the older: the
// fetch is aborted, which closes its connection, and the header X-Desk-Request names each
// request ("SESSION WIDGET N", N growing), so the server stops the older one either way.
const inFlight = new Map();
const SESSION = Math.random().toString(36).slice(2) + Date.now().toString(36);
let sent = 0; // widget requests sent by this page
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
      headers: {"Content-Type": "application/json", "X-Desk-Request": `${SESSION} ${id} ${++sent}`},
      signal: control.signal});
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
//
// The log axis ends at a power of ten at or below the smallest probability drawn, never below
// 1e-12 (answer.curve.floor): the ranks under it (at a low temperature most of them, down to
// exactly 0) are not drawn, so the curve stops at the last rank above it (answer.curve.above,
// one of the ranks sent) and a note says how many lie below. The labels are placed where they
// cross neither the curve nor a line (place). Each axis has its title under or beside its ticks.
function drawCurve(answer) {
  const svg = $("#curve");
  const W = 640, H = 260, left = 64, bottom = 44, top = 8, right = 8;
  const total = sampling.view === "total", V = answer.vocabulary;
  const floorP = answer.curve.floor;
  let ranks = answer.curve.rank, values = total ? answer.curve.total : answer.curve.p;
  let floor = 1;
  if (!total) {
    const kept = values.map((v) => v >= floorP);
    ranks = ranks.filter((_, i) => kept[i]);
    values = values.filter((_, i) => kept[i]);
    floor = Math.max(floorP, Math.min(1e-2, 10 ** Math.floor(Math.log10(Math.min(...values)))));
  }
  const x = (r) => left + (W - left - right) * Math.log(r) / Math.log(V);
  const y = total ? (v) => top + (H - top - bottom) * (1 - v)
    : (v) => top + (H - top - bottom) * Math.log10(v) / Math.log10(floor);
  const parts = [];
  const obstacles = []; // segments [x1, y1, x2, y2] a label must not cross
  const line = (x1, y1, x2, y2, cls) => {
    parts.push(`<line x1="${x1}" y1="${y1}" x2="${x2}" y2="${y2}" class="${cls}"/>`);
    obstacles.push([x1, y1, x2, y2]);
  };
  const text = (tx, ty, s, cls = "tick") => parts.push(
    `<text x="${tx}" y="${ty}" class="${cls}">${s}</text>`);
  line(left, H - bottom, W - right, H - bottom, "axis");
  line(left, top, left, H - bottom, "axis");
  for (let r = 1; r <= V; r *= 10) {
    line(x(r), H - bottom, x(r), H - bottom + 4, "axis");
    text(x(r) - 4, H - bottom + 18, r);
  }
  const middle = (top + H - bottom) / 2;
  parts.push(`<text x="${(left + W - right) / 2}" y="${H - 6}" class="axis-title" ` +
    `text-anchor="middle">rank (log scale)</text>`);
  parts.push(`<text transform="translate(14 ${middle}) rotate(-90)" class="axis-title" ` +
    `text-anchor="middle">${total ? "running total" : "probability (log scale)"}</text>`);
  const labels = []; // [class, text, candidate positions [x, y, anchor], ...]
  if (total) {
    for (const v of [0, 0.5, 1]) text(left - 40, y(v) + 4, v);
    const p = number("#top_p"), k = number("#top_k");
    if (p < 1) {
      line(left, y(p), W - right, y(p), "cutline");
      labels.push(["cutlabel top-p", `top-p ${p}`, [[W - right - 4, y(p) - 4, "end"],
        [W - right - 4, y(p) + 14, "end"], [left + 4, y(p) - 4, "start"],
        [left + 4, y(p) + 14, "start"]]]);
    }
    if (k > 0) {
      line(x(k), top, x(k), H - bottom, "cutline");
      labels.push(["cutlabel top-k", `top-k ${k}`, [[x(k) + 4, top + 12, "start"],
        [x(k) - 4, top + 12, "end"], [x(k) + 4, H / 2, "start"], [x(k) - 4, H / 2, "end"]]]);
    }
  } else {
    for (let e = 0; 10 ** -e >= floor * 0.999; e += 2) {
      text(left - 44, y(10 ** -e) + 4, e ? `1e-${e}` : "1");
    }
  }
  const s = answer.survivors;
  const xs = x(Math.max(s, 1));
  line(xs, top, xs, H - bottom, "survivors");
  const sides = xs > W / 2 ? [[-4, "end"], [4, "start"]] : [[4, "start"], [-4, "end"]];
  const heights = [H - bottom - 6, top + 14, (top + H - bottom) / 2];
  labels.push(["cutlabel survive", `${s} survive${s === 1 ? "s" : ""}`,
    sides.flatMap(([dx, anchor]) => heights.map((h) => [xs + dx, h, anchor]))]);
  const below = V - answer.curve.above;
  if (!total && below > 0) {
    const xe = x(answer.curve.above);
    labels.push(["tick tail", `${below} ranks below ${floorP.toExponential(0)}: not drawn`,
      [[xe + 4, H - bottom - 6, "start"], [xe - 4, H - bottom - 6, "end"],
       [W - right - 4, H - bottom - 6, "end"], [W - right - 4, top + 14, "end"],
       [xe + 4, (top + H - bottom) / 2, "start"]]]);
  }
  const points = ranks.map((r, i) => [x(r), y(values[i])]);
  for (let i = 1; i < points.length; i++) obstacles.push([...points[i - 1], ...points[i]]);
  parts.push(`<polyline points="${points.map(([px, py]) => `${px.toFixed(1)},${py.toFixed(1)}`)
    .join(" ")}" class="curve"/>`);
  if (points.length === 1) { // one rank above the floor (T = 0): a dot, not an empty line
    parts.push(`<circle cx="${points[0][0]}" cy="${points[0][1]}" r="3" class="dot"/>`);
  }
  svg.innerHTML = parts.join("");
  for (const [cls, label, candidates] of labels) {
    place(svg, cls, label, candidates, obstacles, [left, top, W - right, H - bottom]);
  }
}

// A text label at the first of `candidates` ([x, y, anchor]) whose box stays inside `frame`
// ([x1, y1, x2, y2]) and crosses none of the `obstacles` (segments); each placed label becomes
// an obstacle for the next (its box's edges). The first candidate when none is clear.
function place(svg, cls, label, candidates, obstacles, frame) {
  const node = document.createElementNS(SVG, "text");
  node.setAttribute("class", cls);
  node.textContent = label;
  svg.append(node);
  let chosen = null;
  for (const [tx, ty, anchor] of candidates) {
    node.setAttribute("x", tx);
    node.setAttribute("y", ty);
    node.setAttribute("text-anchor", anchor);
    const b = node.getBBox();
    const box = {x: b.x - 2, y: b.y - 1, width: b.width + 4, height: b.height + 2};
    const inside = box.x >= frame[0] && box.y >= frame[1] && box.x + box.width <= frame[2] &&
      box.y + box.height <= frame[3];
    if (inside && !obstacles.some((seg) => segmentHitsBox(...seg, box))) {
      chosen = box;
      break;
    }
  }
  if (chosen === null) {
    const [tx, ty, anchor] = candidates[0];
    node.setAttribute("x", tx);
    node.setAttribute("y", ty);
    node.setAttribute("text-anchor", anchor);
    chosen = node.getBBox();
  }
  const {x: bx, y: by, width: bw, height: bh} = chosen;
  obstacles.push([bx, by, bx + bw, by], [bx, by + bh, bx + bw, by + bh],
                 [bx, by, bx, by + bh], [bx + bw, by, bx + bw, by + bh]);
}

// Whether the segment (x1, y1)-(x2, y2) meets the box {x, y, width, height} (Liang-Barsky).
function segmentHitsBox(x1, y1, x2, y2, box) {
  let t0 = 0, t1 = 1;
  const dx = x2 - x1, dy = y2 - y1;
  const edges = [[-dx, x1 - box.x], [dx, box.x + box.width - x1],
                 [-dy, y1 - box.y], [dy, box.y + box.height - y1]];
  for (const [p, q] of edges) {
    if (p === 0) {
      if (q < 0) return false; // parallel to this edge, and outside it
    } else {
      const t = q / p;
      if (p < 0) { if (t > t1) return false; t0 = Math.max(t0, t); }
      else { if (t < t0) return false; t1 = Math.min(t1, t); }
    }
  }
  return true;
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

const WIDTHS = [32, 8, 6, 5, 4, 3, 2];

// Bytes as MiB (or KiB below one MiB), two decimals.
function size(bytes) {
  return bytes >= 2 ** 20 ? `${(bytes / 2 ** 20).toFixed(2)} MiB` : `${(bytes / 2 ** 10).toFixed(2)} KiB`;
}

async function squeeze() {
  const widget = $("#bits");
  const body = $("#bits-table tbody");
  body.replaceChildren();
  for (const bits of WIDTHS) { // one width at a time: one squeezed copy at once
    const answer = await api(widget, "/api/bits",
      {prompt: $("#bits-prompt").value, bits, max_new_tokens: number("#bits-n")}, "bits");
    if (!answer) return;
    const row = document.createElement("tr");
    const parts = answer.stored;
    row.dataset.bits = bits;
    row.innerHTML = `<td>${bits === 32 ? "float32" : bits}</td>
      <td class="num">${answer.surprise.toFixed(3)} nats</td>
      <td class="num weights"><span class="total">${size(answer.bytes)}</span>
      <span class="parts">${bits === 32 ? `${size(parts.floats)} float32`
        : `${size(parts.values)} packed + ${size(parts.scales)} scales + ${size(parts.floats)} float`}</span></td>
      <td class="text"></td>`;
    $(".weights", row).title = `${answer.bytes} bytes stored; ${answer.resident} bytes held in ` +
      "memory here (the integers one per byte, the fast path's copies included)";
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

// -- serving many requests ------------------------------------------------------------------------

const serving = {answer: null};

async function serve() {
  const widget = $("#serving");
  const prompts = $("#serving-prompts").value.split("\n").filter((line) => line.trim());
  const answer = await api(widget, "/api/serving",
    {prompts, block_size: number("#serving-block"), num_blocks: number("#serving-pool"),
     max_batch_tokens: number("#serving-budget"), max_new_tokens: number("#serving-n"),
     prefix_caching: $("#serving-prefix").checked});
  if (!answer) return;
  serving.answer = answer;
  const slider = $("#serving-step");
  slider.max = answer.steps.length - 1;
  $("#serving-owners").replaceChildren(...answer.requests.map((r) => {
    const span = document.createElement("span");
    span.className = `cell-key owner r${r.id % 4}`;
    span.textContent = `request ${r.id} (${r.prompt_tokens} prompt tokens)`;
    return span;
  }));
  showStep(0);
}

// The pool, the requests and the events after step k (0: before the first step).
function showStep(k) {
  const answer = serving.answer;
  if (!answer) return;
  const steps = answer.steps, last = steps.length - 1;
  k = Math.max(0, Math.min(last, k));
  const shot = steps[k], before = steps[Math.max(0, k - 1)];
  $("#serving-step").value = k;
  $("#serving-step-shown").textContent = `step ${k} of ${last}` +
    (k === last && answer.stopped ? ` (stopped: the ${answer.stopped === "work" ?
      "work bound" : "step cap"})` : "");
  $("#pool").style.setProperty("--columns", Math.min(answer.num_blocks, 24));
  $("#pool").replaceChildren(...shot.blocks.map((b) => {
    const cell = document.createElement("div");
    cell.className = ["cell", b.state, ...(b.refs > 1 ? ["shared"] : []),
                      ...(b.prefix ? ["keyed"] : [])].join(" ");
    cell.dataset.block = b.block;
    cell.dataset.owners = b.owners.join(" ");
    cell.dataset.refs = b.refs;
    if (b.owners.length) {
      const stops = b.owners.map((o, i) => `var(--r${o % 4}) ${100 * i / b.owners.length}% ` +
                                           `${100 * (i + 1) / b.owners.length}%`);
      cell.style.background = `linear-gradient(135deg, ${stops.join(", ")})`;
    }
    cell.title = `block ${b.block}: ` + (b.state === "held" ? `held by request` +
      `${b.owners.length > 1 ? "s" : ""} ${b.owners.join(", ")}` : b.state) +
      (b.prefix ? "; in the prefix cache" : "");
    cell.innerHTML = `<span class="id">${b.block}</span>` +
      (b.refs > 1 ? `<span class="refs">\u00d7${b.refs}</span>` : "");
    return cell;
  }));
  $("#serving-requests tbody").replaceChildren(...shot.requests.map((r) => {
    const row = document.createElement("tr");
    row.dataset.request = r.id;
    row.className = r.state;
    const shared = new Set(shot.blocks.filter((b) => b.refs > 1).map((b) => b.block));
    const table = r.table.map((b) => `<span class="chip${shared.has(b) ? " shared" : ""}">${b}</span>`);
    row.innerHTML = `<td><span class="cell-key owner r${r.id % 4}">${r.id}</span></td>
      <td class="state">${r.state}${r.reason ? ` (${r.reason})` : ""}</td>
      <td class="num computed">${r.state === "finished" ? "&ndash;" : `${r.computed} of ${r.length}`}</td>
      <td class="table">${table.join("")}</td><td class="text"></td>`;
    $(".text", row).textContent = visible(r.text);
    return row;
  }));
  const events = [];
  if (k > 0) {
    events.push(`${shot.positions} positions computed (budget ${answer.max_batch_tokens})`);
    for (const id of shot.running) {
      if (!before.running.includes(id)) {
        const reused = shot.stats.prompt_tokens_reused - before.stats.prompt_tokens_reused;
        events.push(`request ${id} joins` + (reused ? ` (${reused} cached positions reused this step)` : ""));
      }
    }
    for (const out of shot.outputs) {
      events.push(`request ${out.request} draws ${JSON.stringify(out.text)}` +
                  (out.finished ? `, finished (${out.reason})` : ""));
    }
    for (const id of shot.preempted) events.push(`request ${id} is preempted`);
  } else {
    events.push("before the first step: every request waits, the pool is free");
  }
  $("#serving-events").replaceChildren(...events.map((e) => {
    const span = document.createElement("span");
    span.className = e.includes("preempted") ? "event preempted" : "event";
    span.textContent = e;
    return span;
  }));
  const s = shot.stats;
  $("#serving-stats").textContent = `blocks: ${s.blocks_in_use} in use, ${s.blocks_free} free, ` +
    `${s.blocks_cached} cached · prompt positions computed ${s.prompt_tokens_computed}, ` +
    `reused ${s.prompt_tokens_reused} · tokens drawn ${s.decode_tokens} · ` +
    `preemptions ${s.preemptions}`;
}

// -- the mask: constrained decoding -----------------------------------------------------------------

const masking = {answer: null, kind: "json_schema", specs: {}}; // specs: what was typed per kind

// A probability as the page shows it: a percentage, or in powers of ten below 0.01%.
const share = (p) => (p === 0 ? "0" : p < 1e-4 ? p.toExponential(1) : percent(p));
const stateName = (s) => (s === -1 ? "done" : String(s)); // -1: DONE, after the end token
// Where a token leads from the step's state; a masked one nowhere (the index's -1).
const leadsTo = (entry) => (entry.allowed ? `\u2192 ${stateName(entry.next)}` : "\u2013");

async function constrain() {
  const widget = $("#mask");
  const answer = await api(widget, "/api/mask",
    {prompt: $("#mask-prompt").value, kind: $("#mask-kind").value, spec: $("#mask-spec").value,
     temperature: number("#mask-temperature"), seed: number("#mask-seed"),
     max_new_tokens: number("#mask-n")});
  if (!answer) {
    if (!$(".error", widget).hidden) clearMask(); // refused: nothing stale stays on show
    return;
  }
  masking.answer = answer;
  const accepting = answer.accepting.length > 12
    ? `${answer.accepting.slice(0, 12).join(", ")}, \u2026` : answer.accepting.join(", ");
  const end = answer.done ? "ended by the end token: a whole text of the language"
    : answer.whole ? "cut by the token limit where the text is whole, before the end token"
      : "cut by the token limit: only the beginning of a text of the language";
  $("#mask-automaton").textContent = `automaton: ${answer.states} states (start 0; ` +
    `accepting: ${accepting}) \u00b7 index rows built so far: ${answer.rows_built} of ` +
    `${answer.states} \u00b7 ${answer.tokens.length} tokens, ${end}`;
  // The walk: each state, then the token read in it; the state after the last token at the end.
  const path = [];
  answer.steps.forEach((step, i) => {
    path.push(stateChip(step.state, answer.accepting.includes(step.state), i));
    const span = document.createElement("span");
    span.className = "token";
    span.textContent = visible(step.token.text);
    span.title = `token ${step.token.id}`;
    span.dataset.step = i;
    path.push(span);
  });
  const last = answer.steps.length ? answer.steps[answer.steps.length - 1].after : 0;
  path.push(stateChip(last, last !== -1 && answer.accepting.includes(last), answer.steps.length - 1));
  $("#mask-path").replaceChildren(...path);
  $("#mask-step").max = Math.max(0, answer.steps.length - 1);
  showMaskStep(0);
}

// A state of the walk as a chip (accepting: a double border), selecting step `i` when clicked.
function stateChip(state, accepting, i) {
  const chip = document.createElement("span");
  chip.className = "state" + (accepting ? " accepting" : "") + (state === -1 ? " done" : "");
  chip.textContent = stateName(state);
  chip.dataset.step = i;
  chip.title = state === -1 ? "done: the end token was drawn"
    : `state ${state}${accepting ? " (accepting)" : ""}`;
  return chip;
}

function clearMask() {
  masking.answer = null;
  for (const id of ["mask-automaton", "mask-path", "mask-stats", "mask-step-shown", "mask-bars"]) {
    $("#" + id).replaceChildren();
  }
  $("#mask-kept tbody").replaceChildren();
}

// The step-k view: the state, the allowed set, the model's top tokens and what the mask leaves.
function showMaskStep(k) {
  const answer = masking.answer;
  if (!answer || !answer.steps.length) return;
  const steps = answer.steps;
  k = Math.max(0, Math.min(steps.length - 1, k));
  const step = steps[k];
  $("#mask-step").value = k;
  $("#mask-step-shown").textContent = `token ${k + 1} of ${steps.length}`;
  for (const node of $$("#mask-path [data-step]")) {
    node.classList.toggle("current", node.classList.contains("token") && Number(node.dataset.step) === k);
  }
  const token = step.token;
  $("#mask-stats").innerHTML = `in state <span class="mask-state">${step.state}</span> ` +
    `(<span class="mask-accepting">${step.accepting ? "accepting" : "not accepting"}</span>): ` +
    `<span class="mask-allowed">${step.allowed}</span> of ${answer.vocabulary} tokens allowed, ` +
    `holding <span class="mask-held">${share(step.allowed_p)}</span> of the model's ` +
    `probability \u00b7 drawn: <span class="mask-drawn"></span> ` +
    `(${share(token.kept)} after the mask, ${share(token.p)} and rank ${token.rank} before) ` +
    `\u2192 state <span class="mask-after">${stateName(step.after)}</span>`;
  $("#mask-stats .mask-drawn").textContent = JSON.stringify(token.text);
  $("#mask-bars").replaceChildren(...step.top.map((t) => {
    const div = document.createElement("div");
    div.className = "bar-row mask-row" + (t.allowed ? "" : " masked");
    div.dataset.id = t.id;
    div.innerHTML = `<span class="label"></span><span class="track">
      <span class="bar model" style="width:${100 * t.p}%"></span>
      <span class="bar kept" style="width:${100 * t.kept}%"></span></span>
      <span class="share model">${share(t.p)}</span>
      <span class="share kept">${t.allowed ? share(t.kept) : "masked"}</span>
      <span class="next">${leadsTo(t)}</span>`;
    $(".label", div).textContent = JSON.stringify(t.text);
    return div;
  }));
  $("#mask-kept tbody").replaceChildren(...step.kept_top.map((t) => {
    const row = document.createElement("tr");
    row.dataset.id = t.id;
    row.className = t.id === token.id ? "drawn" : "";
    row.innerHTML = `<td class="token-text"></td><td class="num kept">${share(t.kept)}</td>
      <td class="num model">${share(t.p)}</td><td class="num rank">${t.rank}</td>
      <td class="next">${leadsTo(t)}</td>`;
    $(".token-text", row).textContent = JSON.stringify(t.text);
    return row;
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
  $("#serving-prompts").value = INFO.serving.prompts.join("\n");
  $("#serving-n").max = INFO.serving.max_new_tokens;
  $("#serving-pool").value = INFO.serving.num_blocks; // the default prompts' pool on this model
  $("#serving-max-requests").textContent = INFO.serving.max_requests;
  $("#mask-prompt").value = INFO.mask.prompt;
  $("#mask-prompt").maxLength = INFO.max_prompt_chars;
  $("#mask-spec").value = INFO.mask.defaults[masking.kind];

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
  $("#run-serving").addEventListener("click", serve);
  $("#serving-step").addEventListener("input", () => showStep(number("#serving-step")));
  $("#serving-back").addEventListener("click", () => showStep(number("#serving-step") - 1));
  $("#serving-next").addEventListener("click", () => showStep(number("#serving-step") + 1));
  $("#run-mask").addEventListener("click", constrain);
  $("#mask-kind").addEventListener("change", () => { // each kind keeps what was typed for it
    masking.specs[masking.kind] = $("#mask-spec").value;
    masking.kind = $("#mask-kind").value;
    $("#mask-spec").value = masking.specs[masking.kind] ?? INFO.mask.defaults[masking.kind];
    constrain();
  });
  $("#mask-step").addEventListener("input", () => showMaskStep(number("#mask-step")));
  $("#mask-back").addEventListener("click", () => showMaskStep(number("#mask-step") - 1));
  $("#mask-next").addEventListener("click", () => showMaskStep(number("#mask-step") + 1));
  $("#mask-path").addEventListener("click", (event) => {
    const step = event.target.dataset && event.target.dataset.step;
    if (step !== undefined) showMaskStep(Number(step));
  });

  showKnobValues();
  await Promise.all([updateSampling(), writeColumns(), writeGreedy(), serve(), constrain()]);
  document.body.dataset.ready = "yes";
}

start();
