"use strict";
// The vrh-lmms explorer: reads its data from the page's JSON block and builds every element with createElement and
// textContent (never as HTML), so nothing a run names is ever parsed as markup. No request leaves the page.
(function () {
  const DATA = JSON.parse(document.getElementById("explorer-data").textContent);
  const SVG = "http://www.w3.org/2000/svg";
  const KINDS = DATA.kinds || {};
  const PALETTE = ["#d1242f", "#bf8700", "#8250df", "#e16f24", "#0a7ea4", "#bf3989", "#6e7781", "rgb(17, 99, 41)",
                   "rgb(149, 56, 0)", "#0550ae"];
  const STATUS = { c: "correct", m: "mislocated", p: "parse failure", w: "wrong", "-": "not scored" };
  const tip = document.getElementById("tip");

  // ---- small builders -------------------------------------------------------------------------------------------
  function el(tag, attrs, text) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function sv(tag, attrs, text) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); }
  function pts(v) { return v === null || v === undefined ? "-" : (100 * v).toFixed(1); }
  function num(v, d) { return v === null || v === undefined ? "-" : Number(v).toFixed(d === undefined ? 4 : d); }
  function kindColour(kind) { return (KINDS[kind] && KINDS[kind].colour) || "#6e7781"; }
  function kindName(kind) { return (KINDS[kind] && KINDS[kind].legend) || kind; }
  function withTip(node, text) {
    node.addEventListener("mouseenter", (ev) => showTip(text, ev.clientX, ev.clientY));
    node.addEventListener("mousemove", (ev) => showTip(text, ev.clientX, ev.clientY));
    node.addEventListener("mouseleave", hideTip);
    node.addEventListener("focus", () => { const r = node.getBoundingClientRect(); showTip(text, r.right, r.top); });
    node.addEventListener("blur", hideTip);
    const t = sv("title", {}, text);
    if (node.namespaceURI === SVG) node.appendChild(t); else node.setAttribute("title", text);
  }
  function showTip(text, x, y) {
    tip.textContent = text;
    tip.hidden = false;
    tip.style.left = Math.min(x + 12, window.innerWidth - 370) + "px";
    tip.style.top = (y + 12) + "px";
  }
  function hideTip() { tip.hidden = true; }
  function heat(t) {  // 0..1 -> a white-to-navy ramp
    const a = [247, 251, 255], b = [8, 48, 107];
    const c = a.map((v, i) => Math.round(v + (b[i] - v) * Math.max(0, Math.min(1, t))));
    return "rgb(" + c.join(",") + ")";
  }
  function hot(t) {  // 0..1 -> dark red, orange, pale yellow: attention over a dimmed image
    const stops = [[120, 20, 20], [230, 80, 20], [255, 200, 40], [255, 255, 200]];
    const x = Math.max(0, Math.min(1, t)) * (stops.length - 1), i = Math.min(stops.length - 2, Math.floor(x));
    const f = x - i, c = stops[i].map((v, j) => Math.round(v + (stops[i + 1][j] - v) * f));
    return "rgb(" + c.join(",") + ")";
  }
  function decode(b64) {
    const s = atob(b64), out = new Uint8Array(s.length);
    for (let i = 0; i < s.length; i++) out[i] = s.charCodeAt(i);
    return out;
  }
  const MAPS = DATA.doc_views && DATA.doc_views.maps;
  const CELLS = {};
  if (MAPS) for (const d of MAPS.docs) CELLS[d.key] = decode(d.cells);
  const IMAGES = (DATA.doc_views && DATA.doc_views.images) || {};

  // ---- the header: which run(s) -----------------------------------------------------------------------------------
  document.getElementById("title").textContent = DATA.title;
  document.getElementById("subtitle").textContent = (DATA.groups.length ?
    DATA.groups.length + " run(s): " + DATA.groups.map((g) => g.model + " / " + g.task).join("; ") :
    "heads file(s): " + DATA.heads_files.map((h) => h.path).join("; ")) +
    (DATA.version ? " · vrh-lmms " + DATA.version : "");
  const runA = document.getElementById("run-a"), runB = document.getElementById("run-b");
  DATA.groups.forEach((g, i) => {
    runA.appendChild(el("option", { value: i }, g.model + " / " + g.task));
  });
  runB.appendChild(el("option", { value: "" }, "none"));
  DATA.groups.forEach((g, i) => runB.appendChild(el("option", { value: "g" + i }, g.model + " / " + g.task)));
  DATA.heads_files.forEach((h, i) => runB.appendChild(el("option", { value: "h" + i }, "heads file: " + h.label)));
  const panes = document.getElementById("panes");
  function render() {
    clear(panes);
    const a = Number(runA.value || 0);
    const b = runB.value;
    const first = DATA.groups[a] || headsOnly();
    if (!first) { panes.appendChild(el("p", {}, "This report holds no runs.")); return; }
    panes.appendChild(pane(first, null, "a"));
    if (b && b[0] === "g") panes.appendChild(pane(DATA.groups[Number(b.slice(1))], null, "b"));
    if (b && b[0] === "h") panes.appendChild(pane(first, Number(b.slice(1)), "b"));
    panes.classList.toggle("two", panes.children.length > 1);
    if (panes.children.length === 1) panes.firstChild.classList.add("wide");
  }
  function headsOnly() {  // a heads file without runs (a discovery): its map and cells, nothing ablated
    const hf = DATA.heads_files[0];
    if (!hf) return null;
    return { id: "h0", model: hf.model, task: "discovery", metric: null, configs: [], summary: [], dead_heads: hf.dead,
             heads_file: hf.sha256, docs: { id: [], expr: [], gt: [], size: [], task: "" } };
  }
  runA.addEventListener("change", render);
  runB.addEventListener("change", render);

  // ---- one pane: a run's heads, curve and docs --------------------------------------------------------------------
  function heads_for(group) {
    const i = DATA.heads_files.findIndex((h) => h.sha256 && h.sha256 === group.heads_file);
    return i >= 0 ? i : (DATA.heads_files.length ? 0 : -1);
  }
  function pane(group, headsIndex, side) {
    const root = el("section", { class: "pane", "data-pane": side, "data-group": group.id });
    root.appendChild(el("h2", {}, group.model + " / " + group.task));
    const state = { group, heads: headsIndex === null ? heads_for(group) : headsIndex, cell: null, head: null,
                    root };
    root.appendChild(headsSection(state));
    if (group.configs.length) {  // a heads file alone (a discovery) has no runs to show
      root.appendChild(curveSection(state));
      root.appendChild(docsSection(state));
    }
    return root;
  }

  // ---- heads: the layer x head map of one scoring cell ------------------------------------------------------------
  function headsSection(state) {
    const sec = el("section", { class: "heads-section" });
    sec.appendChild(el("h3", {}, "Heads: discovery scores (layer x head)"));
    const hf = DATA.heads_files[state.heads];
    if (!hf) { sec.appendChild(el("p", { class: "note" }, "No heads file was given to this report.")); return sec; }
    const controls = el("div", { class: "controls" });
    const cellSel = el("select", { "aria-label": "scoring cell" });
    for (const name of Object.keys(hf.cells)) {
      cellSel.appendChild(el("option", { value: name }, name + (name === hf.primary ? " (the run's)" : "")));
    }
    state.cell = hf.primary;
    controls.appendChild(el("label", {}, "heads file: " + hf.label + " · scoring cell"));
    controls.appendChild(cellSel);
    sec.appendChild(controls);
    const legend = el("p", { class: "legend" });
    sec.appendChild(legend);
    const gridBox = el("div", {});
    sec.appendChild(gridBox);
    const panel = el("div", { class: "head-panel", "aria-live": "polite" });
    sec.appendChild(panel);
    state.panel = panel;
    const topk = smallestTopk(state.group);
    function draw() {
      clear(gridBox);
      const cell = hf.cells[state.cell];
      const rank = {};
      cell.ranking.forEach((h, i) => { rank[h] = i + 1; });
      let max = 0;
      for (const row of cell.scores) for (const v of row) max = Math.max(max, Math.abs(v));
      const grid = el("div", { class: "head-grid", role: "grid", "aria-label": "heads by layer" });
      grid.style.gridTemplateColumns = "28px repeat(" + hf.heads + ", 26px)";
      grid.appendChild(el("span", { class: "axis" }, ""));
      for (let h = 0; h < hf.heads; h++) grid.appendChild(el("span", { class: "axis" }, "H" + h));
      const dead = new Set(hf.dead);
      const buttons = [];
      for (let l = 0; l < hf.layers; l++) {
        grid.appendChild(el("span", { class: "axis" }, "L" + l));
        for (let h = 0; h < hf.heads; h++) {
          const name = "L" + l + "H" + h;
          const score = cell.scores[l][h];
          const b = el("button", { class: "head-cell", type: "button", "data-head": name, tabindex: "-1",
                                   "aria-pressed": "false", "data-layer": l, "data-index": h,
                                   "aria-label": name + ", rank " + (rank[name] || "-") + ", score " + num(score) });
          b.style.backgroundColor = heat(max > 0 ? Math.sqrt(Math.abs(score) / max) : 0);
          if (dead.has(name)) b.classList.add("dead");
          if (topk && topk.heads.includes(name)) b.classList.add("in-top");
          withTip(b, name + "\nrank " + (rank[name] || "-") + " of " + cell.ranking.length + "\nscore " + num(score) +
                  (dead.has(name) ? "\nwrites nothing (o_proj columns all zero)" : ""));
          b.addEventListener("click", () => select(name));
          b.addEventListener("keydown", (ev) => move(ev, l, h));
          grid.appendChild(b);
          buttons.push(b);
        }
      }
      gridBox.appendChild(grid);
      const focusable = buttons.find((b) => b.dataset.head === (state.head || cell.ranking[0])) || buttons[0];
      if (focusable) focusable.tabIndex = 0;
      legend.textContent = "Colour: |score| in cell " + state.cell + " (darker = higher, square-root scale, max " + num(max) + "). " +
        (topk ? "Red outline: " + topk.id + " (the smallest top-k ablated). " : "") +
        (dead.size ? "Hatched: heads that write nothing. " : "") +
        "Click a head (or use the arrow keys and Enter) for its attention and the configurations that ablate it.";
      if (state.head) select(state.head, true);
    }
    function move(ev, l, h) {
      const steps = { ArrowRight: [0, 1], ArrowLeft: [0, -1], ArrowDown: [1, 0], ArrowUp: [-1, 0] };
      const s = steps[ev.key];
      if (!s) return;
      ev.preventDefault();
      const nl = Math.max(0, Math.min(hf.layers - 1, l + s[0])), nh = Math.max(0, Math.min(hf.heads - 1, h + s[1]));
      const next = gridBox.querySelector('[data-head="L' + nl + "H" + nh + '"]');
      for (const b of gridBox.querySelectorAll(".head-cell")) b.tabIndex = -1;
      next.tabIndex = 0;
      next.focus();
    }
    function select(name, quiet) {
      state.head = name;
      for (const b of gridBox.querySelectorAll(".head-cell")) {
        const on = b.dataset.head === name;
        b.setAttribute("aria-pressed", on ? "true" : "false");
        if (on) b.tabIndex = 0; else b.tabIndex = -1;
      }
      headPanel(state, hf, name);
      if (state.onHead) state.onHead();
      if (!quiet) hideTip();
    }
    cellSel.addEventListener("change", () => { state.cell = cellSel.value; draw(); });
    draw();
    return sec;
  }

  function smallestTopk(group) {
    const tops = group.configs.filter((c) => c.kind === "topk" && c.id.indexOf("@") < 0 && c.heads.length);
    tops.sort((a, b) => a.k - b.k);
    return tops[0] || null;
  }

  function headPanel(state, hf, name) {
    const panel = state.panel;
    clear(panel);
    const cell = hf.cells[state.cell];
    const rank = cell.ranking.indexOf(name) + 1;
    const m = /^L(\d+)H(\d+)$/.exec(name);
    const l = Number(m[1]), h = Number(m[2]);
    const box = el("div", { class: "head-detail", "data-overlay": name });
    box.appendChild(el("h3", {}, "Head " + name));
    const facts = el("p", { class: "facts" });
    facts.appendChild(el("span", {}, "rank " + (rank || "-") + " of " + cell.ranking.length + " in " + state.cell));
    facts.appendChild(el("span", {}, "score " + num(cell.scores[l][h])));
    if (hf.dead.includes(name)) facts.appendChild(el("span", {}, "writes nothing (o_proj columns all zero)"));
    box.appendChild(facts);
    // the configurations that ablate it
    const by = {};
    for (const c of state.group.configs) if (c.heads.includes(name)) (by[c.kind] = by[c.kind] || []).push(c.id);
    const abl = el("p", { class: "facts" });
    const kinds = Object.keys(by);
    abl.appendChild(el("span", {}, kinds.length ? "Ablated by:" : "No configuration of this run ablates it."));
    for (const k of kinds) {
      abl.appendChild(el("span", { "data-ablated-by": k }, kindName(k) + " (" + by[k].length + "): " + by[k].join(", ")));
    }
    box.appendChild(abl);
    // its attention over the sample docs
    const overlays = el("div", { class: "overlays" });
    const docs = MAPS ? MAPS.docs.filter((d) => d.layers > l && d.heads > h &&
                                              (MAPS.model === state.group.model || DATA.groups.length === 1 ||
                                               !DATA.groups.some((g) => g.model === MAPS.model))) : [];
    if (!docs.length) {
      box.appendChild(el("p", { class: "note" }, MAPS ? "The saved attention maps are of another model." :
        "This run saved no per-head attention maps (vrh-lmms demo saves them for a few sample docs)."));
    } else {
      box.appendChild(el("p", { class: "note" }, "Its attention from the answer tokens over the image of " +
        docs.length + " sample docs (bright = more; each map scaled to its own maximum; hover a cell for its " +
        "share); green: the ground-truth box, blue dashed: the model's answer."));
    }
    for (const d of docs) overlays.appendChild(overlay(d, l, h, name));
    box.appendChild(overlays);
    panel.appendChild(box);
  }

  function overlay(d, l, h, name) {
    const fig = el("figure", { "data-map-doc": d.doc_id });
    const [w, hgt] = d.image_size;
    const scale = 180 / Math.max(w, hgt);
    const s = sv("svg", { width: Math.round(w * scale), height: Math.round(hgt * scale), viewBox: "0 0 " + w + " " + hgt,
                          role: "img", "aria-label": name + " on doc " + d.doc_id });
    const img = IMAGES[d.key];
    if (img) {
      s.appendChild(sv("image", { href: img, x: 0, y: 0, width: w, height: hgt, preserveAspectRatio: "none" }));
      s.appendChild(sv("rect", { x: 0, y: 0, width: w, height: hgt, fill: "black", "fill-opacity": 0.55 }));
    } else s.appendChild(sv("rect", { x: 0, y: 0, width: w, height: hgt, fill: "#1f2328" }));
    const cells = CELLS[d.key], per = d.rows * d.cols, off = (l * d.heads + h) * per;
    let peak = 0, peakAt = 0;
    for (let r = 0; r < d.rows; r++) {
      for (let c = 0; c < d.cols; c++) {
        const v = cells[off + r * d.cols + c];
        if (v > peak) { peak = v; peakAt = r * d.cols + c; }
        const x = d.x_edges[c], y = d.y_edges[r];
        const rect = sv("rect", { x: x[0], y: y[0], width: x[1] - x[0], height: y[1] - y[0], fill: hot(v / 255),
                                  "fill-opacity": (0.9 * v / 255).toFixed(3), class: "heat" });
        withTip(rect, "row " + r + ", col " + c + ": " + num(d.scale[l * d.heads + h] * v / 255, 4) +
                " of the head's attention");
        s.appendChild(rect);
      }
    }
    if (d.gt_box) s.appendChild(boxRect(d.gt_box, "gt", "gt"));
    if (d.pred_box) s.appendChild(boxRect(d.pred_box, "baseline", "baseline"));
    fig.appendChild(s);
    const cap = el("figcaption", {});
    cap.appendChild(el("div", {}, "doc " + d.doc_id + ": " + d.expression));
    cap.appendChild(el("div", { class: "note" }, "answer: " + d.answer));
    fig.appendChild(cap);
    fig.dataset.peak = String(peakAt);
    return fig;
  }

  function boxRect(b, cls, hook) {
    const r = sv("rect", { x: b[0], y: b[1], width: Math.max(0, b[2] - b[0]), height: Math.max(0, b[3] - b[1]),
                           class: "box " + cls, "data-box": hook });
    return r;
  }

  // ---- the k-curve and the drops ---------------------------------------------------------------------------------
  function curveSection(state) {
    const sec = el("section", { class: "curve-section" });
    sec.appendChild(el("h3", {}, "Drops against k (points of " + (state.group.metric || "accuracy") + ")"));
    const rows = (state.group.summary || []).filter((r) => r.topk_drop !== null && r.topk_drop !== undefined);
    if (!rows.length) { sec.appendChild(el("p", { class: "note" }, "No top-k configuration to plot.")); return sec; }
    const byId = {};
    for (const c of state.group.configs) byId[c.id] = c;
    const controls = Object.keys(KINDS).filter((k) => KINDS[k].control && rows.some((r) => r[k] && r[k].n));
    const W = 560, H = 300, L = 52, R = 12, T = 14, B = 40;
    const ks = rows.map((r) => r.k);
    const kmin = Math.min(...ks), kmax = Math.max(...ks);
    let ymax = 0.05;
    for (const r of rows) {
      ymax = Math.max(ymax, r.topk_drop_ci ? r.topk_drop_ci[1] || 0 : r.topk_drop);
      for (const k of controls) for (const lab of (r[k] && r[k].labels) || []) ymax = Math.max(ymax, (byId[lab] || {}).drop || 0);
    }
    let ymin = 0;
    for (const c of state.group.configs) if (c.drop !== null && c.drop !== undefined) ymin = Math.min(ymin, c.drop);
    ymax = Math.min(1, ymax + 0.05);
    const X = (k) => kmax === kmin ? L + (W - L - R) / 2 : L + (k - kmin) / (kmax - kmin) * (W - L - R);
    const Y = (v) => T + (ymax - v) / (ymax - ymin) * (H - T - B);
    const s = sv("svg", { class: "chart k-curve", viewBox: "0 0 " + W + " " + H, width: W, height: H, role: "img",
                          "aria-label": "drops against k" });
    const step = [0.02, 0.05, 0.1, 0.2, 0.25].find((x) => (ymax - ymin) / x <= 8) || 0.5;
    for (let v = Math.ceil(ymin / step) * step; v <= ymax + 1e-9; v += step) {
      s.appendChild(sv("line", { x1: L, x2: W - R, y1: Y(v), y2: Y(v), stroke: "#eaeef2" }));
      s.appendChild(sv("text", { x: L - 6, y: Y(v) + 4, "text-anchor": "end" }, (100 * v).toFixed(0)));
    }
    s.appendChild(sv("text", { x: 12, y: (T + H - B) / 2, "text-anchor": "middle",
                               transform: "rotate(-90 12 " + (T + H - B) / 2 + ")" }, "drop, points"));
    for (const k of ks) s.appendChild(sv("text", { x: X(k), y: H - B + 16, "text-anchor": "middle" }, String(k)));
    s.appendChild(sv("text", { x: (L + W - R) / 2, y: H - 6, "text-anchor": "middle" }, "k (heads ablated)"));
    s.appendChild(sv("line", { x1: L, x2: W - R, y1: Y(0), y2: Y(0), stroke: "#8c959f" }));
    const n = controls.length + 1;
    const dx = (i) => (i - (n - 1) / 2) * 9;
    controls.forEach((kind, i) => {
      const colour = kindColour(kind);
      const line = [];
      for (const r of rows) {
        const c = r[kind];
        if (!c || !c.n) continue;
        const x = X(r.k) + dx(i + 1);
        for (const lab of c.labels) {
          const cfg = byId[lab];
          if (!cfg || cfg.drop === null || cfg.drop === undefined) continue;
          const dot = sv("circle", { cx: x, cy: Y(cfg.drop), r: 2.2, fill: colour, "fill-opacity": 0.45,
                                     class: "pt draw", "data-config": lab });
          withTip(dot, lab + ": drop " + pts(cfg.drop) + " points [" + pts(cfg.drop_ci[0]) + ", " +
                  pts(cfg.drop_ci[1]) + "]");
          s.appendChild(dot);
        }
        const se = c.drop_se || 0;
        s.appendChild(sv("line", { x1: x, x2: x, y1: Y(c.drop_mean - se), y2: Y(c.drop_mean + se), stroke: colour,
                                   "stroke-width": 2 }));
        const p = sv("rect", { x: x - 4, y: Y(c.drop_mean) - 4, width: 8, height: 8, fill: colour, class: "pt",
                               tabindex: 0, "data-point": kind + "@" + r.k });
        withTip(p, kindName(kind) + ", k = " + r.k + ": mean drop " + pts(c.drop_mean) + " ± " + pts(se) +
                " points (SE over " + c.n + " draws; min " + pts(c.drop_min) + ", max " + pts(c.drop_max) + ")");
        s.appendChild(p);
        line.push([x, Y(c.drop_mean)]);
      }
      if (line.length > 1) {
        s.appendChild(sv("polyline", { points: line.map((q) => q.join(",")).join(" "), fill: "none", stroke: colour,
                                       "stroke-dasharray": "3 3" }));
      }
    });
    const topLine = [];
    for (const r of rows) {
      const x = X(r.k) + dx(0), ci = r.topk_drop_ci || [r.topk_drop, r.topk_drop];
      s.appendChild(sv("line", { x1: x, x2: x, y1: Y(ci[0]), y2: Y(ci[1]), stroke: kindColour("topk"),
                                 "stroke-width": 2 }));
      const p = sv("circle", { cx: x, cy: Y(r.topk_drop), r: 5, fill: kindColour("topk"), class: "pt", tabindex: 0,
                               "data-point": "topk@" + r.k });
      withTip(p, r.config + " (" + (r.heads_label || "top-k") + "): drop " + pts(r.topk_drop) + " points [" +
              pts(ci[0]) + ", " + pts(ci[1]) + "], p = " + (r.p_test === null || r.p_test === undefined ? "-" :
              Number(r.p_test).toExponential(2)) + "; accuracy " + pts(r.baseline_acc) + "% -> " + pts(r.topk_acc) + "%");
      s.appendChild(p);
      topLine.push([x, Y(r.topk_drop)]);
    }
    if (topLine.length > 1) {
      s.appendChild(sv("polyline", { points: topLine.map((q) => q.join(",")).join(" "), fill: "none",
                                     stroke: kindColour("topk") }));
    }
    sec.appendChild(s);
    const legend = el("p", { class: "legend" });
    for (const kind of ["topk", ...controls]) {
      const sw = el("span", { class: "swatch" });
      sw.style.backgroundColor = kindColour(kind);
      legend.appendChild(sw);
      legend.appendChild(document.createTextNode((kind === "topk" ? "top-k (95% interval)" : kindName(kind) +
        " (mean ± SE; dots: draws)") + "   "));
    }
    sec.appendChild(legend);
    sec.appendChild(dropsTable(state, rows, controls));
    return sec;
  }

  function dropsTable(state, rows, controls) {
    const wrap = el("div", { class: "answers drops" });
    const t = el("table", {});
    const head = el("tr", {});
    for (const h of ["configuration", "k", "accuracy", "drop, points [95% CI]", "p (sign-flip)"]) {
      head.appendChild(el("th", {}, h));
    }
    t.appendChild(head);
    for (const c of state.group.configs) {
      if (KINDS[c.kind] && KINDS[c.kind].control) continue;
      const tr = el("tr", { "data-drop-row": c.id });
      tr.appendChild(el("td", { title: c.heads_label || c.id }, c.id));
      tr.appendChild(el("td", {}, c.k === null ? "" : c.k));
      tr.appendChild(el("td", {}, pts(c.acc) + "%"));
      tr.appendChild(el("td", {}, c.drop === null || c.drop === undefined ? "" :
        pts(c.drop) + " [" + pts(c.drop_ci[0]) + ", " + pts(c.drop_ci[1]) + "]"));
      tr.appendChild(el("td", {}, c.p === null || c.p === undefined ? "" : Number(c.p).toExponential(2)));
      t.appendChild(tr);
    }
    for (const r of rows) {
      for (const kind of controls) {
        const c = r[kind];
        if (!c || !c.n) continue;
        const tr = el("tr", { "data-drop-row": kind + "@" + r.k });
        tr.appendChild(el("td", {}, kindName(kind) + " (" + c.n + " draws)"));
        tr.appendChild(el("td", {}, r.k));
        tr.appendChild(el("td", {}, ""));
        tr.appendChild(el("td", {}, pts(c.drop_mean) + " ± " + pts(c.drop_se) + " (SE)"));
        tr.appendChild(el("td", {}, ""));
        t.appendChild(tr);
      }
    }
    wrap.appendChild(t);
    return wrap;
  }

  // ---- docs: filters, the list, one doc's boxes and answers -----------------------------------------------------
  function breaks(base, cfg, i) {
    const a = base.score[i], b = cfg.score[i];
    return a !== null && b !== null && b < a;
  }
  function filterSets(group, top, draws) {
    const base = group.configs[0];
    const n = group.docs.id.length;
    const topOnly = [], controlOnly = [];
    for (let i = 0; i < n; i++) {
      if (base.score[i] === null || top.score[i] === null || draws.some((d) => d.score[i] === null)) continue;
      const t = breaks(base, top, i);
      let hits = 0;
      for (const d of draws) if (breaks(base, d, i)) hits++;
      const c = 2 * hits >= draws.length;
      if (t && !c) topOnly.push(i);
      if (c && !t) controlOnly.push(i);
    }
    return { topk_only: topOnly, control_only: controlOnly };
  }

  function docsSection(state) {
    const group = state.group;
    const sec = el("section", { class: "docs-section" });
    sec.appendChild(el("h3", {}, "Docs (" + group.docs.id.length + ")"));
    if (!group.docs.id.length) { sec.appendChild(el("p", { class: "note" }, "The sample files are not here.")); return sec; }
    const byId = {};
    for (const c of group.configs) byId[c.id] = c;
    const rows = (group.summary || []).filter((r) => byId[r.config] && byId[r.config].score);
    const controls = Object.keys(KINDS).filter((k) => KINDS[k].control);
    const bar = el("div", { class: "controls" });
    const topSel = el("select", { "aria-label": "top-k configuration", "data-filter-topk": "" });
    for (const r of rows) topSel.appendChild(el("option", { value: r.config }, r.config));
    const ctlSel = el("select", { "aria-label": "control", "data-filter-control": "" });
    bar.appendChild(el("label", {}, "filter by"));
    bar.appendChild(topSel);
    bar.appendChild(el("label", {}, "against"));
    bar.appendChild(ctlSel);
    sec.appendChild(bar);
    const filters = el("div", { class: "filters", role: "radiogroup", "aria-label": "doc filter" });
    sec.appendChild(filters);
    sec.appendChild(el("p", { class: "note" }, "Breaks: scores below the baseline; a control breaks a doc when at " +
      "least half of its draws do (report.json's doc_filters use the same rule)."));
    const body = el("div", { class: "docs-body" });
    const list = el("ul", { class: "doc-list", role: "listbox", "aria-label": "docs" });
    const view = el("div", { class: "doc-view-box" });
    body.appendChild(list);
    body.appendChild(view);
    sec.appendChild(body);
    const st = { filter: "all", shown: [] , current: null };
    function controlsFor(config) {
      const r = rows.find((x) => x.config === config);
      return controls.filter((k) => r && r[k] && (r[k].labels || []).some((lab) => byId[lab] && byId[lab].score));
    }
    function fillControls() {
      clear(ctlSel);
      for (const k of controlsFor(topSel.value)) ctlSel.appendChild(el("option", { value: k }, kindName(k)));
    }
    function refresh() {
      const r = rows.find((x) => x.config === topSel.value);
      const kind = ctlSel.value;
      let sets = { topk_only: [], control_only: [] };
      if (r && kind) {
        const draws = (r[kind].labels || []).map((lab) => byId[lab]).filter((c) => c && c.score);
        sets = filterSets(group, byId[r.config], draws);
      }
      clear(filters);
      const all = group.docs.id.map((_, i) => i);
      const options = [["all", "all docs", all],
                       ["topk_only", (r ? r.config : "top-k") + " breaks, " + kindName(kind) + " does not", sets.topk_only],
                       ["control_only", kindName(kind) + " breaks, " + (r ? r.config : "top-k") + " does not",
                        sets.control_only]];
      for (const [key, text, idx] of options) {
        const lab = el("label", { "data-filter": key });
        const radio = el("input", { type: "radio", name: "filter-" + state.root.dataset.pane, value: key });
        radio.checked = st.filter === key;
        radio.addEventListener("change", () => { st.filter = key; showList(idx); });
        lab.appendChild(radio);
        lab.appendChild(document.createTextNode(" " + text + " ("));
        lab.appendChild(el("span", { "data-count": key }, idx.length));
        lab.appendChild(document.createTextNode(")"));
        filters.appendChild(lab);
        if (st.filter === key) showList(idx);
      }
    }
    function showList(idx) {
      clear(list);
      st.shown = idx;
      idx.forEach((i, pos) => {
        const li = el("li", {});
        const b = el("button", { type: "button", role: "option", "data-doc-item": group.docs.id[i],
                                 "aria-selected": "false", tabindex: pos === 0 ? "0" : "-1" });
        const base = group.configs[0];
        b.textContent = "doc " + group.docs.id[i] + " · " + group.docs.expr[i] + " " +
          (base.status[i] === "c" ? "✓" : "✗");
        b.title = "baseline: " + STATUS[base.status[i] || "-"];
        b.addEventListener("click", () => openDoc(i));
        b.addEventListener("keydown", (ev) => {
          const step = { ArrowDown: 1, ArrowUp: -1, Home: -1e9, End: 1e9 }[ev.key];
          if (step === undefined) return;
          ev.preventDefault();
          const items = Array.from(list.querySelectorAll("button"));
          const at = Math.max(0, Math.min(items.length - 1, items.indexOf(b) + step));
          for (const x of items) x.tabIndex = -1;
          items[at].tabIndex = 0;
          items[at].focus();
        });
        li.appendChild(b);
        list.appendChild(li);
      });
      if (!idx.length) list.appendChild(el("li", { class: "note" }, "no doc"));
      if (st.current === null && idx.length) openDoc(idx[0], true);
    }
    function openDoc(i, quiet) {
      st.current = i;
      for (const b of list.querySelectorAll("button")) {
        b.setAttribute("aria-selected", b.dataset.docItem === String(group.docs.id[i]) ? "true" : "false");
      }
      clear(view);
      view.appendChild(docView(group, i, state));
      if (!quiet) hideTip();
    }
    state.onHead = () => { if (st.current !== null) openDoc(st.current, true); };  // the doc beside its head's map
    topSel.addEventListener("change", () => { fillControls(); refresh(); });
    ctlSel.addEventListener("change", refresh);
    fillControls();
    refresh();
    return sec;
  }

  function docView(group, i, state) {
    const id = group.docs.id[i];
    const key = group.docs.task + "_" + id;
    const box = el("div", { class: "doc-view", "data-doc": id });
    box.appendChild(el("h3", {}, "Doc " + id));
    box.appendChild(el("p", { class: "expression" }, "Expression: " + group.docs.expr[i]));
    const size = group.docs.size[i] || [100, 100];
    const [w, h] = size;
    const scale = 320 / Math.max(w, h);
    const s = sv("svg", { width: Math.round(w * scale), height: Math.round(h * scale), viewBox: "0 0 " + w + " " + h,
                          role: "img", class: "doc-picture", "aria-label": "doc " + id + " with its boxes" });
    if (IMAGES[key]) s.appendChild(sv("image", { href: IMAGES[key], x: 0, y: 0, width: w, height: h,
                                                preserveAspectRatio: "none" }));
    else s.appendChild(sv("rect", { x: 0, y: 0, width: w, height: h, fill: "#eaeef2" }));
    const layer = sv("g", {});
    s.appendChild(layer);
    const pictures = el("div", { class: "overlays" });
    pictures.appendChild(s);
    const mapped = MAPS && MAPS.docs.find((d) => d.key === key);
    const m = state.head && /^L(\d+)H(\d+)$/.exec(state.head);
    if (mapped && m && mapped.layers > Number(m[1]) && mapped.heads > Number(m[2])) {
      const fig = overlay(mapped, Number(m[1]), Number(m[2]), state.head);
      fig.querySelector("figcaption").firstChild.textContent = "head " + state.head + "'s attention on this doc";
      pictures.appendChild(fig);
    } else if (mapped) {
      pictures.appendChild(el("p", { class: "note" }, "Click a head above to see its attention on this doc."));
    }
    box.appendChild(pictures);
    const drawn = new Set(["baseline"]);
    for (const c of group.configs) if (c.kind === "topk" && c.score) drawn.add(c.id);
    const table = el("table", {});
    const head = el("tr", {});
    for (const t of ["draw", "configuration", "kind", "outcome", "answer box", "raw answer"]) head.appendChild(el("th", {}, t));
    table.appendChild(head);
    const colour = {};
    group.configs.filter((c) => c.kind !== "baseline").forEach((c, n) => { colour[c.id] = PALETTE[n % PALETTE.length]; });
    function redraw() {  // configurations first, then the baseline's answer, the ground truth on top
      clear(layer);
      const order = [...group.configs.filter((c) => c.kind !== "baseline"), group.configs[0]];
      for (const c of order) {
        if (!drawn.has(c.id) || !c.box || !c.box[i]) continue;
        const r = boxRect(c.box[i], c.kind === "baseline" ? "baseline" : "cfg", c.id);
        if (c.kind !== "baseline") r.style.stroke = colour[c.id];
        withTip(r, c.id + ": [" + c.box[i].join(", ") + "] " + STATUS[c.status[i] || "-"]);
        layer.appendChild(r);
      }
      if (group.docs.gt[i]) layer.appendChild(boxRect(group.docs.gt[i], "gt", "gt"));
    }
    const gtRow = el("tr", { "data-answer": "gt" });
    gtRow.appendChild(el("td", {}, "■"));
    gtRow.appendChild(el("td", {}, "ground truth"));
    gtRow.appendChild(el("td", {}, ""));
    gtRow.appendChild(el("td", {}, ""));
    gtRow.appendChild(el("td", {}, group.docs.gt[i] ? "[" + group.docs.gt[i].join(", ") + "]" : "-"));
    gtRow.appendChild(el("td", {}, ""));
    table.appendChild(gtRow);
    for (const c of group.configs) {
      if (!c.score) continue;
      const tr = el("tr", { "data-answer": c.id });
      const td = el("td", {});
      const cb = el("input", { type: "checkbox", "aria-label": "draw " + c.id });
      cb.checked = drawn.has(c.id);
      cb.addEventListener("change", () => { if (cb.checked) drawn.add(c.id); else drawn.delete(c.id); redraw(); });
      td.appendChild(cb);
      const own = el("span", { class: "swatch box-colour" });
      own.style.backgroundColor = c.kind === "baseline" ? "#0969da" : colour[c.id];
      td.appendChild(own);
      tr.appendChild(td);
      tr.appendChild(el("td", {}, c.id));
      const kindCell = el("td", {});
      const sw = el("span", { class: "swatch" });
      sw.style.backgroundColor = c.kind === "baseline" ? "#0969da" : kindColour(c.kind);
      kindCell.appendChild(sw);
      kindCell.appendChild(document.createTextNode(kindName(c.kind)));
      tr.appendChild(kindCell);
      tr.appendChild(el("td", {}, STATUS[c.status[i] || "-"]));
      tr.appendChild(el("td", {}, c.box[i] ? "[" + c.box[i].join(", ") + "]" : "none"));
      tr.appendChild(el("td", { class: "raw" }, c.raw[i]));
      table.appendChild(tr);
    }
    redraw();
    const wrap = el("div", { class: "answers" });
    wrap.appendChild(table);
    box.appendChild(el("p", { class: "note" }, "Green: ground truth; blue dashed: the baseline's answer; " +
      "each ticked configuration's answer in the colour beside its tick (tick more below). Boxes in original-image " +
      "pixels; hover a box for its numbers."));
    box.appendChild(wrap);
    return box;
  }

  // ---- notes -----------------------------------------------------------------------------------------------------
  const notes = document.getElementById("notes");
  if (DATA.notes && DATA.notes.length) {
    notes.appendChild(el("h3", {}, "Notes"));
    const ul = el("ul", {});
    for (const n of DATA.notes) ul.appendChild(el("li", {}, n));
    notes.appendChild(ul);
  }
  render();
  document.body.dataset.ready = "true";
})();
