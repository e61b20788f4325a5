"""The inline stylesheet and script of the HTML report (kept apart from the markup in `tokscan.report.html`).

The script only enhances the page: the flagged-sample list is plain HTML and readable without it; with it, the
list can be filtered by code, category, severity and text, and sorted by any column."""

CSS = """
:root{--fg:#1f2328;--muted:#59636e;--line:#d1d9e0;--soft:#f6f8fa;--accent:#0b5cad;--err:#c62828;--warn:#9a6700;
--info:#1f6feb;--ok:#1a7f37}
*{box-sizing:border-box}
body{font:14px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;color:var(--fg);
margin:0;background:#fff}
main{max-width:1240px;margin:0 auto;padding:20px 28px 60px}
a{color:var(--accent);text-decoration:none}a:hover{text-decoration:underline}
h1{font-size:22px;margin:0}h2{font-size:17px;margin:34px 0 6px;padding-bottom:5px;border-bottom:1px solid var(--line)}
h3{font-size:14px;margin:18px 0 6px}
p.note,.note{color:var(--muted);font-size:12.5px;margin:4px 0 8px}
span.dep{color:#b45309;font-weight:600}
code,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,"Liberation Mono",monospace;font-size:12.5px}
.head{display:flex;align-items:center;gap:14px;flex-wrap:wrap}
.verdict{display:inline-block;padding:3px 12px;border-radius:5px;font-weight:700;color:#fff;letter-spacing:.04em}
.verdict.pass{background:var(--ok)}.verdict.fail{background:var(--err)}
.why{color:var(--muted)}
dl.run{display:grid;grid-template-columns:110px 1fr;gap:3px 14px;margin:14px 0 10px;font-size:13px}
dl.run dt{color:var(--muted)}dl.run dd{margin:0;min-width:0;overflow-wrap:anywhere}
pre.cmd{margin:0;white-space:pre-wrap;word-break:break-all;background:var(--soft);border:1px solid var(--line);
border-radius:4px;padding:3px 7px}
.kpis{display:grid;grid-template-columns:repeat(5,1fr);gap:10px;margin:14px 0 4px}
.kpi{border:1px solid var(--line);border-radius:6px;padding:8px 12px;background:var(--soft)}
.kpi b{display:block;font-size:20px;font-variant-numeric:tabular-nums}.kpi span{color:var(--muted);font-size:12px}
nav.toc{margin:12px 0 0;font-size:13px;display:flex;gap:16px;flex-wrap:wrap;border-top:1px solid var(--line);
padding-top:8px}
table{border-collapse:collapse;font-size:13px;font-variant-numeric:tabular-nums}
th,td{padding:4px 10px;border-bottom:1px solid #e6eaef;text-align:right;white-space:nowrap}
th{background:var(--soft);font-weight:600;border-bottom:1px solid var(--line);vertical-align:bottom}
th.l,td.l{text-align:left}td.wrap{white-space:normal;min-width:260px}
tr.total td{font-weight:600;border-top:2px solid var(--line)}
thead th.grp{text-align:center;border-bottom:1px solid var(--line);font-weight:600;color:var(--muted)}
td.zero{color:#b0b8c1}.sub{display:block;color:var(--muted);font-size:10.5px;line-height:1.15}
th.cat{padding:6px 8px;text-align:right;vertical-align:bottom}
th.cat span{writing-mode:vertical-rl;transform:rotate(180deg);white-space:nowrap;display:inline-block;
max-height:190px;overflow:hidden;text-overflow:ellipsis;line-height:1.2}
#special-tokens-table td{padding:3px 8px;line-height:1.25}
.sev{font-weight:600}.sev.error{color:var(--err)}.sev.warning{color:var(--warn)}.sev.info{color:var(--info)}
.status{font-size:12px;padding:1px 7px;border-radius:10px;border:1px solid var(--line);white-space:nowrap}
.status.fails{background:#ffebe9;border-color:#ffcecb;color:var(--err)}
.status.tolerated,.status.ignored{background:#fff8c5;border-color:#eed888;color:#6b4d00}
.status.below{background:var(--soft);color:var(--muted)}
.scroll{overflow-x:auto;max-width:100%}
.c{display:inline-block;font:11.5px/1.5 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;padding:0 6px;
margin:1px 3px 1px 0;border-radius:3px;background:#eef1f5;border:1px solid #dde3ea}
.c.error{background:#ffebe9;border-color:#ffcecb}.c.warning{background:#fff8c5;border-color:#f0e0a0}
.c.info{background:#ddf4ff;border-color:#b6e3ff}.c i{font-style:normal;color:var(--muted)}
.heat td.n{font-weight:600}
.lengths{display:grid;gap:4px 10px;align-items:center}
.lengths .cat{font-size:12.5px;text-align:right;overflow:hidden;text-overflow:ellipsis;white-space:nowrap}
.lengths .cat.all{font-weight:700}.lengths .part{font-weight:600;font-size:13px;padding-bottom:2px}
.lengths .axis-title{font-size:11.5px;color:var(--muted);text-align:center}
.lengths svg{display:block;width:100%;height:auto}
.legend{font-size:12.5px;color:var(--muted);margin:4px 0 10px}.legend span{margin-right:14px;white-space:nowrap}
.sw{display:inline-block;width:11px;height:11px;border-radius:2px;margin-right:5px;vertical-align:-1px}
#filters{display:flex;gap:10px;align-items:center;flex-wrap:wrap;margin:8px 0;padding:8px 10px;
background:var(--soft);border:1px solid var(--line);border-radius:6px;font-size:13px}
#filters label{color:var(--muted)}#filters select,#filters input{font:inherit;padding:2px 6px;border:1px solid
var(--line);border-radius:4px;background:#fff}#filters input{width:220px}#filters button{font:inherit;
padding:2px 10px;border:1px solid var(--line);border-radius:4px;background:#fff;cursor:pointer}
#f-count{font-weight:600}
table.list{width:100%}table.list th,table.list td{text-align:left}table.list td{font-size:12.5px}
table.list td:first-child,table.list th:first-child{text-align:right}table.list td:nth-child(5){white-space:normal}
.big{content-visibility:auto;contain-intrinsic-size:auto 3000px}
table.list th[data-sort]{cursor:pointer;user-select:none}
table.list th[aria-sort=ascending]::after{content:" ▲";font-size:10px}
table.list th[aria-sort=descending]::after{content:" ▼";font-size:10px}
table.list tr:target td,.ex:target{background:#fff8c5}
.cap{background:#fff8c5;border:1px solid #eed888;border-radius:5px;padding:6px 10px;font-size:13px;margin:6px 0}
.ex{border:1px solid var(--line);border-radius:6px;margin:10px 0 14px;overflow:hidden}
.ex .exh{background:var(--soft);padding:6px 10px;font-size:13px;border-bottom:1px solid var(--line)}
.ex .exh .meta{color:var(--muted)}
.seq{font:12.5px/1.75 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;white-space:pre-wrap;
overflow-wrap:anywhere;padding:8px 10px;margin:0}
.seq .k{border-radius:2px;padding:1px 0}
.seq .edge{color:var(--muted);font:600 11px system-ui,sans-serif;margin-right:6px}
.sp{background:#e8e3f6;color:#4b2f8f;border-radius:3px;padding:0 2px}
.oov{background:#ffebe9;color:var(--err);border:1px solid #ffcecb;border-radius:3px;padding:0 2px}
.id{color:#57606a}
mark.hit{background:#ffd7d5;outline:2px solid var(--err);border-radius:2px;color:inherit;padding:0 1px}
mark.hit sup{font:600 10px system-ui,sans-serif;color:#fff;background:var(--err);border-radius:3px;
padding:0 4px;margin-left:3px;vertical-align:4px}
footer{margin-top:40px;color:var(--muted);font-size:12px;border-top:1px solid var(--line);padding-top:8px}
@media print{nav.toc,#filters{display:none}}
.nofont{color:#b45309;text-decoration:underline dotted}
"""

JS = """
(function () {
  // Token names use characters many machines have no font for (DeepSeek's U+FF5C), and decoded text may too:
  // where the browser would draw an empty box, draw a look-alike (fullwidth forms as their ASCII, U+2581 as _)
  // or the code point, set apart and explained in its title. The header note names the token names' unusual
  // characters for readers without script.
  var RISKY = /[\\u2000-\\uD7FF\\uE000-\\uFFFD]/;  // BMP only: a surrogate half is not a character
  var canvas = document.createElement("canvas"), ctx = canvas.getContext && canvas.getContext("2d");
  if (!ctx) return;
  canvas.width = 40; canvas.height = 40;
  var known = {};
  function pixels(ch, font) {
    ctx.clearRect(0, 0, 40, 40); ctx.font = font; ctx.textBaseline = "top"; ctx.fillText(ch, 4, 4);
    return Array.prototype.join.call(ctx.getImageData(0, 0, 40, 40).data, "");
  }
  function drawable(ch, font) {
    var key = ch + "|" + font;
    if (!(font in known)) known[font] = pixels("\\uDBFF\\uDFFD", font);  // a character no font has
    if (!(key in known)) known[key] = pixels(ch, font) !== known[font];
    return known[key];
  }
  function stand_in(ch) {
    var cp = ch.charCodeAt(0);
    if (cp >= 0xFF01 && cp <= 0xFF5E) return String.fromCharCode(cp - 0xFEE0);
    if (cp === 0x2581) return "_";
    return "U+" + cp.toString(16).toUpperCase();
  }
  var walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT), nodes = [];
  while (walker.nextNode()) if (RISKY.test(walker.currentNode.nodeValue)) nodes.push(walker.currentNode);
  nodes.forEach(function (node) {
    var parent = node.parentNode;
    if (!parent || parent.nodeName === "SCRIPT" || parent.nodeName === "STYLE" || parent.nodeName === "TITLE") return;
    var font = getComputedStyle(parent).font, text = node.nodeValue, frag = document.createDocumentFragment();
    var plain = "", changed = false;
    for (var i = 0; i < text.length; i++) {
      var ch = text[i];
      if (RISKY.test(ch) && !drawable(ch, font)) {
        if (plain) { frag.appendChild(document.createTextNode(plain)); plain = ""; }
        var span = document.createElement("span");
        span.className = "nofont";
        span.title = "U+" + ch.charCodeAt(0).toString(16).toUpperCase() + " (no font on this machine draws it)";
        span.textContent = stand_in(ch);
        frag.appendChild(span);
        changed = true;
      } else {
        plain += ch;
      }
    }
    if (!changed) return;
    if (plain) frag.appendChild(document.createTextNode(plain));
    parent.replaceChild(frag, node);
  });
})();
(function () {
  var table = document.getElementById("flagged-list");
  if (!table) return;
  var body = table.tBodies[0], rows = Array.prototype.slice.call(body.rows);
  var fCode = document.getElementById("f-code"), fCat = document.getElementById("f-cat");
  var fSev = document.getElementById("f-sev"), fText = document.getElementById("f-text");
  var count = document.getElementById("f-count");
  var RANK = { error: 3, warning: 2, info: 1 };
  document.getElementById("filters").hidden = false;
  function apply() {
    var c = fCode.value, k = fCat.value, s = fSev.value, t = fText.value.trim().toLowerCase(), n = 0;
    for (var i = 0; i < rows.length; i++) {
      var r = rows[i];
      var ok = (!c || (" " + r.getAttribute("data-codes") + " ").indexOf(" " + c + " ") >= 0) &&
        (!k || r.cells[2].textContent === k) && (!s || r.cells[3].textContent === s) &&
        (!t || r.textContent.toLowerCase().indexOf(t) >= 0);
      r.hidden = !ok;
      if (ok) n++;
    }
    count.textContent = n.toLocaleString("en-US");
  }
  function setFilter(code, cat) {
    fCode.value = code || ""; fCat.value = cat || ""; fSev.value = ""; fText.value = "";
    apply();
  }
  [fCode, fCat, fSev].forEach(function (el) { el.addEventListener("change", apply); });
  fText.addEventListener("input", apply);
  document.getElementById("f-clear").addEventListener("click", function () { setFilter("", ""); });
  document.querySelectorAll("a[data-code], a[data-cat]").forEach(function (a) {
    a.addEventListener("click", function () {
      setFilter(a.getAttribute("data-code"), a.getAttribute("data-cat"));
    });
  });
  var heads = table.tHead.rows[0].cells;
  Array.prototype.forEach.call(heads, function (th) {
    if (!th.hasAttribute("data-sort")) return;
    th.addEventListener("click", function () {
      var idx = th.cellIndex, how = th.getAttribute("data-sort");
      var dir = th.getAttribute("aria-sort") === "ascending" ? -1 : 1;
      Array.prototype.forEach.call(heads, function (h) { h.removeAttribute("aria-sort"); });
      th.setAttribute("aria-sort", dir > 0 ? "ascending" : "descending");
      var key = function (r) {
        var v = r.cells[idx].textContent;
        if (how === "num") return parseFloat(v.replace(/,/g, "")) || 0;
        if (how === "sev") return RANK[v] || 0;
        return v.toLowerCase();
      };
      var keyed = rows.map(function (r, i) { return [key(r), i, r]; });
      keyed.sort(function (a, b) { return a[0] < b[0] ? -dir : a[0] > b[0] ? dir : a[1] - b[1]; });
      rows = keyed.map(function (x) { return x[2]; });
      var frag = document.createDocumentFragment();
      rows.forEach(function (r) { frag.appendChild(r); });
      body.appendChild(frag);
    });
  });
  var m = /^#(code|cat)=(.+)$/.exec(location.hash);
  if (m) {
    var v = decodeURIComponent(m[2]);
    if (m[1] === "code") setFilter(v, ""); else setFilter("", v);
  } else {
    apply();
  }
})();
"""
