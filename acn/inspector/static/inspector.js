// Context inspector: a little plain JavaScript over the server-rendered page and the node API.
// Data from the store is always inserted as text (textContent), never as HTML.
"use strict";

const LABELS = JSON.parse(document.getElementById("inspector-labels").textContent);
const LAYERS = ["system", "memory", "working", "history", "user_input"];

function label(name, values = {}) {
  return (LABELS[name] || name).replace(/\{(\w+)\}/g, (_, key) => String(values[key] ?? ""));
}

function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attributes)) {
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else if (key.startsWith("data-") || key.startsWith("aria-") || key === "scope" || key === "role"
             || key === "title" || key === "href" || key === "style") node.setAttribute(key, value);
    else node[key] = value;
  }
  for (const child of children) node.append(child);
  return node;
}

function table(headers, rows, className = "") {
  const head = el("tr", {}, ...headers.map((h) => el("th", {scope: "col", text: h})));
  return el("table", {class: className}, el("thead", {}, head), el("tbody", {}, ...rows));
}

// -- times: stored as UTC epoch ms, shown in the browser's time zone -----------------------------

const TIME_FORMAT = new Intl.DateTimeFormat(document.documentElement.lang, {
  year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit", second: "2-digit",
  hourCycle: "h23",
});

function showLocalTimes(root = document) {
  for (const node of root.querySelectorAll("time[data-epoch-ms]")) {
    node.textContent = TIME_FORMAT.format(new Date(Number(node.dataset.epochMs)));
  }
}

// -- namespace search ------------------------------------------------------------------------

function setUpNamespaceSearch() {
  const input = document.querySelector("input[data-filter]");
  if (!input) return;
  const list = document.querySelector(input.dataset.filter);
  const apply = () => {
    const needle = input.value.trim().toLowerCase();
    let visible = 0;
    for (const section of list.querySelectorAll("section.agent")) {
      let rows = 0;
      for (const row of section.querySelectorAll("tr[data-search]")) {
        row.hidden = needle !== "" && !row.dataset.search.includes(needle);
        if (!row.hidden) rows += 1;
      }
      section.hidden = rows === 0;
      visible += rows;
    }
    const none = list.querySelector("[data-no-match]");
    if (none) none.hidden = visible > 0 || list.querySelectorAll("section.agent").length === 0;
  };
  input.addEventListener("input", apply);
  apply();
}

// -- timeline panels ---------------------------------------------------------------------------

function openPanel(id) {
  for (const panel of document.querySelectorAll(".detail-panel")) panel.hidden = panel.id !== id;
  for (const control of document.querySelectorAll("[aria-controls]")) {
    control.setAttribute("aria-expanded", String(control.getAttribute("aria-controls") === id));
  }
  const panel = document.getElementById(id);
  if (panel) panel.scrollIntoView({block: "nearest"});
}

function setUpPanels() {
  document.addEventListener("click", (event) => {
    const opener = event.target.closest("[data-panel]");
    if (opener) {
      const id = opener.dataset.panel;
      const open = !document.getElementById(id).hidden && opener.getAttribute("aria-expanded") === "true";
      openPanel(open ? "" : id);
      return;
    }
    if (event.target.closest("[data-close]")) openPanel("");
  });
}

// -- memory table filters -------------------------------------------------------------------

function setUpMemoryFilters() {
  const kind = document.getElementById("memory-kind");
  const text = document.getElementById("memory-text");
  const count = document.getElementById("memory-count");
  if (!kind) return;
  const apply = () => {
    const needle = text.value.trim().toLowerCase();
    let shown = 0;
    for (const row of document.querySelectorAll("#memory-table tbody tr")) {
      const kindMatches = kind.value === "*" || (kind.value === "" ? row.dataset.kind !== "turn"
                                                                    : row.dataset.kind === kind.value);
      row.hidden = !kindMatches || (needle !== "" && !row.dataset.text.includes(needle));
      if (!row.hidden) shown += 1;
    }
    count.value = label("shown", {n: shown});
  };
  kind.addEventListener("change", apply);
  text.addEventListener("input", apply);
  document.getElementById("memory-filters").addEventListener("submit", (event) => event.preventDefault());
  apply();
}

// -- node calls --------------------------------------------------------------------------------

const MAIN = document.getElementById("main");
const CSRF_TOKEN = document.querySelector('meta[name="csrf-token"]').content;

function namespace() {
  return {agent_id: MAIN.dataset.agentId, session_id: MAIN.dataset.sessionId};
}

async function callNode(name, payload) {
  const response = await fetch(MAIN.dataset.nodeBase + name, {
    // The inspector's own route for the node (the sign-in cookie works only under /ui), with the page's CSRF token.
    method: "POST", credentials: "same-origin",
    headers: {"Content-Type": "application/json", "X-CSRF-Token": CSRF_TOKEN},
    body: JSON.stringify({...namespace(), ...payload}),
  });
  const body = await response.json().catch(() => ({ok: false, error: response.statusText}));
  if (!response.ok || body.ok === false) throw new Error(body.error || response.statusText);
  return body;
}

function withStatus(form, run) {
  const status = form.querySelector("[data-status]");
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    status.classList.remove("error");
    status.textContent = label("running");
    form.setAttribute("aria-busy", "true");
    try {
      await run();
      status.textContent = "";
    } catch (error) {
      status.classList.add("error");
      status.textContent = `${label("error")}: ${error.message}`;
    } finally {
      form.removeAttribute("aria-busy");
    }
  });
}

// -- assemble preview --------------------------------------------------------------------------

function layerTexts(body, userInput) {
  const identity = body.tokens.by_layer.system > 0 && body.messages.length ? body.messages[0].content : "";
  return {system: identity, memory: body.memory_text, working: body.working_text, history: body.history_text,
          user_input: userInput};
}

function renderBar(tokens) {
  const bar = document.getElementById("token-bar");
  const unused = Math.max(tokens.budget - tokens.total, 0);
  const parts = [...LAYERS.map((layer) => [layer, tokens.by_layer[layer] || 0]), ["unused", unused]];
  bar.replaceChildren(...parts.filter(([, n]) => n > 0).map(([layer, n]) => el("div", {
    class: `bar-segment layer-${layer}${layer === "unused" ? " unused" : ""}`, "data-layer": layer,
    "data-tokens": String(n), style: `width: ${(100 * n) / tokens.budget}%`,
    title: `${label(layer === "unused" ? "unused" : `layer_${layer}`)}: ${n}`, text: String(n),
  })));
  const spoken = parts.map(([layer, n]) => `${label(layer === "unused" ? "unused" : `layer_${layer}`)} ${n}`);
  bar.setAttribute("aria-label", `${label("token_bar")} (${tokens.budget}): ${spoken.join(", ")}`);
  const rows = parts.map(([layer, n]) => el("tr", {"data-layer": layer},
    el("th", {scope: "row"}, el("span", {class: `layer-swatch layer-${layer}`, "aria-hidden": "true"}),
       label(layer === "unused" ? "unused" : `layer_${layer}`)),
    el("td", {class: "num", "data-tokens": String(n), text: String(n)}),
    el("td", {class: "num", text: `${((100 * n) / tokens.budget).toFixed(1)}%`})));
  document.querySelector("#token-legend tbody").replaceChildren(...rows);
}

function renderLayers(texts, tokens) {
  document.getElementById("layer-details").replaceChildren(...LAYERS.map((layer) => el("details",
    {"data-layer": layer},
    el("summary", {}, el("span", {class: `layer-swatch layer-${layer}`, "aria-hidden": "true"}),
       `${label(`layer_${layer}`)} · ${tokens.by_layer[layer] || 0} ${label("tokens_unit")}`),
    el("pre", {text: texts[layer] || label("none")}))));
}

function renderDropped(dropped) {
  const target = document.getElementById("dropped-list");
  if (!dropped.length) {
    target.replaceChildren(el("p", {class: "muted", text: label("nothing_dropped")}));
    return;
  }
  const rows = dropped.map((item) => el("tr", {"data-id": item.id},
    el("td", {text: label(`layer_${item.layer}`)}), el("td", {text: LABELS[`kind_${item.kind}`] || item.kind}),
    el("td", {class: "id", text: item.id}), el("td", {class: "num", text: String(item.tokens)}),
    el("td", {text: item.reason})));
  target.replaceChildren(table([label("layer"), label("kind"), label("id"), label("tokens"), label("reason")],
                               rows, "dropped"));
}

function turnsText(range) {
  if (!range) return "–";
  return range[0] === range[range.length - 1] ? label("turn_n", {n: range[0]})
    : label("turns_range", {a: range[0], b: range[range.length - 1]});
}

function renderSources(sources) {
  const rows = sources.map((item) => el("tr", {"data-id": item.id},
    el("td", {class: "id", text: item.id}), el("td", {text: LABELS[`kind_${item.kind}`] || item.kind}),
    el("td", {text: label(`layer_${item.layer}`)}), el("td", {text: turnsText(item.turn_range)})));
  document.getElementById("sources-list").replaceChildren(
    table([label("id"), label("kind"), label("layer"), label("turns")], rows, "sources"));
}

function setUpFind(texts) {
  const input = document.getElementById("find-in-context");
  const output = document.getElementById("find-result");
  const apply = () => {
    const needle = input.value.trim();
    const layers = LAYERS.filter((layer) => needle && (texts[layer] || "").includes(needle));
    output.textContent = !needle ? "" : layers.length
      ? label("found_in", {layers: layers.map((layer) => label(`layer_${layer}`)).join(", ")}) : label("not_found");
  };
  input.oninput = apply;
  apply();
}

function setUpAssemble() {
  const form = document.getElementById("assemble-form");
  if (!form) return;
  withStatus(form, async () => {
    const request = {user_input: form.user_input.value, system_prompt: form.system_prompt.value,
                     max_tokens: Number(form.max_tokens.value), mode: form.mode.value};
    const body = await callNode("assemble", request);
    const texts = layerTexts(body, request.user_input);
    document.getElementById("assemble-summary").textContent = label("assemble_summary",
      {total: body.tokens.total, budget: body.tokens.budget, mode: body.mode});
    renderBar(body.tokens);
    renderLayers(texts, body.tokens);
    renderDropped(body.dropped);
    renderSources(body.sources);
    setUpFind(texts);
    const result = document.getElementById("assemble-result");
    result.hidden = false;
    result.dataset.total = String(body.tokens.total);
  });
}

// -- memory_retrieve search --------------------------------------------------------------------

function setUpRetrieve() {
  const form = document.getElementById("retrieve-form");
  if (!form) return;
  withStatus(form, async () => {
    const body = await callNode("memory_retrieve", {query: form.query.value, top_k: Number(form.top_k.value),
                                                    include_superseded: form.include_superseded.checked});
    const target = document.getElementById("retrieve-result");
    if (!body.memories.length) {
      target.replaceChildren(el("p", {class: "muted", text: label("no_results")}));
      return;
    }
    const parts = Object.keys(body.memories[0].score_parts);
    const rows = body.memories.map((memory) => el("tr", {"data-id": memory.id},
      el("td", {class: "num", "data-part": "score", text: memory.score.toFixed(3)}),
      ...parts.map((part) => el("td", {class: "num", "data-part": part,
                                       text: Number(memory.score_parts[part]).toFixed(3)})),
      el("td", {text: LABELS[`kind_${memory.kind}`] || memory.kind}), el("td", {text: turnsText(memory.turn_range)}),
      el("td", {text: memory.content})));
    target.replaceChildren(
      table([label("score"), ...parts, label("kind"), label("turns"), label("content")], rows, "retrieved"),
      el("pre", {class: "code", text: body.text}));
  });
}

// -- versions: diff and (confirmed) rollback ----------------------------------------------------

function setUpDiff() {
  const form = document.getElementById("diff-form");
  if (!form) return;
  withStatus(form, async () => {
    const query = new URLSearchParams({from: form.from.value, to: form.to.value});
    const response = await fetch(`${form.action}?${query}`, {headers: {"X-Fragment": "1"}, credentials: "same-origin"});
    if (!response.ok) {
      const body = await response.json().catch(() => ({error: response.statusText}));
      throw new Error(body.error);
    }
    // The fragment is rendered by the server's templates, which escape every stored value.
    document.getElementById("diff-result").innerHTML = await response.text();
  });
}

function setUpRollback() {
  const dialog = document.getElementById("rollback-dialog");
  if (!dialog) return;
  let chosen = 0;
  document.addEventListener("click", (event) => {
    const button = event.target.closest("[data-rollback]");
    if (!button) return;
    chosen = Number(button.dataset.rollback);
    const request = {...namespace(), version: chosen, expected_version: Number(MAIN.dataset.latestVersion)};
    document.getElementById("rollback-body").textContent = label("rollback_body", {v: chosen});
    document.getElementById("rollback-request").textContent =
      `POST ${MAIN.dataset.nodeBase}session_rollback\n${JSON.stringify(request, null, 2)}`;
    dialog.returnValue = "";
    dialog.showModal();
  });
  dialog.addEventListener("close", async () => {
    if (dialog.returnValue !== "confirm") return;
    const status = document.querySelector("#diff-form [data-status]");
    try {
      const body = await callNode("session_rollback",
                                  {version: chosen, expected_version: Number(MAIN.dataset.latestVersion)});
      status.textContent = label("rollback_done", {v: body.version});
      window.location.reload();
    } catch (error) {
      status.classList.add("error");
      status.textContent = `${label("error")}: ${error.message}`;
    }
  });
}

showLocalTimes();
setUpNamespaceSearch();
setUpPanels();
setUpMemoryFilters();
setUpAssemble();
setUpRetrieve();
setUpDiff();
setUpRollback();
