"""The HTML report of a long prompt: its size bounded at 512 and 2,048 tokens; each head a picture,
each row on its own scale; at full resolution (a pixel a weight) while the report's budget of
pixels allows, else downsampled and said so, with the command that writes every weight, which
works. The PNG pictures are decoded here with zlib alone, not with the program's reader."""

from __future__ import annotations

import base64
import html
import re
import shlex
import struct
import subprocess
import zlib
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from tests.test_keep import LAYERS, long_checkpoint  # noqa: F401  (the fixture: a 6-layer Llama, 2,048 positions)
from transformer_walkthrough.checkpoints.run import walk_prompt
from transformer_walkthrough.cli import app
from transformer_walkthrough.model.trace import Keep
from transformer_walkthrough.views.palette import sequential

REPORT_MB = 20  # the bound: "under about 20 MB" at 2,048 tokens
HEADS = 4
SHADES = 254  # a picture's index k is k/254 of its row's largest weight; 255 is a masked block
GREY = (0xE4, 0xE7, 0xEE)


def decode(data: bytes) -> tuple[np.ndarray, list[tuple[int, ...]]]:
    """The pixels (palette indices) and the palette of an 8-bit palette PNG of unfiltered rows."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    at, chunks = 8, {}
    while at < len(data):
        length, kind = struct.unpack(">I4s", data[at : at + 8])
        body = data[at + 8 : at + 8 + length]
        assert struct.unpack(">I", data[at + 8 + length : at + 12 + length])[0] == zlib.crc32(kind + body)
        chunks[kind] = chunks.get(kind, b"") + body
        at += 12 + length
    width, height, depth, colour = struct.unpack(">IIBB", chunks[b"IHDR"][:10])
    assert (depth, colour) == (8, 3)
    rows = np.frombuffer(zlib.decompress(chunks[b"IDAT"]), dtype=np.uint8).reshape(height, width + 1)
    assert not rows[:, 0].any()  # filter 0: the bytes are the indices
    plte = chunks[b"PLTE"]
    return rows[:, 1:], [tuple(plte[k : k + 3]) for k in range(0, len(plte), 3)]


def report(folder: Path, prompt: str, target: Path) -> str:
    done = CliRunner().invoke(app, ["export", str(target), "--model", str(folder), "--prompt", prompt])
    assert done.exit_code == 0, done.output
    return target.read_text(encoding="utf-8")


def pictures(page: str) -> list[tuple[int, int, str, np.ndarray, list[tuple[int, ...]], str]]:
    """Each head's picture: (layer, head, what its enlarged caption says, pixels, palette, img tag)."""
    found = re.findall(
        r'<figure class="att" id="att-decoder\.(\d+)\.masked-attention-(\d+)">.*?'
        r'<span class="said">(.*?)</span>.*?(<img [^>]*src="data:image/png;base64,([^"]+)">)',
        page,
    )
    out = []
    for layer, head, said, tag, data in found:
        pixels, palette = decode(base64.b64decode(data))
        out.append((int(layer), int(head), html.unescape(re.sub(r"<[^>]+>", "", said)), pixels, palette, tag))
    return out


def shades(means: np.ndarray, hidden: np.ndarray) -> np.ndarray:
    """What each pixel should be, worked out here: 254 × the value / its row's largest visible one."""
    seen = np.where(hidden, 0.0, means.astype(np.float64))
    peak = seen.max(axis=1, keepdims=True)
    return np.where(hidden, 255.0, SHADES * seen / np.where(peak > 0, peak, 1.0))


def heads_of(folder: Path, prompt: str) -> tuple[int, dict[tuple[int, int], np.ndarray]]:
    kept = walk_prompt(str(folder), prompt, keep=Keep.stages(["masked-attention"])).trace
    n = len(kept.target_tokens)
    return n, {
        (layer, h): kept[f"decoder.{layer}.masked-attention"].of("A", h) for layer in range(LAYERS)
        for h in range(1, HEADS + 1)
    }  # fmt: skip


@pytest.fixture(scope="module")
def report_512(long_checkpoint, tmp_path_factory) -> tuple[Path, str]:  # noqa: F811
    """The HTML report of a prompt of 512 tokens on the long checkpoint."""
    prompt = " ".join(["The cat sat on the mat."] * 64)
    target = tmp_path_factory.mktemp("report") / "r512.html"
    report(long_checkpoint, prompt, target)
    return target, prompt


def test_a_512_token_report_draws_every_head_at_full_resolution(long_checkpoint, report_512) -> None:  # noqa: F811
    """512 × 512 × 24 heads fit the report's budget of pixels: each picture is its head at full
    resolution, a pixel a weight, each row on its own scale; no command is needed to see it."""
    target, prompt = report_512
    page = target.read_text(encoding="utf-8")
    assert len(page.encode("utf-8")) < 10 * 10**6
    n, heads = heads_of(long_checkpoint, prompt)
    assert 500 <= n <= 512
    drawn = pictures(page)
    assert {(layer, h) for layer, h, *_ in drawn} == set(heads)
    causal = np.triu(np.ones((n, n), dtype=bool), 1)
    for layer, h, said, pixels, palette, tag in drawn:
        assert said.startswith(f"{n:,} × {n:,} at full resolution: a pixel a weight, each row on its own")
        assert "walkthrough export" not in said
        assert pixels.shape == (n, n)
        assert palette[0] == (255, 255, 255) and palette[SHADES] == sequential(1.0) and palette[255] == GREY
        A = heads[layer, h]
        want = shades(A, causal)
        assert (pixels[causal] == 255).all()  # every masked weight grey
        assert np.abs(pixels[~causal] - want[~causal]).max() <= 0.5 + 1e-3, (layer, h)
        # enlarged, one screen pixel a weight (768 // 512 = 1)
        assert f'width="{n}" height="{n}"' in tag and f"--w: {n}px; --h: {n}px" in tag
    # a flat head is not white: most visible pixels are past a quarter of their row's largest
    assert np.mean(drawn[0][3][~causal] > SHADES / 4) > 0.5


@pytest.mark.slow
def test_one_click_opens_a_head_at_full_resolution_in_a_real_browser(report_512) -> None:
    """In headless Chromium: a head is a thumbnail; a click opens it with one screen pixel a weight,
    its picture decoded at its full n × n."""
    from tests.test_documents import WebDriver, need

    target, _ = report_512
    page = target.read_text(encoding="utf-8")
    n = int(re.search(r"([\d,]+) × [\d,]+ at full resolution", page).group(1).replace(",", ""))
    figure = f"att-decoder.{LAYERS - 1}.masked-attention-3"
    seen = (
        "const f = document.getElementById(arguments[0]); const i = f.querySelector('img');"
        "const r = i.getBoundingClientRect(); return [getComputedStyle(f).position, r.width, r.height,"
        "i.naturalWidth, i.naturalHeight, i.complete, f.querySelector('.said').innerText];"
    )
    driver = WebDriver(need("chromedriver"), need("chromium"))
    try:
        driver("POST", "/url", {"url": target.as_uri()})
        before = driver("POST", "/execute/sync", {"script": seen, "args": [figure]})
        link = driver("POST", "/element", {"using": "css selector", "value": f'a[href="#{figure}"]'})
        driver("POST", "/execute/sync", {"script": "arguments[0].scrollIntoView()", "args": [link]})
        driver("POST", f"/element/{next(iter(link.values()))}/click", {})
        after = driver("POST", "/execute/sync", {"script": seen, "args": [figure]})
    finally:
        driver.close()
    assert before[0] == "static" and before[1:3] == [96, 96]  # a thumbnail in the grid
    assert after[0] == "fixed" and after[1:3] == [n, n]  # enlarged: a screen pixel a weight
    assert after[3:6] == [n, n, True]  # the picture itself is n × n, and decoded
    assert after[6].startswith(f"{n:,} × {n:,} at full resolution")


@pytest.fixture(scope="module")
def long_report(long_checkpoint, tmp_path_factory) -> tuple[Path, str]:  # noqa: F811
    """The HTML report of a prompt of 2,000-odd tokens on the long checkpoint (streamed)."""
    prompt = " ".join(["The cat sat on the mat."] * 255)  # 2,041 tokens
    target = tmp_path_factory.mktemp("report") / "long.html"
    report(long_checkpoint, prompt, target)
    return target, prompt


def test_a_2048_token_report_is_small_downsampled_said_so_and_its_command_writes_the_head(
    long_checkpoint,  # noqa: F811
    long_report,
    tmp_path,
) -> None:
    target, prompt = long_report
    page = target.read_text(encoding="utf-8")
    assert len(page.encode("utf-8")) < REPORT_MB * 10**6
    n, heads = heads_of(long_checkpoint, prompt)
    assert n > 2000
    drawn = pictures(page)
    assert {(layer, h) for layer, h, *_ in drawn} == set(heads)  # every head of every layer
    commands = set()
    for layer, h, said, pixels, _, tag in drawn:
        (f,) = {int(k) for k in re.findall(r"downsampled (\d+) × (\d+)", said)[0]}

        # the smallest f whose pictures show at most 3,500,000 weights (a causal head's triangle)
        def shown(side: int) -> int:
            return len(heads) * side * (side + 1) // 2

        assert f > 1 and shown(-(-n // (f - 1))) > 3_500_000 >= shown(-(-n // f))
        side = -(-n // f)
        assert said.startswith(f"downsampled {f} × {f}: {n:,} × {n:,} shown as {side:,} × {side:,}, each")
        assert pixels.shape == (side, side)
        A = heads[layer, h].astype(np.float64)
        edges = np.arange(0, n, f)
        sums = np.add.reduceat(np.add.reduceat(A, edges, axis=0), edges, axis=1)
        sizes = np.outer(np.diff([*edges, n]), np.diff([*edges, n]))
        whole = edges[None, :] > edges[:, None] + f - 1  # every key of the block after every query
        want = shades(sums / sizes, whole)
        assert (pixels[whole] == 255).all()
        assert np.abs(pixels[~whole] - want[~whole]).max() <= 0.5 + 1e-3, (layer, h)
        zoom = max(1, 768 // side)
        assert f"--w: {side * zoom}px" in tag
        # the command that writes every weight of this head, and where the head is in what it writes
        command = re.search(r"every weight: (walkthrough export .*?) with the options above the grid", said)
        assert command is not None and said.endswith(f"its weights as decoder.{layer}.masked-attention/A{h}")
        commands.add((command.group(1), layer, h))
    # the options are said once, above the grid; the command works with them and writes the head
    options = re.search(r"an \.npz file, with these options: <code>(.*?)</code>", page)
    assert options is not None
    command, layer, h = sorted(commands)[-1]
    words = shlex.split(command) + shlex.split(html.unescape(options.group(1)))
    assert words[:3] == ["walkthrough", "export", "head.npz"]
    written = tmp_path / "head.npz"
    done = CliRunner().invoke(app, ["export", str(written), *words[3:]])
    assert done.exit_code == 0, done.output
    assert words[3:6] == ["-s", f"decoder.{layer}.masked-attention", "--head"] and words[6] == str(h)
    with np.load(written) as npz:  # that head's matrices alone, its weights every one
        # float32: the layers below, not kept by this export, are computed in blocks of queries,
        # which rounds differently from the whole product (by about an ulp)
        written_A = npz[f"decoder.{layer}.masked-attention/A{h}"]
        np.testing.assert_allclose(written_A, heads[layer, h], rtol=1e-5, atol=1e-8)
        assert [name for name in npz.files if re.fullmatch(r".*/A\d+", name)] == [
            f"decoder.{layer}.masked-attention/A{h}"
        ]


@pytest.mark.slow
def test_a_long_prompts_report_opens_in_headless_chromium(long_report) -> None:
    chromium = Path("/usr/bin/chromium")
    if not chromium.exists():
        pytest.skip("no /usr/bin/chromium")
    target, _ = long_report
    done = subprocess.run(
        [str(chromium), "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", target.as_uri()],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-500:]
    # the page was laid out and its script ran: the body is marked clickable, the last section is there
    assert 'class="clickable"' in done.stdout and 'id="attention"' in done.stdout
