// The planner page: the same /v1 operations any client calls (solve, pareto, pairs, deploy).
// No build step and no framework; every text from the server goes in as text, never as HTML.
"use strict";

const $ = (id) => document.getElementById(id);
let uploadedConfig = null; // an HF config.json the user chose instead of a catalog model
let lastPlan = null;

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v;
    else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}

function svg(tag, attrs, text) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}

class ApiError extends Error {
  constructor(status, body) {
    const e = (body && body.error) || {};
    const infeasible = body && body.status === "INFEASIBLE";
    super(infeasible ? `no plan fits: ${body.reason}` : e.message || `HTTP ${status}`);
    this.status = status;
    this.field = e.field || null;
    this.allowed = e.allowed || null;
    this.reasons = infeasible ? body.reasons : [];
  }
}

async function call(op, body, method = "POST") {
  const headers = { "content-type": "application/json" };
  const token = $("token").value.trim();
  if (token) headers.authorization = `Bearer ${token}`;
  const init = { method, headers };
  if (method === "POST") init.body = JSON.stringify(body);
  const r = await fetch(`/v1/${op}`, init);
  let answer = null;
  try { answer = await r.json(); } catch (_) { /* not JSON: reported below */ }
  if (!r.ok) throw new ApiError(r.status, answer);
  return answer;
}

function slo(text) {
  const t = text.trim().toLowerCase();
  if (t === "none" || t === "off" || t === "") return "none";
  const n = Number(t);
  return Number.isFinite(n) ? n : t; // the server names a bad value
}

function number(text) {
  const n = Number(text);
  return text.trim() !== "" && Number.isFinite(n) ? n : text;
}

function inputs() {
  const model = uploadedConfig ? { config: uploadedConfig } : { model: $("model").value };
  return {
    ...model,
    gpu: $("gpu").value,
    gpus: number($("gpus").value),
    connector: $("connector").value,
    isl: number($("isl").value),
    osl: number($("osl").value),
    ttft: slo($("ttft").value),
    tpot: slo($("tpot").value),
  };
}

function showError(e) {
  const box = $("error");
  box.replaceChildren();
  box.append(el("strong", {}, e.field ? `${e.field}: ` : "error: "), e.message);
  if (e.allowed) {
    const allowed = Array.isArray(e.allowed) ? e.allowed.join(", ") : e.allowed;
    box.append(el("div", {}, `allowed: ${allowed}`));
  }
  for (const r of (e.reasons || []).slice(1)) box.append(el("div", {}, `– ${r}`));
  box.hidden = false;
  const input = e.field && $(e.field === "config" ? "config-file" : e.field);
  if (input) input.classList.add("bad");
}

function clearError() {
  $("error").hidden = true;
  for (const n of document.querySelectorAll(".bad")) n.classList.remove("bad");
}

function fmt(x, digits = 2) {
  return typeof x === "number" ? x.toLocaleString("en-US", { maximumFractionDigits: digits }) : "–";
}

function renderPlan(p) {
  const rows = [];
  for (const role of ["prefill", "decode", "aggregated"]) {
    const s = p[role];
    if (s) rows.push(el("tr", {}, el("td", {}, role), el("td", {}, `${s.instances} ×`),
      el("td", {}, s.layout), el("td", {}, s.gpus), el("td", {}, s.gpu || p.gpu)));
  }
  const table = el("table", {},
    el("tr", {}, ...["role", "instances", "layout", "GPUs", "GPU"].map((h) => el("th", {}, h))),
    ...rows);
  const alt = p.alternative
    ? el("p", {}, `${p.alternative.serving === "agg" ? "aggregated" : "disaggregated"} alternative: ` +
      `${p.alternative.summary}, ${fmt(p.alternative.requests_per_s)} req/s on ${p.alternative.gpus_used} GPUs`)
    : "";
  $("plan").replaceChildren(
    el("div", { class: "headline", id: "plan-summary" },
      `${p.model}: ${fmt(p.requests_per_s)} req/s (${fmt(p.output_tokens_per_s, 0)} output tok/s) ` +
      `on ${p.gpus_used} of ${p.gpus} GPUs, ${p.connector}`),
    table,
    el("p", {}, `TTFT ${fmt(p.ttft_ms, 0)} ms, TPOT ${fmt(p.tpot_ms, 1)} ms; bottleneck: ${p.bottleneck}` +
      (p.cost_per_hour != null ? `; $${fmt(p.cost_per_hour)}/h` : "")),
    alt,
    ...(p.notes || []).map((n) => el("p", { class: "sub" }, `note: ${n}`)),
  );
  const rejected = p.rejected || [];
  $("rejected").replaceChildren(...(rejected.length
    ? rejected.map((r) => {
      // "<plan> would serve X req/s (+Y%), but <connector> rejects P/D: <vLLM's error>"
      const at = r.indexOf(" rejects ");
      const cut = at < 0 ? -1 : r.indexOf(": ", at);
      const head = cut > 0 ? r.slice(0, cut) : r;
      const vllm = cut > 0 ? r.slice(cut + 2) : "";
      return el("div", { class: "rejected" }, head, vllm ? el("span", { class: "vllm" }, vllm) : "");
    })
    : [el("p", {}, "none: no plan that serves more breaks vLLM's rules here.")]));
}

function renderPareto(f) {
  const W = 520, H = 300, L = 60, B = 40, T = 10, R = 10;
  const all = [...f.points, ...f.rule_blind];
  const xs = all.map((p) => p.tokens_per_s_per_user).filter(Number.isFinite);
  const ys = all.map((p) => p.tokens_per_s_per_gpu);
  const xmax = Math.max(...xs) * 1.08, ymax = Math.max(...ys) * 1.1;
  const X = (x) => L + (Math.min(x, xmax) / xmax) * (W - L - R);
  const Y = (y) => H - B - (y / ymax) * (H - B - T);
  const root = svg("svg", { width: W, height: H, id: "pareto-chart", role: "img" });
  root.append(svg("line", { x1: L, y1: H - B, x2: W - R, y2: H - B, stroke: "#888" }));
  root.append(svg("line", { x1: L, y1: T, x2: L, y2: H - B, stroke: "#888" }));
  for (let i = 0; i <= 4; i++) {
    root.append(svg("text", { x: X((xmax * i) / 4), y: H - B + 14, "text-anchor": "middle" }, fmt((xmax * i) / 4, 0)));
    root.append(svg("text", { x: L - 6, y: Y((ymax * i) / 4) + 4, "text-anchor": "end" }, fmt((ymax * i) / 4, 0)));
  }
  root.append(svg("text", { x: (L + W) / 2, y: H - 6, "text-anchor": "middle" }, "tokens/s per user"));
  root.append(svg("text", { x: 12, y: (T + H - B) / 2, transform: `rotate(-90 12 ${(T + H - B) / 2})`, "text-anchor": "middle" }, "output tokens/s per GPU"));
  const line = (pts, color, dash) => {
    if (pts.length < 2) return;
    const d = pts.map((p, i) => `${i ? "L" : "M"}${X(p.tokens_per_s_per_user)},${Y(p.tokens_per_s_per_gpu)}`).join("");
    root.append(svg("path", { d, fill: "none", stroke: color, "stroke-width": 2, "stroke-dasharray": dash || "" }));
  };
  line(f.rule_blind, "#c62828", "5 4");
  line(f.frontier, "#1565c0");
  for (const p of f.rule_blind.filter((q) => !q.valid)) {
    const c = svg("circle", { cx: X(p.tokens_per_s_per_user), cy: Y(p.tokens_per_s_per_gpu), r: 5, fill: "#c62828", class: "invalid-point" });
    c.append(svg("title", {}, `${p.summary} (vLLM refuses it)`));
    root.append(c);
  }
  for (const p of f.frontier) {
    const c = svg("circle", { cx: X(p.tokens_per_s_per_user), cy: Y(p.tokens_per_s_per_gpu), r: 4, fill: "#1565c0", class: "frontier-point" });
    c.append(svg("title", {}, `${p.summary}: TPOT ${fmt(p.tpot_ms, 1)} ms, ${fmt(p.tokens_per_s_per_gpu, 0)} tok/s/GPU`));
    root.append(c);
  }
  $("pareto").replaceChildren(root, el("div", { class: "legend" },
    el("span", { style: "color:#1565c0" }, "— valid frontier"),
    el("span", { style: "color:#c62828" }, "- - if vLLM's rules were ignored (red points: refused)")));
}

function renderPairs(g) {
  const head = el("tr", {}, el("th", {}, "P \\ D"), ...g.sizes.map((d) => el("th", {}, `D${d}`)));
  const rows = g.cells.map((row, i) => el("tr", {}, el("th", {}, `P${g.sizes[i]}`), ...row.map((c) => {
    const kind = !c.ok ? "invalid" : c.code === "warning" ? "warning" : "valid";
    const label = kind === "invalid" ? (c.vllm_error || "invalid") : kind === "warning" ? "warn" : "ok";
    return el("td", { class: kind, title: `P${c.prefill_tp}/D${c.decode_tp}: ${c.code}${c.message ? ` — ${c.message}` : ""}` }, label);
  })));
  $("pairs").replaceChildren(el("table", { class: "heat", id: "pairs-table" }, head, ...rows),
    el("p", { class: "sub" }, `${g.model} with ${g.connector}; hover a cell for vLLM's message.`));
}

async function plan(event) {
  if (event) event.preventDefault();
  clearError();
  const body = inputs();
  $("status").textContent = "planning…";
  $("plan-button").disabled = true;
  document.body.dataset.state = "busy"; // "idle" once every answer is in (tests wait on it)
  try {
    const solved = await call("solve", body);
    lastPlan = solved;
    $("results").hidden = false;
    renderPlan(solved);
    $("status").textContent = `planned in ${fmt(solved.solve_ms, 0)} ms`;
    const { ttft, tpot, ...noTpot } = body; // pareto sweeps the TPOT bound itself
    const model = body.config ? { config: body.config } : { model: body.model };
    const [front, pairs] = await Promise.allSettled([
      call("pareto", { ...noTpot, ttft }),
      call("pairs", { ...model, connector: body.connector }),
    ]);
    if (front.status === "fulfilled") renderPareto(front.value);
    else $("pareto").replaceChildren(el("p", {}, front.reason.message));
    if (pairs.status === "fulfilled") renderPairs(pairs.value);
    else $("pairs").replaceChildren(el("p", {}, pairs.reason.message));
  } catch (e) {
    $("status").textContent = "no plan";
    $("results").hidden = true; // no stale plan beside the error of these inputs
    lastPlan = null;
    showError(e);
  } finally {
    $("plan-button").disabled = false;
    document.body.dataset.state = "idle";
  }
}

function save(name, text, type) {
  const a = el("a", { href: URL.createObjectURL(new Blob([text], { type })), download: name });
  document.body.append(a);
  a.click();
  a.remove();
}

async function download(format) {
  if (!lastPlan) return;
  clearError();
  try {
    // The plan shown, as it is (deploy re-solving could pick another).
    const hosts = $("node-hosts").value.trim();
    const body = { plan: lastPlan, format, ...(hosts ? { node_hosts: hosts } : {}) };
    const answer = await call("deploy", body);
    if (format === "json") save("pdtp-deployment.json", JSON.stringify(answer, null, 2), "application/json");
    else if (format === "k8s") save("pdtp-deployment.yaml", Object.values(answer.files).join("\n"), "application/yaml");
    else save("pdtp-scripts.txt", Object.entries(answer.files).map(([n, t]) => `==> ${n} <==\n${t}`).join("\n"), "text/plain");
  } catch (e) {
    showError(e);
  }
}

function fill(select, names, preferred) {
  select.replaceChildren(...names.map((n) => el("option", { value: n }, n)));
  if (names.includes(preferred)) select.value = preferred;
}

async function start() {
  try {
    const [models, gpus, connectors] = await Promise.all(
      ["models", "gpus", "connectors"].map((name) => call(name, null, "GET")));
    fill($("model"), models.map((m) => m.name), "llama-3.1-70b");
    fill($("gpu"), gpus.map((g) => g.name), "mi300x");
    fill($("connector"), connectors.map((c) => c.name), "moriio");
    $("status").textContent = "ready";
    await plan();
  } catch (e) {
    $("status").textContent = "the catalogs did not load";
    showError(e);
    document.body.dataset.state = "idle";
  }
}

$("inputs").addEventListener("submit", plan);
$("download-k8s").addEventListener("click", () => download("k8s"));
$("download-scripts").addEventListener("click", () => download("scripts"));
$("download-json").addEventListener("click", () => download("json"));
$("config-file").addEventListener("change", async (event) => {
  clearError();
  const file = event.target.files[0];
  if (!file) return;
  try {
    uploadedConfig = JSON.parse(await file.text());
    $("model").disabled = true;
    $("clear-config").hidden = false;
  } catch (_) {
    uploadedConfig = null;
    showError({ field: "config", message: `${file.name} is not JSON`, allowed: null });
  }
});
$("clear-config").addEventListener("click", () => {
  uploadedConfig = null;
  $("config-file").value = "";
  $("model").disabled = false;
  $("clear-config").hidden = true;
});
start();
