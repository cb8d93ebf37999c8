"""The /ui inspector in a real browser: Debian's Chromium driven by Playwright against the real server process.

The server runs with an API key (the page sits behind the same check as the API), and a 60-turn conversation
is recorded through record_turn with a small window, so that compaction and segment merges happen.
Screenshots go to the test's tmp dir; with ACN_SAVE_SCREENSHOTS=1 they are also copied to docs/images/inspector-*.png
(the committed ones, shown in docs/inspector.md), so an ordinary run leaves the work tree clean.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import requests
from playwright.sync_api import Browser, BrowserContext, Page, ViewportSize, expect, sync_playwright

from tests.conftest import ROOT, free_port, missing_prerequisite, server_env, wait_for_port
from tests.long_conversation import turn_messages

# Debian's Chromium (`make browser`), another distribution's, or the one CHROMIUM_PATH names.
CHROMIUM = os.environ.get("CHROMIUM_PATH") or shutil.which("chromium") or shutil.which("chromium-browser") \
    or "/usr/bin/chromium"
# Without the background-networking flags Chromium keeps dialling Google on this closed network.
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync"]
API_KEY = "inspector-test-key"
TENANT = "team-inspect"
NS = {"agent_id": "cs-bot", "session_id": "conv-60"}
SHORT = {"agent_id": "cs-bot", "session_id": "conv-short"}
OTHER = {"agent_id": "billing-bot", "session_id": "b-7"}
SYSTEM = "你是XX电商平台的客服助手。"
SCREENSHOTS = ROOT / "docs" / "images"
LAPTOP: ViewportSize = {"width": 1366, "height": 768}
LAYERS = ["system", "memory", "working", "history", "user_input"]


@dataclass
class Server:
    base: str
    http: requests.Session
    state: dict[str, Any] = field(default_factory=dict)

    def node(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        response = self.http.post(f"{self.base}/v1/nodes/{name}", json=body, timeout=60)
        assert response.status_code == 200, response.text
        return response.json()  # type: ignore[no-any-return]

    def url(self, namespace: dict[str, str]) -> str:
        return f"{self.base}/ui/agents/{namespace['agent_id']}/sessions/{namespace['session_id']}"


def seed(server: Server) -> None:
    """Record the 60-turn conversation, a 3-turn session to roll back, and another agent's memory."""
    for turn in range(1, 61):
        server.node("record_turn", {**NS, "messages": turn_messages(turn), "compaction": {"context_window": 2000}})
    for turn in (3, 10, 20):
        server.node("record_turn", {**SHORT, "messages": turn_messages(turn)})
    server.node("memory_write", {**OTHER, "items": [{"kind": "fact", "content": "发票抬头是XX科技有限公司"}]})
    server.state = server.node("session_state", NS)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    port = free_port()
    data = tmp_path_factory.mktemp("inspector-store")
    env = server_env(ACN_MILVUS_URI=str(data / "memory.db"), ACN_LOG_LEVEL="WARNING",
                     ACN_API_KEYS=f"{API_KEY}:{TENANT}")
    process = subprocess.Popen([sys.executable, "server.py", "--port", str(port)], cwd=ROOT, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, timeout=60, process=process)
        http = requests.Session()
        http.headers["Authorization"] = f"Bearer {API_KEY}"
        running = Server(base=f"http://127.0.0.1:{port}", http=http)
        seed(running)
        yield running
        http.close()
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    # No browser is downloaded at run time: without Chromium the tests skip with the reason (fail under CI=true).
    if not os.access(CHROMIUM, os.X_OK):
        missing_prerequisite(f"Chromium is missing ({CHROMIUM}): run `make browser` as root, or install chromium "
                             "and fonts-wqy-microhei yourself (or set CHROMIUM_PATH=/path/to/chromium)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        yield launched
        launched.close()


@pytest.fixture()
def open_page(browser: Browser, server: Server) -> Iterator[Callable[..., Page]]:
    """Return a function opening a page in a fresh context with a locale and time zone, key attached."""
    contexts: list[BrowserContext] = []

    def opener(url: str, locale: str = "en-US", timezone: str = "UTC") -> Page:
        context = browser.new_context(locale=locale, timezone_id=timezone, viewport=LAPTOP,
                                      extra_http_headers={"Authorization": f"Bearer {API_KEY}"})
        contexts.append(context)
        page = context.new_page()
        page.set_default_timeout(15_000)
        page.goto(url)
        return page

    yield opener
    for context in contexts:
        context.close()


def screenshot(page: Page, tmp_path: Path, name: str) -> Path:
    """Save a laptop-sized screenshot in the test's tmp dir (and in docs/images/ when asked to)."""
    path = tmp_path / f"inspector-{name}.png"
    page.screenshot(path=str(path))
    assert path.stat().st_size > 10_000  # a real rendering, not an empty page
    if os.environ.get("ACN_SAVE_SCREENSHOTS") == "1":
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, SCREENSHOTS / path.name)
    return path


def show(page: Page, selector: str) -> None:
    """Scroll so that the element's top sits just under the sticky section bar."""
    page.locator(selector).evaluate("node => window.scrollTo(0, node.getBoundingClientRect().top + scrollY - 48)")


def finish(page: Page, form: str) -> None:
    """Wait until a form's request is over; a failed node call shows its error in the form's status."""
    status = page.locator(f"{form} [data-status]")
    page.wait_for_function("form => !document.querySelector(form).hasAttribute('aria-busy')", arg=form)
    assert "error" not in (status.get_attribute("class") or ""), status.inner_text()


def test_ui_sits_behind_the_api_key(server: Server) -> None:
    for path in ("/ui", "/ui/static/inspector.js", "/ui/agents/cs-bot/sessions/conv-60"):
        denied = requests.get(server.base + path, timeout=10)
        assert denied.status_code == 401 and denied.json()["code"] == "unauthorized"
    page = server.http.get(server.base + "/ui", timeout=10)
    assert page.status_code == 200 and page.headers["Content-Type"].startswith("text/html")
    assert "default-src 'self'" in page.headers["Content-Security-Policy"]


@pytest.fixture()
def keyless_context(browser: Browser) -> Iterator[BrowserContext]:
    """A browser profile that sends no Authorization header: it has to sign in."""
    context = browser.new_context(locale="en-US", timezone_id="UTC", viewport=LAPTOP)
    context.set_default_timeout(15_000)
    yield context
    context.close()


def sign_in(page: Page, key: str) -> None:
    page.get_by_label("API key").fill(key)
    with page.expect_navigation():
        page.get_by_role("button", name="Sign in").click()


def session_cookie(context: BrowserContext) -> dict[str, Any] | None:
    return next((dict(c) for c in context.cookies() if c["name"] == "acn_ui_session"), None)


def test_sign_in_through_the_form_use_the_page_and_sign_out(keyless_context: BrowserContext, server: Server,
                                                            tmp_path: Path) -> None:
    page = keyless_context.new_page()
    page.goto(server.url(NS))
    expect(page).to_have_url(re.compile(r"/ui/login\?next="))
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    sign_in(page, "not-the-key")
    expect(page.get_by_role("alert")).to_have_text("That key is not valid.")
    assert session_cookie(keyless_context) is None
    screenshot(page, tmp_path, "sign-in")

    sign_in(page, API_KEY)
    assert page.url == server.url(NS)  # back where it was going
    expect(page.locator('.summary [data-field="turns"]')).to_have_text("60")
    cookie = session_cookie(keyless_context)
    assert cookie is not None and API_KEY not in cookie["value"]
    assert (cookie["httpOnly"], cookie["sameSite"], cookie["path"], cookie["secure"]) == (True, "Strict", "/ui", False)
    assert "acn_ui_session" not in page.evaluate("document.cookie")  # out of reach of any script
    # The page's node calls run on the cookie alone (through /ui, with the page's CSRF token).
    page.locator("#assemble-input").fill("What is the plan?")
    page.locator("#assemble-form button[type=submit]").click()
    finish(page, "#assemble-form")
    expect(page.locator("#assemble-result")).to_be_visible()
    # The same browser gets nothing from the API itself: the cookie is not a credential there.
    api_status = page.evaluate("""base => fetch(base + "/v1/nodes/session_state", {method: "POST",
        credentials: "include", headers: {"Content-Type": "application/json"},
        body: JSON.stringify({agent_id: "cs-bot", session_id: "conv-60"})}).then(r => r.status)""", server.base)
    assert api_status == 401

    with page.expect_navigation():
        page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_role("status")).to_have_text("Signed out.")
    assert session_cookie(keyless_context) is None
    page.goto(server.base + "/ui")
    expect(page).to_have_url(re.compile(r"/ui/login"))


def test_another_site_cannot_act_with_the_sign_in_cookie(keyless_context: BrowserContext, server: Server) -> None:
    victim_ns = {"agent_id": "cs-bot", "session_id": "conv-csrf"}
    for turn in (1, 2):
        server.node("record_turn", {**victim_ns, "messages": turn_messages(turn)})
    page = keyless_context.new_page()
    page.goto(server.url(victim_ns))
    sign_in(page, API_KEY)
    assert session_cookie(keyless_context) is not None
    # "localhost" is another site than "127.0.0.1": its page tries a rollback and a sign-out with the cookie.
    evil = server.base.replace("127.0.0.1", "localhost") + "/evil"
    target = server.base
    attack = f"""<!doctype html><html><body>
<form id="out" method="post" action="{target}/ui/logout"><input name="csrf_token" value="guess"></form>
<script>
fetch("{target}/ui/nodes/session_rollback", {{method: "POST", mode: "no-cors", credentials: "include",
  body: JSON.stringify({{agent_id: "cs-bot", session_id: "conv-csrf", version: 1}})}})
  .finally(() => document.getElementById("out").submit());
</script></body></html>"""
    keyless_context.route(evil, lambda route: route.fulfill(status=200, content_type="text/html", body=attack))
    attacker = keyless_context.new_page()
    with attacker.expect_navigation():
        attacker.goto(evil)
    attacker.wait_for_load_state()
    assert server.node("session_versions", victim_ns)["latest"] == 2
    assert session_cookie(keyless_context) is not None
    page.goto(server.url(victim_ns))
    expect(page.locator('.summary [data-field="version"]')).to_have_text("2")


def test_namespaces_list_agents_and_sessions_and_search(open_page: Callable[..., Page], server: Server,
                                                        tmp_path: Path) -> None:
    page = open_page(server.base + "/ui")
    expect(page.get_by_role("heading", level=1)).to_have_text("Agents and sessions")
    row = page.locator('tr[data-session="conv-60"]')
    expect(row.locator('[data-field="turns"]')).to_have_text("60")
    expect(row.locator('[data-field="version"]')).to_have_text("60")
    expect(page.locator('section.agent[data-agent="billing-bot"]')).to_be_visible()
    screenshot(page, tmp_path, "namespaces")
    page.get_by_label("Search agents and sessions").fill("conv-6")
    expect(page.locator('section.agent[data-agent="billing-bot"]')).to_be_hidden()
    expect(page.locator('tr[data-session="conv-short"]')).to_be_hidden()
    row.get_by_role("link", name="conv-60").click()
    expect(page).to_have_url(server.url(NS))


def test_timeline_draws_segments_over_their_turns_and_opens_one(open_page: Callable[..., Page], server: Server,
                                                                tmp_path: Path) -> None:
    segments = server.state["segments"]
    assert len(segments) >= 2, "the seeded session must have been compacted into segments"
    page = open_page(server.url(NS))
    cells = page.locator(".turn-cell")
    assert cells.evaluate_all("cells => cells.map(c => Number(c.dataset.turn))") == list(range(1, 61))
    bars = page.locator(".segment-bar")
    expect(bars).to_have_count(len(segments))
    buffered = {m["turn"] for m in server.state["buffer"]}
    for bar, segment in zip(bars.all(), segments, strict=True):
        first, last = segment["turn_range"][0], segment["turn_range"][-1]
        assert (bar.get_attribute("data-from"), bar.get_attribute("data-to")) == (str(first), str(last))
        box, start, end = bar.bounding_box(), cells.nth(first - 1).bounding_box(), cells.nth(last - 1).bounding_box()
        assert box and start and end
        assert abs(box["x"] - start["x"]) <= 1 and abs(box["x"] + box["width"] - end["x"] - end["width"]) <= 1
        statuses = cells.evaluate_all(f"cells => cells.slice({first - 1}, {last}).map(c => c.dataset.status)")
        assert set(statuses) == {"segment"}
    assert {int(n) for n in page.locator('.turn-cell[data-status="buffer"]').evaluate_all(
        "cells => cells.map(c => c.dataset.turn)")} == buffered

    # The account number was stated at turn 25: the turn says so and points at the segment carrying it.
    carrier = next(s for s in segments if s["turn_range"][0] <= 25 <= s["turn_range"][-1])
    page.locator('.turn-cell[data-turn="25"]').click()
    turn_panel = page.locator("#turn-panel-25")
    expect(turn_panel).to_be_visible()
    expect(turn_panel.locator(".turn-memories")).to_contain_text("6月30日前把12万转到对公账户62938471")
    turn_panel.get_by_role("button", name=f"Segment {carrier['turn_range'][0]}–{carrier['turn_range'][-1]}").click()

    panel = page.locator(f'.segment-panel[data-segment-id="{carrier["id"]}"]')
    expect(panel).to_be_visible()
    expect(turn_panel).to_be_hidden()
    expect(page.locator(f'.segment-bar[data-segment-id="{carrier["id"]}"]')).to_have_attribute("aria-expanded", "true")
    expect(panel.locator('[data-field="goal"]')).to_have_text(carrier["goal"])
    for constraint in carrier["constraints"]:
        expect(panel.locator(".segment-fields")).to_contain_text(constraint)
    for decision in carrier["decisions"]:
        expect(panel.locator('[data-field="decisions"]')).to_contain_text(decision["decision"])
    numbers = panel.locator(".key-numbers tbody tr")
    expect(numbers).to_have_count(len(carrier["key_numbers"]))
    assert dict(zip(numbers.locator("th").all_inner_texts(), numbers.locator("td").all_inner_texts(),
                    strict=True)) == carrier["key_numbers"]
    assert carrier["key_numbers"]["账户"] == "62938471"
    raw = panel.locator('.raw-turns li[data-turn="25"]')
    expect(raw).to_contain_text("6月30日前把12万转到对公账户62938471。")
    expect(panel.locator(".raw-turns > li")).to_have_count(carrier["turn_range"][-1] - carrier["turn_range"][0] + 1)
    show(page, "#timeline")
    screenshot(page, tmp_path, "timeline-segment")


def test_assemble_preview_bar_equals_the_api_tokens(open_page: Callable[..., Page], server: Server,
                                                   tmp_path: Path) -> None:
    page = open_page(server.url(NS))
    request: dict[str, Any] = {"user_input": "对账接口的超时现在是多少？", "system_prompt": SYSTEM, "max_tokens": 2000, "mode": "focused"}
    page.get_by_label("User input").fill(request["user_input"])
    page.get_by_label("System prompt (optional)").fill(request["system_prompt"])
    page.get_by_label("Budget (max tokens)").fill("2000")
    page.get_by_label("Mode").select_option("focused")
    page.get_by_role("button", name="Preview").click()
    finish(page, "#assemble-form")
    expect(page.locator("#assemble-result")).to_be_visible()
    api = server.node("assemble", {**NS, **request})
    tokens = api["tokens"]
    unused = tokens["budget"] - tokens["total"]

    bar = page.locator("#token-bar .bar-segment")
    shown = dict(zip(bar.evaluate_all("s => s.map(e => e.dataset.layer)"),
                     map(int, bar.evaluate_all("s => s.map(e => e.dataset.tokens)")), strict=True))
    assert shown == {**{k: v for k, v in tokens["by_layer"].items() if v}, "unused": unused}
    legend = page.locator("#token-legend tbody tr")
    numbers = dict(zip(legend.evaluate_all("rows => rows.map(r => r.dataset.layer)"),
                       map(int, legend.locator("td[data-tokens]").all_inner_texts()), strict=True))
    assert numbers == {**tokens["by_layer"], "unused": unused}
    # Each part's width is its share of the budget.
    full = page.locator("#token-bar").bounding_box()
    assert full
    for part in bar.all():
        box = part.bounding_box()
        assert box and abs(box["width"] / full["width"] - int(part.get_attribute("data-tokens") or 0)
                           / tokens["budget"]) < 0.01
    expect(page.locator("#assemble-summary")).to_have_text(f"{tokens['total']} of {tokens['budget']} tokens used · "
                                                           f"mode {api['mode']}")
    assert page.locator("#dropped-list tr[data-id]").evaluate_all("r => r.map(e => e.dataset.id)") == [
        d["id"] for d in api["dropped"]]
    assert page.locator("#sources-list tr[data-id]").evaluate_all("r => r.map(e => e.dataset.id)") == [
        s["id"] for s in api["sources"]]
    working = page.locator('#layer-details details[data-layer="working"]')
    working.locator("summary").click()
    expect(working.locator("pre")).to_have_text(api["working_text"])
    page.get_by_label("Find in the assembled context").fill("45秒")
    expect(page.locator("#find-result")).to_contain_text("Found in:")
    show(page, "#assemble")
    screenshot(page, tmp_path, "assemble")


def test_memory_search_shows_score_parts_of_memory_retrieve(open_page: Callable[..., Page], server: Server) -> None:
    page = open_page(server.url(NS))
    form = page.locator("#retrieve-form")
    form.get_by_label("Query").fill("转账到哪个账户")
    form.get_by_label("Results (top_k)").fill("3")
    form.get_by_role("button", name="Search").click()
    finish(page, "#retrieve-form")
    rows = page.locator("#retrieve-result tr[data-id]")
    expect(rows.first).to_be_visible()
    api = server.node("memory_retrieve", {**NS, "query": "转账到哪个账户", "top_k": 3})
    assert rows.evaluate_all("r => r.map(e => e.dataset.id)") == [m["id"] for m in api["memories"]]
    for row, memory in zip(rows.all(), api["memories"], strict=True):
        for part, value in {"score": memory["score"], **memory["score_parts"]}.items():
            # Recency moves between the two calls by milliseconds; three decimals are shown.
            assert abs(float(row.locator(f'td[data-part="{part}"]').inner_text()) - value) < 0.002


def test_memories_table_filters_and_shows_supersede_chains(open_page: Callable[..., Page], server: Server,
                                                          tmp_path: Path) -> None:
    page = open_page(server.url(NS), timezone="Asia/Shanghai")
    table = page.locator("#memory-table tbody tr:visible")
    expect(table).to_have_count(8)  # the extracted events; the 136 archived messages are behind a filter
    page.get_by_label("Kind").select_option("decision")
    expect(table).to_have_count(4)
    first = table.first
    expect(first).to_contain_text("把对账接口的超时设为30秒")
    expect(first.locator('[data-field="status"]')).to_contain_text("superseded by")
    expect(first.locator('[data-field="status"]')).to_contain_text("对账接口的超时改成45秒")
    expect(table.last.locator('[data-field="status"]')).to_have_text("current")
    page.get_by_label("Kind").select_option("")
    page.get_by_label("Text", exact=True).fill("62938471")
    expect(table).to_have_count(1)
    expect(page.locator("#memory-count")).to_have_text("1 shown")
    # Stored as UTC epoch ms, shown in the browser's zone (UTC+8 here).
    created = table.first.locator("time").first
    epoch = int(created.get_attribute("data-epoch-ms") or 0)
    local = datetime.fromtimestamp(epoch / 1000, UTC).astimezone(ZoneInfo("Asia/Shanghai"))
    expect(created).to_contain_text(local.strftime("%H:%M:%S"))
    assert created.get_attribute("datetime") == datetime.fromtimestamp(epoch // 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    page.get_by_label("Text", exact=True).fill("")
    page.get_by_label("Kind").select_option("decision")
    show(page, "#memories")
    screenshot(page, tmp_path, "memories")


def test_versions_diff_and_rollback_only_after_confirming(open_page: Callable[..., Page], server: Server,
                                                         tmp_path: Path) -> None:
    page = open_page(server.url(NS))
    page.get_by_label("From version").select_option("30")
    page.get_by_label("To version").select_option("60")
    page.get_by_role("button", name="Show diff").click()
    finish(page, "#diff-form")
    diff = page.locator("#diff-result .diff")
    expect(diff).to_contain_text("Changes from v30 to v60")
    old = server.node("session_state", {**NS, "version": 30})
    expect(diff.locator('[data-field="turn"]')).to_have_text(f"{old['turn']} → 60")
    expect(diff.locator('[data-field="segments"]')).to_have_text(
        f"{len(old['segments'])} → {len(server.state['segments'])}")

    page.get_by_role("button", name="Roll back to v30…").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_be_visible()
    expect(dialog.locator("#rollback-request")).to_contain_text('"version": 30')
    show(page, "#versions")
    screenshot(page, tmp_path, "versions-rollback")
    dialog.get_by_role("button", name="Cancel").click()
    expect(dialog).to_be_hidden()
    assert server.node("session_versions", NS)["latest"] == 60

    short = open_page(server.url(SHORT))
    short.get_by_role("button", name="Roll back to v1…").click()
    with short.expect_navigation():
        short.get_by_role("dialog").get_by_role("button", name="Roll back", exact=True).click()
    versions = server.node("session_versions", SHORT)["versions"]
    assert (versions[-1]["version"], versions[-1]["reason"], versions[-1]["turn"]) == (4, "rollback to v1", 1)
    expect(short.locator('.summary [data-field="version"]')).to_have_text("4")


@pytest.mark.parametrize(("locale", "heading", "layer"), [("zh-CN", "会话时间线", "工作状态"),
                                                         ("en-US", "Session timeline", "Working state")])
def test_labels_follow_the_browser_language(open_page: Callable[..., Page], server: Server, tmp_path: Path,
                                            locale: str, heading: str, layer: str) -> None:
    page = open_page(server.url(NS), locale=locale, timezone="Asia/Shanghai")
    assert page.locator("html").get_attribute("lang") == ("zh-CN" if locale == "zh-CN" else "en")
    expect(page.locator("#timeline-heading")).to_have_text(heading)
    page.locator("#assemble-input").fill("接下来的计划是什么？")
    page.locator("#assemble-form button[type=submit]").click()
    finish(page, "#assemble-form")
    expect(page.locator('#token-legend tr[data-layer="working"] th')).to_have_text(layer)
    stamp = page.locator(".summary time")
    epoch = int(stamp.get_attribute("data-epoch-ms") or 0)
    local = datetime.fromtimestamp(epoch / 1000, UTC).astimezone(ZoneInfo("Asia/Shanghai"))
    expect(stamp).to_contain_text(local.strftime("%H:%M:%S"))
    if locale == "zh-CN":
        assert re.search(r"[\u4e00-\u9fff]", page.locator(".section-nav").inner_text())
        page.locator(".turn-cell[data-turn='25']").click()
        show(page, "#timeline")
        screenshot(page, tmp_path, "zh")
