// The live page: polls /state.json every second, updates each link of the
// drawing in place (class state-*, data-state), the table of links and the
// details of the selected one; fetches /graph.svg again when the revision changes.
"use strict";

const PERIOD_MS = 1000;
let shownRevision = -1;
let selected = null;
let current = null;

function rate(value, unit) {
  if (value === undefined) return "–";
  const steps = [[1e9, "G"], [1e6, "M"], [1e3, "k"]];
  for (const [size, prefix] of steps) {
    if (value >= size) return (value / size).toFixed(1) + " " + prefix + unit;
  }
  return value.toFixed(0) + " " + unit;
}

function endName(end) { return end.pod + ":" + end.intf; }

function flow(from) {
  const r = from.rates || {};
  return rate(r.tx_pps, "f/s") + ", " + rate(r.tx_bps, "bit/s");
}

function errors(link) {
  let sum = 0;
  for (const end of [link.a, link.b]) {
    const c = end.counters || {};
    sum += (c.rx_errors || 0) + (c.tx_errors || 0) + (c.rx_dropped || 0) + (c.tx_dropped || 0);
  }
  return sum;
}

function cell(row, text) {
  const td = document.createElement("td");
  td.textContent = text;
  row.appendChild(td);
  return td;
}

async function loadPicture(revision) {
  const answer = await fetch("/graph.svg", { cache: "no-store" });
  const picture = document.getElementById("picture");
  picture.innerHTML = await answer.text();
  for (const edge of picture.querySelectorAll("g.edge")) {
    const id = (edge.id || "").replace(/^link:/, "");
    edge.addEventListener("click", () => select(id));
  }
  shownRevision = revision;
}

function paint(state) {
  document.getElementById("title").textContent = state.title;
  document.getElementById("updated").textContent =
    "updated " + new Date().toLocaleTimeString();
  document.getElementById("problem").textContent = state.problem || "";
  const body = document.querySelector("#links tbody");
  body.replaceChildren();
  for (const link of Object.values(state.links)) {
    const edge = document.getElementById("link:" + link.id);
    if (edge) {
      edge.setAttribute("class", "edge link state-" + link.state + (link.id === selected ? " selected" : ""));
      edge.setAttribute("data-state", link.state);
    }
    const row = document.createElement("tr");
    row.id = "row:" + link.id;
    row.dataset.state = link.state;
    cell(row, link.id);
    cell(row, link.kind);
    cell(row, link.state).className = "state-" + link.state;
    cell(row, endName(link.a));
    cell(row, endName(link.b));
    cell(row, flow(link.a));
    cell(row, flow(link.b));
    cell(row, String(errors(link)));
    cell(row, link.error || "");
    row.addEventListener("click", () => select(link.id));
    body.appendChild(row);
  }
  showDetails();
}

function select(id) {
  selected = id;
  for (const edge of document.querySelectorAll("g.edge.selected")) edge.classList.remove("selected");
  const edge = document.getElementById("link:" + id);
  if (edge) edge.classList.add("selected");
  showDetails();
}

function showDetails() {
  const box = document.getElementById("details");
  if (!current || selected === null) return;
  const link = current.links[selected];
  box.replaceChildren();
  const title = document.createElement("h2");
  title.id = "details-title";
  box.appendChild(title);
  if (!link) {
    title.textContent = "link " + selected + ": no longer in the lab";
    return;
  }
  title.textContent = "link " + link.id + " (" + link.kind + "): " + link.state;
  if (link.error) {
    const p = document.createElement("p");
    p.className = "state-error";
    p.textContent = "last error: " + link.error;
    box.appendChild(p);
  }
  for (const [side, end] of [["a", link.a], ["b", link.b]]) {
    const table = document.createElement("table");
    const rows = [
      ["end " + side, endName(end)],
      ["address", end.ip || "–"],
      ["MAC", end.mac || "–"],
      ["built", end.reconcile || "unknown"],
      ["pulled", end.pulled ? "yes" : "no"],
      ["impairments", end.impairments_text || "none"],
    ];
    if (end.error) rows.push(["last error", end.error]);
    const counters = end.counters || {};
    for (const name of Object.keys(counters).sort()) rows.push([name, String(counters[name])]);
    const r = end.rates || {};
    rows.push(["rx rate", rate(r.rx_pps, "f/s") + ", " + rate(r.rx_bps, "bit/s")]);
    rows.push(["tx rate", rate(r.tx_pps, "f/s") + ", " + rate(r.tx_bps, "bit/s")]);
    for (const [name, value] of rows) {
      const row = document.createElement("tr");
      cell(row, name);
      cell(row, value);
      table.appendChild(row);
    }
    box.appendChild(table);
  }
}

async function tick() {
  try {
    const answer = await fetch("/state.json", { cache: "no-store" });
    const state = await answer.json();
    if (state.revision !== shownRevision) await loadPicture(state.revision);
    current = state;
    paint(state);
  } catch (err) {
    document.getElementById("problem").textContent = "page: " + err;
  }
  setTimeout(tick, PERIOD_MS);
}

tick();
