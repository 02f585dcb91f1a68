"""report.html as a person sees it, in headless Chromium: the banner, filters, search, and a failure's reproduction.

The page is opened from disk by Debian's ``chromium`` through its ``chromedriver``
(never a browser a tool downloads). Without them the browser tests skip with the
reason, except in CI (``CI`` set), which installs both and must not skip.
Set ``ENGRAM_REPORT_SCREENSHOT=DIR`` to keep the screenshot of the failing report.
"""

from __future__ import annotations

import os
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from engram_mcp.conformance._checks import Status
from engram_mcp.conformance._connect import parse_target
from engram_mcp.conformance._findings import BROKEN_RULES
from engram_mcp.conformance._profile import load_profile
from engram_mcp.conformance._report import write_reports
from engram_mcp.conformance._run import Result, Run, ServerInfo
from engram_mcp.reference._init import write_configuration

if TYPE_CHECKING:  # selenium is imported where the browser starts: without it those tests skip, and the rest run
    from selenium.webdriver.remote.webdriver import WebDriver
    from selenium.webdriver.remote.webelement import WebElement

CROSS_REFERENCES = ("EMC-CAP-002", "EMC-CAP-007", "EMC-CAP-008", "EMC-CAP-010", "EMC-CAP-011")
FAILING_MESSAGE = "2 of 40 cross-references cases for engram_memory_capture were answered wrongly in the legacy era"
FAILING_DETAIL = ("- case 3: two citations share the id c1, and the call succeeded\n"
                  "- case 17: citation ids c2, c2 repeat, and the call succeeded")


def failing_run(directory: Path) -> tuple[Run, Path]:
    """A run of two eras: one family check fails on a rule only EMC-CAP-007 carries, a repeated check passes."""
    write_configuration(directory / "init", seed="html")
    profile = load_profile(directory / "init" / "conformance-profile.toml")
    run = Run(target=parse_target("stdio:my-memory-server --store /srv/memory"), profile=profile,
              host=None, confirmer=None,  # type: ignore[arg-type]  # a report reads neither
              eras=("legacy", "modern"), seed=7, examples=5, strict=False,
              baseline=frozenset(), report_dir=None, timeout=1.0,
              started_at=datetime(2026, 11, 30, 9, 0, 0, tzinfo=UTC))
    run.finished_at = datetime(2026, 11, 30, 9, 2, 30, tzinfo=UTC)
    run.server_info = {era: ServerInfo("my-memory-server", "2.1.0") for era in run.eras}
    run.results += [
        Result("arguments.cross-references", CROSS_REFERENCES, "legacy", Status.FAIL, "n", 0.8, FAILING_MESSAGE,
               {BROKEN_RULES: ["unique_citation_ids"], "sent": 40, "wrong": 2}, case="capture",
               detail=FAILING_DETAIL),
        Result("arguments.cross-references", CROSS_REFERENCES, "modern", Status.PASS, "n", 0.7, case="capture"),
        *[Result("search.stale-cursor", ("EMC-SRCH-010",), era, Status.PASS, "n", 0.1, case=f"limit-{n}")
          for era in run.eras for n in (1, 2)],
        Result("search.limit", ("EMC-SRCH-003",), "modern", Status.SKIP, "n", 0.0, "the profile grants no search"),
    ]
    out = directory / "report"
    write_reports(run, out)
    return run, out / "report.html"


def expected_reproduction(profile: Path) -> str:
    return (f"conformance --target 'stdio:my-memory-server --store /srv/memory' --profile {profile} "
            "--select arguments.cross-references --era legacy --seed 7 --examples 5")


# -- what the file holds, without a browser -----------------------------------------------------------------


def test_the_page_is_self_contained(tmp_path: Path) -> None:
    _, page = failing_run(tmp_path)
    text = page.read_text(encoding="utf-8")
    assert "<link" not in text and " src=" not in text and "@import" not in text and "url(" not in text
    # The SVG namespace is the one address the page names; nothing is fetched from it.
    assert re.findall(r"https?://[^\s'\"<]+", text) == ["http://www.w3.org/2000/svg"]
    assert "default-src 'none'" in text  # and the page's own policy forbids fetching anything


def test_an_unreachable_run_says_so_in_the_banner(tmp_path: Path) -> None:
    from engram_mcp.conformance._html import html_report
    from engram_mcp.conformance._verdicts import exit_code, requirement_verdicts

    run = Run(target=parse_target("stdio:gone"),
              profile=None, host=None, confirmer=None,  # type: ignore[arg-type]  # never read without a None check
              eras=("legacy",), seed=0, examples=1, strict=False, baseline=frozenset(), report_dir=None, timeout=1.0)
    run.unreachable = "the target exited before answering initialize <exit 127>"
    page = html_report(run, requirement_verdicts(run), exit_code(run))
    assert "VERDICT: not judged (target unreachable or environment error)" in page
    assert "the target exited before answering initialize &lt;exit 127&gt;" in page  # escaped, never markup


def test_a_run_green_only_by_its_baseline_has_no_green_banner() -> None:
    from engram_mcp.conformance._checks import SOURCES_SCORED
    from engram_mcp.conformance._html import _VERDICT_COLOURS, html_report
    from engram_mcp.conformance._verdicts import exit_code, requirement_verdicts
    from engram_mcp.contract import load

    run = Run(target=parse_target("stdio:my-server"),
              profile=None, host=None, confirmer=None,  # type: ignore[arg-type]  # never read without a None check
              eras=("legacy",), seed=0, examples=1, strict=False, baseline=frozenset(), report_dir=None, timeout=1.0)
    run.results += [Result(f"synthetic.{r['id'].lower()}", (r["id"],), None, Status.PASS, "n", 0.0)
                    for r in load().requirements["requirements"]
                    if r["level"] in ("MUST", "MUST NOT") and r["status"] == "established" and r["observable"]
                    and r["source"] in SOURCES_SCORED["contract"]]
    run.results.append(Result("search.limit", ("EMC-SRCH-003",), "legacy", Status.XFAIL, "n", 0.0, "known"))
    code = exit_code(run)
    assert code == 0
    page = html_report(run, requirement_verdicts(run), code)
    banner = re.search(r"<header class='banner' id='verdict' style='background:([^']+)'>", page)
    assert banner is not None and banner.group(1) != _VERDICT_COLOURS[0]


def test_only_the_requirement_the_failing_case_breaks_is_blamed(tmp_path: Path) -> None:
    _, page = failing_run(tmp_path)
    footer = (page.parent / "report.jsonl").read_text(encoding="utf-8").splitlines()
    import json

    lines = [json.loads(line) for line in footer]
    failing = next(line for line in lines if line.get("status") == "FAIL")
    assert failing["blamed"] == ["EMC-CAP-007"] and failing["case"] == "capture"
    verdicts = lines[-1]["requirements"]
    assert verdicts["EMC-CAP-007"]["outcome"] == "FAILED"
    assert all(verdicts[rid]["outcome"] != "FAILED" for rid in CROSS_REFERENCES if rid != "EMC-CAP-007")
    header = lines[0]
    assert header["server_identity"] == "my-memory-server 2.1.0" and header["profile_digest"].startswith("sha256:")
    assert header["started_at"] == "2026-11-30T09:00:00Z" and header["finished_at"] == "2026-11-30T09:02:30Z"


def test_the_markdown_reports_name_the_run_and_a_certificate_points_at_its_signature(tmp_path: Path) -> None:
    from engram_mcp.conformance._certificate import ATTESTATION_FILE
    from engram_mcp.conformance._checks import SOURCES_SCORED
    from engram_mcp.contract import load

    run, page = failing_run(tmp_path)
    report = (page.parent / "report.md").read_text(encoding="utf-8")
    for shown in ("Server identity: my-memory-server 2.1.0", f"`{run.profile_digest}`",
                  "Date: 2026-11-30T09:00:00Z to 2026-11-30T09:02:30Z (UTC)"):
        assert shown in report, shown
    assert ATTESTATION_FILE not in report and not (page.parent / "certificate.md").exists()
    run.results[:] = [Result(f"synthetic.{e['id'].lower()}", (e["id"],), None, Status.PASS, "n", 0.0)
                      for e in load().requirements["requirements"]
                      if e["level"] in ("MUST", "MUST NOT") and e["status"] == "established" and e["observable"]
                      and e["source"] in SOURCES_SCORED["contract"]]
    write_reports(run, page.parent)
    certificate = (page.parent / "certificate.md").read_text(encoding="utf-8")
    assert certificate.startswith("# Certificate of conformance") and "my-memory-server 2.1.0" in certificate
    assert f"conformance verify-certificate {ATTESTATION_FILE} --key PUBLIC --report report.jsonl" in certificate


def test_a_failure_without_rule_evidence_blames_every_requirement_of_its_check(tmp_path: Path) -> None:
    from engram_mcp.conformance._findings import blamed

    plain = Result("arguments.cross-references", CROSS_REFERENCES, "legacy", Status.FAIL, "n", 0.1, "wrong")
    assert blamed(plain) == CROSS_REFERENCES
    unknown_rule = Result("arguments.cross-references", CROSS_REFERENCES, "legacy", Status.FAIL, "n", 0.1, "wrong",
                          {BROKEN_RULES: ["no_such_rule"]})
    assert blamed(unknown_rule) == CROSS_REFERENCES  # nothing matched: never blame nobody
    assert blamed(Result("x.y", CROSS_REFERENCES, None, Status.PASS, "n", 0.1)) == ()


def test_the_tools_of_the_failing_cases_narrow_the_blame_further() -> None:
    from engram_mcp.conformance._findings import BROKEN_TOOLS, blamed, spared

    covered = ("EMC-ENC-001", "EMC-SRCH-001", "EMC-CAP-005", "EMC-CAP-009", "EMC-IDEM-002")  # all carry utf8_bytes
    failed = Result("arguments.utf8-boundaries", covered, "modern", Status.FAIL, "n", 0.1, "wrong",
                    {BROKEN_RULES: ["utf8_bytes"], BROKEN_TOOLS: ["engram_memory_get"]}, case="get")
    assert blamed(failed) == ("EMC-ENC-001",)  # the one of them that get has
    assert spared(failed) == covered[1:]


def test_a_failure_of_the_bundled_reference_reproduces_with_target_reference(tmp_path: Path) -> None:
    """The CLI serves `--target reference` from a scratch directory gone after the run: the command names it again."""
    from engram_mcp.conformance._cli_run import reference_target as _reference_target
    from engram_mcp.conformance._findings import reproduction

    label, profile = _reference_target(tmp_path / "engram-conformance-x1" / "reference")
    run = Run(target=parse_target(label), profile=load_profile(profile),
              host=None, confirmer=None,  # type: ignore[arg-type]  # a report reads neither
              eras=("legacy", "modern"), seed=3, examples=25, strict=False, baseline=frozenset(), report_dir=None,
              timeout=1.0, level="pins")
    failed = Result("gate.refusal", ("EMC-GATE-001",), "modern", Status.FAIL, "n", 0.1, "ran", case="decline-forget")
    assert reproduction(run, failed) == ("conformance --target reference --select gate.refusal --era modern "
                                         "--seed 3 --examples 25 --level pins")


# -- what a person sees --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def failing_page(tmp_path_factory: pytest.TempPathFactory) -> tuple[Run, Path]:
    return failing_run(tmp_path_factory.mktemp("html"))


def _open(driver: WebDriver, page: Path) -> None:
    driver.get(page.as_uri())


def _rows(driver: WebDriver, status: str) -> list[WebElement]:
    from selenium.webdriver.common.by import By

    return [row for row in driver.find_elements(By.CSS_SELECTOR, "#checks ~ table tr[data-group]")
            if row.find_element(By.CSS_SELECTOR, "td.st").text == status]


def test_the_banner_says_what_was_certified_where_and_when(browser: WebDriver, failing_page: tuple[Run, Path]) -> None:
    from selenium.webdriver.common.by import By

    run, page = failing_page
    _open(browser, page)
    banner = browser.find_element(By.ID, "verdict")
    text = banner.text
    assert banner.is_displayed() and text.startswith("VERDICT: not conformant (a MUST failed)")
    for shown in ("contract", "legacy, modern", "stdio", "conformance-profile.toml", run.profile_digest or "?",
                  "stdio:my-memory-server --store /srv/memory", "my-memory-server 2.1.0",
                  "2026-11-30T09:00:00Z to 2026-11-30T09:02:30Z UTC", "Engram memory over MCP 1.0.0"):
        assert shown in text, shown
    chart = browser.find_element(By.CSS_SELECTOR, "svg[aria-label='summary chart']")
    assert chart.is_displayed() and "failed 1" in chart.text


def test_the_failures_filter_hides_passed_rows_and_search_narrows(browser: WebDriver,
                                                                    failing_page: tuple[Run, Path]) -> None:
    from selenium.webdriver.common.by import By

    _, page = failing_page
    _open(browser, page)
    passed = _rows(browser, "PASS")
    assert len(passed) == 5 and all(row.is_displayed() for row in passed)
    browser.find_element(By.CSS_SELECTOR, "button[data-filter=fail]").click()
    assert not any(row.is_displayed() for row in passed)
    assert all(row.is_displayed() for row in _rows(browser, "FAIL"))
    requirement = browser.find_element(By.ID, "req-EMC-CAP-007")
    assert requirement.is_displayed() and "FAILED" in requirement.text
    assert not browser.find_element(By.ID, "req-EMC-SRCH-010").is_displayed()
    browser.find_element(By.CSS_SELECTOR, "button[data-filter=all]").click()
    search = browser.find_element(By.ID, "search")
    search.send_keys("stale-cursor")
    shown = [row for row in browser.find_elements(By.CSS_SELECTOR, "#checks ~ table tr[data-group]")
             if row.is_displayed()]
    assert len(shown) == 4 and all("stale-cursor" in row.text for row in shown)
    assert {row.find_elements(By.TAG_NAME, "td")[1].text for row in shown} == {"limit-1", "limit-2"}  # the case ids


def test_a_failure_shows_its_evidence_its_blame_and_a_command_that_reproduces_it(
        browser: WebDriver, failing_page: tuple[Run, Path]) -> None:
    from selenium.webdriver.common.by import By

    run, page = failing_page
    _open(browser, page)
    finding = browser.find_element(By.CSS_SELECTOR, "article.finding")
    assert "arguments.cross-references in the legacy era — case capture" in finding.text
    assert FAILING_MESSAGE in finding.text
    assert run.profile.path is not None
    assert finding.find_element(By.CSS_SELECTOR, "code.repro").text == expected_reproduction(run.profile.path)
    broken = [a.text for a in finding.find_elements(By.CSS_SELECTOR, "ul a.breaks")]
    assert broken == ["EMC-CAP-007"]
    assert "unique_citation_ids" in finding.find_element(By.CSS_SELECTOR, "pre.evidence").text
    # Every offending case the check named is there, not only the first one its verdict quotes.
    assert finding.find_element(By.CSS_SELECTOR, "pre.detail").text == FAILING_DETAIL
    assert finding.find_element(By.CSS_SELECTOR, "p.message").text == FAILING_MESSAGE
    # The requirement links to its checks, and the link lands on a row that is there.
    link = browser.find_element(By.CSS_SELECTOR, "#req-EMC-CAP-007 a.jump")
    assert link.get_attribute("href").endswith("#check-arguments.cross-references")
    browser.find_element(By.ID, "check-arguments.cross-references")
    keep = os.environ.get("ENGRAM_REPORT_SCREENSHOT")
    shot = Path(keep) if keep else page.parent
    shot.mkdir(parents=True, exist_ok=True)
    assert browser.save_screenshot(str(shot / "failing-report.png"))
    assert (shot / "failing-report.png").stat().st_size > 10_000


def _long_page(directory: Path) -> Path:
    """The failing run with enough check rows after the failing one that a link can scroll it to the top."""
    run, page = failing_run(directory)
    run.results += [Result("search.stale-cursor", ("EMC-SRCH-010",), era, Status.PASS, "n", 0.1, case=f"page-{n}")
                    for era in run.eras for n in range(40)]
    write_reports(run, page.parent)
    return page


def _top_and_bar(driver: WebDriver, element: WebElement) -> tuple[float, float, float]:
    """The element's top, the sticky filter bar's bottom and the viewport's height, as laid out now."""
    return driver.execute_script(
        "var r=arguments[0].getBoundingClientRect(), bar=document.querySelector('.controls').getBoundingClientRect();"
        "return [r.top, bar.bottom, window.innerHeight];", element)


@pytest.mark.parametrize(("link", "target"), [
    ("#req-EMC-CAP-007 a.jump", "check-arguments.cross-references"),  # a requirement to its check's first row
    ("article.finding h3 a.jump", "result-arguments.cross-references-legacy-capture"),  # a failure to its row
])
def test_a_link_lands_below_the_sticky_filter_bar(browser: WebDriver, tmp_path: Path, link: str, target: str) -> None:
    from selenium.webdriver.common.by import By

    _open(browser, _long_page(tmp_path))
    browser.set_window_size(1280, 700)
    try:
        browser.find_element(By.CSS_SELECTOR, link).click()
        landed = browser.find_element(By.ID, target)
        row = landed if landed.tag_name == "tr" else landed.find_element(By.XPATH, "./ancestor::tr")
        assert browser.execute_script("return window.scrollY") > 0
        top, bar_bottom, height = _top_and_bar(browser, row)
        assert bar_bottom <= top < height, (top, bar_bottom)  # in view, not under the bar
    finally:
        browser.set_window_size(1280, 1600)


def test_requirement_and_check_ids_never_break_across_lines(browser: WebDriver, failing_page: tuple[Run, Path]) -> None:
    from selenium.webdriver.common.by import By

    _, page = failing_page
    _open(browser, page)
    browser.set_window_size(900, 1600)
    try:
        lines = browser.execute_script(
            "var out={};document.querySelectorAll(arguments[0]).forEach(function(el){"
            "var r=document.createRange();r.selectNodeContents(el);"
            "var tops=new Set(Array.prototype.map.call(r.getClientRects(),function(c){return Math.round(c.top);}));"
            "out[el.textContent]=tops.size;});return out;",
            "#requirements ~ details td.id, #checks ~ table td.id, a.jump")
        assert lines and "EMC-HOST-001" in lines and "arguments.cross-references" in lines
        assert {text: n for text, n in lines.items() if n != 1} == {}
        assert browser.find_elements(By.CSS_SELECTOR, "#req-EMC-HOST-001 td.id")
    finally:
        browser.set_window_size(1280, 1600)


def test_the_headings_count_what_the_filter_and_search_show(browser: WebDriver, failing_page: tuple[Run, Path]) -> None:
    from selenium.webdriver.common.by import By

    _, page = failing_page
    _open(browser, page)
    failures = browser.find_element(By.ID, "failures")
    checks = browser.find_element(By.ID, "checks")
    assert failures.text == "Failures (1)" and checks.text == "Check results (7)"
    browser.find_element(By.CSS_SELECTOR, "button[data-filter=pass]").click()
    assert not failures.is_displayed()  # no card is shown: no empty heading either
    assert checks.text == "Check results (5 of 7 shown)"
    browser.find_element(By.CSS_SELECTOR, "button[data-filter=all]").click()
    browser.find_element(By.ID, "search").send_keys("stale-cursor")
    assert not failures.is_displayed() and checks.text == "Check results (4 of 7 shown)"
    browser.find_element(By.CSS_SELECTOR, "button[data-filter=fail]").click()
    browser.find_element(By.ID, "search").clear()
    browser.find_element(By.ID, "search").send_keys("cross")
    assert failures.is_displayed() and failures.text == "Failures (1)"


def test_a_warning_is_counted_as_what_it_is(tmp_path: Path) -> None:
    from engram_mcp.conformance._html import html_report
    from engram_mcp.conformance._verdicts import exit_code, requirement_verdicts

    run, _ = failing_run(tmp_path)
    run.results.append(Result("envelope.hint", ("EMC-ENV-003",), "legacy", Status.WARN, "n", 0.1, "a SHOULD"))
    page = html_report(run, requirement_verdicts(run), exit_code(run))
    heading = re.search(r"<h2 id='failures'[^>]*>(.*?)</h2>", page)
    assert heading is not None and re.sub("<[^>]+>", "", heading.group(1)) == "Failures and warnings (2)"


def test_a_small_share_of_the_chart_stays_visible() -> None:
    from engram_mcp.conformance._html import _MIN_SEGMENT, _widths

    widths = _widths([2, 642, 71], 715)
    assert widths[0] >= _MIN_SEGMENT and abs(sum(widths) - 480) < 1e-6
    assert widths[1] > widths[2] > widths[0]
    assert _widths([0, 5], 5) == [0.0, 480.0]  # a zero count has no segment at all
    assert _widths([1, 1], 2) == [240.0, 240.0]


def test_an_incomplete_run_lists_what_it_left_unjudged_once_per_reason(browser: WebDriver,
                                                                      failing_page: tuple[Run, Path]) -> None:
    from selenium.webdriver.common.by import By

    _, page = failing_page
    _open(browser, page)
    heading = browser.find_element(By.ID, "not-exercised")
    assert heading.is_displayed() and heading.text.startswith("Not exercised (")
    reasons = browser.find_elements(By.CSS_SELECTOR, "ul.gaps > li")
    texts = [item.find_element(By.CSS_SELECTOR, ".reason").text for item in reasons]
    assert len(texts) == len(set(texts)), "a reason is listed twice"
    skipped = [item for item in reasons if "the profile grants no search" in item.text]
    assert len(skipped) == 1, [item.text for item in reasons]
    # Every id under the reason links to its requirement's row, with the eras it held in.
    link = skipped[0].find_element(By.CSS_SELECTOR, "a.jump")
    assert link.text == "EMC-SRCH-003 (modern)" and link.get_attribute("href").endswith("#req-EMC-SRCH-003")
    # Each requirement counted once, however many reasons held it back.
    held = {link.text.split(" ")[0] for item in reasons for link in item.find_elements(By.CSS_SELECTOR, "a.jump")}
    assert f"({len(held)} scored MUSTs, {len(reasons)} reason" in heading.text
    # Shown whole: a reason never ends cut inside a word.
    assert not [t for t in texts if t.endswith("…")]


def test_a_requirement_row_names_each_reason_once_with_its_eras(tmp_path: Path) -> None:
    from engram_mcp.conformance._html import html_report
    from engram_mcp.conformance._verdicts import exit_code, requirement_verdicts

    run, _ = failing_run(tmp_path)
    run.results.append(Result("search.limit", ("EMC-SRCH-003",), "legacy", Status.SKIP, "n", 0.0,
                              "the profile grants no search"))
    page = html_report(run, requirement_verdicts(run), exit_code(run))
    row = page[page.index("id='req-EMC-SRCH-003'"):]
    row = row[:row.index("</tr>")]
    assert row.count("the profile grants no search") == 1 and "legacy and modern: the profile" in row, row


def two_tool_run(directory: Path) -> Path:
    """A run of a server that serves search and get alone: the readiness table's page."""
    write_configuration(directory / "init", seed="tools")
    profile = load_profile(directory / "init" / "conformance-profile.toml")
    run = Run(target=parse_target("stdio:my-memory-server"), profile=profile,
              host=None, confirmer=None,  # type: ignore[arg-type]  # a report reads neither
              eras=("legacy",), seed=0, examples=5, strict=False, baseline=frozenset(), report_dir=None, timeout=1.0)
    run.finished_at = run.started_at
    search, get, capture = "engram_memory_search", "engram_memory_get", "engram_memory_capture"
    run.served = {tool: tool in (search, get) for tool in load_tools()}
    run.served_how = {tool: "listed to agent-full in acme/research" if served else "not served: answered -32602"
                      for tool, served in run.served.items()}
    run.results += [
        Result("search.cursor-out-of-bounds", ("EMC-SRCH-010",), "legacy", Status.PASS, "n", 0.1, case="empty",
               tools=(search,)),
        Result("get.record-id", ("EMC-GET-002",), "legacy", Status.SKIP, "n", 0.0,
               f"needs {capture}, which the target does not serve", tools=(capture, get), missing=(capture,)),
    ]
    write_reports(run, directory / "report")
    return directory / "report" / "report.html"


def load_tools() -> list[str]:
    from engram_mcp.contract import load

    return list(load().tools)


def test_the_tools_table_says_what_the_target_serves(browser: WebDriver, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    page = two_tool_run(tmp_path)
    _open(browser, page)
    table = browser.find_element(By.CSS_SELECTOR, "table.tools")
    assert table.is_displayed()
    rows = {row.find_element(By.CSS_SELECTOR, "td.id").text: row for row in table.find_elements(By.CSS_SELECTOR,
                                                                                                   "tr[data-tool]")}
    assert list(rows) == load_tools()
    assert [rows[t].find_element(By.CSS_SELECTOR, "td.st").text for t in load_tools()] == \
        ["served", "served", "not served", "not served", "not served", "not served"]
    said = browser.find_element(By.CSS_SELECTOR, "p.tools-summary").text
    assert "does not serve capture, request_admission, withdraw and forget" in said
    keep = os.environ.get("ENGRAM_REPORT_SCREENSHOT")
    shot = Path(keep) if keep else page.parent
    shot.mkdir(parents=True, exist_ok=True)
    assert browser.save_screenshot(str(shot / "tools-table.png"))
