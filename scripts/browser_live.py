"""Browser checks of the live models (book/_static/live-model.js), called by
scripts/browser_test.py on the pages that hold one.

The page's numbers are compared with PyTorch's, computed here on the same models (the ones
``make live-models`` exported, from the model cache):

- Chapter 7: for two fixed prompts (one longer than the context, which the page crops as
  ``generate`` does), the logits of each of 30 greedy steps equal ``GPT.forward``'s on the
  same window within ``TOL``, and the 30 characters are ``generate(..., greedy=True)``'s;
  the seeded sampler gives the same text on two runs, and another seed another text; an
  empty prompt, unknown characters, a text file, a foreign ONNX model and a file cut short
  each get their message; Stop ends a run of 2,000 tokens; the sampler's distribution
  (top-k, temperature, top-p) is ``next_token``'s within 1e-5 for six settings; the book's
  own file, loaded as "your own model", gives the same greedy text; the form's Top-k of 1
  and Top-p of 0.01 each give the greedy text at temperature 1. The prompt runs on Enter
  (the keyboard) and, at 390 px, on a tap (touch events, Chromium's touch emulation), with
  the form no wider than the window, where Enter types a new line (a phone's keyboard has
  no Shift+Enter) and "Load your own model" is a thumb's height.
- Chapter 13: each head's attention pattern and the logit lens equal
  ``GPT.attention_maps`` and ``interp.logit_lens`` within ``TOL``.
- Chapter 12: two chat turns are ``chat.chat``'s answers, and a chat marker typed as text is
  refused.
- Without WebAssembly (the global deleted before the page's scripts run, as in a browser
  whose policy turns it off: Chromium's --js-flags=--noexpose_wasm leaves it), the widget
  is one sentence; with JavaScript off (``Emulation.setScriptExecutionDisabled``), the
  sentence the page holds until its script runs (book/_ext/live_model.py's ``NO_SCRIPT``).

Budgets, measured and printed (not bars, except the page weight before Run, which
scripts/browser_phone.py holds to its 4 MB bar for interactive pages): the page weight
before Run, the bytes downloaded on pressing Run, the time to the first token (cold: ONNX
Runtime and the model loaded; warm) and tokens per second over 200 sampled tokens. They go
to ``_build/live-budgets.json`` too.
"""

from __future__ import annotations

import functools
import json
import tempfile
import time
from pathlib import Path

from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

ROOT = Path(__file__).resolve().parent.parent
LIVE = {"notebooks/07_generation": "generate", "notebooks/12_assistant": "chat",
        "notebooks/13_inside": "inside"}
# float32 in both, different kernels (ONNX Runtime's WebAssembly SIMD, PyTorch's CPU): see
# the report's "largest |page - PyTorch|" lines for what was measured; logits reach ~15.
TOL = 1e-4
GREEDY = ["ROMEO:\n", "First Citizen:\nBefore we proceed any further, hear me speak.\n"
          "All:\nSpeak, speak.\n"]  # 80 characters: longer than the context of 64
WAIT_S = 120

# Bytes the page has loaded so far (uncompressed, as browser_phone weighs a page), and
# the requests for ONNX Runtime or a model.
LOADED = """
const entries = [...performance.getEntriesByType('navigation'),
                 ...performance.getEntriesByType('resource')];
return {bytes: entries.reduce((sum, r) => sum + (r.decodedBodySize || 0), 0),
        transfer: entries.reduce((sum, r) => sum + (r.transferSize || 0), 0),
        live: entries.map(r => r.name).filter(n => /\\/(ort|models)\\//.test(n))};
"""


@functools.cache
def models():
    """The PyTorch models behind the page's ONNX files (scripts/live_models.py's), read from
    the cache entries ``make live-models`` exported: an entry is keyed by the arithmetic, so
    under other settings this process would train and compare another model; it says so
    instead (``book_models(cached_only=True)``)."""
    from scripts.live_models import book_models

    return book_models(cached_only=True)


def _root(driver):
    return driver.find_element(By.CSS_SELECTOR, "div.live-model")


def _wait(driver, root) -> str:
    """Wait for the widget's run to end; its status line."""
    end = time.monotonic() + WAIT_S
    while driver.execute_script("return arguments[0].liveModel.running", root):
        if time.monotonic() > end:
            raise TimeoutError(f"the live model still runs after {WAIT_S} s")
        time.sleep(0.1)
    return root.find_element(By.CSS_SELECTOR, ".live-status").text


def _set(root, name: str, value) -> None:
    field = root.find_element(By.NAME, name)
    field.clear()
    field.send_keys(str(value))


def _prompt(driver, root, text: str) -> None:
    """Type ``text`` into the prompt (a newline with Shift+Enter) and press Enter."""
    field = root.find_element(By.NAME, "prompt")
    driver.execute_script("arguments[0].value = ''", field)
    lines = text.split("\n")
    for i, line in enumerate(lines):
        field.send_keys(line)
        if i < len(lines) - 1:
            field.send_keys(Keys.SHIFT, Keys.ENTER, Keys.SHIFT)  # Shift up again
    field.send_keys(Keys.ENTER)


def _generated(driver, root) -> str:
    return driver.execute_script(
        "return [...arguments[0].querySelectorAll('.live-token')].map(t => t.textContent)"
        ".join('')", root)


def _trace(driver, root) -> list[dict]:
    return driver.execute_script("return arguments[0].liveModel.trace", root)


def _logit_gap(model, trace: list[dict]) -> float:
    """The largest |page - PyTorch| over every step's last-position logits."""
    import torch

    gap = 0.0
    with torch.no_grad():
        for step in trace:
            logits, _ = model(torch.tensor([step["window"]]))  # (1, T, V)
            page = torch.tensor(step["logits"])
            gap = max(gap, (logits[0, -1] - page).abs().max().item())
    return gap


def _upload(driver, root, path: Path) -> str:
    """Give ``path`` to "Load your own model"; the status line once it is read."""
    root.find_element(By.CSS_SELECTOR, "details.live-own summary").click()
    field = root.find_element(By.CSS_SELECTOR, "input[type=file]")
    driver.execute_script("arguments[0].value = ''", field)
    field.send_keys(str(path))
    end = time.monotonic() + WAIT_S
    status = root.find_element(By.CSS_SELECTOR, ".live-status")
    while status.text.startswith("Reading") or not status.text:
        if time.monotonic() > end:
            break
        time.sleep(0.1)
    return status.text


def _foreign_files(folder: Path, book_file: Path) -> dict[str, tuple[Path, str]]:
    """Files that are not the book's models, each with the message the page must give."""
    import onnx

    text = folder / "notes.onnx"
    text.write_text("hello, this is not ONNX\n")
    x = onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])
    y = onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])
    other = onnx.helper.make_model(onnx.helper.make_graph(
        [onnx.helper.make_node("Identity", ["x"], ["y"])], "g", [x], [y]))
    onnx.save_model(other, folder / "other.onnx")
    cut = folder / "cut.onnx"
    cut.write_bytes(book_file.read_bytes()[:len(book_file.read_bytes()) // 2])
    return {"a text file": (text, "is not a complete ONNX file"),
            "another ONNX model": (folder / "other.onnx", "not one of the book's models"),
            "a file cut short": (cut, "is not a complete ONNX file")}


# The page's sampling distribution (live-model.js's samplingProbs) for one logits row.
PAGE_PROBS = """
const [logits, options, done] = arguments;
import(new URL('../_static/live-model.js', location.href).href)
  .then(m => done(m.samplingProbs(logits, options)), err => done(String(err)));
"""
SETTINGS = [(0.8, None, 0.95), (1.0, 5, None), (0.5, None, 0.5), (1.7, 10, 0.9),
            (1.0, 1, None), (3.0, None, 1.0)]  # (temperature, top_k, top_p)


def _check_sampler(driver, root, model) -> list[str]:
    """The page draws from ``next_token``'s distribution: for the logits of the last run's
    steps and each of ``SETTINGS``, its probabilities equal the chapter's filters' (top-k,
    temperature, top-p, softmax) within 1e-5, and it keeps the same tokens."""
    import torch

    from gpt_from_scratch.generate import top_k_filter, top_p_filter

    problems = []
    for step in _trace(driver, root)[:40:8]:
        logits = torch.tensor(step["logits"])  # (V,)
        for temperature, top_k, top_p in SETTINGS:
            options = {"temperature": temperature, "topk": top_k, "topp": top_p}
            page = torch.tensor(driver.execute_async_script(PAGE_PROBS, step["logits"],
                                                            options))
            x = top_k_filter(logits, top_k) if top_k else logits
            x = (x - x.max()) / temperature
            x = top_p_filter(x, top_p) if top_p else x
            expected = torch.softmax(x, dim=-1)
            if not (torch.equal(page > 0, expected > 0)
                    and (page - expected).abs().max() <= 1e-5):
                problems.append(f"the page's sampling distribution at {options} keeps "
                                f"{int((page > 0).sum())} tokens, next_token's "
                                f"{int((expected > 0).sum())}, off by "
                                f"{(page - expected).abs().max():.1e}")
    return problems


def check_generate(driver, base: str, page: str, budgets: dict) -> list[str]:
    """Chapter 7's widget (see the module's docstring)."""
    import torch

    from gpt_from_scratch.generate import generate

    model, tokenizer = models()["shakespeare-char"]
    problems = []
    root = _root(driver)
    before = driver.execute_script(LOADED)
    if before["live"]:
        problems.append(f"ONNX Runtime or a model loaded before Run: {before['live'][:2]}")
    budgets["page weight before Run (MB)"] = round(before["bytes"] / 2**20, 3)
    _set(root, "temperature", 0)
    _set(root, "tokens", 30)
    gaps, greedy = [], []
    for n, prompt in enumerate(GREEDY):
        _prompt(driver, root, prompt)  # Enter runs it: the keyboard
        status = _wait(driver, root)
        if n == 0:
            after = driver.execute_script(LOADED)
            budgets["bytes downloaded on pressing Run (MB)"] = round(
                (after["bytes"] - before["bytes"]) / 2**20, 3)
            budgets["bytes transferred on pressing Run (MB)"] = round(
                (after["transfer"] - before["transfer"]) / 2**20, 3)
            budgets["first token, cold (ms)"] = round(driver.execute_script(
                "return arguments[0].liveModel.stats.firstTokenMs", root))
        text = _generated(driver, root)
        idx = torch.tensor([tokenizer.encode(prompt)])
        expected = tokenizer.decode(generate(model, idx, 30, greedy=True)[0, -30:].tolist())
        greedy.append(expected)
        if text != expected:
            problems.append(f"greedy from {prompt[:20]!r}: the page wrote {text!r}, "
                            f"generate {expected!r}")
        trace = _trace(driver, root)
        gaps.append(_logit_gap(model, trace))
        if len(trace) != 30:
            problems.append(f"greedy from {prompt[:20]!r}: {len(trace)} steps, not 30")
        if len(prompt) > 64 and "newest 64" not in status:
            problems.append(f"a prompt of {len(prompt)} characters: no word of the crop in "
                            f"{status!r}")
    budgets["largest |page - PyTorch| logit"] = max(gaps)
    if max(gaps) > TOL:
        problems.append(f"the page's logits differ from PyTorch's by {max(gaps):.2e}")
    budgets["first token, warm (ms)"] = round(driver.execute_script(
        "return arguments[0].liveModel.stats.firstTokenMs", root))
    _set(root, "temperature", 0.8)
    _set(root, "tokens", 200)
    samples = []
    for seed in (1337, 1337, 7):
        _set(root, "seed", seed)
        _prompt(driver, root, "ROMEO:\n")
        _wait(driver, root)
        samples.append(_generated(driver, root))
    problems += _check_sampler(driver, root, model)
    budgets["tokens per second (200 sampled)"] = round(driver.execute_script(
        "return arguments[0].liveModel.stats.tokensPerSecond", root), 1)
    if samples[0] != samples[1] or len(samples[0]) != 200:
        problems.append(f"seed 1337 twice gave {samples[0][:30]!r} and {samples[1][:30]!r}")
    if samples[2] == samples[0]:
        problems.append("seeds 1337 and 7 gave the same 200 characters")
    _set(root, "tokens", 2000)
    _prompt(driver, root, "ROMEO:\n")
    time.sleep(0.5)
    root.find_element(By.CSS_SELECTOR, "button.live-stop").click()
    status = _wait(driver, root)
    if not status.startswith("Stopped") or len(_generated(driver, root)) >= 2000:
        problems.append(f"Stop during a run of 2,000 tokens: {status[:60]!r}")
    # The form's Top-k and Top-p reach the sampler: at temperature 1, either at their least
    # keeps the likeliest token alone, so the page writes the greedy text.
    _set(root, "tokens", 30)
    for name, value in (("top_k", 1), ("top_p", 0.01)):
        for setting in (("temperature", 1), ("top_k", 0), ("top_p", 1), (name, value)):
            _set(root, *setting)
        _prompt(driver, root, GREEDY[0])
        _wait(driver, root)
        if _generated(driver, root) != greedy[0]:
            problems.append(f"{name} = {value} at temperature 1 in the form wrote "
                            f"{_generated(driver, root)!r}, not the greedy {greedy[0]!r}")
    _set(root, "top_p", 0.95)
    unknown = "does not know these characters: \"é\", \"“\""
    for prompt, expected in (("", "Type a prompt first"), ("Café “ROMEO”", unknown)):
        _prompt(driver, root, prompt)
        status = _wait(driver, root)
        if expected not in status:
            problems.append(f"the prompt {prompt!r} showed {status!r}, not {expected!r}")
    book_file = ROOT / ".live" / "models" / "shakespeare-char.onnx"
    with tempfile.TemporaryDirectory() as folder:
        for what, (path, expected) in _foreign_files(Path(folder), book_file).items():
            status = _upload(driver, root, path)
            if expected not in status:
                problems.append(f"{what} as your own model showed {status!r}")
    status = _upload(driver, root, book_file)
    if not status.startswith("Loaded shakespeare-char.onnx"):
        problems.append(f"the book's own file as your own model showed {status!r}")
    _set(root, "temperature", 0)
    _set(root, "tokens", 30)
    _prompt(driver, root, GREEDY[0])
    _wait(driver, root)
    idx = torch.tensor([tokenizer.encode(GREEDY[0])])
    expected = tokenizer.decode(generate(model, idx, 30, greedy=True)[0, -30:].tolist())
    if _generated(driver, root) != expected:
        problems.append("the book's file loaded as your own model wrote "
                        f"{_generated(driver, root)!r}, not {expected!r}")
    return problems + check_touch(driver, base + page + ".html")


def check_touch(driver, url: str) -> list[str]:
    """At 390 px, with touch events: the form fits the window, the Run button is a thumb's
    size, and a tap on it runs the model."""
    problems = []
    width = driver.get_window_size()["width"]
    driver.set_window_size(390, 900)
    driver.execute_cdp_cmd("Emulation.setTouchEmulationEnabled",
                           {"enabled": True, "maxTouchPoints": 1})
    try:
        driver.get(url)
        time.sleep(0.5)
        root = _root(driver)
        driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", root)
        box = driver.execute_script(
            "const r = arguments[0].getBoundingClientRect(), b = arguments[0]"
            ".querySelector('button.live-run').getBoundingClientRect();"
            "return {right: r.right, window: document.documentElement.clientWidth, "
            "x: b.x + b.width / 2, y: b.y + b.height / 2, height: b.height};", root)
        if box["right"] > box["window"] + 1:
            problems.append(f"at 390 px the live model is {box['right']:.0f} px wide")
        if box["height"] < 40:
            problems.append(f"at 390 px the Run button is {box['height']:.0f} px tall")
        summary = root.find_element(By.CSS_SELECTOR, "details.live-own summary")
        if summary.size["height"] < 40:
            problems.append(f"at 390 px 'Load your own model' is {summary.size['height']} "
                            "px tall")
        field = root.find_element(By.NAME, "prompt")  # a phone's Enter: a new line
        field.send_keys(Keys.END, Keys.ENTER)
        if not field.get_attribute("value").endswith("\n\n"):  # a run prevents it
            problems.append("at 390 px with touch, Enter did not type a new line")
        _set(root, "tokens", 20)
        point = [{"x": box["x"], "y": box["y"]}]
        driver.execute_cdp_cmd("Input.dispatchTouchEvent",
                               {"type": "touchStart", "touchPoints": point})
        driver.execute_cdp_cmd("Input.dispatchTouchEvent",
                               {"type": "touchEnd", "touchPoints": []})
        time.sleep(0.3)
        _wait(driver, root)
        if len(_generated(driver, root)) != 20:
            problems.append("at 390 px a tap on Run did not generate 20 characters")
    finally:
        driver.execute_cdp_cmd("Emulation.setTouchEmulationEnabled", {"enabled": False})
        driver.set_window_size(width, 1600)
    return problems


def check_inside(driver, budgets: dict) -> list[str]:
    """Chapter 13's widget: attention patterns and logit lens against PyTorch's."""
    import torch

    from gpt_from_scratch import interp

    model, tokenizer = models()["shakespeare-char"]
    root = _root(driver)
    text = "ROMEO: Is the day so young?"
    field = root.find_element(By.NAME, "text")
    field.clear()
    field.send_keys(text + Keys.ENTER)
    _wait(driver, root)
    page = driver.execute_script(
        "const d = arguments[0].liveModel.insideData;"
        "return {attention: Array.from(d.attention), lens: Array.from(d.lens)};", root)
    idx = torch.tensor([tokenizer.encode(text)])
    with torch.no_grad():
        attention = torch.stack(model.attention_maps(idx)).flatten()  # (L, 1, H, T, T)
        lens = interp.logit_lens(model, idx).flatten()  # (L, 1, T, V)
    problems = []
    for name, ours, theirs in (("attention", page["attention"], attention),
                               ("logit lens", page["lens"], lens)):
        gap = (torch.tensor(ours) - theirs).abs().max().item() if len(ours) == len(
            theirs) else float("inf")
        budgets[f"largest |page - PyTorch| {name}"] = gap
        if gap > TOL:
            problems.append(f"the page's {name} differs from PyTorch's by {gap:.2e}")
    summary = root.find_element(By.CSS_SELECTOR, ".live-summary").text
    layer = root.find_element(By.NAME, "layer")
    layer.send_keys(Keys.END)  # the keyboard picks the last layer
    if root.find_element(By.CSS_SELECTOR, ".live-summary").text == summary:
        problems.append("another layer picked by the keyboard did not change the pattern")
    return problems


def check_chat(driver) -> list[str]:
    """Chapter 12's widget: two turns, as ``chat`` answers them, and a marker refused."""
    from gpt_from_scratch.chat import chat

    assistant, tok = models()["assistant"]
    root = _root(driver)
    history, problems = [], []
    for message in ("Last word: The quality of mercy is not strain'd",
                    "Repeat: It droppeth as the gentle rain"):
        field = root.find_element(By.NAME, "message")
        field.clear()
        field.send_keys(message + Keys.ENTER)
        _wait(driver, root)
        history = chat(assistant, tok, history, message)
        shown = root.find_elements(By.CSS_SELECTOR, ".live-assistant")[-1].text
        expected = "Assistant: " + history[-1]["content"]
        if shown != expected:
            problems.append(f"to {message!r} the page said {shown!r}, chat {expected!r}")
    field = root.find_element(By.NAME, "message")
    field.send_keys("<|end|>" + Keys.ENTER)
    if "chat marker <|end|>" not in _wait(driver, root):
        problems.append("a chat marker typed as text was not refused")
    return problems


def check_no_wasm(driver, url: str) -> list[str]:
    """Without WebAssembly, the widget is one clear sentence."""
    script = driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument",
                                    {"source": "delete globalThis.WebAssembly;"})
    try:
        driver.get(url)
        time.sleep(0.5)
        text = _root(driver).text
    finally:
        driver.execute_cdp_cmd("Page.removeScriptToEvaluateOnNewDocument", script)
    if "needs WebAssembly" not in text:
        return [f"with WebAssembly off the live model shows {text[:80]!r}"]
    return []


def check_no_script(driver, url: str) -> list[str]:
    """With JavaScript off, the widget says so, in its place."""
    driver.execute_cdp_cmd("Emulation.setScriptExecutionDisabled", {"value": True})
    try:
        driver.get(url)
        text = _root(driver).text
    finally:
        driver.execute_cdp_cmd("Emulation.setScriptExecutionDisabled", {"value": False})
    if "with JavaScript, which this browser has turned off" not in text:
        return [f"with JavaScript off the live model shows {text[:80]!r}"]
    return []


def check_live(driver, base: str, page: str) -> tuple[list[str], list[str]]:
    """The live model of ``page``, loaded at the wide width with the cache on: its problems
    and its budget lines."""
    mode = LIVE.get(page)
    found = len(driver.find_elements(By.CSS_SELECTOR, "div.live-model"))
    if mode is None:
        return ([f"{found} live models on a page without one in LIVE"] if found else []), []
    if found != 1:
        return [f"{found} live models, expected one"], []
    url = base + page + ".html"
    driver.execute_cdp_cmd("Network.setCacheDisabled", {"cacheDisabled": True})
    try:
        driver.get(url)
        time.sleep(0.5)
        budgets: dict = {}
        if mode == "generate":
            problems = check_generate(driver, base, page, budgets)
        elif mode == "inside":
            problems = check_inside(driver, budgets)
        else:
            problems = check_chat(driver)
    finally:
        driver.execute_cdp_cmd("Network.setCacheDisabled", {"cacheDisabled": False})
    problems += check_no_wasm(driver, url) + check_no_script(driver, url)
    out = ROOT / "_build" / "live-budgets.json"
    saved = json.loads(out.read_text()) if out.exists() else {}
    out.write_text(json.dumps(saved | {page: budgets}, indent=1) + "\n")
    return problems, [f"live model: {key} {value}" for key, value in budgets.items()]
