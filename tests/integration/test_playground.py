"""The web playground in real headless Chromium (Selenium), against the stack."""

from __future__ import annotations

import shutil
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.stack import EVAL, Stack

pytestmark = pytest.mark.stack

JFK = EVAL / "real" / "whisper" / "jfk.flac"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
FLAGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--no-first-run", "--window-size=1200,1400", "--autoplay-policy=no-user-gesture-required",
         "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream"]


def png_pixels(data: bytes, max_rows: int = 400) -> tuple[int, int, list[bytes]]:
    """A tiny PNG reader (8-bit RGB/RGBA, no interlace): width, height and the first
    ``max_rows`` unfiltered rows (a row's filter needs only the rows above it)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        (length,), kind = struct.unpack(">I", data[pos:pos + 4]), data[pos + 4:pos + 8]
        chunk = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", chunk)
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + length
    assert header is not None
    width, height, depth, colour, _, _, interlace = header
    assert depth == 8 and colour in (2, 6) and interlace == 0
    bpp = 3 if colour == 2 else 4
    raw, stride, rows, prev = zlib.decompress(idat), width * bpp, [], bytearray(width * bpp)
    for y in range(min(height, max_rows)):
        at = y * (stride + 1)
        kind, line = raw[at], bytearray(raw[at + 1:at + 1 + stride])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + a) & 255
            elif kind == 2:
                line[i] = (line[i] + b) & 255
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return width, height, rows


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    if not (CHROMIUM and CHROMEDRIVER):
        pytest.fail("chromium and chromedriver are not installed (ops/install.sh installs them)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_script_timeout(30)
    yield driver
    driver.quit()


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
