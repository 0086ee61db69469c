"""Open a local HTML file in headless Debian Chromium and report what a reader would see."""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tests.requires import unavailable

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


@dataclass
class PageCheck:
    console_errors: list[str]
    images: int
    broken_images: list[str]
    body_text: str
    alerts: int
    screenshot: Path
    height: int = 0
    """The page's full height in CSS pixels (a 1280 px wide window)."""
    probed: object = None
    """What the `probe` script returned."""


def check_page(html: Path, screenshot_name: str, *, probe: str | None = None) -> PageCheck:
    """Load `html` from disk, collect console errors, image loads, text and a screenshot.

    `probe`: JavaScript run in the page (a function body ending in ``return ...``), its result
    in `PageCheck.probed`.
    """
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_bin = shutil.which("chromedriver")
    if chromium is None or driver_bin is None:
        unavailable(  # skipped, or failed as CI
            "Chromium and chromedriver are not installed (apt-get install chromium "
            "chromium-driver); `bash scripts/test.sh --system` installs them"
        )
    from selenium import webdriver
    from selenium.common.exceptions import NoAlertPresentException
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="oodeval-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-quic",
        f"--user-data-dir={profile}",
        "--window-size=1280,1800",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(driver_bin), options=options)
    try:
        driver.get(html.resolve().as_uri())
        alerts = 0
        try:
            driver.switch_to.alert.dismiss()
            alerts += 1
        except NoAlertPresentException:
            pass
        state = driver.execute_script(
            "return Array.from(document.images).map(i => [i.alt, i.complete, i.naturalWidth]);"
        )
        broken = [alt for alt, complete, width in state if not complete or width <= 0]
        text = driver.execute_script("return document.body.innerText;")
        height = driver.execute_script("return document.documentElement.scrollHeight;")
        probed = driver.execute_script(probe) if probe else None
        ARTIFACTS.mkdir(exist_ok=True)
        shot = ARTIFACTS / screenshot_name
        driver.save_screenshot(str(shot))
        errors = [
            entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"
        ]
        return PageCheck(errors, len(state), broken, text, alerts, shot, int(height), probed)
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
