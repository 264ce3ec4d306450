// The report's stepping, shortcuts and self-check. Nothing here loads anything.
//
// The URL fragment selects what is shown, so a headless browser can drive the page:
// #policy=P&decision=SEQ&step=next-interesting (step: prev, next, next-interesting or
// next-KIND). After every change the self-check writes into <output id="selfcheck">
// the decision shown, the candidate markers plotted in its SVG, the rows the receipt
// has for it, and the script errors seen so far.
(function () {
  "use strict";
  var errors = [];
  var markerRadius = "7";
  var check = document.getElementById("selfcheck");

  function writeCheck(shown) {
    check.dataset.errors = String(errors.length);
    check.dataset.errorText = errors.join(" | ");
    if (shown) {
      var svg = shown.querySelector("svg");
      check.dataset.policy = shown.dataset.policy;
      check.dataset.seq = shown.dataset.seq;
      check.dataset.rows = shown.dataset.rows;
      check.dataset.points = String(svg ? svg.querySelectorAll('circle[r="' + markerRadius + '"]').length : 0);
      check.dataset.plot = svg ? String(hash(svg.outerHTML)) : "";
    }
    check.dataset.cut = cutElements().join(" ");
    check.dataset.ready = "1";
  }
  // What the layout cuts or runs past its column at this viewport: the comparison table
  // wider than its section, a decision label wider than the selector shows. The browser
  // test opens the page 1000 px wide and expects nothing here.
  function cutElements() {
    var cut = [];
    var table = document.querySelector("table.metrics");
    if (table && table.getBoundingClientRect().right > table.parentElement.getBoundingClientRect().right + 0.5) {
      cut.push("comparison-table");
    }
    var select = document.getElementById("decision-select");
    var probe = document.createElement("span");
    probe.style.cssText = "position:absolute;visibility:hidden;white-space:pre";
    probe.style.font = getComputedStyle(select).font;
    document.body.appendChild(probe);
    // The selector's arrow and padding take about 28 px of its width.
    for (var i = 0; i < select.options.length; i++) {
      probe.textContent = select.options[i].text;
      if (probe.getBoundingClientRect().width + 28 > select.clientWidth) {
        cut.push("decision-select");
        break;
      }
    }
    document.body.removeChild(probe);
    return cut;
  }
  function hash(text) {
    var h = 5381;
    for (var i = 0; i < text.length; i++) { h = ((h * 33) ^ text.charCodeAt(i)) >>> 0; }
    return h;
  }
  window.addEventListener("error", function (e) { errors.push(String(e.message)); writeCheck(null); });
  window.addEventListener("unhandledrejection", function (e) { errors.push(String(e.reason)); writeCheck(null); });
  var consoleError = console.error;
  console.error = function () {
    errors.push(Array.prototype.join.call(arguments, " "));
    writeCheck(null);
    return consoleError.apply(console, arguments);
  };

  var byPolicy = {};
  Array.prototype.forEach.call(document.querySelectorAll("article.decision"), function (a) {
    (byPolicy[a.dataset.policy] = byPolicy[a.dataset.policy] || []).push(a);
  });
  var policySelect = document.getElementById("policy-select");
  var decisionSelect = document.getElementById("decision-select");
  var state = { policy: null, index: -1 };

  function list() { return byPolicy[state.policy] || []; }

  function kindsOf(article) { return article.dataset.kinds ? article.dataset.kinds.split(" ") : []; }

  function fillDecisions() {
    decisionSelect.textContent = "";
    list().forEach(function (a, i) {
      var option = document.createElement("option");
      option.value = String(i);
      var kinds = kindsOf(a);
      option.textContent = "seq " + a.dataset.seq + " · " + a.dataset.request + (kinds.length ? " · " + kinds.join(", ") : "");
      decisionSelect.appendChild(option);
    });
    Array.prototype.forEach.call(document.querySelectorAll("ul.shortcuts"), function (ul) {
      ul.hidden = ul.dataset.policy !== state.policy;
    });
  }

  function show(policy, index) {
    var current = list()[state.index];
    if (current) { current.hidden = true; }
    if (policy !== state.policy) {
      state.policy = policy;
      policySelect.value = policy;
      fillDecisions();
    }
    var articles = list();
    state.index = Math.max(0, Math.min(index, articles.length - 1));
    var shown = articles[state.index];
    if (shown) {
      shown.hidden = false;
      decisionSelect.value = String(state.index);
      var fragment = "#policy=" + policy + "&decision=" + shown.dataset.seq;
      if (location.hash !== fragment && history.replaceState) { history.replaceState(null, "", fragment); }
    }
    writeCheck(shown);
  }

  // The index of the next decision after the shown one that has `kind` (any kind for
  // "interesting"), wrapping around; the shown one when there is none.
  function nextOf(kind) {
    var articles = list();
    for (var step = 1; step <= articles.length; step++) {
      var i = (state.index + step) % articles.length;
      var kinds = kindsOf(articles[i]);
      if (kind === "interesting" ? kinds.length > 0 : kinds.indexOf(kind) >= 0) { return i; }
    }
    return state.index;
  }

  function step(how) {
    if (how === "prev") { show(state.policy, state.index - 1); }
    else if (how === "next") { show(state.policy, state.index + 1); }
    else if (how.indexOf("next-") === 0) { show(state.policy, nextOf(how.slice(5))); }
  }

  function fromFragment() {
    var params = {};
    location.hash.replace(/^#/, "").split("&").forEach(function (pair) {
      var kv = pair.split("=");
      if (kv[0]) { params[decodeURIComponent(kv[0])] = decodeURIComponent(kv[1] || ""); }
    });
    var policy = byPolicy[params.policy] ? params.policy : document.body.dataset.defaultPolicy;
    if (!byPolicy[policy]) { policy = Object.keys(byPolicy)[0]; }
    var articles = byPolicy[policy] || [];
    var index = -1;
    for (var i = 0; i < articles.length; i++) {
      if (articles[i].dataset.seq === params.decision) { index = i; }
    }
    if (index < 0) {
      // With no decision named, open on the first decision of the most telling kind
      // the policy has (the shortcut order: dominated choices first).
      index = 0;
      var order = Array.prototype.map.call(document.querySelectorAll("ul.shortcuts[data-policy='" + policy + "'] button"), function (b) {
        return b.dataset.step.slice(5);
      });
      search: for (var k = 0; k < order.length; k++) {
        for (var j = 0; j < articles.length; j++) {
          if (kindsOf(articles[j]).indexOf(order[k]) >= 0) { index = j; break search; }
        }
      }
    }
    state.policy = null;
    state.index = -1;
    Array.prototype.forEach.call(document.querySelectorAll("article.decision"), function (a) { a.hidden = true; });
    show(policy, index);
    if (params.step) { step(params.step); }
  }

  policySelect.addEventListener("change", function () { show(policySelect.value, 0); });
  decisionSelect.addEventListener("change", function () { show(state.policy, Number(decisionSelect.value)); });
  Array.prototype.forEach.call(document.querySelectorAll("button[data-step]"), function (button) {
    button.addEventListener("click", function () { step(button.dataset.step); });
  });
  document.addEventListener("keydown", function (e) {
    if (e.target && (e.target.tagName === "SELECT" || e.target.tagName === "INPUT")) { return; }
    if (e.key === "ArrowLeft") { step("prev"); }
    else if (e.key === "ArrowRight") { step("next"); }
    else if (e.key === "n") { step("next-interesting"); }
  });
  window.addEventListener("hashchange", function () {
    var shown = list()[state.index];
    if (!shown || location.hash !== "#policy=" + state.policy + "&decision=" + shown.dataset.seq) { fromFragment(); }
  });
  if (Object.keys(byPolicy).length > 0) { fromFragment(); } else { writeCheck(null); }
})();
