"""The operator's console in a real browser (Debian's Chromium, driven by Playwright), served by
the local host, over real orders in Azurite."""

from __future__ import annotations

import json
import os
import re
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlparse
from zoneinfo import ZoneInfo

import httpx
import pytest
from playwright.sync_api import Browser, Locator, Page, Request, Route, expect, sync_playwright

from shared.domain.state import ProcessState, due_at
from shared.handlers.operator_requests import RedriveRequest, ResubmitRefused
from shared.handlers.principal import CANCEL_ROLE, PAUSE_ROLE, READ_ROLE, RESUBMIT_ROLE
from tests.integration.conftest import RunningHost
from tests.integration.helpers import drain_json, function, sb_message
from tests.integration.test_operator_api import (
    OPERATOR_OID,
    accept,
    compensation_failed,
    failed_and_compensated,
    requests_of,
    signed_in,
)
from tests.integration.test_scheduler import reply

CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
# Chromium as root, with nothing of its own reaching out to the network (this machine's network
# is closed; its background connections would only be refused).
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
CONSOLE = {"overview", "console", "get_order", "resubmit_order", "ack_alert", "list_orders",
           "resubmit_orders", "cancel_order", "cancel_orders", "list_pauses", "pause", "resume",
           "resume_order", "list_redrives", "start_redrive", "change_redrive"}


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    assert Path(CHROMIUM).exists(), f"{CHROMIUM} is missing: `make install` installs Chromium"
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        yield b
        b.close()


@pytest.fixture
def h(run_host: Any) -> RunningHost:
    # Pending orders fall due after 1 s: an accepted order nobody takes soon is overdue.
    # The development principal (an operator with every role) stands in for the platform's
    # sign-in: no key anywhere.
    h: RunningHost = run_host(only=CONSOLE, PendingGraceSeconds="1",
                              OperatorDevelopmentRoles=",".join((READ_ROLE, RESUBMIT_ROLE,
                                                                 CANCEL_ROLE, PAUSE_ROLE)),
                              LOCALRUN_FUNCTION_KEY="fn-key", LOCALRUN_MASTER_KEY="master-key")
    failed_and_compensated(h, "f-1")
    compensation_failed(h, "f-2")
    h.container.scheduler.handle_command(accept("o-fresh"))  # in flight, due in the budget
    accept("o-late")  # nobody takes it
    function("intake")(msg=sb_message(b'{"order_id": "<b>x</b>"}',
                                      message_id="<i>bad</i>\u202eevil\u200b"))
    due = due_at(h.container.store.get_state("o-late"), timedelta(seconds=1))
    time.sleep(max(0.0, (due - datetime.now(UTC)).total_seconds()) + 0.2)  # a time, not a sync
    return h


def open_console(browser: Browser, h: RunningHost, headers: dict[str, str] | None = None,
                 timezone: str | None = None, locale: str | None = None,
                 ) -> tuple[Page, list[str]]:
    """The console in a fresh browser context; the list collects what it tried to fetch from
    anywhere but this app (aborted), and every error the browser logged (a script error, or
    something its Content-Security-Policy refused). ``headers``: an operator's principal on
    every request; ``timezone`` and ``locale``: the viewer's."""
    context = browser.new_context(viewport={"width": 1300, "height": 1000},
                                  extra_http_headers=headers, timezone_id=timezone,
                                  locale=locale)
    pg = context.new_page()
    foreign: list[str] = []
    pg.on("console", lambda m: foreign.append(f"console {m.type}: {m.text}")
          if m.type == "error" and "Failed to load resource" not in m.text else None)
    pg.on("pageerror", lambda e: foreign.append(f"script error: {e}"))

    def only_this_app(route: Any) -> None:
        if urlparse(route.request.url).netloc != f"127.0.0.1:{h.port}":
            foreign.append(route.request.url)
            route.abort()
        else:
            route.continue_()

    pg.route("**/*", only_this_app)
    pg.goto(f"http://127.0.0.1:{h.port}/api/console")
    return pg, foreign


@pytest.fixture
def page(browser: Browser, h: RunningHost) -> Iterator[Page]:
    pg, foreign = open_console(browser, h)
    expect(pg.get_by_test_id("refreshed")).to_contain_text("updated")
    yield pg
    pg.context.close()
    assert foreign == [], "the console fetched something from elsewhere, or logged an error"
    assert "code=" not in pg.url  # no key in the address, ever


def store_counts(h: RunningHost) -> Counter[str]:
    counts: Counter[str] = Counter()
    token = None
    while True:
        states, token = h.container.store.list_states(None, 1000, token)
        counts.update(s.process_state.value for s in states)
        if not token:
            return counts


def test_the_console_needs_no_key(h: RunningHost) -> None:
    """Issue 32: it was opened with ?code=<key>, which stayed in the address bar and history.
    The page holds no data; what it shows comes from the operator routes, by identity."""
    ok = httpx.get(f"http://127.0.0.1:{h.port}/api/console", timeout=10)
    assert ok.status_code == 200 and ok.headers["content-type"].startswith("text/html")
    assert "x-functions-key" not in ok.text and "code=" not in ok.text


def test_the_console_runs_no_inline_script(h: RunningHost) -> None:
    """Issue 32, item 5: the policy allowed inline script and set no base-uri or form-action.
    The page's script and styles are files the same function serves; the policy names only
    this app's own files, and a page that held inline script would not run it (the browser
    tests below would see the console stay at "loading", and the error it logs)."""
    base = f"http://127.0.0.1:{h.port}/api/console"
    page = httpx.get(base, timeout=10)
    policy = dict(d.strip().split(" ", 1) for d in
                  page.headers["content-security-policy"].split(";"))
    assert policy == {"default-src": "'none'", "script-src": "'self'", "style-src": "'self'",
                      "connect-src": "'self'", "img-src": "'self' data:", "base-uri": "'none'",
                      "form-action": "'none'", "frame-ancestors": "'none'"}
    assert "unsafe" not in page.headers["content-security-policy"]
    assert re.search(r"<script(?![^>]*\bsrc=)", page.text) is None  # every script is a file
    assert "<style" not in page.text and " style=" not in page.text
    assert re.search(r"\son\w+=", page.text) is None  # no inline event handler either
    for asset, kind in (("console.js", "text/javascript"), ("console.css", "text/css")):
        r = httpx.get(base, params={"asset": asset}, timeout=10)
        assert r.status_code == 200 and r.headers["content-type"].startswith(kind)
        assert r.headers["x-content-type-options"] == "nosniff"
        assert r.headers["content-security-policy"] == page.headers["content-security-policy"]
    # Only the console's own files: nothing else of the package is served by name.
    for other in ("console.html", "../functions/web.py", "console.js/", "x"):
        assert httpx.get(base, params={"asset": other}, timeout=10).status_code == 404


def test_without_an_identity_the_console_offers_the_platform_sign_in(
        browser: Browser, run_host: Any) -> None:
    h: RunningHost = run_host(only=CONSOLE)  # no development principal: as Azure, signed out
    pg, _ = open_console(browser, h)
    expect(pg.get_by_test_id("refreshed")).to_contain_text("sign in: this route needs an "
                                                           "operator identity")
    link = pg.get_by_test_id("sign-in")
    assert link.get_attribute("href") == (
        "/.auth/login/aad?post_login_redirect_uri=%2Fapi%2Fconsole")
    pg.context.close()


def test_a_reader_sees_why_they_cannot_resubmit(browser: Browser, h: RunningHost) -> None:
    pg, foreign = open_console(browser, h, signed_in(READ_ROLE))
    pg.goto(f"http://127.0.0.1:{h.port}/api/console#/orders/f-1")
    resubmit(pg, "card limit raised")
    expect(pg.get_by_test_id("resubmit-result")).to_contain_text(
        "Ada Operator lacks the app role 'Orders.Resubmit'")
    assert h.container.store.get_state("f-1").process_state is ProcessState.ERROR
    pg.context.close()
    assert foreign == []


def test_counts_match_the_store(page: Page, h: RunningHost) -> None:
    counts = store_counts(h)
    assert counts == {"Error": 2, "Processing": 1, "Pending": 1}
    for state in ProcessState:
        expect(page.get_by_test_id(f"by-state-{state.value}")).to_contain_text(
            str(counts[state.value]))
    expect(page.get_by_test_id("by-compensation-Failed")).to_contain_text("1")
    expect(page.get_by_test_id("by-compensation-Done")).to_contain_text("1")
    if os.environ.get("CONSOLE_SCREENSHOT"):  # the README's picture: see README, Console
        page.screenshot(path=os.environ["CONSOLE_SCREENSHOT"], full_page=True)


def test_an_overdue_order_is_highlighted_and_a_fresh_one_is_not(page: Page) -> None:
    late = page.get_by_test_id("in-flight").locator('tr[data-order="o-late"]')
    expect(late).to_have_class("overdue")
    expect(late).to_contain_text("overdue by")
    fresh = page.get_by_test_id("in-flight").locator('tr[data-order="o-fresh"]')
    expect(fresh).not_to_have_class("overdue")
    expect(fresh).to_contain_text("inventory")
    # The most overdue first.
    expect(page.get_by_test_id("in-flight").locator("tbody tr").first).to_have_attribute(
        "data-order", "o-late")


def test_failures_alerts_and_rejections_are_listed_as_text(page: Page) -> None:
    expect(page.get_by_test_id("failed")).to_contain_text("f-1")
    expect(page.get_by_test_id("failed")).to_contain_text("card declined")
    expect(page.get_by_test_id("compensation-failed")).to_contain_text("f-2")
    expect(page.get_by_test_id("alerts")).to_contain_text("OrderFailed")
    rejected = page.get_by_test_id("rejected")
    expect(rejected).to_contain_text("<i>bad</i>")  # shown as text, never as markup
    assert rejected.locator("i, b").count() == 0
    # A bidi override (it would reverse what follows) and a zero-width space: written out.
    expect(rejected).to_contain_text("<i>bad</i>\\u202eevil\\u200b")
    assert "\u202e" not in rejected.inner_text()


def test_the_overview_refreshes_by_itself(page: Page) -> None:
    expect(page.get_by_test_id("by-state-Pending")).to_contain_text("1")
    accept("o-new")
    expect(page.get_by_test_id("by-state-Pending")).to_contain_text("2", timeout=15_000)


def resubmit(page: Page, reason: str, force: bool = False) -> None:
    """Fill in the order page's resubmit form and send it."""
    form = page.get_by_test_id("resubmit")
    form.locator("textarea[name=reason]").fill(reason)
    if force:
        form.locator("input[name=force]").check()
    form.get_by_role("button", name="Resubmit").click()


def test_resubmit_from_the_order_page(page: Page, h: RunningHost) -> None:
    page.get_by_test_id("failed").get_by_role("link", name="f-1").click()
    expect(page.get_by_test_id("order")).to_contain_text("f-1")
    # The refused charge did nothing: left failed, not undone; the reservation before it was.
    steps = page.get_by_test_id("steps")
    expect(steps.locator('tr[data-step="charge_payment"]')).to_contain_text("failed")
    expect(steps.locator('tr[data-step="charge_payment"]')).not_to_contain_text("compensated")
    expect(steps.locator('tr[data-step="reserve_inventory"]')).to_contain_text("compensated")
    expect(page.locator('dd[data-field="last error"]')).to_contain_text("card declined")
    resubmit(page, "card limit raised")
    expect(page.get_by_test_id("resubmit-result")).to_contain_text("Resubmitted: now Pending")
    state = h.container.store.get_state("f-1")
    assert (state.process_state, state.generation) == (ProcessState.PENDING, 1)
    assert state.history[-1]["reason"] == "card limit raised"
    assert state.history[-1]["by"] == "local developer (oid development)"
    expect(page.get_by_test_id("history")).to_contain_text("card limit raised")
    expect(page.get_by_test_id("history")).to_contain_text("local developer (oid development)")


def test_a_signed_in_operator_is_named_in_the_history(browser: Browser, h: RunningHost) -> None:
    pg, _ = open_console(browser, h, signed_in(READ_ROLE, RESUBMIT_ROLE))
    pg.goto(f"http://127.0.0.1:{h.port}/api/console#/orders/f-1")
    resubmit(pg, "card limit raised")
    expect(pg.get_by_test_id("resubmit-result")).to_contain_text("Resubmitted")
    expect(pg.get_by_test_id("history")).to_contain_text(f"Ada Operator (oid {OPERATOR_OID})")
    pg.context.close()


def test_a_failed_compensation_needs_the_force_confirmation(page: Page, h: RunningHost) -> None:
    page.get_by_test_id("compensation-failed").get_by_role("link", name="f-2").click()
    resubmit(page, "refunded by hand")
    expect(page.get_by_test_id("resubmit-result")).to_contain_text("force")
    assert h.container.store.get_state("f-2").process_state is ProcessState.ERROR

    resubmit(page, "refunded by hand", force=True)
    expect(page.get_by_test_id("resubmit-result")).to_contain_text("Resubmitted")
    assert h.container.store.get_state("f-2").history[-1]["forced"] is True


def test_an_alert_is_acknowledged_from_the_console(page: Page, h: RunningHost) -> None:
    alerts = page.get_by_test_id("alerts")
    row = alerts.locator("tbody tr", has_text="f-1")
    expect(row).to_contain_text("OrderFailed")
    alert_id = row.get_attribute("data-alert")
    row.get_by_role("button", name="Acknowledge").click()
    expect(page.get_by_test_id("ack-result")).to_contain_text(
        "acknowledged by local developer (oid development)")
    # Listed apart, with who and when; no longer among the open ones.
    acked = page.get_by_test_id("acknowledged").locator(f'tr[data-alert="{alert_id}"]')
    expect(acked).to_contain_text("local developer (oid development)")
    expect(page.get_by_test_id("alerts").locator(f'tr[data-alert="{alert_id}"]')).to_have_count(0)
    views = h.container.operator.alerts(50, acknowledged=True).alerts
    assert [v.AlertId for v in views] == [alert_id]


def test_a_reader_is_told_why_they_cannot_acknowledge(browser: Browser, h: RunningHost) -> None:
    pg, foreign = open_console(browser, h, signed_in(READ_ROLE))
    pg.get_by_test_id("alerts").get_by_role("button", name="Acknowledge").first.click()
    expect(pg.get_by_test_id("ack-result")).to_contain_text(
        "lacks the app role 'Orders.Resubmit'")
    assert h.container.operator.alerts(50, acknowledged=True).alerts == []
    pg.context.close()
    assert foreign == []


def focused(page: Page) -> str:
    """What has the keyboard: its test id, id, name, order or text."""
    return str(page.evaluate("""() => { const e = document.activeElement;
        return e.dataset.testid || e.id || e.name || e.dataset.order || e.textContent; }"""))


def test_the_keyboard_path_search_open_and_close(page: Page, h: RunningHost) -> None:
    """Issue 33, item 4: every console feature by keyboard alone. Tab goes through the header
    in reading order; Enter searches and opens; Escape closes, and the keyboard lands where
    the operator left it."""
    page.locator("body").focus()
    seen = []
    for _ in range(5):
        page.keyboard.press("Tab")
        seen.append(focused(page))
    assert seen == ["search-q", "state", "Search", "live", "home"]
    page.locator("#search-q").focus()
    page.keyboard.type("f-1")
    page.keyboard.press("Enter")
    results = page.get_by_test_id("search-results")
    expect(results.locator("tbody tr")).to_have_count(1)
    expect(results.get_by_role("link", name="f-1")).to_be_focused()
    page.keyboard.press("Enter")  # opens it
    expect(page.get_by_test_id("order")).to_contain_text("f-1")
    expect(page.locator("#order-heading")).to_be_focused()
    page.keyboard.press("Escape")  # back to the results, on the order it opened
    expect(results.get_by_role("link", name="f-1")).to_be_focused()
    page.keyboard.press("Escape")  # and to the overview
    expect(page.get_by_test_id("by-state")).to_be_visible()
    assert "#/search" not in page.url
    # Escape in the resubmit form's text leaves the field first: nothing typed is lost.
    page.goto(f"http://127.0.0.1:{h.port}/api/console#/orders/f-1")
    page.locator("textarea[name=reason]").fill("half a sentence")
    page.locator("textarea[name=reason]").focus()
    page.keyboard.press("Escape")
    expect(page.get_by_test_id("order")).to_be_visible()
    assert page.locator("textarea[name=reason]").input_value() == "half a sentence"


def test_search_by_customer_by_state_and_by_the_start_of_an_id(page: Page) -> None:
    search = page.get_by_test_id("search")
    results = page.get_by_test_id("search-results")

    def ids() -> set[str]:
        expect(results).to_be_visible()
        return {r.get_attribute("data-order") or "" for r in results.locator("tbody tr").all()}

    search.locator("select[name=state]").select_option("Error")
    search.locator("input[name=q]").fill("c-1")  # the test orders' customer
    search.get_by_role("button", name="Search").click()
    expect(results.locator("tbody tr")).to_have_count(2)
    assert ids() == {"f-1", "f-2"}
    search.locator("input[name=q]").fill("")
    search.locator("select[name=state]").select_option("Processing")
    search.get_by_role("button", name="Search").click()
    expect(results.locator("tbody tr")).to_have_count(1)
    assert ids() == {"o-fresh"}
    search.locator("select[name=state]").select_option("")
    search.locator("input[name=q]").fill("o-")
    search.get_by_role("button", name="Search").click()
    expect(results.locator("tbody tr")).to_have_count(2)
    assert ids() == {"o-fresh", "o-late"}
    search.locator("input[name=q]").fill("nobody")
    search.get_by_role("button", name="Search").click()
    expect(results).to_have_text("none")
    expect(page.locator("p.more")).to_have_count(0)  # everything that matched was shown


def test_an_overview_whose_alert_scan_stopped_says_so(page: Page) -> None:
    expect(page.get_by_test_id("alerts")).to_be_visible()
    expect(page.locator("p.more")).to_have_count(0)  # the fixture's few alerts: all read

    def cut(route: Route) -> None:
        answer = route.fetch()
        route.fulfill(response=answer, json={**answer.json(), "AlertsComplete": False})
    page.route("**/api/overview", cut)
    page.reload()
    expect(page.locator("p.more")).to_have_text(
        "The newest 2,000 alerts of the last 7 days were read: older ones, open ones among "
        "them, are not shown.")


def test_a_search_that_found_more_than_it_shows_says_so(page: Page) -> None:
    """The search by customer has one page: past its cap the API says truncated, and the
    console says more match rather than pass the rows for all there are."""
    def capped(route: Route) -> None:
        if "customer=" not in route.request.url:
            route.continue_()
            return
        answer = route.fetch()
        route.fulfill(response=answer, json={**answer.json(), "truncated": True})
    page.route("**/api/orders?*", capped)
    search = page.get_by_test_id("search")
    search.locator("input[name=q]").fill("c-1")
    search.get_by_role("button", name="Search").click()
    expect(page.get_by_test_id("search-results").locator("tbody tr")).to_have_count(4)
    expect(page.locator("p.more")).to_have_text(
        "More orders may match than are shown here: the search shows the first 50 it finds.")


def test_times_are_the_viewers_with_utc_on_hover(browser: Browser, h: RunningHost) -> None:
    pg, foreign = open_console(browser, h, timezone="Asia/Tokyo", locale="en-GB")
    pg.goto(f"http://127.0.0.1:{h.port}/api/console#/orders/f-1")
    updated = h.container.store.get_state("f-1").updated_at
    shown = pg.locator('dd[data-field="updated"] time')
    tokyo = updated.astimezone(ZoneInfo("Asia/Tokyo"))
    expect(shown).to_have_text(tokyo.strftime("%d/%m/%Y, %H:%M:%S"))
    expect(shown).to_have_attribute("title", updated.astimezone(UTC).strftime(
        "%Y-%m-%d %H:%M:%S UTC"))
    expect(pg.get_by_test_id("zone")).to_have_text("times in Asia/Tokyo (UTC on hover)")
    pg.context.close()
    assert foreign == []


# -- bulk resubmit (issue 33, item 4) -------------------------------------------------------------

def outcomes(page: Page) -> dict[str, str]:
    """What the bulk page's table says of each order: its outcome and why."""
    rows = page.get_by_test_id("bulk-items").locator("tbody tr")
    return {r.get_attribute("data-order") or "": r.locator("td").nth(3).inner_text() + ": "
            + r.locator("td").nth(4).inner_text() for r in rows.all()}


def test_bulk_resubmit_a_dry_run_then_confirm(page: Page, h: RunningHost) -> None:
    """From the failed orders: filters, a dry run showing what each order would come to and
    changing nothing, then a confirmation that resubmits them as the signed-in operator."""
    page.get_by_test_id("bulk-open").click()
    form = page.get_by_test_id("bulk-form")
    expect(page.locator("#bulk-heading")).to_be_focused()
    # The failed steps the overview showed are offered.
    steps = form.locator("datalist option")
    assert {o.get_attribute("value") for o in steps.all()} == {"charge_payment",
                                                               "arrange_shipping"}
    form.locator("textarea[name=reason]").fill("outage over")
    form.get_by_role("button", name="Dry run").click()
    plan = page.get_by_test_id("bulk-plan")
    expect(plan).to_contain_text("Dry run: 1 would be resubmitted, 0 refused")
    expect(page.get_by_test_id("bulk-items").locator("tbody tr")).to_have_count(1)
    assert "would resubmit" in outcomes(page)["f-1"]
    # f-2's compensation failed: not picked without the force confirmation, and said.
    expect(page.get_by_test_id("bulk-skipped")).to_contain_text(
        "1 more failed order matches that a resubmit would refuse")
    expect(plan).not_to_contain_text("null")  # nothing missing drawn as a word
    assert [h.container.store.get_state(o).generation for o in ("f-1", "f-2")] == [0, 0]
    # A filter changed after the dry run drops it: nothing to confirm until it runs again.
    form.locator("input[name=failed_step]").fill("arrange_shipping")
    expect(page.get_by_test_id("bulk-confirm")).to_have_count(0)
    form.get_by_role("button", name="Dry run").click()
    expect(plan).to_contain_text("Dry run: 0 would be resubmitted, 0 refused")
    expect(page.get_by_test_id("bulk-confirm")).to_have_count(0)  # nothing it could do
    form.locator("input[name=force]").check()
    form.get_by_role("button", name="Dry run").click()
    expect(plan).to_contain_text("Dry run: 1 would be resubmitted, 0 refused")
    assert "would resubmit" in outcomes(page)["f-2"]
    form.locator("input[name=force]").uncheck()
    form.locator("input[name=failed_step]").fill("")
    # A time after every failure picks none (the viewer's own time, sent as UTC).
    form.locator("input[name=since]").fill(
        (datetime.now() + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M"))
    form.get_by_role("button", name="Dry run").click()
    expect(page.get_by_test_id("bulk-items")).to_have_text("none")
    form.locator("input[name=since]").fill(
        (datetime.now() - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M"))
    form.get_by_role("button", name="Dry run").click()
    expect(plan).to_contain_text("Dry run: 1 would be resubmitted, 0 refused")
    page.get_by_test_id("bulk-confirm").click()
    expect(page.get_by_test_id("bulk-result")).to_have_text("Resubmitted 1, refused 0")
    assert "resubmitted" in outcomes(page)["f-1"]
    f1, f2 = (h.container.store.get_state(o) for o in ("f-1", "f-2"))
    assert (f1.process_state, f1.generation) == (ProcessState.PENDING, 1)
    assert f1.history[-1]["by"] == "local developer (oid development)"
    assert f1.history[-1]["reason"] == "outage over"
    assert (f2.process_state, f2.generation) == (ProcessState.ERROR, 0)


def test_bulk_resubmit_confirms_only_what_the_dry_run_showed(page: Page, h: RunningHost) -> None:
    """An order failing between the dry run and the confirmation is not swept in with it."""
    page.goto(f"http://127.0.0.1:{h.port}/api/console#/resubmit")
    form = page.get_by_test_id("bulk-form")
    form.get_by_role("button", name="Dry run").click()
    expect(page.get_by_test_id("bulk-plan")).to_contain_text("1 would be resubmitted")
    drain_json(h.env["InventoryRequestsQueueName"])  # o-fresh's request: not f-3's
    failed_and_compensated(h, "f-3")  # fails after the operator looked
    page.get_by_test_id("bulk-confirm").click()
    expect(page.get_by_test_id("bulk-result")).to_have_text("Resubmitted 1, refused 0")
    assert set(outcomes(page)) == {"f-1"}
    assert h.container.store.get_state("f-3").generation == 0


def test_a_reader_is_told_why_they_cannot_bulk_resubmit(browser: Browser, h: RunningHost) -> None:
    pg, foreign = open_console(browser, h, signed_in(READ_ROLE))
    pg.goto(f"http://127.0.0.1:{h.port}/api/console#/resubmit")
    pg.get_by_test_id("bulk-form").get_by_role("button", name="Dry run").click()
    expect(pg.get_by_test_id("bulk-result")).to_contain_text(
        "Ada Operator lacks the app role 'Orders.Resubmit'")
    expect(pg.get_by_test_id("bulk-confirm")).to_have_count(0)
    assert h.container.store.get_state("f-1").generation == 0
    pg.context.close()
    assert foreign == []


def test_the_keyboard_path_of_bulk_resubmit(page: Page, h: RunningHost) -> None:
    """By keyboard alone: the page's fields in reading order, Enter runs the dry run and lands
    on what it found, Tab reaches the confirmation, Enter resubmits and lands on the outcome,
    Escape goes back to the overview."""
    page.get_by_test_id("bulk-open").focus()
    page.keyboard.press("Enter")
    expect(page.locator("#bulk-heading")).to_be_focused()
    seen: list[str] = []
    for _ in range(30):  # a date and time field is several stops (day, month, year, ...)
        page.keyboard.press("Tab")
        if not seen or seen[-1] != focused(page):
            seen.append(focused(page))
        if seen[-1] == "bulk-dry-run":
            break
    assert seen == ["since", "until", "failed_step", "limit", "reason", "force", "bulk-dry-run"]
    page.locator("input[name=failed_step]").focus()
    page.keyboard.type("charge_payment")
    page.keyboard.press("Escape")  # text in the field: Escape only leaves it
    expect(page.get_by_test_id("bulk")).to_be_visible()
    page.locator("input[name=failed_step]").focus()
    page.keyboard.press("Enter")  # the dry run
    expect(page.locator("#bulk-plan-heading")).to_be_focused()
    expect(page.locator("#bulk-plan-heading")).to_have_text(
        "Dry run: 1 would be resubmitted, 0 refused (nothing was changed)")
    assert h.container.store.get_state("f-1").generation == 0
    for _ in range(4):  # past the order's link to the confirmation
        page.keyboard.press("Tab")
        if focused(page) == "bulk-confirm":
            break
    assert focused(page) == "bulk-confirm"
    page.keyboard.press("Enter")
    expect(page.locator("#bulk-done-heading")).to_be_focused()
    expect(page.locator("#bulk-done-heading")).to_have_text("Resubmitted 1, refused 0")
    assert h.container.store.get_state("f-1").generation == 1
    page.keyboard.press("Escape")
    expect(page.get_by_test_id("by-state")).to_be_visible()
    assert "#/resubmit" not in page.url


# -- cancel (issue 44) ----------------------------------------------------------------------------

def posts(page: Page) -> list[Request]:
    """Every POST the page sends from now on."""
    sent: list[Request] = []
    page.on("request", lambda r: sent.append(r) if r.method == "POST" else None)
    return sent


def open_cancel(page: Page, h: RunningHost, order_id: str) -> None:
    """The order's page, its cancel form opened."""
    page.goto(f"http://127.0.0.1:{h.port}/api/console#/orders/{order_id}")
    expect(page.get_by_test_id("order")).to_contain_text(order_id)
    page.get_by_test_id("cancel").get_by_role("button", name="Cancel this order...").click()
    expect(page.get_by_test_id("cancel-form").locator("textarea[name=reason]")).to_be_focused()


ONLY_CANCELLABLE = "Only a Pending, Processing or Parked order can be cancelled."


def test_cancel_a_running_order_from_its_page(page: Page, h: RunningHost) -> None:
    page.get_by_test_id("in-flight").get_by_role("link", name="o-fresh").click()
    expect(page.locator('dd[data-field="state"]')).to_have_text("Processing")
    cancel = page.get_by_test_id("cancel")
    expect(cancel.get_by_test_id("cancel-form")).to_have_count(0)  # a button first
    cancel.get_by_role("button", name="Cancel this order...").click()
    cancel.locator("textarea[name=reason]").fill("customer withdrew <b>now</b>")
    with page.expect_request(lambda r: r.method == "POST") as sent:
        cancel.get_by_role("button", name="Cancel the order", exact=True).click()
    assert sent.value.url == f"http://127.0.0.1:{h.port}/api/orders/o-fresh/cancel"
    assert sent.value.post_data_json == {"reason": "customer withdrew <b>now</b>"}
    assert sent.value.all_headers()["origin"] == f"http://127.0.0.1:{h.port}"
    expect(page.get_by_test_id("cancel-result")).to_have_text(
        "Cancelled: now Cancelled, its work being undone (compensation Pending).")
    expect(page.locator('dd[data-field="state"]')).to_have_text("Cancelled")
    expect(page.locator('dd[data-field="compensation"]')).to_have_text("Pending")
    # The reason, as text, with who.
    expect(page.locator('dd[data-field="last error"]')).to_have_text(
        "cancelled by local developer (oid development): customer withdrew <b>now</b>")
    assert page.get_by_test_id("order").locator("b").count() == 0
    # Nothing more to cancel: no button, and why.
    expect(cancel.get_by_role("button")).to_have_count(0)
    expect(cancel).to_contain_text(ONLY_CANCELLABLE)
    state = h.container.store.get_state("o-fresh")
    assert (state.process_state, state.compensation.value) == (ProcessState.CANCELLED, "Pending")
    # Counted, and found by state, as the other states are; not a failure.
    page.locator("#home").click()
    card = page.get_by_test_id("by-state-Cancelled")
    expect(card).to_contain_text("1")
    expect(card).not_to_have_class(re.compile(r"\bbad\b"))
    expect(page.get_by_test_id("by-state-Error")).to_have_class(re.compile(r"\bbad\b"))
    search = page.get_by_test_id("search")
    search.locator("select[name=state]").select_option("Cancelled")
    search.get_by_role("button", name="Search").click()
    results = page.get_by_test_id("search-results")
    expect(results.locator("tbody tr")).to_have_count(1)
    expect(results.locator('tr[data-order="o-fresh"]')).to_contain_text("Cancelled")


def test_a_cancel_without_a_reason_is_refused_in_the_page(page: Page, h: RunningHost) -> None:
    open_cancel(page, h, "o-late")
    sent = posts(page)
    form = page.get_by_test_id("cancel-form")
    for reason in ("", "   "):
        form.locator("textarea[name=reason]").fill(reason)
        form.get_by_role("button", name="Cancel the order", exact=True).click()
        expect(page.get_by_test_id("cancel-result")).to_have_text(
            "Say why it is cancelled: a cancel needs a reason.")
        expect(page.get_by_test_id("cancel-result")).to_be_focused()
    assert sent == []
    assert h.container.store.get_state("o-late").process_state is ProcessState.PENDING
    form.locator("textarea[name=reason]").fill("duplicate")  # the form is still there
    form.get_by_role("button", name="Cancel the order", exact=True).click()
    expect(page.get_by_test_id("cancel-result")).to_contain_text("Cancelled: now Cancelled")
    assert [r.url for r in sent] == [f"http://127.0.0.1:{h.port}/api/orders/o-late/cancel"]


def processed(h: RunningHost, order_id: str, started: bool = False) -> None:
    """Drive one order (``started``: one already taken) through every step to Processed, by
    hand."""
    s = h.container.scheduler
    if not started:
        s.handle_command(accept(order_id))
    for step in range(len(h.container.workflow.steps)):
        s.handle_reply(reply(next(r for r in requests_of(h, step) if r["order_id"] == order_id)))
    assert h.container.store.get_state(order_id).process_state is ProcessState.PROCESSED


def test_a_finished_or_failed_order_offers_no_cancel(page: Page, h: RunningHost) -> None:
    processed(h, "p-1")
    for order_id, state in (("p-1", "Processed"), ("f-1", "Error")):
        page.goto(f"http://127.0.0.1:{h.port}/api/console#/orders/{order_id}")
        expect(page.locator('dd[data-field="state"]')).to_have_text(state)
        cancel = page.get_by_test_id("cancel")
        expect(cancel).to_contain_text(ONLY_CANCELLABLE)
        expect(cancel.get_by_role("button")).to_have_count(0)


def test_an_order_that_finished_meanwhile_is_refused_with_why(page: Page, h: RunningHost) -> None:
    """The page was drawn while it ran; the cancel is refused (409), saying why, as text."""
    open_cancel(page, h, "o-fresh")
    processed(h, "o-fresh", started=True)  # meanwhile
    form = page.get_by_test_id("cancel-form")
    form.locator("textarea[name=reason]").fill("too late")
    form.get_by_role("button", name="Cancel the order", exact=True).click()
    expect(page.get_by_test_id("cancel-result")).to_contain_text(
        "order o-fresh is Processed: a delivered order is not cancelled")
    expect(page.get_by_test_id("cancel-result")).to_have_class("error")
    expect(page.locator('dd[data-field="state"]')).to_have_text("Processed")


def test_a_resubmitter_is_told_why_they_cannot_cancel(browser: Browser, h: RunningHost) -> None:
    pg, foreign = open_console(browser, h, signed_in(READ_ROLE, RESUBMIT_ROLE))
    open_cancel(pg, h, "o-late")
    pg.get_by_test_id("cancel-form").locator("textarea[name=reason]").fill("duplicate")
    pg.get_by_role("button", name="Cancel the order", exact=True).click()
    expect(pg.get_by_test_id("cancel-result")).to_contain_text(
        "Ada Operator lacks the app role 'Orders.Cancel'")
    assert h.container.store.get_state("o-late").process_state is ProcessState.PENDING
    pg.context.close()
    assert foreign == []


def cancel_outcomes(page: Page) -> dict[str, str]:
    """What the bulk cancel page's table says of each order: its outcome."""
    rows = page.get_by_test_id("bulk-cancel-items").locator("tbody tr")
    return {r.get_attribute("data-order") or "": r.locator("td").nth(3).inner_text()
            for r in rows.all()}


def test_bulk_cancel_a_dry_run_then_confirm(page: Page, h: RunningHost) -> None:
    """From the orders in flight: filters, a reason (refused in the page without one), a dry
    run changing nothing, then a confirmation for what it showed, as the signed-in operator;
    an order received after the dry run is not swept in."""
    page.get_by_test_id("bulk-cancel-open").click()
    expect(page.locator("#bulk-cancel-heading")).to_be_focused()
    form = page.get_by_test_id("bulk-cancel-form")
    plan = page.get_by_test_id("bulk-cancel-plan")
    sent = posts(page)
    form.get_by_role("button", name="Dry run").click()
    expect(page.get_by_test_id("bulk-cancel-result")).to_have_text(
        "Say why they are cancelled: a cancel needs a reason.")
    assert sent == []
    form.locator("textarea[name=reason]").fill("supplier recall")
    form.get_by_role("button", name="Dry run").click()
    expect(plan).to_contain_text("Dry run: 2 would be cancelled, 0 refused (nothing was changed)")
    assert cancel_outcomes(page) == {"o-fresh": "would cancel", "o-late": "would cancel"}
    assert sent[-1].post_data_json == {"state": None, "prefix": None, "reason": "supplier recall",
                                       "limit": 50, "dry_run": True}
    assert store_counts(h)["Cancelled"] == 0
    # A filter changed after the dry run drops it.
    form.locator("select[name=state]").select_option("Pending")
    expect(page.get_by_test_id("bulk-cancel-confirm")).to_have_count(0)
    form.get_by_role("button", name="Dry run").click()
    expect(plan).to_contain_text("Dry run: 1 would be cancelled, 0 refused")
    assert set(cancel_outcomes(page)) == {"o-late"}
    form.locator("select[name=state]").select_option("")
    form.locator("input[name=prefix]").fill("nobody")
    form.get_by_role("button", name="Dry run").click()
    expect(page.get_by_test_id("bulk-cancel-items")).to_have_text("none")
    expect(page.get_by_test_id("bulk-cancel-confirm")).to_have_count(0)
    form.locator("input[name=prefix]").fill("o-")
    form.get_by_role("button", name="Dry run").click()
    expect(plan).to_contain_text("Dry run: 2 would be cancelled, 0 refused")
    accept("o-new")  # received after the operator looked
    page.get_by_test_id("bulk-cancel-confirm").click()
    expect(page.get_by_test_id("bulk-cancel-result")).to_have_text("Cancelled 2, refused 0")
    assert cancel_outcomes(page) == {"o-fresh": "cancelled", "o-late": "cancelled"}
    for order_id in ("o-fresh", "o-late"):
        state = h.container.store.get_state(order_id)
        assert state.process_state is ProcessState.CANCELLED
        assert state.last_error == ("cancelled by local developer (oid development): "
                                    "supplier recall")
    assert h.container.store.get_state("o-new").process_state is ProcessState.PENDING
    page.keyboard.press("Escape")
    expect(page.get_by_test_id("by-state-Cancelled")).to_contain_text("2")
    assert "#/cancel" not in page.url


# -- pauses ---------------------------------------------------------------------------------------

DEVELOPER = "local developer (oid development)"


def pause_row(page: Page, target: str) -> Locator:
    """The pauses panel's row of a service or workflow ("service:payment")."""
    return page.get_by_test_id("pauses-list").locator(f'tr[data-pause="{target}"]')


def open_pause(page: Page, target: str, action: str = "Pause") -> Locator:
    """The row's form opened (``action``: Pause or Resume); the reason has the keyboard."""
    pause_row(page, target).get_by_role("button", name=action).click()
    form = page.get_by_test_id("pause-form")
    expect(form).to_have_attribute("data-pause", target)
    expect(form.locator("textarea[name=reason]")).to_be_focused()
    return form


def paused_since(h: RunningHost, kind: str, name: str) -> str | None:
    """Who paused it, per the store (None: it runs)."""
    (view,) = [v for v in h.container.operator.pauses.list().Pauses
               if (v.Kind, v.Name) == (kind, name)]
    return view.By if view.Paused else None


def test_pause_and_resume_a_service_from_the_panel(page: Page, h: RunningHost) -> None:
    """Paused with a reason, as the signed-in operator: listed paused with who and since when,
    said at the top of the overview; resumed, it runs again and the banner is gone."""
    row = pause_row(page, "service:payment")
    expect(row.locator("td.state")).to_have_text("running")
    expect(page.get_by_test_id("paused-banner")).to_have_count(0)
    expect(page.locator("#main")).not_to_contain_text("null")  # no banner drawn as a word
    expect(page.get_by_test_id("pauses")).to_contain_text("Not the circuit breaker")
    form = open_pause(page, "service:payment")
    form.locator("textarea[name=reason]").fill("PSP incident <b>4711</b>")
    with page.expect_request(lambda r: r.method == "POST") as sent:
        form.get_by_role("button", name="Pause service payment").click()
    assert sent.value.url == f"http://127.0.0.1:{h.port}/api/pauses/service/payment"
    assert sent.value.post_data_json == {"reason": "PSP incident <b>4711</b>"}
    assert sent.value.all_headers()["content-type"] == "application/json"
    result = page.get_by_test_id("pause-result")
    expect(result).to_have_text(f"Paused service payment as {DEVELOPER}: its steps wait until "
                                "it is resumed.")
    expect(result).to_be_focused()
    assert paused_since(h, "service", "payment") == DEVELOPER
    (since,) = [v.Since for v in h.container.operator.pauses.list().Pauses if v.Paused]
    assert since is not None
    on_hover = since.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    # Listed paused, first, with who, since when and why (as text).
    expect(row.locator("td.state")).to_have_text("paused")
    expect(row).to_contain_text(DEVELOPER)
    expect(row).to_contain_text("PSP incident <b>4711</b>")
    expect(row.locator("time").first).to_have_attribute("title", on_hover)
    expect(page.get_by_test_id("pauses-list").locator("tbody tr").first).to_have_attribute(
        "data-pause", "service:payment")
    expect(page.get_by_test_id("pause-form")).to_have_count(0)
    # At the top of the overview: what is paused, by whom, since when, why.
    banner = page.get_by_test_id("paused-banner")
    expect(banner).to_contain_text("their orders wait, by design, until resumed")
    paused = banner.locator("tbody tr")
    expect(paused).to_have_count(1)
    expect(paused).to_have_attribute("data-pause", "service:payment")
    for text in ("service", "payment", DEVELOPER, "PSP incident <b>4711</b>"):
        expect(paused).to_contain_text(text)
    expect(paused.locator("time")).to_have_attribute("title", on_hover)
    assert page.get_by_test_id("pauses").locator("b").count() == 0
    assert banner.locator("b").count() == 0
    banner.get_by_test_id("pauses-go").click()
    expect(page.locator("#pauses-heading")).to_be_focused()
    # Resumed: runs again, its pause kept among the recent ones; nothing said paused any more.
    form = open_pause(page, "service:payment", "Resume")
    form.locator("textarea[name=reason]").fill("provider back")
    with page.expect_request(lambda r: r.method == "POST") as sent:
        form.get_by_role("button", name="Resume service payment").click()
    assert sent.value.url == f"http://127.0.0.1:{h.port}/api/pauses/service/payment/resume"
    assert sent.value.post_data_json == {"reason": "provider back"}
    expect(result).to_have_text("Resumed service payment: it runs again.")
    expect(row.locator("td.state")).to_have_text("running")
    expect(row).not_to_contain_text(DEVELOPER)
    expect(row.locator("td").nth(6).locator("time")).to_have_count(2)  # from ... to ...
    expect(page.get_by_test_id("paused-banner")).to_have_count(0)
    assert paused_since(h, "service", "payment") is None


def test_a_pause_without_a_reason_is_refused_in_the_page(page: Page, h: RunningHost) -> None:
    form = open_pause(page, "service:payment")
    sent = posts(page)
    for reason in ("", "   "):
        form.locator("textarea[name=reason]").fill(reason)
        form.get_by_role("button", name="Pause service payment").click()
        expect(page.get_by_test_id("pause-result")).to_have_text(
            "Say why service payment is paused: a pause needs a reason.")
        expect(page.get_by_test_id("pause-result")).to_have_class("error")
        expect(page.get_by_test_id("pause-result")).to_be_focused()
    assert sent == []
    assert paused_since(h, "service", "payment") is None
    expect(pause_row(page, "service:payment").locator("td.state")).to_have_text("running")
    form.locator("textarea[name=reason]").fill("maintenance")  # the form is still there
    form.get_by_role("button", name="Pause service payment").click()
    expect(page.get_by_test_id("pause-result")).to_contain_text("Paused service payment")
    assert [r.url for r in sent] == [f"http://127.0.0.1:{h.port}/api/pauses/service/payment"]


def test_a_reader_is_told_why_they_cannot_pause(browser: Browser, h: RunningHost) -> None:
    pg, foreign = open_console(browser, h, signed_in(READ_ROLE))
    form = open_pause(pg, "service:payment")
    form.locator("textarea[name=reason]").fill("PSP incident")
    form.get_by_role("button", name="Pause service payment").click()
    result = pg.get_by_test_id("pause-result")
    expect(result).to_contain_text("Ada Operator lacks the app role 'Orders.Pause'")
    expect(result).to_have_class("error")
    expect(pause_row(pg, "service:payment").locator("td.state")).to_have_text("running")
    expect(pg.get_by_test_id("paused-banner")).to_have_count(0)
    assert paused_since(h, "service", "payment") is None
    pg.context.close()
    assert foreign == []


def test_pausing_what_was_paused_meanwhile_is_refused_with_why(page: Page,
                                                                 h: RunningHost) -> None:
    """The form was opened while it ran; paused meanwhile (another operator, the CLI), the
    pause is refused (409), saying by whom and since when; a resume of what was resumed
    meanwhile, too."""
    form = open_pause(page, "service:payment")
    pauses = h.container.operator.pauses
    pauses.pause("service", "payment", "maintenance window", by="Grace Operator (oid g)")
    form.locator("textarea[name=reason]").fill("PSP incident")
    form.get_by_role("button", name="Pause service payment").click()
    result = page.get_by_test_id("pause-result")
    expect(result).to_contain_text(
        "service payment is paused already, by Grace Operator (oid g) since ")
    expect(result).to_have_class("error")
    # Drawn again: paused, by the one who did, and why.
    row = pause_row(page, "service:payment")
    expect(row.locator("td.state")).to_have_text("paused")
    expect(row).to_contain_text("Grace Operator (oid g)")
    expect(row).to_contain_text("maintenance window")
    expect(page.get_by_test_id("paused-banner")).to_contain_text("Grace Operator (oid g)")
    assert paused_since(h, "service", "payment") == "Grace Operator (oid g)"

    form = open_pause(page, "service:payment", "Resume")
    pauses.resume("service", "payment", "", by="Grace Operator (oid g)")  # meanwhile
    form.get_by_role("button", name="Resume service payment").click()
    expect(result).to_have_text("service payment is not paused")
    expect(row.locator("td.state")).to_have_text("running")
    expect(page.get_by_test_id("paused-banner")).to_have_count(0)


# -- parked orders --------------------------------------------------------------------------------

NEEDS = "the customer must confirm the payment"


def parked(h: RunningHost, order_id: str) -> dict[str, Any]:
    """Drive one order until its charge needs a person (its payment answered 402 with what is
    needed, as StepRetry.park has the Agent say), by hand; the charge's request returned."""
    s = h.container.scheduler
    s.handle_command(accept(order_id))

    def mine(step: int) -> dict[str, Any]:
        return next(r for r in requests_of(h, step) if r["order_id"] == order_id)

    s.handle_reply(reply(mine(0)))
    charge = mine(1)
    refused = json.loads(reply(charge, "permanent_error", "charge: HTTP 402 please confirm"))
    s.handle_reply(json.dumps({**refused, "needs": NEEDS}))
    assert h.container.store.get_state(order_id).process_state is ProcessState.PARKED
    return charge


def open_resume(page: Page, h: RunningHost, order_id: str) -> Locator:
    """The parked order's page, its resume form opened (a button first); the reason has the
    keyboard."""
    page.goto(f"http://127.0.0.1:{h.port}/api/console#/orders/{order_id}")
    expect(page.locator('dd[data-field="state"]')).to_have_text("Parked")
    form = page.get_by_test_id("resume-form")
    expect(form).to_have_count(0)
    page.get_by_test_id("resume").get_by_role("button", name="Resume this order...").click()
    expect(form.locator("textarea[name=reason]")).to_be_focused()
    return form


def test_a_parked_order_is_listed_and_resumed_from_its_page(page: Page, h: RunningHost) -> None:
    """Listed with its step, what is needed and since when; resumed from its page with a
    reason, as the signed-in operator: Pending, its charge asked again under the same key."""
    charge = parked(h, "p-1")
    expect(page.get_by_test_id("parked")).to_have_text("none")  # drawn before it was parked
    page.reload()
    rows = page.get_by_test_id("parked").locator("tbody tr")
    expect(rows).to_have_count(1)
    row = rows.first
    expect(row).to_have_attribute("data-order", "p-1")
    expect(row.locator("td").nth(1)).to_have_text("charge_payment")
    expect(row.locator("td").nth(2)).to_have_text(NEEDS)  # without the step's name before it
    since = h.container.store.get_state("p-1").updated_at
    expect(row.locator("time")).to_have_attribute(
        "title", since.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"))
    expect(page.get_by_test_id("by-state-Parked")).to_contain_text("1")
    # Not in flight, not failed: waiting for a person.
    for other in ("in-flight", "failed", "compensation-failed"):
        expect(page.get_by_test_id(other).locator('tr[data-order="p-1"]')).to_have_count(0)

    row.get_by_role("link", name="p-1").click()
    resume = page.get_by_test_id("resume")
    expect(resume.get_by_test_id("resume-needs")).to_have_text(
        f"charge_payment waits for a person: {NEEDS}")
    form = open_resume(page, h, "p-1")
    expect(form).to_contain_text("it goes on from charge_payment, the step that waited, asked "
                                 "again under the same key")
    form.locator("textarea[name=reason]").fill("customer confirmed <b>now</b>")
    with page.expect_request(lambda r: r.method == "POST") as sent:
        form.get_by_role("button", name="Resume the order", exact=True).click()
    assert sent.value.url == f"http://127.0.0.1:{h.port}/api/orders/p-1/resume"
    assert sent.value.post_data_json == {"reason": "customer confirmed <b>now</b>"}
    assert sent.value.all_headers()["content-type"] == "application/json"
    result = page.get_by_test_id("resume-result")
    expect(result).to_have_text(
        "Resumed: now Pending, charge_payment to be asked again under the same key.")
    expect(result).to_be_focused()
    expect(result).not_to_have_class("error")
    # Drawn again: Pending, nothing more to resume.
    expect(page.locator('dd[data-field="state"]')).to_have_text("Pending")
    expect(resume).to_contain_text("Only a Parked order can be resumed")
    expect(resume.get_by_role("button")).to_have_count(0)
    state = h.container.store.get_state("p-1")
    assert state.process_state is ProcessState.PENDING
    assert {"event": "note", "detail": "resumed: customer confirmed <b>now</b>",
            "by": DEVELOPER}.items() <= next(e for e in reversed(state.timeline)
                                             if e.get("event") == "note").items()
    # It goes on from the charge, under the same key.
    (start,) = [c for c in drain_json(h.env["SchedulerQueueName"]) if c["order_id"] == "p-1"]
    h.container.scheduler.handle_command(json.dumps(start))
    (asked,) = [r for r in requests_of(h, 1) if r["order_id"] == "p-1"]
    assert (asked["idempotency_key"], asked["attempt"]) == (charge["idempotency_key"], 2)
    page.keyboard.press("Escape")
    expect(page.get_by_test_id("parked")).to_have_text("none")


def test_a_reader_is_told_why_they_cannot_resume(browser: Browser, h: RunningHost) -> None:
    parked(h, "p-1")
    pg, foreign = open_console(browser, h, signed_in(READ_ROLE))
    form = open_resume(pg, h, "p-1")
    form.locator("textarea[name=reason]").fill("customer confirmed")
    form.get_by_role("button", name="Resume the order", exact=True).click()
    result = pg.get_by_test_id("resume-result")
    expect(result).to_contain_text("Ada Operator lacks the app role 'Orders.Resubmit'")
    expect(result).to_have_class("error")
    # Still parked, and still offered (to someone with the role).
    expect(pg.locator('dd[data-field="state"]')).to_have_text("Parked")
    expect(pg.get_by_test_id("resume").get_by_role("button", name="Resume this order...")
           ).to_be_visible()
    assert h.container.store.get_state("p-1").process_state is ProcessState.PARKED
    pg.context.close()
    assert foreign == []


def test_an_order_resumed_meanwhile_is_refused_with_why(page: Page, h: RunningHost) -> None:
    """The form was opened while it was parked; resumed meanwhile (another operator, the CLI),
    the resume is refused (409), saying why, and the page shows it Pending."""
    parked(h, "p-1")
    form = open_resume(page, h, "p-1")
    h.container.operator.resume("p-1", "customer called", by="Grace Operator (oid g)")
    form.get_by_role("button", name="Resume the order", exact=True).click()
    result = page.get_by_test_id("resume-result")
    expect(result).to_contain_text("order p-1 is Pending, not Parked")
    expect(result).to_have_class("error")
    expect(page.locator('dd[data-field="state"]')).to_have_text("Pending")
    expect(page.get_by_test_id("resume")).to_contain_text("Only a Parked order can be resumed")
    expect(page.get_by_test_id("resume").get_by_role("button")).to_have_count(0)


def test_a_parked_order_is_offered_cancel_too(page: Page, h: RunningHost) -> None:
    parked(h, "p-1")
    open_cancel(page, h, "p-1")
    expect(page.get_by_test_id("resume")).to_be_visible()  # alongside its resume
    form = page.get_by_test_id("cancel-form")
    form.locator("textarea[name=reason]").fill("customer never confirmed")
    form.get_by_role("button", name="Cancel the order", exact=True).click()
    expect(page.get_by_test_id("cancel-result")).to_have_text(
        "Cancelled: now Cancelled, its work being undone (compensation Pending).")
    expect(page.locator('dd[data-field="state"]')).to_have_text("Cancelled")
    expect(page.get_by_test_id("resume")).to_have_count(0)  # nothing to resume any more
    state = h.container.store.get_state("p-1")
    assert (state.process_state, state.compensation.value) == (ProcessState.CANCELLED, "Pending")


def test_parked_orders_are_cancelled_in_bulk_only_when_picked(page: Page,
                                                              h: RunningHost) -> None:
    """Bulk cancel sweeps running orders by default; parked ones, waiting for a person, only
    when the operator picks their state."""
    parked(h, "p-1")
    page.get_by_test_id("bulk-cancel-open").click()
    form = page.get_by_test_id("bulk-cancel-form")
    plan = page.get_by_test_id("bulk-cancel-plan")
    form.locator("textarea[name=reason]").fill("customer never confirmed")
    form.get_by_role("button", name="Dry run").click()
    expect(plan).to_contain_text("Dry run: 2 would be cancelled")
    assert "p-1" not in cancel_outcomes(page)
    form.locator("select[name=state]").select_option("Parked")
    form.get_by_role("button", name="Dry run").click()
    expect(plan).to_contain_text("Dry run: 1 would be cancelled, 0 refused")
    assert cancel_outcomes(page) == {"p-1": "would cancel"}
    page.get_by_test_id("bulk-cancel-confirm").click()
    expect(page.get_by_test_id("bulk-cancel-result")).to_have_text("Cancelled 1, refused 0")
    assert h.container.store.get_state("p-1").process_state is ProcessState.CANCELLED
    assert h.container.store.get_state("o-late").process_state is ProcessState.PENDING


def test_an_order_that_is_not_parked_offers_no_resume(page: Page, h: RunningHost) -> None:
    for order_id, state in (("o-late", "Pending"), ("f-1", "Error")):
        page.goto(f"http://127.0.0.1:{h.port}/api/console#/orders/{order_id}")
        expect(page.locator('dd[data-field="state"]')).to_have_text(state)
        expect(page.get_by_test_id("resume")).to_have_count(0)
        # Nothing drawn in its place (a missing section written out as "null"): sections only.
        assert page.locator("#main").evaluate(
            "m => [...m.childNodes].every(n => n.nodeName === 'SECTION')")


# -- re-drives ------------------------------------------------------------------------------------

GRACE = "Grace Operator (oid g)"
PREVIEWED = "(a preview: nothing was changed)"


def failed_beside_others(h: RunningHost, order_id: str) -> None:
    """Drive one order to Error and its undo done, by hand, among the fixture's orders in
    flight (their requests on the same queues, left as they are)."""
    s = h.container.scheduler
    s.handle_command(accept(order_id))

    def mine(step: int) -> dict[str, Any]:
        return next(r for r in requests_of(h, step) if r["order_id"] == order_id)

    first = mine(0)
    s.handle_reply(reply(first))
    s.handle_reply(reply(mine(1), "permanent_error", "HTTP 422 card declined"))
    undo = mine(0)
    assert (undo["action"], undo["compensates"]) == ("undo", first["idempotency_key"])
    s.handle_reply(reply(undo))
    state = h.container.store.get_state(order_id)
    assert state.process_state is ProcessState.ERROR and state.is_settled


def started(h: RunningHost, **ask: Any) -> str:
    """A re-drive of the orders that failed at the charge, started by another operator (or the
    CLI): its id."""
    return h.container.redrives.start(
        RedriveRequest(failed_step="charge_payment", reason="PSP back", **ask), GRACE).Id


def redrive_state(h: RunningHost, redrive_id: str) -> str:
    return h.container.redrives.get(redrive_id).State


def redrive_row(page: Page, redrive_id: str) -> Locator:
    """The re-drives panel's row of one."""
    return page.get_by_test_id("redrives-list").locator(f'tr[data-redrive="{redrive_id}"]')


def open_redrive(page: Page) -> Locator:
    """The panel's start form opened (a button first); the failed step has the keyboard."""
    page.get_by_test_id("redrives").get_by_role("button", name="Re-drive failed orders...").click()
    form = page.get_by_test_id("redrive-form")
    expect(form.locator("input[name=failed_step]")).to_be_focused()
    return form


def open_redrive_change(page: Page, redrive_id: str, action: str) -> Locator:
    """A row's Pause, Resume or Cancel form opened; the reason has the keyboard."""
    redrive_row(page, redrive_id).get_by_role(
        "button", name=f"{action} re-drive {redrive_id}...").click()
    form = page.get_by_test_id("redrive-change-form")
    expect(form).to_have_attribute("data-redrive", redrive_id)
    expect(form.locator("textarea[name=reason]")).to_be_focused()
    return form


def asked(**fields: Any) -> dict[str, Any]:
    """The body the start form sends: every filter, null when left empty."""
    return {"workflow": None, "failed_step": None, "error_text": None, "since": None,
            "until": None, "force": False, "rate": None, "reason": "", **fields}


def test_preview_a_redrive_from_the_panel(page: Page, h: RunningHost) -> None:
    """A dry run: how many of the failed orders it read it would pick, what, how fast, and the
    first few; nothing is started and no order changes."""
    page.get_by_test_id("redrives-go").click()  # from the failed orders to the panel
    expect(page.locator("#redrives-heading")).to_be_focused()
    expect(page.get_by_test_id("redrives-list")).to_have_text("none")
    form = open_redrive(page)
    # The failed steps the overview showed are offered, and the app's workflows.
    assert {o.get_attribute("value") for o in form.locator("#redrive-steps option").all()} == {
        "charge_payment", "arrange_shipping"}
    assert {o.get_attribute("value") for o in form.locator("#redrive-workflows option").all()
            } == set(h.container.workflows.names)
    form.locator("input[name=failed_step]").fill("charge_payment")
    with page.expect_request(lambda r: r.method == "POST") as sent:
        form.get_by_role("button", name="Preview", exact=True).click()
    assert sent.value.url == f"http://127.0.0.1:{h.port}/api/redrives"
    assert sent.value.post_data_json == asked(failed_step="charge_payment", dry_run=True)
    assert sent.value.all_headers()["content-type"] == "application/json"
    rate = h.container.redrives.preview(RedriveRequest(failed_step="charge_payment")).Rate
    answer = page.get_by_test_id("redrive-said")
    expect(answer).to_have_text("Would pick 1 of 2 failed orders read: failed at charge_payment, "
                                f"{rate:g} a second {PREVIEWED}")
    expect(answer).not_to_have_class("error")
    expect(answer).to_be_focused()
    sample = page.get_by_test_id("redrive-sample")
    expect(sample).to_have_text("e.g. f-1")
    expect(sample.get_by_role("link", name="f-1")).to_have_attribute("href", "#/orders/f-1")
    # A field changed drops the preview: it holds only for what it ran on.
    form.locator("input[name=failed_step]").fill("")
    expect(answer).to_have_count(0)
    # Compensation failures too (confirmed), by a part of the error, at a pace of its own.
    form.locator("input[name=error_text]").fill("http 422")
    form.locator("input[name=rate]").fill("2.5")
    form.locator("input[name=force]").check()
    form.locator("input[name=error_text]").press("Enter")  # Enter previews
    expect(answer).to_have_text("Would pick 2 of 2 failed orders read: error containing "
                                f"'http 422', compensation failures too, 2.5 a second {PREVIEWED}")
    expect(sample.get_by_role("link")).to_have_count(2)
    assert {a.inner_text() for a in sample.get_by_role("link").all()} == {"f-1", "f-2"}
    # Nothing started, nothing resubmitted.
    assert h.container.redrives.list().Redrives == []
    assert [h.container.store.get_state(o).generation for o in ("f-1", "f-2")] == [0, 0]
    expect(page.get_by_test_id("redrives-list")).to_have_text("none")


def test_start_a_redrive_and_watch_its_progress(page: Page, h: RunningHost) -> None:
    """Started with a reason, as the signed-in operator: listed running; once its runner has
    run, the page's own refresh shows it done, what it resubmitted and what it refused, why."""
    failed_beside_others(h, "f-3")
    page.reload()
    form = open_redrive(page)
    form.locator("input[name=failed_step]").fill("charge_payment")
    form.locator("input[name=rate]").fill("50")
    form.locator("textarea[name=reason]").fill("PSP back <b>4711</b>")
    with page.expect_request(lambda r: r.method == "POST") as sent:
        form.get_by_role("button", name="Start the re-drive").click()
    assert sent.value.post_data_json == asked(failed_step="charge_payment", rate=50,
                                              reason="PSP back <b>4711</b>", dry_run=False)
    result = page.get_by_test_id("redrive-result")
    expect(result).to_contain_text("Started re-drive rd-")
    (view,) = h.container.redrives.list().Redrives
    assert (view.State, view.By, view.Rate, view.Reason) == ("running", DEVELOPER, 50,
                                                             "PSP back <b>4711</b>")
    expect(result).to_have_text(f"Started re-drive {view.Id}: {view.Picks}, 50 a second. Its "
                                "progress shows in the list.")
    expect(result).to_be_focused()
    expect(page.get_by_test_id("redrive-form")).to_have_count(0)  # drawn again, the form gone
    row = redrive_row(page, view.Id)
    expect(row.locator(".state")).to_have_text("running")
    expect(row.locator("td.progress")).to_have_text(
        "0 resubmitted, 0 refused, 0 in hand, 0 failed orders read")
    for text in (view.Picks, "50 a second", DEVELOPER, "PSP back <b>4711</b>"):
        expect(row).to_contain_text(text)
    assert row.locator("b").count() == 0  # the reason as text
    expect(row.locator("time")).to_have_attribute(
        "title", view.Created.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"))
    expect(row.get_by_role("button", name=f"Pause re-drive {view.Id}...")).to_be_visible()
    expect(row.get_by_role("button", name=f"Cancel re-drive {view.Id}...")).to_be_visible()
    expect(row.get_by_role("button")).to_have_count(2)  # no resume of a running one

    resubmit = h.container.redriver.resubmit

    def changed_meanwhile(order_id: str, *rest: Any) -> object:
        if order_id == "f-3":  # another operator's change, met by the resubmit
            raise ResubmitRefused("order f-3 changed meanwhile; look again")
        return resubmit(order_id, *rest)

    h.container.redriver.resubmit = changed_meanwhile
    h.container.redriver.run(8)  # the timer's run, by hand
    # No reload: the overview's refresh every 5 s moves it on.
    expect(row.locator(".state")).to_have_text("done", timeout=15_000)
    expect(row.locator("td.progress")).to_have_text(
        "1 resubmitted, 1 refused, 0 in hand, 3 failed orders read")
    refusals = row.get_by_test_id("redrive-refusals").locator("li")
    expect(refusals).to_have_count(1)
    expect(refusals).to_have_attribute("data-order", "f-3")
    expect(refusals).to_contain_text("f-3: order f-3 changed meanwhile; look again")
    expect(row).to_contain_text("ended")
    expect(row.get_by_role("button")).to_have_count(0)  # nothing left to do to it
    f1 = h.container.store.get_state("f-1")
    assert (f1.process_state, f1.generation) == (ProcessState.PENDING, 1)
    assert (f1.history[-1]["by"], f1.history[-1]["reason"]) == (
        DEVELOPER, f"re-drive {view.Id}: PSP back <b>4711</b>")
    assert h.container.store.get_state("f-2").generation == 0  # its compensation failed


def test_pause_a_redrive_from_the_panel(page: Page, h: RunningHost) -> None:
    rid = started(h)
    page.reload()
    row = redrive_row(page, rid)
    expect(row.locator(".state")).to_have_text("running")
    expect(row).to_contain_text(GRACE)
    form = open_redrive_change(page, rid, "Pause")
    form.locator("textarea[name=reason]").fill("looking at the <i>PSP</i>")
    with page.expect_request(lambda r: r.method == "POST") as sent:
        form.get_by_role("button", name=f"Pause re-drive {rid}").click()
    assert sent.value.url == f"http://127.0.0.1:{h.port}/api/redrives/{rid}/pause"
    assert sent.value.post_data_json == {"reason": "looking at the <i>PSP</i>"}
    result = page.get_by_test_id("redrive-result")
    expect(result).to_have_text(f"Paused re-drive {rid} as {DEVELOPER}: it stops before its "
                                "next order until it is resumed.")
    expect(result).to_be_focused()
    expect(result).not_to_have_class("error")
    expect(row.locator(".state")).to_have_text("paused")
    expect(row.get_by_test_id("redrive-changed")).to_have_text(
        f"paused by {DEVELOPER}: looking at the <i>PSP</i>")
    assert row.locator("i").count() == 0
    expect(row.get_by_role("button", name=f"Resume re-drive {rid}...")).to_be_visible()
    expect(row.get_by_role("button", name=f"Cancel re-drive {rid}...")).to_be_visible()
    expect(row.get_by_role("button")).to_have_count(2)
    expect(page.get_by_test_id("redrive-change-form")).to_have_count(0)
    assert redrive_state(h, rid) == "paused"
    h.container.redriver.run(8)  # a paused one is left be
    assert h.container.store.get_state("f-1").generation == 0


def test_resume_a_redrive_from_the_panel(page: Page, h: RunningHost) -> None:
    rid = started(h, rate=5.0)
    h.container.redrives.pause(rid, "looking", GRACE)
    page.reload()
    row = redrive_row(page, rid)
    expect(row.locator(".state")).to_have_text("paused")
    expect(row.get_by_test_id("redrive-changed")).to_have_text(f"paused by {GRACE}: looking")
    form = open_redrive_change(page, rid, "Resume")
    with page.expect_request(lambda r: r.method == "POST") as sent:
        form.get_by_role("button", name=f"Resume re-drive {rid}").click()  # no reason: optional
    assert sent.value.url == f"http://127.0.0.1:{h.port}/api/redrives/{rid}/resume"
    assert sent.value.post_data_json == {"reason": ""}
    expect(page.get_by_test_id("redrive-result")).to_have_text(
        f"Resumed re-drive {rid}: it goes on, 5 a second.")
    expect(row.locator(".state")).to_have_text("running")
    expect(row.get_by_test_id("redrive-changed")).to_have_text(f"resumed by {DEVELOPER}")
    expect(row.get_by_role("button", name=f"Pause re-drive {rid}...")).to_be_visible()
    assert redrive_state(h, rid) == "running"
    h.container.redriver.run(8)  # it goes on
    page.reload()
    expect(row.locator(".state")).to_have_text("done")
    expect(row.locator("td.progress")).to_have_text(
        "1 resubmitted, 0 refused, 0 in hand, 2 failed orders read")
    assert h.container.store.get_state("f-1").generation == 1


def test_cancel_a_redrive_from_the_panel(page: Page, h: RunningHost) -> None:
    """A cancel needs a reason (refused in the page without one); cancelled, it ends: no order
    is resubmitted by it any more."""
    rid = started(h)
    page.reload()
    form = open_redrive_change(page, rid, "Cancel")
    sent = posts(page)
    for reason in ("", "   "):
        form.locator("textarea[name=reason]").fill(reason)
        form.get_by_role("button", name=f"Cancel re-drive {rid}").click()
        result = page.get_by_test_id("redrive-result")
        expect(result).to_have_text(f"Say why re-drive {rid} is cancelled: a cancel needs a "
                                    "reason.")
        expect(result).to_have_class("error")
        expect(result).to_be_focused()
    assert sent == []
    assert redrive_state(h, rid) == "running"
    form.locator("textarea[name=reason]").fill("wrong step")  # the form is still there
    form.get_by_role("button", name=f"Cancel re-drive {rid}").click()
    expect(result).to_have_text(f"Cancelled re-drive {rid}: the orders it resubmitted run on; "
                                "the rest stay failed.")
    assert [(r.url, r.post_data_json) for r in sent] == [
        (f"http://127.0.0.1:{h.port}/api/redrives/{rid}/cancel", {"reason": "wrong step"})]
    row = redrive_row(page, rid)
    expect(row.locator(".state")).to_have_text("cancelled")
    expect(row.get_by_test_id("redrive-changed")).to_have_text(
        f"cancelled by {DEVELOPER}: wrong step")
    expect(row).to_contain_text("ended")
    expect(row.get_by_role("button")).to_have_count(0)
    assert redrive_state(h, rid) == "cancelled"
    h.container.redriver.run(8)
    assert h.container.store.get_state("f-1").generation == 0


def test_cancelling_a_redrive_done_meanwhile_is_refused_with_why(page: Page,
                                                                  h: RunningHost) -> None:
    """The form was opened while it ran (a form holds the page still); done meanwhile, the
    cancel is refused (409) in the API's words, and the page shows it done."""
    rid = started(h)
    page.reload()
    form = open_redrive_change(page, rid, "Cancel")
    h.container.redriver.run(8)
    assert redrive_state(h, rid) == "done"
    form.locator("textarea[name=reason]").fill("wrong step")
    form.get_by_role("button", name=f"Cancel re-drive {rid}").click()
    result = page.get_by_test_id("redrive-result")
    expect(result).to_have_text(f"re-drive {rid} is done already")
    expect(result).to_have_class("error")
    expect(result).to_be_focused()
    row = redrive_row(page, rid)
    expect(row.locator(".state")).to_have_text("done")
    expect(row.locator("td.progress")).to_contain_text("1 resubmitted, 0 refused")
    expect(row.get_by_role("button")).to_have_count(0)


def test_a_redrive_the_api_refuses_is_said_and_the_form_kept(page: Page, h: RunningHost) -> None:
    """Without a reason: refused in the page, nothing sent. A step the app has not (404), a
    time span that ends before it begins (400): the API's words, the form kept as filled in."""
    form = open_redrive(page)
    sent = posts(page)
    start = form.get_by_role("button", name="Start the re-drive")
    said = page.get_by_test_id("redrive-said")
    form.locator("input[name=failed_step]").fill("chrage_payment")
    start.click()
    expect(said).to_have_text("Say why they are re-driven: a re-drive needs a reason.")
    expect(said).to_have_class("error")
    expect(said).to_be_focused()
    assert sent == []
    form.locator("textarea[name=reason]").fill("PSP back")
    start.click()
    expect(said).to_contain_text("failed_step: no step 'chrage_payment' (the steps: ")
    expect(said).to_contain_text("charge_payment")
    expect(said).to_have_class("error")
    assert [r.post_data_json["dry_run"] for r in sent] == [False]
    form.get_by_role("button", name="Preview", exact=True).click()  # the same, as a preview
    expect(said).to_contain_text("failed_step: no step 'chrage_payment'")
    form.locator("input[name=failed_step]").fill("charge_payment")
    form.locator("input[name=since]").fill("2030-01-02T10:00")
    form.locator("input[name=until]").fill("2030-01-01T10:00")
    start.click()
    expect(said).to_have_text(re.compile("since must be before until"))
    expect(form.locator("input[name=failed_step]")).to_have_value("charge_payment")
    expect(form.locator("textarea[name=reason]")).to_have_value("PSP back")
    assert h.container.redrives.list().Redrives == []
    expect(page.get_by_test_id("redrive-result")).to_have_count(0)
    expect(page.get_by_test_id("redrives-list")).to_have_text("none")


def test_a_reader_is_told_why_they_cannot_redrive(browser: Browser, h: RunningHost) -> None:
    rid = started(h)
    pg, foreign = open_console(browser, h, signed_in(READ_ROLE))
    row = redrive_row(pg, rid)
    expect(row.locator(".state")).to_have_text("running")  # reading is a reader's
    form = open_redrive(pg)
    form.locator("textarea[name=reason]").fill("PSP back")
    form.get_by_role("button", name="Start the re-drive").click()
    expect(pg.get_by_test_id("redrive-said")).to_contain_text(
        "Ada Operator lacks the app role 'Orders.Resubmit'")
    form = open_redrive_change(pg, rid, "Pause")  # the start form gives way to it
    expect(pg.get_by_test_id("redrive-form")).to_have_count(0)
    form.locator("textarea[name=reason]").fill("looking")
    form.get_by_role("button", name=f"Pause re-drive {rid}").click()
    result = pg.get_by_test_id("redrive-result")
    expect(result).to_contain_text("Ada Operator lacks the app role 'Orders.Resubmit'")
    expect(result).to_have_class("error")
    expect(row.locator(".state")).to_have_text("running")
    assert [r.Id for r in h.container.redrives.list().Redrives] == [rid]
    assert redrive_state(h, rid) == "running"
    pg.context.close()
    assert foreign == []


def test_a_waiting_redrive_says_why_as_text(page: Page, h: RunningHost) -> None:
    """Its service paused, a re-drive's orders would only wait: it waits too, and says why.
    (What it says comes from the store: text, never markup.)"""
    rid = started(h)
    page.reload()
    row = redrive_row(page, rid)
    expect(row.locator(".state")).to_have_text("running")
    expect(row.get_by_test_id("redrive-waiting")).to_have_count(0)
    expect(page.get_by_test_id("redrives")).not_to_contain_text("null")

    def waiting(route: Route) -> None:
        answer = route.fetch()
        body = answer.json()
        body["Redrives"][0]["Waiting"] = "service <b>payment</b> is paused\u202e"
        route.fulfill(response=answer, json=body)
    page.route("**/api/redrives", waiting)
    page.reload()
    expect(row.get_by_test_id("redrive-waiting")).to_have_text(
        "waiting: service <b>payment</b> is paused\\u202e")
    assert row.locator("b").count() == 0
