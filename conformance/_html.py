"""report.html: one self-contained page an auditor reads (inline CSS, SVG and script; nothing fetched).

Top to bottom: the verdict banner (what was certified, where, when, under which
profile), a summary chart, filters and a search box, the failures with their
evidence and a command that reproduces each, the requirements grouped by contract
section with their text, and every check result with its case id.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from html import escape
from typing import TYPE_CHECKING, Any

from engram_mcp.conformance import _readiness as readiness
from engram_mcp.conformance._checks import SEVERITY, Status
from engram_mcp.conformance._findings import blamed, catalog, reproduction
from engram_mcp.conformance._redact import redact
from engram_mcp.conformance._verdicts import (
    EXCLUDED,
    FAILED,
    NOT_APPLICABLE,
    NOT_EXERCISED,
    PASSED,
    counts,
    grouped_gaps,
    level_of,
    musts,
    profile_label,
    spoken_eras,
    tally,
    utc_stamp,
    verdict_line,
)
from engram_mcp.contract import load

if TYPE_CHECKING:
    from engram_mcp.conformance._run import Result, Run

# Which filter button shows a status or an outcome.
GROUP = {
    Status.FAIL.value: "fail", Status.ERROR.value: "fail", Status.XPASS.value: "fail", Status.XFAIL.value: "fail",
    FAILED: "fail", Status.SKIP.value: "gap", Status.NA.value: "other", Status.BLOCKED.value: "gap",
    NOT_EXERCISED: "gap", "NOT_RUN": "gap",
    Status.PASS.value: "pass", Status.WARN.value: "pass", PASSED: "pass", EXCLUDED: "other", NOT_APPLICABLE: "other",
    Status.PIN.value: "pin",
}
FILTERS = (("all", "All"), ("fail", "Failures"), ("gap", "Not exercised"), ("pass", "Passed"),
           ("pin", "Pins"), ("other", "Excluded"))
# Listed first, with evidence: failures, warnings, and the pins the target does not keep.
_ATTENTION = (Status.FAIL, Status.ERROR, Status.XPASS, Status.XFAIL, Status.WARN, Status.PIN)
_EVIDENCE_CHARS = 4000
_BAR_WIDTH, _MIN_SEGMENT = 480.0, 4.0  # summary chart: the bar and the narrowest segment a non-zero count gets
_COLOURS = {"fail": "#c62828", "gap": "#f9a825", "pass": "#2e7d32", "pin": "#6a1b9a", "other": "#9e9e9e"}
_VERDICT_COLOURS = {0: "#2e7d32", 1: "#c62828", 3: "#616161", 4: "#ef6c00", 5: "#f9a825", 6: "#c62828"}

_STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:0;color:#212121;background:#fafafa}
main{padding:0 2em 3em}
.banner{color:#fff;padding:1.2em 2em}
.banner h1{margin:0 0 .4em;font-size:1.5em}
.banner dl{display:grid;grid-template-columns:max-content 1fr;gap:.15em 1.2em;margin:0}
.banner dt{font-weight:600;opacity:.85}.banner dd{margin:0;word-break:break-all}
h2{margin:1.4em 0 .4em;border-bottom:2px solid #ddd}
.controls{position:sticky;top:0;background:#fafafa;padding:.6em 0;z-index:1;border-bottom:1px solid #ddd}
.controls button{font:inherit;padding:.3em .9em;margin-right:.3em;border:1px solid #888;border-radius:1em;
background:#fff;cursor:pointer}
.controls button[aria-pressed=true]{background:#333;color:#fff}
.controls input{font:inherit;padding:.3em .6em;width:22em;margin-left:1em}
table{border-collapse:collapse;width:100%;background:#fff}
td,th{border:1px solid #ddd;padding:3px 6px;vertical-align:top;text-align:left}
th{background:#eee}
.st{font-weight:700;white-space:nowrap}
.g-fail .st{color:#c62828}.g-gap .st{color:#a66f00}.g-pass .st{color:#2e7d32}.g-other .st{color:#757575}
.g-pin .st{color:#6a1b9a}
.finding{background:#fff;border:1px solid #e0a0a0;border-left:6px solid #c62828;padding:.6em 1em;margin:.8em 0}
.finding h3{margin:0 0 .3em;font-size:1.05em}
pre,code{font:12px/1.4 ui-monospace,monospace}
pre{background:#f4f4f4;padding:.5em;overflow:auto;max-height:20em;white-space:pre-wrap}
.repro{display:block;background:#263238;color:#eceff1;padding:.5em;white-space:pre-wrap;word-break:break-all}
.breaks{font-weight:700;color:#c62828}
details.section{margin:.6em 0}details.section>summary{font-weight:600;cursor:pointer;padding:.2em 0}
body[data-filter=fail] [data-group]:not([data-group=fail]),
body[data-filter=gap] [data-group]:not([data-group=gap]),
body[data-filter=pass] [data-group]:not([data-group=pass]),
body[data-filter=pin] [data-group]:not([data-group=pin]),
body[data-filter=other] [data-group]:not([data-group=other]){display:none}
.unmatched{display:none!important}
td.id,a.jump{white-space:nowrap}
[id]{scroll-margin-top:calc(var(--bar,4em) + .5em)}
"""

_SCRIPT = """
(function(){
  var body=document.body, search=document.getElementById('search');
  var bar=document.querySelector('.controls');
  function measure(){body.style.setProperty('--bar', bar.offsetHeight+'px');}
  function visible(el){return getComputedStyle(el).display!=='none';}
  function recount(){
    document.querySelectorAll('h2[data-counts]').forEach(function(h){
      var all=document.querySelectorAll(h.dataset.counts);
      var shown=Array.prototype.filter.call(all,visible).length;
      h.querySelector('.count').textContent=shown===all.length?'('+all.length+')':'('+shown+' of '+all.length+' shown)';
      if(h.hasAttribute('data-hide-empty')){h.style.display=shown?'':'none';}
    });
  }
  function refresh(){
    var q=search.value.trim().toLowerCase();
    document.querySelectorAll('[data-group]').forEach(function(el){
      el.classList.toggle('unmatched', q!=='' && el.textContent.toLowerCase().indexOf(q)<0);
    });
    document.querySelectorAll('details.section').forEach(function(sec){
      var shown=Array.prototype.some.call(sec.querySelectorAll('tr[data-group]'),function(tr){
        return getComputedStyle(tr).display!=='none';});
      sec.style.display=shown?'':'none';
    });
    recount();
  }
  function choose(name){
    body.dataset.filter=name;
    document.querySelectorAll('.controls button').forEach(function(b){
      b.setAttribute('aria-pressed', String(b.dataset.filter===name));});
    refresh();
  }
  document.querySelectorAll('.controls button').forEach(function(b){
    b.addEventListener('click',function(){choose(b.dataset.filter);});});
  document.querySelectorAll('a.jump').forEach(function(a){
    a.addEventListener('click',function(){search.value='';choose('all');});});
  search.addEventListener('input',refresh);
  window.addEventListener('resize',measure);
  measure();
  choose('all');
})();
"""


def _anchor(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-")


def _check_anchor(check_id: str) -> str:
    return "check-" + _anchor(check_id)


def _result_anchor(result: Result) -> str:
    return "result-" + _anchor(result.label)


def _req_link(rid: str, *, breaks: bool = False) -> str:
    cls = "jump breaks" if breaks else "jump"
    return f"<a class='{cls}' href='#req-{escape(rid)}'>{escape(rid)}</a>"


def _banner(run: Run, code: int) -> str:
    eras = ", ".join(spoken_eras(run)) or "none"
    refused = "; ".join(f"{era} refused: {why}" for era, why in run.unsupported_eras.items())
    started, finished = utc_stamp(run.started_at), utc_stamp(run.finished_at)
    facts = [
        ("Contract", f"Engram memory over MCP {load().version} ({load().digest})"),
        ("Level", f"{level_of(run)}" + (" (strict: unverified requirements scored too)" if run.strict else "")),
        ("Eras", eras + (f" — {refused}" if refused else "")),
        ("Transports", ", ".join(run.transports)),
        ("Profile", profile_label(run).replace("`", "")),
        ("Target", run.target_identity),
        ("Server", run.server_identity or "did not name itself"),
        ("Date", f"{started or 'not started'}" + (f" to {finished}" if finished else "") + " UTC"),
        ("Seed", f"{run.seed} ({run.examples} generated cases per tool and mode)" + ("; deep" if run.deep else "")),
        ("Harness", run.harness_version),
    ]
    if run.select:
        facts.append(("Selection", ", ".join(run.select) + " (a partial run, never a certificate)"))
    if run.unreachable:
        facts.append(("Not judged", run.unreachable))
    rows = "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in facts)
    colour = _VERDICT_COLOURS.get(code, "#616161")
    if code == 0 and any(r.status is Status.XFAIL for r in run.results):
        colour = _VERDICT_COLOURS[4]  # exit 0 on a baseline is not conformant: orange, as the badge says
    return (f"<header class='banner' id='verdict' style='background:{colour}'>"
            f"<h1>{escape(verdict_line(run, code))}</h1><dl>{rows}</dl></header>")


def _widths(counts: list[int], total: int, width: float = _BAR_WIDTH) -> list[float]:
    """Each segment's width in proportion, but a non-zero one never under _MIN_SEGMENT (1 of 715 must show);
    what that adds is taken from the segments wider than the minimum, in proportion to their width."""
    widths = [width * n / total if n else 0.0 for n in counts]
    short = [i for i, w in enumerate(widths) if 0 < w < _MIN_SEGMENT]
    wide = sum(w for w in widths if w >= _MIN_SEGMENT)
    if not short or wide <= 0:
        return widths
    added = sum(_MIN_SEGMENT - widths[i] for i in short)
    shrink = max(wide - added, 0.0) / wide
    return [_MIN_SEGMENT if i in short else w * shrink for i, w in enumerate(widths)]


def _bar(y: int, label: str, parts: list[tuple[str, str, int]]) -> str:
    """One stacked horizontal bar: (group, text, count) per segment, with its legend beneath."""
    total = sum(n for _, _, n in parts) or 1
    out = [f"<text x='0' y='{y - 6}' font-weight='600'>{escape(label)}</text>"]
    x = 0.0
    for (group, text, n), w in zip(parts, _widths([n for _, _, n in parts], total), strict=True):
        if n:
            out.append(f"<rect x='{x:.1f}' y='{y}' width='{w:.1f}' height='18' fill='{_COLOURS[group]}'>"
                       f"<title>{escape(text)}: {n}</title></rect>")
            x += w
    legend = " · ".join(f"{text} {n}" for _, text, n in parts)
    out.append(f"<text x='0' y='{y + 34}'>{escape(legend)}</text>")
    return "".join(out)


def _chart(run: Run, verdicts: dict[str, dict[str, Any]]) -> str:
    t = tally(musts(verdicts))
    checks = counts(run)
    check_parts = [(GROUP[s.value], s.value, checks.get(s.value, 0)) for s in SEVERITY if checks.get(s.value)]
    must_parts = [("pass", "passed", t["passed"]), ("fail", "failed", t["failed"]),
                  ("gap", "not exercised", t["not_exercised"])]
    return ("<svg role='img' aria-label='summary chart' width='520' height='130' viewBox='0 0 520 130' "
            "xmlns='http://www.w3.org/2000/svg' font-size='12' font-family='sans-serif'>"
            + _bar(20, f"Scored MUST requirements ({t['scored']}; {t['excluded']} more excluded, not scored)",
                   must_parts)
            + _bar(82, f"Check results ({sum(checks.values())})", check_parts or [("other", "none", 0)])
            + "</svg>")


def _controls() -> str:
    buttons = "".join(f"<button type='button' data-filter='{key}'>{escape(text)}</button>" for key, text in FILTERS)
    return (f"<div class='controls' role='toolbar'>Show: {buttons}"
            "<input id='search' type='search' placeholder='Search requirements and checks' "
            "aria-label='search'></div>")


def _evidence(result: Result) -> str:
    text = json.dumps(redact(result.evidence), ensure_ascii=False, indent=1, sort_keys=True, default=str)
    if len(text) > _EVIDENCE_CHARS:
        text = text[:_EVIDENCE_CHARS] + f"\n… [{len(text)} characters; report.jsonl has it all]"
    return text


def _finding(run: Run, result: Result) -> str:
    hit = blamed(result)
    entries = catalog()
    breaks = "".join(f"<li>{_req_link(rid, breaks=True)} ({escape(entries[rid]['level'])}): "
                     f"{escape(entries[rid]['summary'])}</li>" for rid in hit if rid in entries)
    others = [rid for rid in result.requirements if rid not in hit]
    case = f" — case <code>{escape(result.case)}</code>" if result.case else ""
    return (
        f"<article class='finding' data-group='{GROUP[result.status.value]}' "
        f"id='finding-{escape(_anchor(result.label))}'>"
        f"<h3><span class='st'>{escape(result.status.value)}</span> "
        f"<a class='jump' href='#{_result_anchor(result)}'>{escape(result.check_id)}</a>"
        f"{' in the ' + escape(result.era) + ' era' if result.era else ''}{case}</h3>"
        f"<p class='message'>{escape(result.message.splitlines()[0] if result.message else result.status.value)}</p>"
        + (f"<p>Breaks:</p><ul>{breaks}</ul>" if breaks else "")
        + (f"<p>Also covered by this check, not broken by its failing cases: "
           f"{', '.join(_req_link(r) for r in others)}</p>" if others and hit else "")
        + f"<p>Reproduce:</p><code class='repro'>{escape(reproduction(run, result))}</code>"
        + "<details open><summary>Evidence</summary>"
        + (f"<pre class='detail'>{escape(result.detail)}</pre>" if result.detail else "")
        + f"<pre class='evidence'>{escape(_evidence(result))}</pre></details></article>"
    )


def _sections(run: Run, verdicts: dict[str, dict[str, Any]]) -> str:
    checks_of: dict[str, list[str]] = {}
    for result in run.results:
        for rid in result.requirements:
            if result.check_id not in checks_of.setdefault(rid, []):
                checks_of[rid].append(result.check_id)
    by_section: dict[str, list[str]] = {}
    for rid, entry in catalog().items():
        by_section.setdefault(entry["section"], []).append(rid)
    out = []
    for section, ids in by_section.items():
        rows = []
        for rid in ids:
            v, entry = verdicts[rid], catalog()[rid]
            group = GROUP.get(v["outcome"], "other")
            links = ", ".join(f"<a class='jump' href='#{_check_anchor(c)}'>{escape(c)}</a>"
                              for c in checks_of.get(rid, [])) or "no check ran"
            why = "; ".join(f"{' and '.join(eras)}: {reason} → {unlock}"
                            for (reason, unlock), eras in _eras_by_reason(v["not_exercised"]).items())
            source = entry["source"] + ("" if v["scored"] else " (not scored)")
            rows.append(
                f"<tr class='g-{group}' data-group='{group}' id='req-{escape(rid)}'><td class='id'>{escape(rid)}</td>"
                f"<td>{escape(entry['summary'])}" + (f"<br><small>{escape(why)}</small>" if why else "") + "</td>"
                f"<td>{escape(entry['level'])}<br><small>{escape(entry['status'])}</small></td><td>{escape(source)}</td>"
                f"<td class='st'>{escape(v['outcome'])}</td><td>{links}</td></tr>")
        tallied = Counter(verdicts[rid]["outcome"] for rid in ids)
        summary = ", ".join(f"{n} {k.lower().replace('_', ' ')}" for k, n in sorted(tallied.items()))
        out.append(f"<details class='section' open><summary>{escape(section)} — {escape(summary)}</summary>"
                   "<table><tr><th>Requirement</th><th>Text</th><th>Level</th><th>Source</th><th>Outcome</th>"
                   f"<th>Checks</th></tr>{''.join(rows)}</table></details>")
    return "".join(out)


def _eras_by_reason(gaps: list[dict[str, Any]]) -> dict[tuple[str, str], list[str]]:
    """One requirement's not-exercised reasons, each once, with the eras it held in."""
    grouped: dict[tuple[str, str], list[str]] = {}
    for gap in gaps:
        eras = grouped.setdefault((gap["reason"], gap["unlock"]), [])
        if gap["era"] not in eras:
            eras.append(gap["era"])
    return grouped


def _not_exercised(run: Run, verdicts: dict[str, dict[str, Any]]) -> str:
    """The scored MUSTs the run left unjudged, grouped by reason: what stands between this run and a certificate."""
    if run.unreachable or run.not_engram:
        return ""
    groups = grouped_gaps(musts(verdicts))
    if not groups:
        return ""
    items = "".join(
        f"<li><span class='reason'>{escape(reason)}</span> → <span class='unlock'>{escape(unlock)}</span> "
        f"<span class='count'>({len(ids)})</span><br><small>"
        + ", ".join(f"<a class='jump' href='#req-{escape(i.split(' ')[0])}'>{escape(i)}</a>" for i in ids)
        + "</small></li>" for reason, unlock, ids in groups)
    total = len({i.split(" ")[0] for _, _, ids in groups for i in ids})  # a requirement held back for two reasons
    return (f"<h2 id='not-exercised'>Not exercised <span class='count'>({total} scored MUSTs, "
            f"{len(groups)} reason{'s' if len(groups) != 1 else ''})</span></h2><ul class='gaps'>{items}</ul>")


def _tools(run: Run, verdicts: dict[str, dict[str, Any]]) -> str:
    """The readiness table: per tool, served or not, and what the checks that call it concluded."""
    if not run.served or run.unreachable or run.not_engram:
        return ""
    scored = musts(verdicts)
    cells = "".join(
        f"<tr class='g-{_TOOL_GROUPS[row.state]}' data-tool='{escape(row.tool)}'><td class='id'>{escape(row.tool)}</td>"
        f"<td class='st'>{escape(row.state)}</td><td>{escape(row.how)}</td><td>{row.passed}</td><td>{row.failed}</td>"
        f"<td>{row.not_exercised}</td><td>{row.waiting}</td></tr>" for row in readiness.rows(run, scored))
    said = readiness.sentence(run, scored)
    return ("<h2 id='tools'>Tools</h2><table class='tools'><tr><th>Tool</th><th>Served</th><th>How the harness "
            "learnt it</th><th>Checks passed</th><th>Failed</th><th>Not exercised</th><th>Scored MUSTs waiting</th>"
            f"</tr>{cells}</table>" + (f"<p class='tools-summary'>{escape(said)}</p>" if said else ""))


_TOOL_GROUPS = {readiness.SERVED: "pass", readiness.NOT_SERVED: "fail", readiness.NOT_GRANTED: "gap",
                readiness.UNKNOWN: "other"}


def _checks(results: list[Result]) -> str:
    rows, anchored = [], set()
    for result in sorted(results, key=lambda r: (r.check_id, r.era or "", r.case or "")):
        group = GROUP[result.status.value]
        hit = set(blamed(result))
        first = result.check_id not in anchored
        anchored.add(result.check_id)
        reqs = " ".join(_req_link(rid, breaks=rid in hit) for rid in result.requirements)
        anchor = f"<a id='{_check_anchor(result.check_id)}'></a>" if first else ""
        rows.append(
            f"<tr class='g-{group}' data-group='{group}' id='{_result_anchor(result)}'>"
            f"<td class='id'>{anchor}{escape(result.check_id)}</td><td>{escape(result.case or '')}</td>"
            f"<td>{escape(result.era or 'all')}</td><td class='st'>{escape(result.status.value)}</td>"
            f"<td>{reqs}</td><td>{escape(result.message.splitlines()[0] if result.message else '')}</td></tr>")
    return ("<table><tr><th>Check</th><th>Case</th><th>Era</th><th>Status</th><th>Requirements "
            f"(<span class='breaks'>broken</span>)</th><th>Message</th></tr>{''.join(rows)}</table>")


def _attention_title(attention: list[Result]) -> str:
    """What the cards are: failures (the Failures filter shows them), warnings (a SHOULD broken; the Passed
    filter shows them), pins not kept (not scored at the run's level), or several of these."""
    kinds = {"warnings" if r.status is Status.WARN else "pins not kept" if r.status is Status.PIN
             else "failures" for r in attention}
    ordered = [k for k in ("failures", "warnings", "pins not kept") if k in kinds]
    text = ", ".join(ordered[:-1]) + (" and " if len(ordered) > 1 else "") + ordered[-1]
    return text[0].upper() + text[1:]


def html_report(run: Run, verdicts: dict[str, dict[str, Any]], code: int) -> str:
    attention = sorted((r for r in run.results if r.status in _ATTENTION),
                       key=lambda r: (SEVERITY.index(r.status), r.check_id, r.era or "", r.case or ""))
    findings = "".join(_finding(run, r) for r in attention)
    notes = "".join(f"<li>{escape(note)}</li>" for note in run.notes)
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        "<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; style-src 'unsafe-inline'; "
        "script-src 'unsafe-inline'; img-src data:\">"
        f"<title>Engram memory over MCP {escape(load().version)} — conformance report</title>"
        f"<style>{_STYLE}</style></head><body data-filter='all'>"
        + _banner(run, code)
        + "<main>"
        + f"<h2>Summary</h2>{_chart(run, verdicts)}"
        + _tools(run, verdicts)
        + (f"<ul class='notes'>{notes}</ul>" if notes else "")
        + _controls()
        + (f"<h2 id='failures' data-counts='article.finding' data-hide-empty>{escape(_attention_title(attention))} "
           f"<span class='count'>({len(attention)})</span></h2>{findings}" if attention else "")
        + _not_exercised(run, verdicts)
        + f"<h2 id='requirements'>Requirements by contract section</h2>{_sections(run, verdicts)}"
        + f"<h2 id='checks' data-counts='#checks ~ table tr[data-group]'>Check results "
        f"<span class='count'>({len(run.results)})</span></h2>{_checks(run.results)}"
        + f"</main><script>{_SCRIPT}</script></body></html>\n"
    )
