"""Pictures of a grid's walk (--show): what they draw is what the index maps say, and
the page they write is valid HTML with valid SVG."""
import dataclasses
import html.parser
import re
import xml.etree.ElementTree as ElementTree

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl

from pytest_pallas_hints import chapters, show
from pytest_pallas_hints.checking import measure


def copy_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...]


def reversed_copy(x):
    """Reads block 3 - i at step i, writes block i: every input block once, reversed."""
    blocks = x.shape[0] // 8
    return pl.pallas_call(copy_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          grid=(blocks,),
                          in_specs=[pl.BlockSpec((8, 128), lambda i: (blocks - 1 - i, 0))],
                          out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)))(x)


def row_sums(x):
    """Grid (rows, cols); the output block follows the rows only: written once per row."""
    def kernel(x_ref, o_ref):
        @pl.when(pl.program_id(1) == 0)
        def _():
            o_ref[...] = jnp.zeros_like(o_ref)
        o_ref[...] += jnp.sum(x_ref[...], axis=1, keepdims=True)

    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((x.shape[0], 1), x.dtype),
                          grid=(x.shape[0] // 8, x.shape[1] // 128),
                          in_specs=[pl.BlockSpec((8, 128), lambda i, j: (i, j))],
                          out_specs=pl.BlockSpec((8, 1), lambda i, j: (i, 0)))(x)


def test_the_walk_is_what_the_index_maps_say():
    x = np.arange(32 * 128, dtype=np.float32).reshape(32, 128)
    (gw,) = show.of(measure(reversed_copy, x, structure=None))
    read, written = gw.operands
    assert read.indices == ((3, 0), (2, 0), (1, 0), (0, 0)) and all(read.fetched)
    assert written.indices == ((0, 0), (1, 0), (2, 0), (3, 0)) and all(written.fetched)
    assert read.blocks() == {(3, 0): [0], (2, 0): [1], (1, 0): [2], (0, 0): [3]}
    picture = "\n".join(show.terminal(gw))
    assert "x_ref (in): 4 blocks fetched, 4 copies" in picture
    assert "4 3 2 1" in picture           # block 0 is reached last: order 4


def test_blocks_no_step_reaches_are_drawn_as_never():
    """A grid that walks half the array: the other half is drawn, marked never reached."""
    def first_half(x):
        return pl.pallas_call(copy_kernel, out_shape=jax.ShapeDtypeStruct((16, 128), x.dtype),
                              grid=(2,), in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
                              out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)))(x)

    x = np.ones((32, 128), np.float32)
    (gw,) = show.of(measure(first_half, x, structure=None))
    assert gw.operands[0].extent == (4, 1)
    picture = "\n".join(show.terminal(gw))
    assert "x_ref (in): 2 of 4 blocks fetched (· never), 2 copies" in picture
    assert "1 2 · ·" in picture
    assert show.GridWalk.from_dict(gw.to_dict()) == gw


def test_a_block_that_stays_put_is_one_copy_and_one_write_back():
    x = np.ones((16, 384), np.float32)
    (gw,) = show.of(measure(row_sums, x, structure=None))
    read, written = gw.operands
    assert sum(read.fetched) == 6                                   # every (i, j) once
    assert written.fetched == (False, False, True, False, False, True)   # at the row's end
    assert written.blocks() == {(0, 0): [2], (1, 0): [5]}


def test_a_skipping_kernel_shows_the_steps_it_leaves_out():
    chapters.configure("reference")
    try:
        flash = chapters.chapter("flash")
    finally:
        chapters.configure("exercises")
    q = np.random.default_rng(0).normal(size=(1, 1, 512, 128)).astype(np.float32)
    (gw,) = show.of(measure(flash.flash_forward, q, q, q, causal=True, block_q=128,
                            block_kv=128, structure=None))
    skipped = [n for n, flops in enumerate(gw.work) if not flops]
    q_block, kv_block = np.divmod(np.arange(16), 4)
    assert skipped == [int(n) for n in np.flatnonzero(kv_block > q_block)]
    assert "skips it (6 of 16 steps)" in "\n".join(show.terminal(gw))
    assert show.GridWalk.from_dict(gw.to_dict()) == gw


class _Strict(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.open = []

    def handle_starttag(self, tag, attrs):
        if tag not in ("meta", "rect", "br", "input"):   # void elements
            self.open.append(tag)

    def handle_endtag(self, tag):
        if tag in ("rect",):
            return
        assert self.open and self.open.pop() == tag, f"</{tag}> closes nothing"


def test_the_page_is_valid_html_with_valid_svg():
    x = np.arange(32 * 128, dtype=np.float32).reshape(32, 128)
    page = show.html("basics.reverse <demo>", show.of(measure(reversed_copy, x, structure=None)),
                     wrong=[[True, False], [False, False]])
    parser = _Strict()
    parser.feed(page)
    parser.close()
    assert parser.open == []
    svgs = re.findall(r"<svg .*?</svg>", page, re.S)
    assert len(svgs) >= 3
    for svg in svgs:
        ElementTree.fromstring(svg)       # well-formed XML
    assert "basics.reverse &lt;demo&gt;" in page


def test_a_failing_puzzles_page_shows_its_verdict_beside_the_walk(kit):
    wrong = (kit.path / "reference" / "basics.py").read_text().replace(
        "lambda i: (n - 1 - i, 0)", "lambda i: (i, 0)")
    kit.write("exercises/basics.py", wrong)
    kit.run("exercises/test_basics.py", "-k", "reverse", "--show=html")
    page = (kit.path / "pallas-show" / "basics.reverse.html").read_text()
    assert "<h2>the verdict</h2>" in page and "✗ basics.reverse" in page


def test_show_draws_in_the_terminal_and_writes_a_page(kit):
    kit.write("exercises/basics.py", (kit.path / "reference" / "basics.py").read_text())
    out = kit.run("exercises/test_basics.py", "-k", "reverse", "--show=html").stdout.str()
    assert "the grid's walk" in out and "basics.reverse [" in out
    assert "drawn: pallas-show/basics.reverse.html" in out
    assert (kit.path / "pallas-show" / "basics.reverse.html").read_text().startswith(
        "<!DOCTYPE html>")


def test_a_bad_show_value_is_a_usage_error(kit):
    result = kit.run("exercises/test_basics.py", "--show=pdf")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--show=pdf: give --show (the terminal) or --show=html" in result.stderr.str()


def test_a_browser_opens_the_page(tmp_path):
    """Where a headless Chromium is installed (Debian's package), it renders the page."""
    import shutil
    import subprocess

    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("no headless Chromium here (apt install chromium): the page was parsed")
    x = np.arange(32 * 128, dtype=np.float32).reshape(32, 128)
    page = tmp_path / "walk.html"
    page.write_text(show.html("walk", show.of(measure(reversed_copy, x, structure=None))))
    shot = tmp_path / "walk.png"
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu",
                    f"--screenshot={shot}", f"--user-data-dir={tmp_path / 'profile'}",
                    page.as_uri()], check=True, capture_output=True, timeout=120)
    assert shot.stat().st_size > 1000


# ------------------------------------------------------ the page, in a browser ---

import os  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402


def _browser():
    """Headless Chromium, or a skip with the reason; under CI (CI=true) a missing browser
    fails: .ci/run installs it with the system's package manager."""
    found = next((shutil.which(name) for name in ("chromium", "chromium-headless-shell",
                                                  "chromium-browser", "google-chrome")
                  if shutil.which(name)), None)
    if found is None:
        why = "no headless Chromium here (apt-get install chromium)"
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    return found


def _chromium(page, *flags):
    """Chromium with the network cut (every host resolves to nothing): the page must
    work offline."""
    command = [_browser(), "--headless", "--no-sandbox", "--disable-gpu",
               "--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=127.0.0.1:9",
               *flags, page]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    return done.stdout


def _causal_walks():
    chapters.configure("reference")
    try:
        flash = chapters.chapter("flash")
    finally:
        chapters.configure("exercises")
    q = np.random.default_rng(0).normal(size=(1, 1, 512, 64)).astype(np.float32)
    return show.of(measure(flash.flash_causal, q, q, q, block_q=128, block_kv=128,
                           structure=None), config="T=S=512 block_q=block_kv=128")


def test_the_page_draws_the_causal_triangle_and_each_step(tmp_path):
    """Compared by structure: the DOM Chromium built, JavaScript run, at step 5."""
    page = tmp_path / "causal.html"
    page.write_text(show.html("flash.causal", _causal_walks()), encoding="utf-8")
    dom = _chromium(f"file://{page}#step=5", "--dump-dom")
    kinds = re.findall(r"data-point=\"(\d+),(\d+)\" data-step=\"\d+\" data-kind=\"(\w+)\"", dom)
    assert len(kinds) == 16
    work = {(int(r), int(c)) for r, c, kind in kinds if kind == "work"}
    assert work == {(r, c) for r in range(4) for c in range(4) if c <= r}   # the triangle
    assert all(kind == "idle" for r, c, kind in kinds if (int(r), int(c)) not in work)
    # step 5 = q block 1, kv block 1: the grid cell and the blocks it reads outlined
    assert re.search(r'data-point="1,1"[^>]*class="now"', dom)
    assert "step 5 of 16: program ids (0, 0, 1, 1)" in dom
    assert "k_ref: block (0,0,1,0) copied in now" in dom
    # operands in their true orientation: k's blocks down dim 2 (4 rows, 1 column)
    k = dom.split('data-name="k_ref"')[1].split("</figure>")[0]
    rows = {int(y) for y in re.findall(r"<rect x=\"0\" y=\"(\d+)\"", k)}
    assert len(rows) == 4 and "dim 2 (512, blocks of 128)" in k
    assert "array [1, 1, 512, 64] float32, blocks (squeezed, squeezed, 128, 64)" in k
    assert "T=S=512 block_q=block_kv=128" in dom


def test_the_page_works_offline_and_every_label_is_readable(tmp_path):
    html_text = show.html("flash.causal", _causal_walks())
    assert not re.search(r"(src|href)=['\"]?https?:", html_text)   # nothing to fetch
    for fill, ink in re.findall(r"fill='(#[0-9a-f]{6})' [^/]*/>(?:<rect[^>]*/>)?<text [^>]*"
                                r"fill='(#[0-9a-f]{6})'", html_text):
        assert show.contrast(fill, ink) >= 4.5, (fill, ink)
    assert show.contrast(show.ink_for(show._blend(1.0)), show._blend(1.0)) >= 4.5


def test_a_failing_run_is_drawn_with_its_wrong_blocks(tmp_path):
    (gw,) = _causal_walks()
    failed = dataclasses.replace(gw, failed="values").with_wrong(
        (1, 1, 512, 64), [((0, 1), (0, 1), (128, 256), (0, 64))])
    out = failed.operands[-1]
    assert out.wrong == ((0, 0, 1, 0),)
    page = tmp_path / "failed.html"
    page.write_text(show.html("flash.causal", [failed]), encoding="utf-8")
    dom = _chromium(f"file://{page}", "--dump-dom")
    assert "this run failed (values)" in dom
    assert re.search(r'data-block="0,0,1,0" data-kind="once wrong"', dom)


def test_a_small_grid_gets_a_step_table_in_the_terminal():
    (gw,) = _causal_walks()
    table = show.step_table(gw)
    assert table[0].split() == ["step", "ids", "MXU", "flops", "q_ref", "k_ref", "v_ref",
                                "o_ref"]
    assert table[1].split()[:3] == ["0", "0,0,0,0", "4,194,304"]   # 2 dots of 128x128x64
    assert table[2].split()[2] == "0"          # q block 0 skips kv block 1
    assert len(table) == 16 + 2
