// blamejax interactive page: the reduction of blamejax.report.interactive_reduction, operation
// by operation in the same order on the same float64 numbers (see that module's docstring), and
// the controls that edit the coalition scores. No network, no dependencies.
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("bj-data").textContent);
  var n = data.steps.length;
  var order = data.order;  // the steps as every report lists them (by mean Shapley value)
  var size = 1 << n;
  var full = size - 1;
  var scores = [];
  var edited = [];
  var view = { failure: 0, coalition: 0 };
  var result = null;

  function copyScores() {
    scores = data.failures.map(function (f) {
      return f.scores.map(function (row) { return row.slice(); });
    });
    edited = data.failures.map(function () { return {}; });
  }

  function popcount(m) {
    var c = 0;
    while (m) { c += m & 1; m >>>= 1; }
    return c;
  }

  // ---- the reduction (mirrors interactive_reduction line by line) ----
  function reduceAll() {
    var w8 = data.weights, scale = data.scale, threshold = data.threshold;
    var rows = { shapley: [], banzhaf: [], fix_alone: [], leave_one_out: [], resolve: [],
      last_step: [], empty: [], full: [], total: [], value: [] };
    var numF = scores.length;
    var f, i, m, s, w;
    for (f = 0; f < numF; f++) {
      var x = scores[f];
      var numW = x.length;
      var last = data.failures[f].last;
      var v = [];
      for (m = 0; m < size; m++) {
        var acc = 0.0;
        for (w = 0; w < numW; w++) acc += x[w][m];
        v.push(acc / numW);
      }
      var d = [];
      for (i = 0; i < n; i++) { d.push([]); for (s = 0; s < n; s++) d[i].push(0.0); }
      for (m = 0; m < size; m++) {
        s = popcount(m);
        for (i = 0; i < n; i++) {
          var bit = 1 << i;
          if (!(m & bit)) d[i][s] += v[m | bit] - v[m];
        }
      }
      var shapley = [], banzhaf = [], fixAlone = [], loo = [], resolve = [], lastShare = [];
      for (i = 0; i < n; i++) {
        var a = 0.0, plain = 0.0;
        for (s = 0; s < n; s++) { a += w8[s] * d[i][s]; plain += d[i][s]; }
        shapley.push(a);
        banzhaf.push(plain * scale);
      }
      for (i = 0; i < n; i++) {
        fixAlone.push(v[1 << i] - v[0]);
        loo.push(v[full] - v[full - (1 << i)]);
        var hits = 0, named = 0;
        for (w = 0; w < numW; w++) {
          if (x[w][1 << i] >= threshold) hits += 1;
          if (last[w] === i) named += 1;
        }
        resolve.push(hits / numW);
        lastShare.push(named / numW);
      }
      rows.shapley.push(shapley); rows.banzhaf.push(banzhaf); rows.fix_alone.push(fixAlone);
      rows.leave_one_out.push(loo); rows.resolve.push(resolve); rows.last_step.push(lastShare);
      rows.empty.push(v[0]); rows.full.push(v[full]); rows.total.push(v[full] - v[0]);
      rows.value.push(v);
    }
    function mean(name) {
      var out = [];
      for (var i = 0; i < n; i++) {
        var acc = 0.0;
        for (var f = 0; f < numF; f++) acc += rows[name][f][i];
        out.push(acc / numF);
      }
      return out;
    }
    var batch = { shapley: mean("shapley"), banzhaf: mean("banzhaf"), fix_alone: mean("fix_alone"),
      leave_one_out: mean("leave_one_out") };
    var total = 0.0;
    for (f = 0; f < numF; f++) total += rows.total[f];
    var share = [];
    for (i = 0; i < n; i++) {
      var acc2 = 0.0;
      for (f = 0; f < numF; f++) acc2 += rows.shapley[f][i];
      share.push(total !== 0.0 ? acc2 / total : NaN);
    }
    batch.share_of_repair = share;
    batch.resolve_rate = mean("resolve");
    var pairs = 0, counts = [];
    for (i = 0; i < n; i++) counts.push(0);
    for (f = 0; f < numF; f++) {
      var lf = data.failures[f].last;
      pairs += lf.length;
      for (w = 0; w < lf.length; w++) if (lf[w] >= 0 && lf[w] < n) counts[lf[w]] += 1;
    }
    batch.last_step_rate = counts.map(function (c) { return c / pairs; });
    rows.batch = batch;
    return rows;
  }

  // ---- edits ----
  function checkIndex(name, value, stop) {
    if (typeof value !== "number" || !Number.isInteger(value) || value < 0 || value >= stop) {
      throw new RangeError(name + " must be an integer in [0, " + stop + "), got " + String(value));
    }
  }
  function checkScore(value) {
    if (typeof value !== "number" || !isFinite(value) || value < data.low || value > data.high) {
      throw new RangeError("a score must be a number in [" + data.low + ", " + data.high + "], got " + String(value));
    }
  }
  function setScore(f, m, w, value) {
    checkIndex("failure", f, scores.length);
    checkIndex("coalition", m, size);
    checkIndex("world", w, scores[f].length);
    checkScore(value);
    scores[f][w][m] = value;
    edited[f][m] = true;
    update();
  }
  function setRate(f, m, value) {
    checkIndex("failure", f, scores.length);
    checkIndex("coalition", m, size);
    checkScore(value);
    for (var w = 0; w < scores[f].length; w++) scores[f][w][m] = value;
    edited[f][m] = true;
    update();
  }
  function flip(f, m) {
    checkIndex("failure", f, scores.length);
    checkIndex("coalition", m, size);
    var passes = result.value[f][m] >= data.threshold;
    var to = passes ? data.low : data.high;
    for (var w = 0; w < scores[f].length; w++) scores[f][w][m] = to;
    edited[f][m] = true;
    update();
  }
  function reset(f) {
    if (f === undefined) {
      copyScores();
    } else {
      checkIndex("failure", f, scores.length);
      scores[f] = data.failures[f].scores.map(function (row) { return row.slice(); });
      edited[f] = {};
    }
    update();
  }

  // ---- the page ----
  var app = document.getElementById("bj-app");
  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    if (attrs) for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function fmt(x, digits, sign) {
    if (x === null || isNaN(x)) return "n/a";
    var t = x.toFixed(digits);
    return sign && x >= 0 ? "+" + t : t;
  }
  function numCell(x, digits, sign) {
    var td = el("td", { "data-value": String(x) }, fmt(x, digits, sign));
    return td;
  }
  function optionName(site, option) {
    var labels = data.labels[site];
    return labels ? labels[option] : String(option);
  }
  function coalitionName(m) {
    var names = [];
    order.forEach(function (i) { if (m & (1 << i)) names.push(data.steps[i]); });
    return names.length ? "{" + names.join(", ") + "}" : "{} (the failed run)";
  }
  function table(id, caption, head) {
    var t = el("table", { id: id });
    t.appendChild(el("caption", { class: "muted" }, caption));
    var tr = el("tr");
    head.forEach(function (h) { tr.appendChild(el("th", { scope: "col" }, h)); });
    t.appendChild(tr);
    return t;
  }

  app.appendChild(el("h2", null, "Batch table (means over failures)"));
  var batchHolder = el("div");
  app.appendChild(batchHolder);
  app.appendChild(el("h2", null, "One failure"));
  var controls = el("div", { id: "bj-controls" });
  app.appendChild(controls);
  var pick = el("label", { for: "bj-failure" }, "Failure ");
  var select = el("select", { id: "bj-failure" });
  data.failures.forEach(function (f, a) {
    select.appendChild(el("option", { value: String(a) }, "case " + f.id + " (" + (a + 1) + " of " + data.failures.length + ")"));
  });
  pick.appendChild(select);
  controls.appendChild(pick);
  var fixes = el("fieldset", { id: "bj-fixes" });
  fixes.appendChild(el("legend", null, "Steps that run their fix (the coalition)"));
  var boxes = [];  // by step index; shown in the reports' order
  order.forEach(function (i) {
    var step = data.steps[i];
    var box = el("input", { type: "checkbox", id: "bj-fix-" + i });
    var label = el("label", { for: "bj-fix-" + i });
    label.appendChild(box);
    label.appendChild(document.createTextNode(" fix " + step));
    fixes.appendChild(label);
    box.addEventListener("change", function () {
      view.coalition = box.checked ? view.coalition | (1 << i) : view.coalition & ~(1 << i);
      render();
    });
    boxes[i] = box;
  });
  controls.appendChild(fixes);
  var info = el("p", { id: "bj-coalition", "aria-live": "polite" });
  controls.appendChild(info);
  var edits = el("fieldset", { id: "bj-edits" });
  edits.appendChild(el("legend", null, "Edit this coalition"));
  var flipButton = el("button", { type: "button", id: "bj-flip" }, "Flip pass/fail");
  edits.appendChild(flipButton);
  var rateLabel = el("label", { for: "bj-rate" }, "success rate ");
  var rate = el("input", { type: "number", id: "bj-rate", step: "any", min: String(data.low), max: String(data.high) });
  rateLabel.appendChild(rate);
  edits.appendChild(rateLabel);
  var setButton = el("button", { type: "button", id: "bj-set" }, "Set rate");
  edits.appendChild(setButton);
  var resetOne = el("button", { type: "button", id: "bj-reset" }, "Undo this failure's edits");
  edits.appendChild(resetOne);
  var resetAll = el("button", { type: "button", id: "bj-reset-all" }, "Undo all edits");
  edits.appendChild(resetAll);
  var message = el("p", { id: "bj-message", class: "error", role: "status" });
  edits.appendChild(message);
  controls.appendChild(edits);
  var outputsHolder = el("div");
  var rulesHolder = el("div");
  var coalitionsHolder = el("div");
  app.appendChild(outputsHolder);
  app.appendChild(rulesHolder);
  app.appendChild(el("h2", null, "Every coalition of this failure"));
  app.appendChild(coalitionsHolder);

  function guarded(action) {
    return function () {
      message.textContent = "";
      try { action(); } catch (e) { message.textContent = e.message; }
    };
  }
  select.addEventListener("change", function () { view.failure = Number(select.value); render(); });
  flipButton.addEventListener("click", guarded(function () { flip(view.failure, view.coalition); }));
  setButton.addEventListener("click", guarded(function () {
    if (rate.value.trim() === "") throw new RangeError("type a success rate first");
    setRate(view.failure, view.coalition, Number(rate.value));
  }));
  rate.addEventListener("keydown", function (e) { if (e.key === "Enter") setButton.click(); });
  resetOne.addEventListener("click", guarded(function () { reset(view.failure); }));
  resetAll.addEventListener("click", guarded(function () { reset(); }));

  function renderBatch() {
    var b = result.batch;
    var count = 0;
    edited.forEach(function (e) { count += Object.keys(e).length; });
    var t = table("bj-batch", "Recomputed from the coalition tables of all " + scores.length + " failures" +
      (count ? " (" + count + " coalition" + (count > 1 ? "s" : "") + " edited)" : ""),
      ["step", "mean Shapley", "mean Banzhaf", "mean fix-alone", "mean leave-one-out",
        "share of repair", "fix-alone resolves", "last-step blame"]);
    order.forEach(function (i) {
      var step = data.steps[i];
      var tr = el("tr", { "data-step": step });
      tr.appendChild(el("td", null, step));
      tr.appendChild(numCell(b.shapley[i], 4, true));
      tr.appendChild(numCell(b.banzhaf[i], 4, true));
      tr.appendChild(numCell(b.fix_alone[i], 4, true));
      tr.appendChild(numCell(b.leave_one_out[i], 4, true));
      tr.appendChild(numCell(b.share_of_repair[i], 4));
      tr.appendChild(numCell(b.resolve_rate[i], 4));
      tr.appendChild(numCell(b.last_step_rate[i], 4));
      t.appendChild(tr);
    });
    batchHolder.replaceChildren(t);
  }

  function render() {
    var f = view.failure, m = view.coalition;
    select.value = String(f);
    boxes.forEach(function (box, i) { box.checked = !!(m & (1 << i)); });
    var v = result.value[f][m];
    var worlds = scores[f].map(function (row) { return row[m]; });
    info.textContent = "Coalition " + coalitionName(m) + ": value " + fmt(v, 4) + " (" +
      (v >= data.threshold ? "passes" : "fails") + ")" +
      (worlds.length > 1 ? "; scores per world: " + worlds.map(function (x) { return fmt(x, 3); }).join(", ") : "") +
      (edited[f][m] ? "; edited" : "") + ".";
    info.setAttribute("data-value", String(v));
    if (document.activeElement !== rate) rate.value = String(v);
    // The outputs of every draw under the failure's recorded noise.
    var ch = data.failures[f].choices;
    var out = table("bj-outputs", "Each step's output under this failure's recorded noise",
      ["step", "with these fixes", "failed run", "fully fixed run"]);
    data.sites.forEach(function (step, s) {
      var mine = ch[m][s], failed = ch[0][s], fixed = ch[full][s];
      var tr = el("tr", mine !== failed ? { class: "differs" } : null);
      tr.appendChild(el("td", null, step));
      tr.appendChild(el("td", { "data-option": String(mine) }, optionName(s, mine)));
      tr.appendChild(el("td", null, optionName(s, failed)));
      tr.appendChild(el("td", null, optionName(s, fixed)));
      out.appendChild(tr);
    });
    outputsHolder.replaceChildren(out);
    var rules = table("bj-rules", "Case " + data.failures[f].id + ": v(failed run) " + fmt(result.empty[f], 4) +
      ", v(all fixes) " + fmt(result.full[f], 4) + ", total repair " + fmt(result.total[f], 4, true),
      ["step", "Shapley", "Banzhaf", "fix-alone", "leave-one-out", "fix-alone resolves", "last-step blame"]);
    order.forEach(function (i) {
      var step = data.steps[i];
      var tr = el("tr", { "data-step": step });
      tr.appendChild(el("td", null, step));
      tr.appendChild(numCell(result.shapley[f][i], 4, true));
      tr.appendChild(numCell(result.banzhaf[f][i], 4, true));
      tr.appendChild(numCell(result.fix_alone[f][i], 4, true));
      tr.appendChild(numCell(result.leave_one_out[f][i], 4, true));
      tr.appendChild(numCell(result.resolve[f][i], 3));
      tr.appendChild(numCell(result.last_step[f][i], 3));
      rules.appendChild(tr);
    });
    rulesHolder.replaceChildren(rules);
    var all = table("bj-coalitions", "Select a row to toggle its fixes on; shaded rows were edited",
      ["coalition", "value", "passes", ""]);
    for (var c = 0; c < size; c++) {
      var tr = el("tr", edited[f][c] ? { class: "edited" } : null);
      if (c === m) tr.classList.add("selected");
      tr.appendChild(el("td", null, coalitionName(c)));
      tr.appendChild(numCell(result.value[f][c], 4));
      tr.appendChild(el("td", null, result.value[f][c] >= data.threshold ? "yes" : "no"));
      var td = el("td");
      var b = el("button", { type: "button", "data-coalition": String(c) }, "select");
      b.setAttribute("aria-label", "select coalition " + coalitionName(c));
      b.addEventListener("click", (function (c) { return function () { view.coalition = c; render(); }; })(c));
      td.appendChild(b);
      tr.appendChild(td);
      all.appendChild(tr);
    }
    var focused = document.activeElement && document.activeElement.getAttribute("data-coalition");
    coalitionsHolder.replaceChildren(all);
    if (focused !== null && focused !== undefined) {  // keep the keyboard's place in the rebuilt table
      var again = all.querySelector('button[data-coalition="' + focused + '"]');
      if (again) again.focus();
    }
  }

  function update() {
    result = reduceAll();
    renderBatch();
    render();
  }

  function numbers() {
    // NaN is written as null; negative zero, which JSON cannot hold, as the string "-0".
    return JSON.stringify(result, function (key, value) { return Object.is(value, -0) ? "-0" : value; });
  }

  copyScores();
  update();
  window.blamejax = {
    numbers: numbers,
    setScore: setScore,
    setRate: setRate,
    flip: flip,
    reset: reset,
    select: function (f, m) {
      checkIndex("failure", f, scores.length);
      checkIndex("coalition", m === undefined ? 0 : m, size);
      view.failure = f; view.coalition = m === undefined ? 0 : m; render();
    },
    view: function () { return JSON.stringify(view); }
  };
})();
