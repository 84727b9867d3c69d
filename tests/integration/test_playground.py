"""The web playground in real headless Chromium (Selenium), against the stack."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.browser import browser, png_pixels  # noqa: F401 - the fixture, by import
from ops.stack import EVAL, Stack

pytestmark = pytest.mark.stack

JFK = EVAL / "real" / "whisper" / "jfk.flac"


def _use_key(driver, key: str) -> None:
    from selenium.webdriver.common.by import By
    field = driver.find_element(By.ID, "key")
    field.clear()
    field.send_keys(key)
    driver.find_element(By.ID, "save-key").click()


def test_batch_page(stack: Stack, browser, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
    driver = browser
    _, key = stack.new_account()
    driver.get(stack.url("/playground"))
    assert "a5s playground" in driver.title
    _use_key(driver, key)
    assert driver.execute_script("return sessionStorage.getItem('a5s.key')") == key
    driver.find_element(By.ID, "file").send_keys(str(JFK))
    driver.find_element(By.ID, "go").click()
    status = driver.find_element(By.ID, "status")
    WebDriverWait(driver, 240, poll_frequency=0.5).until(
        lambda d: "completed" in status.text or "error" in status.get_attribute("class"))
    assert "completed" in status.text, status.text

    words = driver.find_elements(By.CSS_SELECTOR, "#transcript .utt .w")
    assert len(words) >= 20 and "country" in " ".join(w.text for w in words)
    utt = driver.find_element(By.CSS_SELECTOR, "#transcript .utt")
    assert "spk-1" in utt.get_attribute("class") and utt.get_attribute("data-speaker")
    colour = driver.execute_script("return getComputedStyle(arguments[0]).color", words[0])
    body = driver.execute_script("return getComputedStyle(document.body).color")
    assert colour != body  # words carry their speaker's colour

    srt_link = driver.find_element(By.ID, "dl-srt")
    href = srt_link.get_attribute("href")
    assert href.startswith("blob:") and srt_link.get_attribute("download").endswith(".srt")
    srt = driver.execute_async_script(
        "const done = arguments[1];"
        "fetch(arguments[0]).then(r => r.text()).then(done, e => done('failed: ' + e))", href)
    assert srt.startswith("1\n00:00:") and "[speaker_1]" in srt

    target = words[10]
    start = float(target.get_attribute("data-start"))
    target.click()
    now = driver.execute_script("return document.getElementById('player').currentTime")
    assert abs(now - start) < 0.3, (now, start)

    shot = tmp_path / "playground.png"
    shot.write_bytes(driver.get_screenshot_as_png())
    width, height, rows = png_pixels(shot.read_bytes())
    assert width >= 800 and height >= 600
    distinct = {row[i:i + 3] for row in rows[::10] for i in range(0, len(row), 12)}
    assert len(distinct) > 20, "the screenshot looks blank"


def test_live_page_streams_a_file(stack: Stack, browser) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
    driver = browser
    _, key = stack.new_account()
    driver.get(stack.url("/playground/live"))
    _use_key(driver, key)
    driver.find_element(By.ID, "file").send_keys(str(JFK))
    driver.find_element(By.ID, "stream-file").click()
    status = driver.find_element(By.ID, "status")
    WebDriverWait(driver, 120, poll_frequency=0.5).until(
        lambda d: "finished" in status.text or "error" in status.get_attribute("class"))
    assert "finished" in status.text, status.text
    assert "country" in driver.find_element(By.ID, "final").text.lower()
