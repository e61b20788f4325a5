"""The HTML report: self-contained, and what a reader needs is on it. The structural tests parse the page with
html.parser and always run; the browser tests render it in headless Chromium (skipped when it is missing)."""

from __future__ import annotations

import copy
import json
import re
import shutil
import struct
import subprocess
from collections import Counter
from html.parser import HTMLParser
from typing import Any

import pytest

import tokscan
from tokscan import demo, forensics
from tokscan.api import default_tokenizer_dir
from tokscan.report.html import render, select_rows

from conftest import run_cli

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (make browser)")
VOID = {"br", "wbr", "meta", "input", "img", "hr", "link", "source", "col", "area", "base", "embed", "track"}


class Page(HTMLParser):
    """Just enough of a DOM: elements by id, text per section, table body rows, highlighted tokens, URLs."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, dict[str, str]]] = []
        self.ids: dict[str, dict[str, str]] = {}
        self.section_text: dict[str, list[str]] = {}
        self.rows: dict[str, list[dict[str, Any]]] = {}  # table id -> tbody rows {attrs, cells}
        self.marks: list[dict[str, Any]] = []  # mark.hit: {text, label, excerpt id}
        self.options: dict[str, list[str]] = {}
        self.urls: list[str] = []
        self.tags: Counter[str] = Counter()
        self.classes: Counter[str] = Counter()
        self.scripts: list[str] = []
        self.styles: list[str] = []
        self._cell: list[str] | None = None
        self._mark: dict[str, Any] | None = None
        self._sup = False
        self.feed(text)
        self.close()

    def _inside(self, tag: str, **attrs: str) -> dict[str, str] | None:
        for t, a in reversed(self.stack):
            if t == tag and all(a.get(k) == v for k, v in attrs.items()):
                return a
        return None

    def handle_starttag(self, tag: str, attrs_list: list[tuple[str, str | None]]) -> None:
        attrs = {k: v or "" for k, v in attrs_list}
        self.tags[tag] += 1
        self.classes.update(attrs.get("class", "").split())
        for key in ("src", "href", "action", "poster"):
            if key in attrs:
                self.urls.append(attrs[key])
        if "id" in attrs:
            self.ids[attrs["id"]] = {"tag": tag, **attrs}
        if tag == "section":
            self.section_text.setdefault(attrs.get("id", ""), [])
        if tag == "tr" and self._inside("tbody") is not None:
            table = self._inside("table")
            self.rows.setdefault((table or {}).get("id", ""), []).append({"attrs": attrs, "cells": []})
        if tag in ("td", "th") and self._inside("tbody") is not None:
            self._cell = []
        if tag == "mark" and "hit" in attrs.get("class", "").split():
            ex = self._inside("div", **{"class": "ex"})
            self._mark = {"text": "", "label": "", "excerpt": (ex or {}).get("id")}
        if tag == "sup" and self._mark is not None:
            self._sup = True
        if tag == "option":
            select = self._inside("select")
            if select is not None:
                self.options.setdefault(select.get("id", ""), []).append(attrs.get("value", ""))
        if tag not in VOID:
            self.stack.append((tag, attrs))

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            table = self._inside("table")
            rows = self.rows.get((table or {}).get("id", ""))
            if rows:
                rows[-1]["cells"].append("".join(self._cell).strip())
            self._cell = None
        if tag == "sup":
            self._sup = False
        if tag == "mark" and self._mark is not None:
            self.marks.append(self._mark)
            self._mark = None
        while self.stack:
            t, _a = self.stack.pop()
            if t == tag:
                break

    def handle_data(self, data: str) -> None:
        if self.stack and self.stack[-1][0] == "script":
            self.scripts.append(data)
        if self.stack and self.stack[-1][0] == "style":
            self.styles.append(data)
        if self._cell is not None:
            self._cell.append(data)
        if self._mark is not None:
            self._mark["label" if self._sup else "text"] += data
        section = self._inside("section")
        if section is not None:
            self.section_text[section.get("id", "")].append(data)

    def text(self, section: str) -> str:
        return " ".join("".join(self.section_text.get(section, [])).split())


class HeaderParser(HTMLParser):
    """The run header's <dt>/<dd> pairs as text."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.fields: dict[str, str] = {}
        self._key: str | None = None
        self._in: str | None = None
        self._buf: list[str] = []
        self.feed(text[: text.index("</header>")])

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("dt", "dd"):
            self._in, self._buf = tag, []

    def handle_endtag(self, tag: str) -> None:
        if tag == "dt" and self._in == "dt":
            self._key = "".join(self._buf).strip()
        elif tag == "dd" and self._in == "dd" and self._key is not None:
            self.fields[self._key] = " ".join("".join(self._buf).split())
        if tag in ("dt", "dd"):
            self._in = None

    def handle_data(self, data: str) -> None:
        if self._in:
            self._buf.append(data)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("html")
    path, profile = demo.write_demo(root, "deepseek", seed=3)
    return root, path, profile


@pytest.fixture(scope="module")
def cli_run(corpus):
    """`tokscan scan --html --json --decode 1 --tokenizer DIR` on the demo corpus: the page and its report."""
    root, path, profile = corpus
    out, js = root / "report.html", root / "report.json"
    proc = run_cli(
        "scan",
        str(path),
        "-p",
        profile,
        "--html",
        str(out),
        "--json",
        str(js),
        "--decode",
        "1",
        "--tokenizer",
        str(default_tokenizer_dir()),
        "-q",
    )
    assert proc.returncode == 1, proc.stderr
    return out, tokscan.Report.load(js)


@pytest.fixture(scope="module")
def page(cli_run):
    return Page(cli_run[0].read_text(encoding="utf-8"))


def test_page_is_self_contained(cli_run, page):
    text = cli_run[0].read_text(encoding="utf-8")
    assert all(u.startswith("#") for u in page.urls), [u for u in page.urls if not u.startswith("#")]
    assert "src=" not in text and "<link" not in text and "@import" not in text and "url(" not in "".join(page.styles)
    assert page.tags["script"] == 1 and "fetch(" not in page.scripts[0] and "XMLHttpRequest" not in page.scripts[0]


def test_header_names_the_run(cli_run, page):
    path, report = cli_run
    fields = HeaderParser(path.read_text(encoding="utf-8")).fields
    assert report.data["inputs"][0]["path"] in fields["Inputs"] and "240 samples" in fields["Inputs"]
    assert fields["Profile"].startswith("deepseek") and "vocab 129,280" in fields["Profile"]
    assert fields["Tokenizer"] == str(default_tokenizer_dir())
    assert "scan" in fields["Command"] and "--html" in fields["Command"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", fields["Date"]), fields["Date"]
    took = fields["Scan time"]
    assert re.match(r"[\d,]+\.\d\d? m?s \([\d.]+[kMB]? tok/s\) \(the core's scan\)$", took), took
    assert fields["Fail on"] == "error"
    failures = report.failures("error")
    verdict = re.search(r"class='verdict (\w+)'>(\w+)<", path.read_text(encoding="utf-8"))
    assert failures and verdict and verdict.groups() == ("fail", "FAIL")
    assert f"{len(failures)} code(s) at or above" in path.read_text(encoding="utf-8")


def test_category_table_matches_the_report(cli_run, page):
    _path, report = cli_run
    rows = page.rows["category-table"]
    assert [r["cells"][0] for r in rows] == [*report.categories, "all"]
    flagged = Counter(f["category"] for f in report.flagged)
    for r in rows:
        name, cells = r["cells"][0], r["cells"]
        c = report.data["overall"] if name == "all" else report.categories[name]
        L = c["lengths"]
        n_flagged = len(report.flagged) if name == "all" else flagged.get(name, 0)
        assert cells[1] == f"{c['samples']:,}", name
        assert cells[3:6] == [f"{L[p]['median']:,.0f}" for p in ("prompt", "thinking", "response")], name
        assert cells[6:9] == [f"{L['total']['p99']:,.0f}", f"{L['total']['max']:,.0f}", f"{n_flagged:,}"], name


def test_special_token_counts_and_rates(cli_run, page):
    _path, report = cli_run
    rows = page.rows["special-tokens-table"]
    overall = report.data["overall"]["special_tokens"]
    seen = [t for t, n in overall.items() if n]
    assert [r["cells"][0] for r in rows] == [t for t in report.data["profile"]["special_tokens"] if t in seen]
    cats = [*report.categories.items(), ("all", report.data["overall"])]
    for r in rows:
        tok = r["cells"][0]
        assert r["cells"][1] == str(report.data["profile"]["special_tokens"][tok])
        for cell, (_name, c) in zip(r["cells"][2:], cats, strict=True):
            n = c["special_tokens"][tok]
            assert cell == f"{n:,}{n / c['samples']:.2f}", (tok, cell)
    never = [t for t, n in overall.items() if not n]
    assert all(t in page.text("special-tokens") for t in never)


def test_length_charts_share_one_scale(cli_run, page):
    path, report = cli_run
    text = path.read_text(encoding="utf-8")
    charts = re.findall(r'<svg class="hist" data-category="([^"]+)" data-part="(\w+)"', text)
    assert len(charts) == 4 * (len(report.categories) + 1)
    assert {c for c, _p in charts} == {*report.categories, "all"}
    assert {p for _c, p in charts} == {"prompt", "thinking", "response", "total"}
    assert len({m for m in re.findall(r'<svg class="hist"[^>]*width="(\d+)" height="(\d+)"', text)}) == 1
    assert "length in tokens (log2 bins)" in page.text("lengths") and "share" in page.text("lengths")
    # A bar's tooltip names its count; per chart they add up to the category's samples.
    for name, c in [*report.categories.items(), ("all", report.data["overall"])]:
        chart = re.search(rf'data-category="{re.escape(name)}" data-part="total".*?</svg>', text, re.S)
        assert chart is not None
        counts = [int(n.replace(",", "")) for n in re.findall(r": ([\d,]+) samples", chart.group())]
        assert sum(counts) == c["samples"], name


def test_anomaly_table_links_to_the_samples(cli_run, page):
    _path, report = cli_run
    rows = page.rows["anomalies-table"]
    found = {c: a for c, a in report.anomalies.items() if a["count"]}
    assert sorted(r["attrs"]["data-code"] for r in rows) == sorted(found)
    failures = report.failures("error")
    for r in rows:
        code = r["attrs"]["data-code"]
        cells = r["cells"]
        assert cells[0] == code and cells[1] == found[code]["severity"] and cells[2] == f"{found[code]['count']:,}"
        assert cells[4] == ("fails the run" if code in failures else "below --fail-on error")
        assert cells[5] == found[code]["description"]
    assert "samples" in rows[0]["cells"][6]


def test_every_flagged_sample_is_listed(cli_run, page):
    _path, report = cli_run
    rows = page.rows["flagged-list"]
    assert len(rows) == len(report.flagged) == 21
    for r, f in zip(rows, report.flagged, strict=True):
        assert r["attrs"]["id"] == f"s{f['row']}" and r["attrs"]["data-codes"].split() == f["codes"]
        cells = r["cells"]
        assert cells[0] == str(f["row"]) and cells[1] == f["sample_id"] and cells[2] == f["category"]
        assert cells[3] == f["severity"]
        for code in f["codes"]:
            pos = f["positions"].get(code)
            assert (f"{code} @{pos}" if pos is not None else code) in cells[4]
        assert cells[6] == "deepseek-demo.parquet"
        dup = f.get("duplicate_of")
        assert (dup["sample_id"] in cells[5] and f"row {dup['row']}" in cells[5]) if dup else cells[5] == ""
    assert any(f.get("duplicate_of") for f in report.flagged)


def test_filter_controls_cover_codes_and_categories(cli_run, page):
    _path, report = cli_run
    assert page.ids["filters"].get("hidden") == ""  # shown by the script; the list is plain HTML without it
    assert page.options["f-code"][1:] == list(report.found())
    assert page.options["f-cat"][1:] == sorted({f["category"] for f in report.flagged})
    assert set(page.options["f-sev"][1:]) == {f["severity"] for f in report.flagged}
    for control in ("f-text", "f-clear", "f-count"):
        assert control in page.ids


def test_decoded_excerpts_highlight_the_flagged_token(cli_run, page):
    _path, report = cli_run
    decoded = report.data["decoded"]
    with_position = [(code, e) for code, v in decoded.items() for e in v if e["position"] is not None]
    assert len(with_position) >= 10
    marks = {m["excerpt"]: m for m in page.marks}
    for code, e in with_position:
        m = marks[f"d-{code}-{e['row']}"]
        assert m["label"] == f"id {e['excerpt']['id_at']}", (code, m)
    oov = decoded["out_of_vocab"][0]
    assert marks[f"d-out_of_vocab-{oov['row']}"]["text"] == f"⟨oov {oov['excerpt']['id_at']}⟩"
    trailing = decoded["trailing_tokens"][0]
    assert marks[f"d-trailing_tokens-{trailing['row']}"]["text"] == "<｜User｜>"
    dup = decoded["duplicate"][0]
    original = dup["duplicate_of"]["sample_id"]
    assert f"repeats {original} (row {dup['duplicate_of']['row']})" in page.text("decoded")
    assert page.classes["sp"] > 10  # special tokens set apart in the decoded text


def test_policy_decides_the_verdict_and_says_so(cli_run):
    _path, report = cli_run
    errors = [c for c, a in report.anomalies.items() if a["count"] and a["severity"] == "error"]
    policy: dict[str, str | int] = {c: 5 for c in errors[1:]} | {errors[0]: "ignore"}
    page = Page(render(report, "error", policy))
    assert "class='verdict pass'" in render(report, "error", policy)
    status = {r["attrs"]["data-code"]: r["cells"][4] for r in page.rows["anomalies-table"]}
    assert status[errors[0]] == "ignored by policy"
    assert all(status[c] == "tolerated: policy allows ≤ 5" for c in errors[1:])
    never = render(report, "never")
    assert "class='verdict pass'" in never and "--fail-on never" in never
    # The checks ran; nothing they found fails the run.
    status = {r["attrs"]["data-code"]: r["cells"][4] for r in Page(never).rows["anomalies-table"]}
    assert set(status.values()) == {"never fails (--fail-on never)"}


def big_report(report: tokscan.Report, n: int) -> tokscan.Report:
    """The demo report with its flagged samples repeated to `n` (distinct rows and ids)."""
    data = copy.deepcopy(report.data)
    src = report.flagged
    data["flagged"] = [{**copy.deepcopy(src[i % len(src)]), "row": i, "sample_id": f"x-{i:06d}"} for i in range(n)]
    data["n_samples"] = 4 * n
    return tokscan.Report(data)


def test_long_lists_are_capped_and_every_code_stays_listed(cli_run):
    _path, report = cli_run
    big = big_report(report, 12_000)
    page = Page(render(big, max_rows=5000))
    rows = page.rows["flagged-list"]
    assert len(rows) == 5000
    assert "5,000 of 12,000" in page.text("flagged") and "JSON report" in page.text("flagged")
    listed = Counter(c for r in rows for c in r["attrs"]["data-codes"].split())
    assert set(listed) == set(report.found())
    assert [int(r["cells"][0]) for r in rows] == sorted(int(r["cells"][0]) for r in rows)
    assert len(Page(render(big, max_rows=None)).rows["flagged-list"]) == 12_000
    assert select_rows(big.flagged, 20_000) == list(range(12_000))


def test_decode_without_tokenizer_shows_ids_and_token_names(corpus, tmp_path):
    _root, path, profile = corpus
    out, js = tmp_path / "ids.html", tmp_path / "ids.json"
    proc = run_cli("scan", str(path), "-p", profile, "--decode", "1", "--html", str(out), "--json", str(js), "-q")
    assert proc.returncode == 1, proc.stderr
    report = tokscan.Report.load(js)
    entries = [e for v in report.data["decoded"].values() for e in v]
    assert entries and all(e["decoder"] == "ids" for e in entries)
    page = Page(out.read_text(encoding="utf-8"))
    fields = HeaderParser(out.read_text(encoding="utf-8")).fields
    assert fields["Tokenizer"].startswith("none")
    marks = {m["excerpt"]: m for m in page.marks}
    trailing = report.data["decoded"]["trailing_tokens"][0]
    assert marks[f"d-trailing_tokens-{trailing['row']}"]["text"] == "<｜User｜>"
    oov = report.data["decoded"]["out_of_vocab"][0]
    assert marks[f"d-out_of_vocab-{oov['row']}"]["text"] == f"⟨oov {oov['excerpt']['id_at']}⟩"
    assert "<｜begin▁of▁sentence｜>" in page.text("decoded") and "Without a tokenizer" in page.text("decoded")


def test_decode_flagged_names_special_tokens_without_a_tokenizer(corpus):
    _root, path, profile = corpus
    report = tokscan.scan(path, profile=profile)
    prof = tokscan.load_profile(profile)
    decoded = forensics.decode_flagged(report, [str(path)], None, 1, None, prof)
    trailing = decoded["trailing_tokens"][0]
    ex = trailing["excerpt"]
    assert ex["at"] == "<｜User｜>" and ex["before"].split()[-1] == "<｜end▁of▁sentence｜>"
    assert ex["after"].split() == [str(i) for i in ex["ids_after"]]  # ordinary tokens stay ids
    seg = [s for s in trailing["segments"] if s["start"] == trailing["position"]]
    assert len(seg) == 1 and seg[0]["end"] == trailing["position"] + 1 and seg[0]["ids"] == [ex["id_at"]]
    plain = forensics.decode_flagged(report, [str(path)], None, 1)  # no profile: bare ids
    assert plain["trailing_tokens"][0]["excerpt"]["at"] == str(ex["id_at"])


def test_oov_ids_stay_visible_in_decoded_text():
    class Tok:
        def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
            return "".join(f"<{i}>" for i in ids)

    assert forensics.decode_text(Tok(), [1, 2, 999, -3, 4], vocab_size=100) == "<1><2>⟨oov 999⟩⟨oov -3⟩<4>"
    assert forensics.decode_text(Tok(), [1, 2], vocab_size=100) == "<1><2>"
    assert forensics.decode_text(Tok(), [1, -2]) == "<1>⟨oov -2⟩"  # negative ids are never valid


# ----------------------------------------------------------------------------------------- headless Chromium


def chromium(*args: str) -> subprocess.CompletedProcess[str]:
    base = [CHROMIUM or "chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]
    return subprocess.run([*base, *args], capture_output=True, text=True, timeout=180)


@needs_chromium
def test_page_renders_and_the_script_runs_in_chromium(cli_run):
    path, report = cli_run
    dom = chromium("--dump-dom", path.resolve().as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    page = Page(dom.stdout)
    assert "hidden" not in page.ids["filters"]  # the script ran and showed the controls
    assert len(page.rows["flagged-list"]) == len(report.flagged)
    assert f'<span id="f-count">{len(report.flagged)}</span>' in dom.stdout
    assert "unterminated_thinking" in page.text("anomalies") and "FAIL" in dom.stdout


@needs_chromium
def test_a_link_to_a_code_filters_the_list_in_chromium(cli_run):
    path, report = cli_run
    dom = chromium("--dump-dom", path.resolve().as_uri() + "#code=length_outlier")
    assert dom.returncode == 0, dom.stderr[-2000:]
    rows = Page(dom.stdout).rows["flagged-list"]
    visible = [r["attrs"]["id"] for r in rows if "hidden" not in r["attrs"]]
    assert visible == [f"s{row}" for row in report.flagged_rows("length_outlier")]
    assert f'<span id="f-count">{report.count("length_outlier")}</span>' in dom.stdout


@needs_chromium
def test_screenshot_is_a_full_page(cli_run, tmp_path):
    path, _report = cli_run
    shot = tmp_path / "report.png"
    proc = chromium(f"--screenshot={shot}", "--hide-scrollbars", "--window-size=1280,2400", path.resolve().as_uri())
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (1280, 2400) and len(data) > 100_000  # a rendered page, not a blank one


def test_report_json_is_unchanged_by_rendering(cli_run):
    _path, report = cli_run
    before = json.dumps(report.data, sort_keys=True)
    render(report, "warning", None, command=["tokscan", "scan", "x"], seconds=1.5, max_rows=3)
    assert json.dumps(report.data, sort_keys=True) == before


def test_clean_report_passes_and_says_nothing_was_flagged(cli_run):
    _path, report = cli_run
    data = copy.deepcopy(report.data)
    data["flagged"], data["decoded"] = [], {}
    for a in data["anomalies"].values():
        a["count"] = 0
    page = Page(render(tokscan.Report(data)))
    assert "No anomalies found." in page.text("anomalies") and "No sample was flagged." in page.text("flagged")
    assert "decoded" not in page.ids and "filters" not in page.ids
    assert page.classes["pass"] == 1 and page.classes["fail"] == 0


# What a reader at 1,400 and 800 px must not see: column headers that run into each other, a chart or table
# that runs past the page instead of scrolling in its box, a token character drawn as an empty box.
LAYOUT_PROBE = """
<script>
(function () {
  var out = {width: window.innerWidth, page: document.documentElement.scrollWidth, clipped: [], overlaps: [],
             boxes: []};
  function scroller(el) {
    for (var p = el.parentElement; p; p = p.parentElement) {
      var s = getComputedStyle(p).overflowX;
      if (s === "auto" || s === "scroll") return p;
    }
    return null;
  }
  document.querySelectorAll("main table, main .lengths").forEach(function (t) {
    if (t.getBoundingClientRect().right > out.width + 1 && !scroller(t)) out.clipped.push(t.id || t.className);
  });
  document.querySelectorAll("thead tr").forEach(function (tr) {
    var rects = Array.prototype.map.call(tr.cells, function (th) {
      var r = document.createRange(); r.selectNodeContents(th); return [th.textContent, r.getClientRects()];
    });
    for (var i = 0; i + 1 < rects.length; i++)
      Array.prototype.forEach.call(rects[i][1], function (a) {
        Array.prototype.forEach.call(rects[i + 1][1], function (b) {
          if (a.right > b.left - 3 && a.left < b.right && a.bottom > b.top && a.top < b.bottom)
            out.overlaps.push(rects[i][0] + " | " + rects[i + 1][0]);
        });
      });
  });
  var canvas = document.createElement("canvas"), ctx = canvas.getContext("2d");
  canvas.width = canvas.height = 40;
  function pixels(ch, font) {
    ctx.clearRect(0, 0, 40, 40); ctx.font = font; ctx.textBaseline = "top"; ctx.fillText(ch, 4, 4);
    return Array.prototype.join.call(ctx.getImageData(0, 0, 40, 40).data, "");
  }
  var walker = document.createTreeWalker(document.querySelector("main"), NodeFilter.SHOW_TEXT);
  while (walker.nextNode()) {
    var node = walker.currentNode, font = getComputedStyle(node.parentNode).font;
    Array.prototype.forEach.call(node.nodeValue, function (ch) {
      var cp = ch.charCodeAt(0);
      if (cp >= 0x2000 && (cp < 0xD800 || cp > 0xDFFF) && out.boxes.indexOf(ch) < 0 &&
          pixels(ch, font) === pixels("\\uDBFF\\uDFFD", font))
        out.boxes.push(ch);
    });
  }
  document.body.setAttribute("data-probe", JSON.stringify(out));
})();
</script>
"""


@pytest.fixture(scope="module")
def demo_page(tmp_path_factory):
    root = tmp_path_factory.mktemp("demo") / "demo"
    proc = run_cli("demo", str(root))
    assert proc.returncode == 0, proc.stderr
    return root / "report.html"


def test_the_demo_page_shows_decoded_excerpts(demo_page):
    """`make demo`'s page shows what `--decode` gives: flagged samples decoded by the real tokenizer."""
    page = Page(demo_page.read_text(encoding="utf-8"))
    text = page.text("decoded")
    assert "decoded" in page.ids and "Paris" in text  # a tool call's arguments, decoded as text
    hits = [m for m in page.marks if m["label"].startswith("id ")]
    assert len(hits) >= 10  # the flagged token of each excerpt, marked with its id


@needs_chromium
@pytest.mark.parametrize("width", [1400, 800])
def test_the_demo_page_lays_out_in_chromium(demo_page, tmp_path, width):
    probe = tmp_path / "probe.html"
    probe.write_text(demo_page.read_text(encoding="utf-8").replace("</body>", LAYOUT_PROBE + "</body>"), "utf-8")
    dom = chromium(f"--window-size={width},3000", "--dump-dom", probe.resolve().as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    m = re.search(r'data-probe="([^"]*)"', dom.stdout)
    assert m, "the probe did not run"
    found = json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    assert found["page"] <= found["width"], found  # nothing widens the page: wide parts scroll in their box
    assert found["clipped"] == [] and found["overlaps"] == [], found
    assert found["boxes"] == [], found  # every character is drawn (the page's stand-ins where fonts lack one)
