"""Headless Chromium for the web pages' tests: Chromium (or Google Chrome) and ChromeDriver, driven by Selenium.

Both are found by :func:`find_browser`: ``SESSIONMEM_CHROMIUM`` and ``SESSIONMEM_CHROMEDRIVER``
when set, else the first of ``chromium``, ``chromium-browser``, ``google-chrome``, ``chrome`` and
``chromedriver`` on ``PATH`` (then the usual macOS application bundles). ``make test`` installs
Debian's packages (``apt-get install chromium chromium-driver``) where apt-get exists and either
is missing, and says what to install elsewhere. Nothing is downloaded by Selenium: the browser
and the driver are given by path, so Selenium Manager has nothing to look for. When either is
missing the tests that need them fail, saying so -- never a silent skip.

:class:`Browser` wraps a WebDriver with what the tests ask of a page: log in through a
``/login?code=`` link, wait for something to show, collect the hosts the page asked
for (Chrome's performance log) and the console's errors, save screenshots to
``build/screenshots/``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

# The names a Chromium-based browser and its driver go by on PATH, in the order they are tried.
BROWSER_NAMES = ("chromium", "chromium-browser", "google-chrome", "chrome")
DRIVER_NAMES = ("chromedriver",)
# Where macOS keeps the browsers when nothing put them on PATH (a Mac with Chrome installed the usual way).
MACOS_BUNDLES = ("/Applications/Chromium.app/Contents/MacOS/Chromium",
                 "/Applications/Google Chrome.app/Contents/MacOS/Google Chrome")
SCREENSHOTS = Path(__file__).resolve().parent.parent / "build" / "screenshots"
# As the brief for this machine asks: no sandbox (root), nothing that calls home.
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--window-size=1440,1000")
WAIT_S = 20.0


def find_executable(variable: str, names: tuple[str, ...], fallbacks: tuple[str, ...] = (),
                    environ: Mapping[str, str] | None = None) -> str | None:
    """``environ[variable]`` when set (a path, or a name looked up on PATH), else the first of ``names`` on
    ``environ``'s PATH, else the first executable of ``fallbacks``; None when there is none."""
    environ = os.environ if environ is None else environ
    path = environ.get("PATH", os.defpath)
    chosen = environ.get(variable, "").strip()
    if chosen:
        return shutil.which(chosen, path=path)
    for name in names:
        found = shutil.which(name, path=path)
        if found:
            return found
    return next((candidate for candidate in fallbacks if os.access(candidate, os.X_OK)), None)


def find_browser(environ: Mapping[str, str] | None = None) -> tuple[str | None, str | None]:
    """The browser and the driver the tests use: (path or None, path or None)."""
    return (find_executable("SESSIONMEM_CHROMIUM", BROWSER_NAMES, MACOS_BUNDLES, environ),
            find_executable("SESSIONMEM_CHROMEDRIVER", DRIVER_NAMES, (), environ))


def missing_browser(browser: str | None, driver: str | None) -> str:
    """What is missing, and how to get it."""
    missing = [what for what, found in (("a Chromium browser", browser), ("ChromeDriver", driver)) if found is None]
    return (f"the browser tests need Chromium (or Google Chrome) and ChromeDriver, and {' and '.join(missing)} "
            f"{'is' if len(missing) == 1 else 'are'} not found: put `{'`, `'.join(BROWSER_NAMES)}` and `chromedriver` on PATH, or name them in "
            f"SESSIONMEM_CHROMIUM and SESSIONMEM_CHROMEDRIVER (Debian: `apt-get install chromium chromium-driver`, "
            f"which `make test` runs where apt-get exists; elsewhere: Chrome or Chromium and the ChromeDriver of its "
            f"version)")


def require_browser() -> tuple[str, str]:
    browser, driver = find_browser()
    if browser is None or driver is None:
        pytest.fail(missing_browser(browser, driver), pytrace=False)
    return browser, driver


class Browser:
    def __init__(self, driver: Any) -> None:
        self.driver = driver

    def login(self, worker: Any, page: str = "/") -> None:
        """Open a single-use login link, as `sessionmem open` prints it; the worker sets its cookie."""
        status, body = worker.request("POST", f"/api/auth/login-code?next={page}")
        assert status == 200, body
        # Leave the page before first: its live stream, reconnecting to a worker that has stopped,
        # would log a refused connection after the logs were read.
        self.driver.get("about:blank")
        self.requested_hosts()  # forget what was asked before this page
        self.console_errors()
        self.driver.get(body["url"])
        self.wait(lambda: urlsplit(self.driver.current_url).path == page, f"the login link to lead to {page}")

    def js(self, script: str, *args: Any) -> Any:
        return self.driver.execute_script(script, *args)

    def wait(self, condition: Callable[[], Any], what: str, timeout: float = WAIT_S) -> Any:
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            try:
                result = condition()
                if result:
                    return result
            except Exception as exc:  # an element being redrawn: look again
                last = exc
            time.sleep(0.05)
        raise AssertionError(f"waited {timeout:.0f} s for {what}" + (f" (last error: {last!r})" if last else ""))

    def css(self, selector: str) -> list[Any]:
        from selenium.webdriver.common.by import By

        return self.driver.find_elements(By.CSS_SELECTOR, selector)

    def one(self, selector: str, what: str = "") -> Any:
        return self.wait(lambda: (self.css(selector) or [None])[0], what or selector)

    def click(self, selector: str, what: str = "") -> None:
        """Click the first match, looking again if the page redrew it in between."""
        def clicked() -> bool:
            found = self.css(selector)
            if found:
                found[0].click()
            return bool(found)
        self.wait(clicked, what or f"to click {selector}")

    def text(self, selector: str) -> str:
        """The rendered text of every match (read in one script: nothing goes stale between find and read)."""
        return self.js("return [...document.querySelectorAll(arguments[0])].map(e => e.innerText).join(' ')", selector)

    def attribute(self, selector: str, name: str) -> str:
        """Attribute ``name`` of the first match ("" if none), read in one script as :meth:`text` reads."""
        return str(self.js("const e = document.querySelector(arguments[0]);"
                           " return e === null ? '' : (e.getAttribute(arguments[1]) ?? '')", selector, name))

    def content(self, selector: str) -> str:
        """The text content of every match, shown or not (a closed <details>, say)."""
        return self.js("return [...document.querySelectorAll(arguments[0])].map(e => e.textContent).join(' ')",
                       selector)

    def requested_hosts(self, page_origin: str = "") -> set[str]:
        """Every scheme://host:port that pages of ``page_origin`` asked for since the last call (Chrome's
        performance log; the browser's own pages, such as its first tab, are left out, and so are ``data:``
        URLs, which reach no host: Chromium's own date picker icon is one)."""
        import json

        hosts = set()
        for entry in self.driver.get_log("performance"):
            message = json.loads(entry["message"])["message"]
            if message["method"] != "Network.requestWillBeSent":
                continue
            params = message["params"]
            if not str(params.get("documentURL", "")).startswith(page_origin):
                continue
            url = urlsplit(params["request"]["url"])
            if url.scheme != "data":
                hosts.add(f"{url.scheme}://{url.netloc}")
        return hosts

    def console_errors(self) -> list[str]:
        return [entry["message"] for entry in self.driver.get_log("browser") if entry["level"] == "SEVERE"]

    def screenshot(self, name: str) -> Path:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        target = SCREENSHOTS / f"{name}.png"
        self.driver.save_screenshot(str(target))
        return target


@contextmanager
def open_browser() -> Iterator[Browser]:
    """Headless Chromium with a fresh profile; closed (and its profile removed) on leaving."""
    browser, driver = require_browser()
    os.environ.setdefault("SE_AVOID_STATS", "true")  # Selenium Manager: no telemetry (it is not run at all)
    os.environ.setdefault("SE_OFFLINE", "true")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="sessionmem-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    options.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(driver))
    try:
        yield Browser(driver)
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def main() -> int:
    """``python -m tests.browser``: the browser and driver the tests would use (``make test`` asks before it installs)."""
    browser, driver = find_browser()
    if browser is None or driver is None:
        print(missing_browser(browser, driver))
        return 1
    print(f"browser {browser}\ndriver {driver}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
