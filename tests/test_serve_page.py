"""The web page `pdtp serve` serves, in a real headless browser (Debian's Chromium and
chromedriver, driven by Selenium): it loads, a plan appears for the default inputs (the one
the Python API gives), the pairs heatmap and the Pareto frontier are drawn, an invalid input
shows its error naming the field, a config upload plans that model, and the deployment
downloads. Screenshots go to $PDTP_TEST_ARTIFACTS (default target/test-artifacts/)."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import time
from typing import Any

import pytest

pytest.importorskip("selenium")
from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait

import pdtp
from pdtp.service.server import BackgroundServer

ROOT = pathlib.Path(__file__).resolve().parent.parent
ARTIFACTS = pathlib.Path(
    os.environ.get("PDTP_TEST_ARTIFACTS") or ROOT / "target" / "test-artifacts"
)
CONFIG = pathlib.Path(__file__).parent / "data" / "hf-configs"
WAIT_S = 180  # a loaded CI machine plans slowly; the page itself has no deadline


def _binary(*names: str) -> str:
    for name in names:
        path = shutil.which(name)
        if path:
            return path
    pytest.fail(f"{' or '.join(names)} not found: apt-get install -y chromium chromium-driver")


@pytest.fixture(scope="module")
def server() -> Any:
    with BackgroundServer() as url:
        yield url


@pytest.fixture(scope="module")
def downloads(tmp_path_factory: Any) -> pathlib.Path:
    return pathlib.Path(tmp_path_factory.mktemp("downloads"))


@pytest.fixture(scope="module")
def browser(downloads: pathlib.Path) -> Any:
    options = Options()
    options.binary_location = _binary("chromium", "chromium-browser")
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1400,1500",
    ):
        options.add_argument(arg)
    options.add_experimental_option(
        "prefs",
        {"download.default_directory": str(downloads), "download.prompt_for_download": False},
    )
    driver = webdriver.Chrome(service=Service(_binary("chromedriver")), options=options)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def screenshot(driver: Any, name: str) -> pathlib.Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / name
    assert driver.save_screenshot(str(path))
    assert path.stat().st_size > 10_000
    return path


def wait(driver: Any, condition: Any) -> Any:
    return WebDriverWait(driver, WAIT_S).until(condition)


def idle(driver: Any) -> None:
    """Every request the page made is answered (none is left running past the test)."""
    wait(driver, ec.presence_of_element_located((By.CSS_SELECTOR, "body[data-state=idle]")))


def test_the_page_plans_the_default_inputs(browser: Any, server: str) -> None:
    browser.get(server + "/")
    summary = wait(browser, ec.visibility_of_element_located((By.ID, "plan-summary")))
    live = pdtp.solve("llama-3.1-70b", gpus=16, gpu="mi300x")
    assert summary.text.startswith(f"{live.model}: ")
    assert f"on {live.gpus_used} of 16 GPUs" in summary.text
    rows = browser.find_elements(By.CSS_SELECTOR, "#plan table tr")[1:]
    cells = [[td.text for td in r.find_elements(By.TAG_NAME, "td")] for r in rows]
    expected = [
        [role, f"{side.instances} ×", str(side.layout)]
        for role, side in (
            ("prefill", live.prefill),
            ("decode", live.decode),
            ("aggregated", live.aggregated),
        )
        if side is not None
    ]
    assert [c[:3] for c in cells] == expected
    # The rejected better-looking plan and vLLM's own error, as the planner reports them.
    rejected = browser.find_element(By.ID, "rejected").text
    if live.rejected:
        head, _, vllm = live.rejected[0].partition(" rejects ")
        assert head in rejected and vllm.split(": ", 1)[-1][:40] in rejected
    # The pairs heatmap: one cell per pair, valid exactly where pdtp.check says so.
    wait(browser, ec.presence_of_element_located((By.ID, "pairs-table")))
    tds = browser.find_elements(By.CSS_SELECTOR, "#pairs-table td")
    sizes = [1, 2, 4, 8]
    assert len(tds) == len(sizes) ** 2
    for k, td in enumerate(tds):
        p, d = sizes[k // len(sizes)], sizes[k % len(sizes)]
        ok = pdtp.check("llama-3.1-70b", p, d, connector="moriio").ok
        assert ("invalid" not in td.get_attribute("class")) == ok, (p, d)
    # The Pareto frontier: a point per frontier plan.
    wait(
        browser, ec.presence_of_element_located((By.CSS_SELECTOR, "#pareto-chart .frontier-point"))
    )
    points = browser.find_elements(By.CSS_SELECTOR, "#pareto-chart .frontier-point")
    assert len(points) >= 1
    assert browser.find_element(By.ID, "error").is_displayed() is False
    idle(browser)
    screenshot(browser, "serve-page.png")


def test_the_deployment_downloads(browser: Any, server: str, downloads: pathlib.Path) -> None:
    if not browser.find_elements(By.ID, "plan-summary"):
        browser.get(server + "/")
        wait(browser, ec.visibility_of_element_located((By.ID, "plan-summary")))
    browser.find_element(By.ID, "download-k8s").click()
    target = downloads / "pdtp-deployment.yaml"
    deadline = time.monotonic() + 60
    while not target.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert target.exists(), sorted(os.listdir(downloads))
    text = target.read_text()
    assert "kind: StatefulSet" in text and "pdtp-prefill" in text


def test_an_invalid_input_shows_its_error(browser: Any, server: str) -> None:
    browser.get(server + "/")
    wait(browser, ec.visibility_of_element_located((By.ID, "plan-summary")))
    idle(browser)
    gpus = browser.find_element(By.ID, "gpus")
    gpus.clear()
    gpus.send_keys("0")
    browser.find_element(By.ID, "plan-button").click()
    box = wait(browser, ec.visibility_of_element_located((By.ID, "error")))
    assert box.text.startswith("gpus: "), box.text
    assert "bad" in gpus.get_attribute("class")
    screenshot(browser, "serve-page-error.png")
    # A fixed input clears the error.
    gpus.clear()
    gpus.send_keys("16")
    browser.find_element(By.ID, "plan-button").click()
    wait(browser, ec.invisibility_of_element_located((By.ID, "error")))
    idle(browser)


def test_a_config_upload_plans_that_model(browser: Any, server: str) -> None:
    config = next(p for p in sorted(CONFIG.rglob("*.json")) if "qwen3-8b" in str(p).lower())
    browser.get(server + "/")
    wait(browser, ec.visibility_of_element_located((By.ID, "plan-summary")))
    idle(browser)
    browser.find_element(By.ID, "config-file").send_keys(str(config))
    wait(browser, ec.visibility_of_element_located((By.ID, "clear-config")))
    gpus = browser.find_element(By.ID, "gpus")
    gpus.clear()
    gpus.send_keys("8")
    browser.find_element(By.ID, "plan-button").click()
    live = pdtp.solve(json.loads(config.read_text()), gpus=8, gpu="mi300x")
    wait(browser, ec.text_to_be_present_in_element((By.ID, "plan-summary"), "of 8 GPUs"))
    summary = browser.find_element(By.ID, "plan-summary").text
    assert summary.startswith(f"{live.model}: ") and f"on {live.gpus_used} of 8 GPUs" in summary
    idle(browser)
