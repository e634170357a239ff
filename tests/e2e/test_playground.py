"""The playground page in a real browser: Debian's headless Chromium, driven by Selenium over its ChromeDriver.

A gateway with one tenant (so a wrong key gets OpenAI's 401), a synthetic engine paced at real time (so the test can
see audio playing while the response is still streaming, and which makes voices from samples) and espeak behind
``tts-1`` (which does not). Chromium's microphone is a fake capture device that plays a WAV file in a loop.
"""

from __future__ import annotations

import base64
import math
import struct
import time
import wave
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import Select, WebDriverWait

from auth import generate_api_key, hash_api_key
from harness.gateway_process import GatewayProcess

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from selenium.webdriver import Chrome
    from selenium.webdriver.remote.webdriver import WebDriver

pytestmark = pytest.mark.timeout(60)

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
KEY = generate_api_key()
#: 1.5 s of tones, spoken at real time: the response streams for about as long as it plays.
PACED_TEXT = "A paced synthetic sentence of fifty characters...."
CONFIG: dict[str, Any] = {
    "auth": {"tenants": [{"name": "web", "api_key_sha256": [hash_api_key(KEY)]}]},
    "engines": {
        "paced": {"kind": "synthetic", "options": {"rtf": 1.0, "seconds_per_char": 0.03}},
        "espeak": {"kind": "espeak"},
    },
    "aliases": {"tts-1": ["espeak"]},
    "cache": {"enabled": False},  # every request is synthesized, paced: a cached clip would arrive all at once
}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    with GatewayProcess(CONFIG, tmp_path_factory.mktemp("playground")) as process:
        yield process


def write_tone(path: Path, seconds: float, frequency: float, rate: int = 24000) -> Path:
    """A mono s16 WAV of a tone whose loudness wavers three times a second (a little like syllables)."""
    frames = (
        0.4 * 32767 * math.sin(2 * math.pi * frequency * i / rate) * (0.6 + 0.4 * math.sin(2 * math.pi * 3 * i / rate))
        for i in range(round(seconds * rate))
    )
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(b"".join(struct.pack("<h", round(frame)) for frame in frames))
    return path


@pytest.fixture(scope="module")
def microphone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What Chromium's fake capture device hears: 3 s of a 220 Hz tone at 48 kHz, looped."""
    return write_tone(tmp_path_factory.mktemp("microphone") / "microphone.wav", 3.0, 220.0, rate=48000)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory, microphone: Path) -> Iterator[Chrome]:
    missing = [str(path) for path in (CHROMIUM, CHROMEDRIVER) if not path.is_file()]
    if missing:
        pytest.fail(
            f"{', '.join(missing)} not found: install Debian's browser with "
            "`apt-get install -y chromium chromium-driver` (.ci/run does)"
        )
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--autoplay-policy=no-user-gesture-required",
        # getUserMedia is granted without a prompt and records the WAV file instead of a microphone.
        "--use-fake-ui-for-media-stream",
        "--use-fake-device-for-media-stream",
        f"--use-file-for-fake-audio-capture={microphone}",
        "--window-size=900,1100",
        f"--user-data-dir={tmp_path_factory.mktemp('chromium')}",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # Both paths given: Selenium Manager has nothing to look up or download.
    driver = webdriver.Chrome(options=options, service=Service(executable_path=str(CHROMEDRIVER)))
    driver.set_page_load_timeout(15)
    driver.set_script_timeout(10)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def page(browser: Chrome, gateway: GatewayProcess) -> Chrome:
    browser.get(f"{gateway.base_url}/playground")
    browser.execute_script("localStorage.clear()")
    browser.get_log("browser")  # drop what earlier tests logged
    return browser


def wait(driver: WebDriver, condition: Callable[[WebDriver], Any], timeout_s: float = 15.0) -> Any:
    return WebDriverWait(driver, timeout_s, poll_frequency=0.05).until(condition)


def state(driver: WebDriver) -> dict[str, str]:
    values: dict[str, str] = driver.execute_script(
        "const d = document.documentElement.dataset; return {state: d.state || '', played: d.played || '0',"
        " playback: d.playback || '', error: document.getElementById('error').textContent};"
    )
    return values


def paste_key(driver: WebDriver, key: str) -> None:
    field = driver.find_element(By.ID, "api-key")
    field.clear()
    field.send_keys(key, Keys.TAB)  # leaving the field reloads the models with the key


def choose(driver: WebDriver, select_id: str, value: str) -> None:
    wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, f"#{select_id} option[value='{value}']"))
    Select(driver.find_element(By.ID, select_id)).select_by_value(value)


def prepare(driver: WebDriver, model: str, voice: str, text: str, response_format: str) -> None:
    paste_key(driver, KEY)
    choose(driver, "model", model)
    wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#voice option[value='alloy']"))
    choose(driver, "voice", voice)
    area = driver.find_element(By.ID, "text")
    area.clear()
    area.send_keys(text)
    choose(driver, "format", response_format)


def download(driver: WebDriver) -> bytes:
    """The bytes behind the page's download link (a blob: URL), read inside the page."""
    link = driver.find_element(By.ID, "download")
    encoded: str = driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "fetch(arguments[0]).then(r => r.arrayBuffer()).then(b => {"
        " let s = ''; for (const x of new Uint8Array(b)) s += String.fromCharCode(x); done(btoa(s)); });",
        link.get_attribute("href"),
    )
    return base64.b64decode(encoded)


def test_page_is_public_and_self_contained(gateway: GatewayProcess) -> None:
    for path in ("/", "/playground"):
        response = httpx.get(gateway.base_url + path, timeout=5)
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/html")
        assert "connect-src 'self'" in response.headers["content-security-policy"]
        assert 'href="/docs"' in response.text
    for asset in ("playground.js", "playground.css"):
        assert httpx.get(f"{gateway.base_url}/playground/static/{asset}", timeout=5).status_code == 200
    assert "/playground" not in httpx.get(f"{gateway.base_url}/docs/openapi.json", timeout=5).text


# Each format by the path it plays on: mp3 through MediaSource, pcm and wav on Web Audio, flac as a live pcm stream
# (no browser decodes streamed flac) with the flac file fetched for the download.
@pytest.mark.parametrize(
    ("response_format", "playback", "magic"),
    [
        ("mp3", "mse", b""),
        ("pcm", "webaudio", b""),
        ("wav", "webaudio", b"RIFF"),
        ("flac", "webaudio", b"fLaC"),
    ],
)
def test_audio_plays_while_it_streams(page: Chrome, response_format: str, playback: str, magic: bytes) -> None:
    prepare(page, "paced", "nova", PACED_TEXT, response_format)
    page.find_element(By.ID, "speak").click()

    heard_while_streaming = wait(page, lambda d: (s := state(d))["state"] == "streaming" and float(s["played"]) > 0.1)
    assert heard_while_streaming, state(page)
    wait(page, lambda d: state(d)["state"] in {"done", "error"})
    final = state(page)
    assert final["state"] == "done", final
    assert final["playback"] == playback
    assert float(final["played"]) > 1.0, final  # most of the 1.5 s clip was heard
    assert page.find_element(By.ID, "ttfa").text.endswith(" s")
    assert page.find_element(By.ID, "total").text.endswith(" s")
    assert float(page.find_element(By.ID, "total").text[:-2]) >= 1.0  # paced: the stream lasted as long as the clip
    assert page.find_element(By.ID, "engine").text == "paced"

    wait(page, lambda d: d.find_element(By.ID, "download").is_displayed())
    assert page.find_element(By.ID, "download").get_attribute("download") == f"speech.{response_format}"
    audio = download(page)
    assert audio.startswith(magic)
    assert len(audio) >= (1.5 * 24000 * 2 if response_format == "pcm" else 1000)
    severe = [entry for entry in page.get_log("browser") if entry["level"] == "SEVERE"]
    assert not severe, severe


def test_speaks_with_espeak_and_looks_right(page: Chrome) -> None:
    prepare(page, "tts-1", "alloy", "Hello from the speech gateway playground.", "mp3")
    started = time.monotonic()
    page.find_element(By.ID, "speak").click()
    wait(page, lambda d: state(d)["state"] in {"done", "error"})
    final = state(page)
    assert final["state"] == "done", final
    assert float(final["played"]) > 1.0
    assert page.find_element(By.ID, "engine").text == "espeak"
    assert time.monotonic() - started < 15
    ARTIFACTS.mkdir(exist_ok=True)
    page.save_screenshot(str(ARTIFACTS / "playground.png"))


def test_a_wrong_key_shows_openai_error_message(page: Chrome, gateway: GatewayProcess) -> None:
    wrong = generate_api_key()
    expected = httpx.post(
        f"{gateway.base_url}/v1/audio/speech",
        headers={"Authorization": f"Bearer {wrong}"},
        json={"model": "tts-1", "input": "hi", "voice": "alloy"},
        timeout=10,
    )
    assert expected.status_code == 401
    message = expected.json()["error"]["message"]

    prepare(page, "tts-1", "alloy", "This must not be spoken.", "mp3")
    paste_key(page, wrong)
    page.find_element(By.ID, "speak").click()
    wait(page, lambda d: state(d)["state"] == "error")
    error = page.find_element(By.ID, "error")
    assert error.is_displayed()
    assert error.text == f"Error 401: {message}"
    assert float(state(page)["played"]) == 0


def test_the_setting_turns_the_page_off(tmp_path: Path) -> None:
    config = {"server": {"playground": False}, "engines": {"synthetic": {"kind": "synthetic"}}, "aliases": {}}
    with GatewayProcess(config, tmp_path) as process:
        for path in ("/", "/playground", "/playground/static/playground.js"):
            assert httpx.get(process.base_url + path, timeout=5).status_code == 404, path
        assert httpx.get(f"{process.base_url}/docs", timeout=5).status_code == 200


def live(driver: WebDriver) -> dict[str, str]:
    values: dict[str, str] = driver.execute_script(
        "const d = document.documentElement.dataset; return {live: d.live || '', segments: d.liveSegments || '0',"
        " played: d.played || '0', error: document.getElementById('error').textContent};"
    )
    return values


def test_speak_as_you_type_over_the_realtime_socket(page: Chrome) -> None:
    """Typing speaks each sentence once it ends (the key goes in the socket's first message); Speak says the rest."""
    prepare(page, "paced", "nova", "", "mp3")
    page.find_element(By.ID, "live").click()
    wait(page, lambda d: live(d)["live"] == "open")

    page.find_element(By.ID, "text").send_keys("Typed words are heard. And the rest")
    wait(page, lambda d: live(d)["segments"] == "1" and float(live(d)["played"]) > 0.3)
    assert page.find_element(By.ID, "status").text.startswith("Spoke: “Typed words are heard.”")
    page.find_element(By.ID, "speak").click()  # says "And the rest", which has no full stop
    wait(page, lambda d: live(d)["segments"] == "2")

    final = live(page)
    assert final["error"] == "", final
    assert page.find_element(By.ID, "ttfa").text.endswith(" s")
    assert page.find_element(By.ID, "engine").text == "paced"
    page.find_element(By.ID, "live").click()  # off: the socket closes
    wait(page, lambda d: live(d)["live"] == "")
    severe = [entry for entry in page.get_log("browser") if entry["level"] == "SEVERE"]
    assert not severe, severe


# ---- The Realtime (OpenAI) transport: /v1/realtime from the browser -------------------------------------------

#: 2.76 s of tones at real time: long enough to interrupt midway.
LONG_PACED_TEXT = "A paced sentence that takes a few seconds to say, long enough to interrupt it in the middle."


def realtime_state(driver: WebDriver) -> dict[str, str]:
    values: dict[str, str] = driver.execute_script(
        "const d = document.documentElement.dataset; return {state: d.state || '', played: d.played || '0',"
        " transport: d.transport || '', response: d.response || '', playback: d.playback || '',"
        " error: document.getElementById('error').textContent};"
    )
    return values


def speak_over_realtime(driver: WebDriver, text: str) -> None:
    prepare(driver, "paced", "nova", text, "mp3")
    choose(driver, "transport", "openai-realtime")
    assert not driver.find_element(By.ID, "format").is_enabled()  # the Realtime transport plays pcm
    assert not driver.find_element(By.ID, "live").is_enabled()
    driver.find_element(By.ID, "speak").click()


def test_speaks_through_openais_realtime_api(page: Chrome, gateway: GatewayProcess) -> None:
    """The key goes as the subprotocol openai-insecure-api-key.<key> (this gateway has a tenant: without it the
    handshake is refused); the out-of-band response's pcm deltas are heard while they stream; response.done's
    transcript and usage are shown; what played is what the HTTP endpoint answers for the same request."""
    speak_over_realtime(page, PACED_TEXT)

    heard_while_streaming = wait(
        page, lambda d: (s := realtime_state(d))["state"] == "streaming" and float(s["played"]) > 0.1
    )
    assert heard_while_streaming, realtime_state(page)
    wait(page, lambda d: realtime_state(d)["state"] in {"done", "error"})
    final = realtime_state(page)
    assert (final["state"], final["response"], final["error"]) == ("done", "completed", ""), final
    assert (final["transport"], final["playback"]) == ("openai-realtime", "webaudio")
    assert float(final["played"]) > 1.0, final  # most of the 1.5 s clip was heard
    assert page.find_element(By.ID, "spoken").text == PACED_TEXT
    assert page.find_element(By.ID, "usage").text == "50 characters, 75 audio tokens (1.50 s)"
    assert page.find_element(By.ID, "engine").text == "paced"
    assert page.find_element(By.ID, "ttfa").text.endswith(" s")

    wait(page, lambda d: d.find_element(By.ID, "download").is_displayed())
    body = {"model": "paced", "input": PACED_TEXT, "voice": "nova", "response_format": "pcm"}
    assert download(page) == api(gateway, "POST", "/v1/audio/speech", json=body).content
    severe = [entry for entry in page.get_log("browser") if entry["level"] == "SEVERE"]
    assert not severe, severe


def test_stop_cancels_the_realtime_response(page: Chrome) -> None:
    """Stop sends response.cancel: the response ends cancelled, its usage counts only the audio sent."""
    speak_over_realtime(page, LONG_PACED_TEXT)
    wait(page, lambda d: float(realtime_state(d)["played"]) > 0.3)
    page.find_element(By.ID, "stop").click()
    wait(page, lambda d: realtime_state(d)["response"] == "cancelled", timeout_s=5)

    final = realtime_state(page)
    assert (final["state"], final["error"]) == ("idle", ""), final
    assert page.find_element(By.ID, "status").text == "Stopped."
    assert page.find_element(By.ID, "spoken").text == LONG_PACED_TEXT
    usage = page.find_element(By.ID, "usage").text  # "92 characters, N audio tokens (S s)"
    sent_s = float(usage.rsplit("(", 1)[1].removesuffix(" s)"))
    assert 0.3 < sent_s < len(LONG_PACED_TEXT) * 0.03 / 2, usage  # it stopped well before the end
    assert not page.find_element(By.ID, "stop").is_enabled()


def test_a_refused_realtime_handshake_shows_openais_error(page: Chrome, gateway: GatewayProcess) -> None:
    """A browser cannot read a refused handshake's status or body: the page asks the same over HTTP."""
    wrong = generate_api_key()
    expected = httpx.get(f"{gateway.base_url}/v1/models/paced", headers={"Authorization": f"Bearer {wrong}"}, timeout=5)
    assert expected.status_code == 401

    prepare(page, "paced", "nova", "This must not be spoken.", "mp3")
    choose(page, "transport", "openai-realtime")
    paste_key(page, wrong)
    page.find_element(By.ID, "speak").click()
    wait(page, lambda d: realtime_state(d)["state"] == "error")
    assert page.find_element(By.ID, "error").text == f"Error 401: {expected.json()['error']['message']}"
    assert float(realtime_state(page)["played"]) == 0
    # The browser logs the refused handshake and the 401s (read here, so that no later test sees them), nothing else.
    severe = [entry["message"] for entry in page.get_log("browser") if entry["level"] == "SEVERE"]
    assert any("/v1/realtime" in message for message in severe), severe
    assert all("401" in message or "/v1/realtime" in message for message in severe), severe


def test_the_api_docs_render_offline_in_the_browser(browser: Chrome, gateway: GatewayProcess) -> None:
    """/docs is Swagger UI served by the gateway itself: the page renders its operations with no internet (Chromium
    here has none), from the app's own OpenAPI document."""
    browser.get(f"{gateway.base_url}/docs")
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, ".opblock-summary-path"))
    paths = {
        element.text.replace("\u200b", "")
        for element in browser.find_elements(By.CSS_SELECTOR, ".opblock-summary-path")
    }
    assert {"/v1/audio/speech", "/v1/models", "/v1/audio/voices"} <= paths
    requested = browser.execute_script("return performance.getEntriesByType('resource').map(e => e.name);")
    assert requested and all(url.startswith(gateway.base_url) for url in requested), requested
    severe = [entry for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]
    assert not severe, severe


# ---- New voice: consent and sample from the microphone or from files -------------------------------------------

#: How long each take is recorded from the fake microphone.
CONSENT_SECONDS = 2.0
SAMPLE_SECONDS = 3.0


def dataset(driver: WebDriver, name: str) -> str:
    value: str = driver.execute_script(f"return document.documentElement.dataset.{name} || ''")
    return value


def api(gateway: GatewayProcess, method: str, path: str, **kwargs: Any) -> httpx.Response:
    headers = {"Authorization": f"Bearer {KEY}"}
    return httpx.request(method, gateway.base_url + path, headers=headers, timeout=15, **kwargs)


def record(driver: WebDriver, kind: str, seconds: float) -> None:
    """Records ``seconds`` of the fake microphone as the consent or the sample, with the page's own buttons."""
    button = driver.find_element(By.ID, f"record-{kind}")
    button.click()
    wait(driver, lambda d: dataset(d, f"{kind}Take") == "recording")
    assert button.text == "Stop recording"
    time.sleep(seconds)
    button.click()
    wait(driver, lambda d: dataset(d, f"{kind}Take") == "ready")
    assert button.text == f"Record {kind}"
    assert driver.find_element(By.ID, f"{kind}-take").text.startswith("Recorded ")
    assert driver.find_element(By.ID, f"{kind}-preview").is_displayed()


def create_voice(driver: WebDriver) -> str:
    driver.find_element(By.ID, "create-voice").click()
    wait(driver, lambda d: dataset(d, "newVoice") in {"created", "error"}, timeout_s=30)
    return dataset(driver, "newVoice")


def voice_error(driver: WebDriver) -> str:
    error = driver.find_element(By.ID, "voice-error")
    return error.text if error.is_displayed() else ""


def chosen_voice(driver: WebDriver) -> tuple[str, str]:
    option = Select(driver.find_element(By.ID, "voice")).first_selected_option
    return option.get_attribute("value") or "", option.text


def listed_voices(gateway: GatewayProcess, model: str) -> dict[str, str]:
    response = api(gateway, "GET", "/v1/audio/voices", params={"model": model})
    assert response.status_code == 200, response.text
    return {voice["id"]: voice["name"] for voice in response.json()["data"]}


def consent_names(gateway: GatewayProcess) -> list[str]:
    response = api(gateway, "GET", "/v1/audio/voice_consents", params={"limit": 100})
    assert response.status_code == 200, response.text
    return [consent["name"] for consent in response.json()["data"]]


def speak_pcm(driver: WebDriver, text: str) -> bytes:
    """Speaks ``text`` with the chosen voice as pcm and returns what the page downloaded."""
    area = driver.find_element(By.ID, "text")
    area.clear()
    area.send_keys(text)
    choose(driver, "format", "pcm")
    driver.find_element(By.ID, "speak").click()
    wait(driver, lambda d: state(d)["state"] in {"done", "error"})
    assert state(driver)["state"] == "done", state(driver)
    wait(driver, lambda d: d.find_element(By.ID, "download").is_displayed())
    return download(driver)


def test_a_new_voice_from_the_microphone_is_chosen_and_speaks(page: Chrome, gateway: GatewayProcess) -> None:
    paste_key(page, KEY)
    choose(page, "model", "paced")
    wait(page, lambda d: d.find_element(By.ID, "voice-model").text == "paced")
    phrase = page.find_element(By.ID, "consent-phrase").text
    assert phrase.startswith("I am the owner of this voice.")
    assert "does not check what is said" in page.find_element(By.ID, "voice-form").text
    page.find_element(By.ID, "voice-name").send_keys("Fake microphone")

    record(page, "consent", CONSENT_SECONDS)
    record(page, "sample", SAMPLE_SECONDS)
    page.find_element(By.ID, "transcript").send_keys("A wavering tone from the fake microphone.")
    assert create_voice(page) == "created", voice_error(page)

    voice_id, label = chosen_voice(page)
    assert voice_id.startswith("voice_")
    assert label == "Fake microphone (custom)"
    assert page.find_element(By.ID, "voice-status").text == (
        f"The voice “Fake microphone” ({voice_id}) is ready and chosen in the Voice picker."
    )
    assert listed_voices(gateway, "paced")[voice_id] == "Fake microphone"
    assert "Fake microphone" in consent_names(gateway)
    assert page.find_element(By.ID, "voice-name").get_attribute("value") == ""  # the form is ready for another

    # The page speaks it as {"id": ...}: what it plays is what the API answers for that voice, not a built-in one.
    text = "Spoken in the new voice."
    heard = speak_pcm(page, text)
    body = {"model": "paced", "input": text, "response_format": "pcm"}
    assert heard == api(gateway, "POST", "/v1/audio/speech", json=body | {"voice": {"id": voice_id}}).content
    assert heard != api(gateway, "POST", "/v1/audio/speech", json=body | {"voice": "alloy"}).content
    severe = [entry for entry in page.get_log("browser") if entry["level"] == "SEVERE"]
    assert not severe, severe


def refusal(gateway: GatewayProcess, consent: Path, sample: Path, **form: str) -> dict[str, Any]:
    """What the API itself answers (an OpenAI error body) for a voice the page is about to ask for."""
    made = api(
        gateway,
        "POST",
        "/v1/audio/voice_consents",
        data={"name": "Reference", "language": "en-US"},
        files={"recording": consent.read_bytes()},
    )
    assert made.status_code == 201, made.text
    answer = api(
        gateway,
        "POST",
        "/v1/audio/voices",
        data={"name": "Reference", "consent": made.json()["id"], **form},
        files={"audio_sample": sample.read_bytes()},
    )
    assert answer.status_code == 400, answer.text
    error: dict[str, Any] = answer.json()["error"]
    return error


def test_a_new_voice_from_files_shows_the_api_errors(page: Chrome, gateway: GatewayProcess, tmp_path: Path) -> None:
    """The page says what is missing; then the API's refusals are shown as it words them, with the focus on the
    field at fault; the consent saved on the first try is used again on the last."""
    paste_key(page, KEY)
    choose(page, "model", "tts-1")  # espeak: it cannot make voices from samples
    page.find_element(By.ID, "create-voice").click()
    wait(page, lambda d: voice_error(d) == "Give the voice a name.")
    assert page.switch_to.active_element.get_attribute("id") == "voice-name"

    consent = write_tone(tmp_path / "consent.wav", 2.0, 330.0)
    sample = write_tone(tmp_path / "sample.wav", 3.0, 440.0)
    page.find_element(By.ID, "voice-name").send_keys("From files")
    page.find_element(By.ID, "consent-file").send_keys(str(consent))
    page.find_element(By.ID, "sample-file").send_keys(str(sample))
    wait(page, lambda d: dataset(d, "consentTake") == dataset(d, "sampleTake") == "ready")
    assert page.find_element(By.ID, "sample-take").text.startswith("File sample.wav (")

    for model, focus in (("tts-1", "model"), ("paced", "transcript")):  # no cloning; then no transcript
        expected = refusal(gateway, consent, sample, model=model)
        assert expected["param"] == focus
        choose(page, "model", model)
        assert create_voice(page) == "error"
        assert voice_error(page) == f"The voice was not created. Error 400: {expected['message']}"
        assert page.switch_to.active_element.get_attribute("id") == focus

    page.switch_to.active_element.send_keys("A steady tone from a file.")
    assert create_voice(page) == "created", voice_error(page)
    assert not page.find_element(By.ID, "voice-error").is_displayed()
    voice_id, label = chosen_voice(page)
    assert label == "From files (custom)"
    assert listed_voices(gateway, "paced")[voice_id] == "From files"
    assert consent_names(gateway).count("From files") == 1
    assert speak_pcm(page, "Files make voices too.")
