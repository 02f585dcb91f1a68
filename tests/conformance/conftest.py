"""What the tests of the harness share: a real headless Chromium for the HTML report's pages."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:  # selenium is imported where the browser starts: without it those tests skip, and the rest run
    from selenium.webdriver.remote.webdriver import WebDriver

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--window-size=1280,1600",
         "--disable-dev-shm-usage")  # a container's small /dev/shm must not crash the renderer


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if not shutil.which(path)]
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        missing.append("the selenium package (pip install '.[test]')")
    if missing:
        reason = "headless Chromium needs " + ", ".join(missing) + " (apt-get install -y chromium chromium-driver)"
        if os.environ.get("CI"):
            pytest.fail(reason + ": CI installs them, so CI never skips this")
        pytest.skip(reason)
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*FLAGS, f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}"):
        options.add_argument(flag)
    # An explicit driver path: Selenium Manager (which would download one) is never consulted.
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()
