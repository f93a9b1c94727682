"""A real browser for the plan page: Debian's headless Chromium, driven through its chromedriver.

No silent skip: a machine without Chromium fails these tests and says how to install it
(``bash hack/install-browser.sh``; CI runs it). Screenshots and load times are written to
``build/test-output/view`` (``$GPUPLAN_TEST_OUTPUT`` moves it).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

ROOT = Path(__file__).resolve().parents[2]
INSTALL = "bash hack/install-browser.sh"


def _find(*names: str) -> str:
    for name in names:
        found = shutil.which(name)
        if found:
            return found
    pytest.fail(f"{' or '.join(names)} not found: the page tests need Debian's chromium; run {INSTALL}")


@pytest.fixture(scope="session")
def out_dir() -> Path:
    out = Path(os.environ.get("GPUPLAN_TEST_OUTPUT", ROOT / "build" / "test-output")) / "view"
    out.mkdir(parents=True, exist_ok=True)
    return out


@pytest.fixture(scope="session")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[webdriver.Chrome]:
    """Chromium at a raised CPU priority where allowed (root, as in CI): the load times measured
    are the page's, not those of whatever else shares the machine's cores."""
    options = webdriver.ChromeOptions()
    chromium = _find("chromium", "chromium-browser")
    if os.geteuid() == 0:
        wrapper = tmp_path_factory.mktemp("browser") / "chromium"
        wrapper.write_text(f'#!/bin/sh\nexec nice -n -10 {chromium} "$@"\n')
        wrapper.chmod(0o755)
        chromium = str(wrapper)
    options.binary_location = chromium
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1400,1000",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=_find("chromedriver")), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()
