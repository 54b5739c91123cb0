"""The auditor's page in a real browser: Playwright driving Chromium (Debian's `chromium`; where
Playwright's own browser download is unreachable, as here, it is launched by its path).

Skipped, saying why, only where no Chromium is installed; `.ci/run` sets WARDEN_REQUIRE_BROWSER
when it installed one, and then a missing piece fails instead of skipping.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from .world import TOKENS, XSS

CANDIDATES = ("chromium", "chromium-browser", "google-chrome")


def _chromium() -> str | None:
    given = os.environ.get("WARDEN_CHROMIUM")
    if given:
        return given
    for name in CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


def _unavailable(reason: str) -> None:
    if os.environ.get("WARDEN_REQUIRE_BROWSER"):
        pytest.fail(f"WARDEN_REQUIRE_BROWSER is set but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser() -> Iterator:
    path = _chromium()
    if path is None:
        _unavailable("no Chromium installed (apt-get install chromium; or WARDEN_CHROMIUM=PATH)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("the playwright package is not installed (pip install -e '.[dev]')")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=path, headless=True)
        yield browser
        browser.close()


@pytest.fixture
def page(browser) -> Iterator:
    context = browser.new_context()
    page = context.new_page()
    page.set_default_timeout(20_000)
    problems: list[str] = []
    # a CSP the page itself breaks, or a script error, is a failure of the page
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(str(e)))
    yield page
    context.close()
    assert not [p for p in problems if "Content Security Policy" in p or "Error" in p], problems


def _login(page, web, who: str = "carol") -> None:
    page.goto(web.url + "/")
    page.fill("#token", TOKENS[who])
    page.click("#login-form button[type=submit]")
    page.wait_for_selector("#app:not([hidden])")


def _expect():
    from playwright.sync_api import expect

    expect.set_options(timeout=20_000)  # a loaded machine is slow; a wrong page never passes
    return expect


def test_an_auditor_logs_in_and_sees_the_stream_grow(page, world):
    expect = _expect()
    web, cp = world.web, world.checkpoint
    page.goto(web.url + "/")
    page.fill("#token", "not-a-token-at-all-0123")
    page.click("#login-form button[type=submit]")
    expect(page.locator("#login-error")).to_contain_text("not one the checkpoint knows")
    assert page.locator("#app").is_hidden()
    page.fill("#token", TOKENS["carol"])
    page.click("#login-form button[type=submit]")
    expect(page.locator("#who")).to_contain_text("carol")
    expect(page.locator("#stream-status")).to_have_text("live")
    rows = page.locator("#stream tbody tr")
    before = rows.count()
    assert before > 0 and page.locator("#stream tbody").get_by_text("list_templates").count() == 0
    run = cp.start_run("recon")
    resp = cp.call(run.run_token, "list_templates", {})
    seq = cp.server.service.log.head()[0]
    new_row = page.locator(f"#stream tbody tr[data-seq='{seq}']")
    expect(new_row).to_contain_text("list_templates")  # pushed to the page by the long poll
    assert resp.decision_id and rows.count() == before + 2  # the start_run and the call
    assert page.locator("#stream tbody tr").first.get_attribute("data-seq") == str(seq)  # newest first
    # another tenant's records never reach carol's page
    assert page.locator("#stream tbody").get_by_text("helpdesk").count() == 0


def test_filters_narrow_the_stream(page, shared_world):
    expect = _expect()
    _login(page, shared_world.web)
    page.select_option("#filters select[name=verdict]", "HALT")
    page.click("#filters button[type=submit]")
    rows = page.locator("#stream tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("breaker_tokens")
    page.click("#filters button[type=reset]")
    page.fill("#filters input[name=tool]", "create_task_from_template")
    page.click("#filters button[type=submit]")
    expect(rows).to_have_count(2)  # the call that asked for a person, and carol's approval of it
    expect(rows.nth(1)).to_contain_text("REQUIRE_APPROVAL")
    expect(rows.nth(0)).to_contain_text("approval")
    assert page.locator("#stream tbody").get_by_text("breaker_tokens").count() == 0


def test_a_hostile_argument_shows_as_text_and_never_runs(page, shared_world):
    expect = _expect()
    _login(page, shared_world.web)
    cell = page.locator("#stream td.args", has_text="<script>window.__pwned=1</script>")
    expect(cell).to_have_count(1)
    assert cell.text_content() == json.dumps({"task_id": XSS}, separators=(",", ":"))  # the very characters
    assert page.evaluate("window.__pwned") is None
    assert page.locator("#stream script, #stream img").count() == 0


def test_a_runs_timeline_shows_its_delegation_tree_trips_and_approvals(page, shared_world):
    expect = _expect()
    story = shared_world.story
    _login(page, shared_world.web)
    page.click("nav button[data-tab=runs]")
    page.locator("#runs .run-link", has_text=story.parent).click()
    expect(page.locator("#run-title")).to_contain_text(story.parent)
    child = page.locator(f"#run-tree li[data-run='{story.parent}'] > ul > li[data-run='{story.child}']")
    expect(child).to_contain_text("triage")
    expect(child).to_contain_text("1 breaker trip")
    expect(page.locator("#run-approvals li")).to_have_count(2)
    expect(page.locator("#run-approvals")).to_contain_text("by carol")
    expect(page.locator("#run-breakers")).to_contain_text("none")
    child.locator("button.link").first.click()
    expect(page.locator("#run-title")).to_contain_text(f"{story.child} (tree of {story.parent})")
    expect(page.locator("#run-breakers li")).to_have_count(1)
    expect(page.locator("#run-breakers")).to_contain_text("breaker_tokens")
    expect(page.locator("#run-timeline li.trip")).to_have_count(1)
    # a run of another tenant is not there for carol
    page.fill("#run-id", story.globex_run)
    page.click("#run-form button[type=submit]")
    expect(page.locator("#run-error")).to_have_text("No such run.")


def test_the_chain_status_turns_broken_when_the_log_is_tampered_with(page, world):
    expect = _expect()
    _login(page, world.web)
    page.click("nav button[data-tab=chain]")
    expect(page.locator("#chain-status")).to_contain_text("WHOLE")
    expect(page.locator("#chain-badge")).to_have_text("chain whole")
    with sqlite3.connect(world.checkpoint.log_path) as db:
        db.execute("UPDATE decisions SET verdict = 'ALLOW' WHERE code = 'breaker_tokens'")
    seq = sqlite3.connect(world.checkpoint.log_path).execute(
        "SELECT seq FROM decisions WHERE code = 'breaker_tokens'").fetchone()[0]
    # no reload: the page checks again by itself
    expect(page.locator("#chain-status")).to_contain_text(f"BROKEN at seq {seq}: hash_mismatch")
    expect(page.locator("#chain-badge")).to_have_text("chain BROKEN")


def test_the_agent_versions_chart(page, shared_world, tmp_path: Path):
    expect = _expect()
    _login(page, shared_world.web)
    page.click("nav button[data-tab=agents]")
    bars = page.locator("#chart svg rect.bar")
    expect(bars).to_have_count(2)
    recon = page.locator("#chart rect.bar[data-agent=recon]")
    assert (recon.get_attribute("data-kind"), recon.get_attribute("data-count")) == ("succeeded", "1")
    triage = page.locator("#chart rect.bar[data-agent=triage]")
    assert (triage.get_attribute("data-kind"), triage.get_attribute("data-count")) == ("open", "1")
    expect(page.locator("#chart svg")).to_contain_text("1 breaker trips")
    expect(page.locator("#stats tbody tr")).to_have_count(2)
    assert page.locator("#chart").get_by_text("helpdesk").count() == 0  # globex's agent
    page.screenshot(path=str(tmp_path / "agents.png"), full_page=True)  # for a person to look at


def test_a_token_refused_mid_session_sends_the_auditor_back_to_log_in(page, world):
    expect = _expect()
    _login(page, world.web)
    world.tokens.write_text("".join(f"{n} {t}\n" for n, t in TOKENS.items() if n != "carol"))
    # the page's next request (the chain's check, the stream's poll) is refused: back to the login
    expect(page.locator("#login")).to_be_visible()
    expect(page.locator("#login-error")).to_contain_text("no longer accepted")


def test_refused_calls_are_marked_in_text_and_listed_at_a_runs_top(page, shared_world):
    expect = _expect()
    story = shared_world.story
    _login(page, shared_world.web)
    halt = page.locator("#stream tbody tr", has=page.locator(".verdict-HALT"))
    expect(halt).to_have_count(1)
    expect(halt).to_contain_text("breaker_tokens")
    # not by colour alone: the row says so in words a screen reader reads out
    expect(halt.locator(".refused-mark")).to_have_text("✖ refused: ")
    assert "refused" in (halt.get_attribute("class") or "")
    allowed = page.locator("#stream tbody tr", has_text="list_templates").or_(
        page.locator("#stream tbody tr", has_text="task-1"))
    assert allowed.first.locator(".refused-mark").count() == 0
    marked = page.locator("#stream tbody tr.refused")
    assert marked.count() == page.locator("#stream tbody tr", has=page.locator(".verdict-DENY, .verdict-HALT")).count()
    page.click("nav button[data-tab=run]")
    page.fill("#run-id", story.child)
    page.click("#run-form button[type=submit]")
    expect(page.locator("#run-refusals li")).to_have_count(1)
    expect(page.locator("#run-refusals li")).to_contain_text("refused: ")
    expect(page.locator("#run-refusals li")).to_contain_text("HALT · breaker_tokens")
    # the refusals come before the tree and the timeline
    order = page.evaluate("""() => [...document.querySelectorAll('#run-view h3')].map(h => h.textContent)""")
    assert order[0].startswith("Refusals"), order


def test_the_runs_tab_shows_status_counts_and_filters(page, shared_world):
    expect = _expect()
    story = shared_world.story
    _login(page, shared_world.web)
    page.click("nav button[data-tab=runs]")
    row = page.locator(f"#runs tbody tr[data-run='{story.parent}']")
    expect(row.locator(".run-status")).to_have_text("succeeded")
    records = shared_world.web.json(f"/api/decisions?run={story.parent}&limit=1000")["records"]
    expect(row.locator(".run-decisions")).to_have_text(str(len(records)))
    denied = sum(r["verdict"] == "DENY" for r in records)
    expect(row.locator(".run-denied")).to_contain_text(str(denied))
    page.select_option("#runs-filter select[name=status]", "failed")
    page.click("#runs-filter button[type=submit]")
    expect(page.locator("#runs tbody tr")).to_have_count(0)
    expect(page.locator("#runs-count")).to_have_text("0")
    page.click("#runs-filter button[type=reset]")
    expect(page.locator("#runs tbody tr")).to_have_count(1)
    page.fill("#runs-filter input[name=since]", "2999-01-01")
    page.click("#runs-filter button[type=submit]")
    expect(page.locator("#runs tbody tr")).to_have_count(0)
    page.fill("#runs-filter input[name=since]", "last tuesday")
    page.click("#runs-filter button[type=submit]")
    expect(page.locator("#runs-error")).to_contain_text("since")


def test_the_decisions_since_and_until_inputs(page, shared_world):
    expect = _expect()
    _login(page, shared_world.web)
    rows = page.locator("#stream tbody tr")
    expect(page.locator("#stream-status")).to_have_text("live")
    every = rows.count()
    page.fill("#filters input[name=since]", "2999-01-01")
    page.click("#filters button[type=submit]")
    expect(rows).to_have_count(0)
    page.fill("#filters input[name=since]", "")
    page.fill("#filters input[name=until]", "2999-01-01")
    page.click("#filters button[type=submit]")
    expect(rows).to_have_count(every)
    page.fill("#filters input[name=until]", "2000-01-01")
    page.click("#filters button[type=submit]")
    expect(rows).to_have_count(0)
    page.fill("#filters input[name=until]", "soonish")
    page.click("#filters button[type=submit]")
    expect(page.locator("#stream-status")).to_contain_text("until")
