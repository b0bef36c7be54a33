#!/usr/bin/env python3
"""Build a reveal.js slide deck per lesson from the executed copies of the notebooks, for instructors.

    python3 bootstrap.py slides              # or: make slides
    python tools/build_slides.py [LESSON ...] [--out DIR] [--no-execute]

Each deck follows its notebook: a title slide (the lesson's title, what you will learn, and where its outputs
were made), then per section the idea in one or two sentences, every guess the learner writes as its own slide
(the question, the variable to set), the measurement's plots and the claims the run judged, in the notebook's
order, so a guess always comes before the measurement that answers it; the key takeaways close the deck. The
plots and claims are the executed copy's outputs from build/executed/ (tools/nbrun.py): a lesson with no
executed copy made from its current code is executed first, as the website build does (about ten minutes on
two cores when none exists), unless --no-execute is given, which builds only the lessons that have one.

reveal.js comes from the npm registry (`npm pack`, once, cached in build/slides/npm) and is copied next to the
decks, so they work offline and load nothing from another server. Output: build/slides/index.html (the list
of decks) and build/slides/<lesson>/index.html with its plots. Open one in a browser: the arrow keys move between
slides, F shows it full screen, Esc every slide at once.
"""

from __future__ import annotations

import argparse
import base64
import html
import re
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from markdown_it import MarkdownIt

sys.path.insert(0, str(Path(__file__).resolve().parent))
import build_site  # noqa: E402
import nbrun  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "build" / "slides"
#: reveal.js, pinned; only these files of its package are copied next to the decks (the theme embeds its fonts)
REVEAL = {"reveal.js": "6.0.2"}
REVEAL_FILES = ("dist/reset.css", "dist/reveal.css", "dist/reveal.js", "dist/theme/white.css", "LICENSE")
WIDTH, HEIGHT = 1280, 720  # the slide canvas, in CSS pixels (reveal.js scales it to the window)
IDEA_CHARS = 300  # the idea slide keeps the first sentence, and the second while both fit in this many characters
TAKEAWAY_CHARS = 900  # more than this on one slide and the takeaways go on two
CLAIMS_PER_SLIDE = 4
GUESS = re.compile(r"^(guess_\w+)\s*=\s*None\b.*$", re.M)
PROMPT = re.compile(r"^\*\*Your predictions?\b")
LABEL = re.compile(r"^\*\*Your predictions?(?: \d+)?\.?\*\*[,.:]?\s+")  # the slide's heading says it
IDEA = re.compile(r"^\*\*Idea\.\*\*\s*")
LEAD = re.compile(r"^\*\*[^*]{1,60}\*\*")  # a list item's bold lead, "**Cores.**"
SKIPPED_SECTIONS = ("Save your run",)
ABBREVIATIONS = ("e.g.", "i.e.", "et al.", "cf.", "vs.", "Fig.", "approx.", "No.")


class SlidesError(build_site.SiteError):
    """The decks cannot be built from what is stored (the message says which notebook and what to do)."""


# --- markdown to HTML: the site's parser (markdown-it-py), raw HTML escaped, nothing loaded from elsewhere ---


def _image_as_text(self, tokens, idx, options, env) -> str:
    """An image in the markdown (the "Open in Colab" badge) becomes its alt text: a deck loads nothing from outside."""
    return html.escape(self.renderInlineAsText(tokens[idx].children or [], options, env))


def _link_open(self, tokens, idx, options, env) -> str:
    """Links to other servers stay links; a link to a file of the course (another notebook) becomes its text."""
    outside = (tokens[idx].attrGet("href") or "").startswith(("https://", "http://"))
    env.setdefault("links", []).append(outside)
    return self.renderToken(tokens, idx, options, env) if outside else ""


def _link_close(self, tokens, idx, options, env) -> str:
    return self.renderToken(tokens, idx, options, env) if env["links"].pop() else ""


MD = MarkdownIt("commonmark", {"html": False}).enable("table")
MD.add_render_rule("image", _image_as_text)
MD.add_render_rule("link_open", _link_open)
MD.add_render_rule("link_close", _link_close)


def md_block(source: str) -> str:
    """Markdown blocks as HTML (raw HTML in the source is shown as text)."""
    return MD.render(source, {})


def md_inline(source: str) -> str:
    """One line of markdown as inline HTML (raw HTML in the source is shown as text)."""
    return MD.renderInline(source, {})


def plain(source: str) -> str:
    """Markdown as plain text, for a page's <title>."""
    return re.sub(r"[*_`]", "", source).strip()


# --- a notebook as a stream of blocks ---------------------------------------------------------------------


@dataclass
class Block:
    """One piece of a notebook, in order: a heading, a paragraph, a list, another markdown block, a guess
    cell, a plot or a claim."""

    kind: str  # "heading", "p", "list", "other", "guess", "png", "claim"
    text: str = ""  # markdown source; a guess's lines of code; a claim's line
    level: int = 0  # a heading's level
    items: list[str] = field(default_factory=list)  # a list's items (markdown)
    data: bytes = b""  # a plot's PNG
    held: bool = True  # a claim's verdict


def _markdown_blocks(source: str) -> list[Block]:
    lines = source.splitlines()
    tokens = MD.parse(source)
    blocks = []
    for i, tok in enumerate(tokens):
        if tok.level != 0 or tok.nesting == -1 or tok.map is None:
            continue
        text = "\n".join(lines[tok.map[0] : tok.map[1]]).strip()
        if tok.type == "heading_open":
            blocks.append(Block("heading", tokens[i + 1].content.strip(), level=int(tok.tag[1])))
        elif tok.type == "paragraph_open":
            blocks.append(Block("p", " ".join(line.strip() for line in text.splitlines())))
        elif tok.type in ("bullet_list_open", "ordered_list_open"):
            items = [
                _item("\n".join(lines[t.map[0] + tok.map[0] : t.map[1] + tok.map[0]]))
                for t in MD.parse(text)
                if t.type == "list_item_open" and t.level == 1 and t.map is not None
            ]
            blocks.append(Block("list", text, items=items))
        else:
            blocks.append(Block("other", text))
    return blocks


def _item(source: str) -> str:
    """A list item's markdown without its marker, on one line."""
    first, *rest = source.strip().splitlines() or [""]
    return " ".join([re.sub(r"^\s*([-*+]|\d+[.)])\s+", "", first), *(line.strip() for line in rest)]).strip()


def _text(value) -> str:
    return value if isinstance(value, str) else "".join(value)


def blocks(nb: nbformat.NotebookNode) -> list[Block]:
    """The notebook's markdown split into headings, paragraphs and lists, and its code cells into the guesses
    they ask for, the plots they drew and the claims they judged, in order."""
    out: list[Block] = []
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            out += _markdown_blocks(cell.source)
        elif cell.cell_type == "code":
            guesses = [m.group(0).rstrip() for m in GUESS.finditer(cell.source)]
            if guesses:
                out.append(Block("guess", "\n".join(guesses)))
            for output in cell.get("outputs", []):
                data = output.get("data", {})
                if nbrun.CLAIM_MIME in data:
                    line = _text(data.get("text/plain", data[nbrun.CLAIM_MIME].get("text", "")))
                    out.append(Block("claim", line.strip(), held=bool(data[nbrun.CLAIM_MIME].get("held"))))
                elif "image/png" in data:
                    out.append(Block("png", data=base64.b64decode(_text(data["image/png"]))))
    return out


# --- shortening ----------------------------------------------------------------------------------------------


def sentences(source: str) -> list[str]:
    """A paragraph's markdown split into sentences (not after an abbreviation such as "e.g." or "et al.")."""
    found, start = [], 0
    for m in re.finditer(r"[.!?][)*_\"'’”]*\s+(?=[A-Z0-9(\[*_`\"“])", source):
        if source[: m.start() + 1].endswith(ABBREVIATIONS):
            continue
        found.append(source[start : m.end()].strip())
        start = m.end()
    rest = source[start:].strip()
    return found + ([rest] if rest else [])


def idea_points(paragraph: str, listed: list[str] | None = None) -> list[str]:
    """The one or two bullet points of an idea slide: the paragraph's first sentence, and its second when both are
    short (markdown, without the "**Idea.**" label). A point that announces a list ("Two ways to prune:") ends with
    the list's bold leads ("**global unstructured**, **structured**") where ``listed`` (the list's items) has them."""
    parts = sentences(IDEA.sub("", paragraph))
    if not parts:
        return []
    points = parts[:1]
    if len(parts) > 1 and len(parts[0]) + len(parts[1]) <= IDEA_CHARS:
        points.append(parts[1])
    if points[-1].endswith(":"):
        leads = [m.group(0)[2:-2].rstrip(".:") for m in (LEAD.match(item) for item in listed or []) if m]
        if leads and len(leads) == len(listed or []):
            points[-1] += " " + ", ".join(f"**{lead}**" for lead in leads[:5]) + "."
        elif len(points) > 1:  # "So:" announces what the slide leaves out
            points.pop()
        else:
            points[-1] = points[-1][:-1] + "."
    return points


# --- slides ----------------------------------------------------------------------------------------------------


@dataclass
class Slide:
    """One slide: its kind ("title", "idea", "guess", "plot", "claims", "takeaways"), its HTML, and for a plot the
    PNG and the file name it is written under, next to the deck."""

    kind: str
    html: str
    image: bytes = b""
    image_name: str = ""


@dataclass
class Deck:
    name: str  # the notebook's stem, the deck's folder
    title: str  # markdown
    provenance: str
    slides: list[Slide]


def _unlabelled(question: str) -> str:
    """A question without its "**Your prediction.**" label (the slide's heading says it)."""
    rest = LABEL.sub("", question)
    return rest[:1].upper() + rest[1:] if rest != question else question


def _kicker(section: str, sub: str = "") -> str:
    text = md_inline(section) + (f" · {md_inline(sub)}" if sub else "")
    return f'<p class="kicker">{text}</p>'


def _title_slide(title: str, outcomes: list[str], run: dict | None) -> tuple[Slide, str]:
    where = (
        f"Outputs made on {nbrun.provenance(run)}. On another machine the numbers differ; the claims are judged "
        "again there."
        if run
        else "This copy does not say where its outputs were made."
    )
    learn = "".join(f"<li>{md_inline(o)}</li>" for o in outcomes)
    body = f"<h1>{md_inline(title)}</h1>" + (
        f'<div class="outcomes"><p><strong>What you will learn</strong></p><ul>{learn}</ul></div>' if outcomes else ""
    )
    body += f'<p class="provenance">{html.escape(where)}</p><p class="back"><a href="../index.html">All decks</a></p>'
    return Slide("title", body), where


def _claims_slides(claims: list[Block], section: str, sub: str) -> list[Slide]:
    slides = []
    for start in range(0, len(claims), CLAIMS_PER_SLIDE):
        items = []
        for claim in claims[start : start + CLAIMS_PER_SLIDE]:
            label, _, rest = claim.text.partition(":")
            mark = "held" if claim.held else "failed"
            items.append(f'<li class="{mark}"><strong>{html.escape(label)}:</strong>{html.escape(rest)}</li>')
        body = _kicker(section, sub) + "<h3>Judged on this run</h3>" + f'<ul class="claims">{"".join(items)}</ul>'
        slides.append(Slide("claims", body))
    return slides


def _takeaway_slides(items: list[str], notes: list[str]) -> list[Slide]:
    chunks: list[list[str]] = [[]]
    for item in items:
        if chunks[-1] and sum(len(i) for i in chunks[-1]) + len(item) > TAKEAWAY_CHARS:
            chunks.append([])
        chunks[-1].append(item)
    slides = []
    for n, chunk in enumerate(chunks, 1):
        head = "Key takeaways" + (f" ({n} of {len(chunks)})" if len(chunks) > 1 else "")
        body = f"<h2>{head}</h2><ul>" + "".join(f"<li>{md_inline(i)}</li>" for i in chunk) + "</ul>"
        if n == len(chunks):
            body += "".join(f'<p class="note">{md_inline(p)}</p>' for p in notes)
        slides.append(Slide("takeaways", body))
    return slides


def _section_slides(heading: str, body: list[Block], start_plot: int) -> list[Slide]:
    """One section's slides, in the notebook's order: the idea where its paragraph stands (so a guess asked before
    it stays before it), each guess with its question, each plot, and the claims judged after them."""
    paragraphs = [b for b in body if b.kind == "p"]
    idea = next((b for b in paragraphs if IDEA.match(b.text)), None) or next(
        (b for b in paragraphs if not PROMPT.match(b.text)), None
    )
    after = body[body.index(idea) + 1] if idea is not None and body.index(idea) + 1 < len(body) else None
    points = idea_points(idea.text, after.items if after is not None and after.kind == "list" else None) if idea else []
    if idea is None:  # a section that is only a list: its first item
        first_list = next((b for b in body if b.kind == "list" and b.items), None)
        if first_list is not None:
            idea, points = first_list, idea_points(first_list.items[0])
    bullets = "".join(f"<li>{md_inline(p)}</li>" for p in points)
    idea_slide = Slide("idea", f"<h2>{md_inline(heading)}</h2>" + (f"<ul>{bullets}</ul>" if bullets else ""))
    slides: list[Slide] = []
    if idea is None:
        slides.append(idea_slide)
    sub, claims, asked = "", [], 0  # asked: where the text of the next guess's question may start
    plots = start_plot

    def flush_claims() -> None:
        if claims:
            slides.extend(_claims_slides(claims, heading, sub))
            claims.clear()

    for i, block in enumerate(body):
        if block is idea:
            flush_claims()
            slides.append(idea_slide)
        if block.kind == "heading":
            flush_claims()
            sub, asked = block.text, i + 1
        elif block.kind == "claim":
            claims.append(block)
        elif block.kind == "png":
            flush_claims()
            plots += 1
            name = f"plot-{plots:02d}.png"
            alt = html.escape(plain(sub or heading), quote=True)
            img = f'<img class="plot" src="{name}" alt="A plot of the run: {alt}">'
            slides.append(Slide("plot", _kicker(heading, sub) + img, image=block.data, image_name=name))
        elif block.kind == "guess":
            flush_claims()
            if i > 0 and body[i - 1].kind == "guess":  # one question, several guesses: one slide
                continue
            run = [block.text]
            for later in body[i + 1 :]:
                if later.kind != "guess":
                    break
                run.append(later.text)
            text = [b for b in body[asked:i] if b.kind in ("p", "list", "other")]
            start = max((k for k, b in enumerate(text) if b.kind == "p" and PROMPT.match(b.text)), default=None)
            question = text[start:] if start is not None else [b for b in text if b.kind == "p"][-1:]
            asked = i + len(run)
            code = html.escape("\n".join(run))
            names = ", ".join(f"<code>{n}</code>" for n in GUESS.findall("\n".join(run)))
            slides.append(
                Slide(
                    "guess",
                    _kicker(heading, sub)
                    + "<h3>Your prediction</h3>"
                    + "".join(md_block(_unlabelled(b.text) if b is question[0] else b.text) for b in question)
                    + f'<pre class="guess"><code>{code}</code></pre>'
                    + f'<p class="note">Write your guess down now, before the measurement: in the notebook, set '
                    f"{names} and run the cell.</p>",
                )
            )
    flush_claims()
    return slides


def deck(nb: nbformat.NotebookNode, name: str) -> Deck:
    """The slides of one executed notebook: title, then each section's idea, guesses, plots and claims, then the
    key takeaways, last."""
    stream = blocks(nb)
    title = next((b.text for b in stream if b.kind == "heading" and b.level == 1), name)
    outcomes: list[str] = []
    for k, b in enumerate(stream):
        if b.kind == "heading" and b.level == 2:
            break
        if b.kind == "p" and b.text.startswith("**What you will learn**"):
            outcomes = next((x.items for x in stream[k + 1 :] if x.kind == "list"), [])
            break
    title_slide, where = _title_slide(title, outcomes, nb.metadata.get("course_run"))
    slides, takeaways, notes = [title_slide], [], []
    sections: list[tuple[str, list[Block]]] = []
    current: list[Block] | None = None
    for b in stream:
        if b.kind == "heading" and b.level <= 2:
            current = None
            if b.level == 2 and b.text.strip().lower() == "key takeaways":
                current = []
                sections.append(("\0takeaways", current))
            elif b.level == 2 and not b.text.strip().startswith(SKIPPED_SECTIONS):
                current = []
                sections.append((b.text, current))
        elif current is not None:
            current.append(b)
    plots = 0
    for heading, body in sections:
        if heading == "\0takeaways":
            takeaways += [item for b in body if b.kind == "list" for item in b.items]
            notes += [b.text for b in body if b.kind == "p"]
            continue
        made = _section_slides(heading, body, plots)
        plots += sum(s.kind == "plot" for s in made)
        slides += made
    if takeaways:
        slides += _takeaway_slides(takeaways, notes)
    return Deck(name, title, where, slides)


# --- writing ---------------------------------------------------------------------------------------------------

DECK_CSS = """/* The decks' layout on reveal.js's white theme: a 1280 x 720 canvas, text to read from the back row. */
:root { --r-main-font-size: 30px; --r-heading1-size: 1.75em; --r-heading2-size: 1.4em; --r-heading3-size: 1.1em;
        --r-heading-text-transform: none; --r-block-margin: 14px; }
.reveal .slides section { text-align: left; }
.reveal ul, .reveal ol { display: block; }
.reveal li { margin: 0.35em 0; }
.reveal .kicker { font-size: 0.6em; color: #666; margin: 0 0 0.4em 0; }
.reveal .outcomes { font-size: 0.66em; }
.reveal .outcomes p { margin: 0.2em 0; }
.reveal .outcomes li { margin: 0.15em 0; }
.reveal .provenance { font-size: 0.55em; color: #444; border-left: 5px solid #2a76dd; padding-left: 0.6em; }
.reveal .back { font-size: 0.5em; margin: 0; }
.reveal .note { font-size: 0.62em; background: #fff4cc; padding: 0.4em 0.7em; border-radius: 6px; }
.reveal pre.guess { width: auto; font-size: 0.62em; box-shadow: none; background: #f3f3f3; padding: 0.5em 0.7em;
                    white-space: pre-wrap; }
.reveal pre.guess code { max-height: none; padding: 0; white-space: pre-wrap; overflow: visible; }
.reveal img.plot { display: block; width: 100%; height: 590px; max-width: 100%; max-height: none;
                   object-fit: contain; margin: 0; }
.reveal ul.claims { list-style: none; margin-left: 0; font-size: 0.78em; }
.reveal ul.claims li { padding-left: 1.6em; text-indent: -1.6em; }
.reveal ul.claims li.held::before { content: "\\2714\\FE0E  "; color: #1a7f37; }
.reveal ul.claims li.failed::before { content: "\\2718\\FE0E  "; color: #c62828; }
.reveal table { font-size: 0.7em; }
"""

# Start reveal.js, then shrink the text of any slide taller or wider than the canvas until it fits (a long question
# or a long list of outcomes), and say so on <body> for the browser check.
DECK_JS = """Reveal.initialize({
  width: %(width)d, height: %(height)d, margin: 0.04, hash: true, slideNumber: "c/t", transition: "none",
  viewDistance: 1000, center: true, controls: true, progress: true
}).then(function () { return document.fonts.ready; }).then(function () {
  var config = Reveal.getConfig();
  Reveal.getSlides().forEach(function (slide) {
    var size = 100;
    while ((slide.scrollHeight > config.height || slide.scrollWidth > config.width) && size > 56) {
      size -= 4;
      slide.style.fontSize = size + "%%";
    }
  });
  Reveal.layout();
  document.body.dataset.fitted = "yes";
});
""" % {"width": WIDTH, "height": HEIGHT}

PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<link rel="stylesheet" href="../reveal/reset.css">
<link rel="stylesheet" href="../reveal/reveal.css">
<link rel="stylesheet" href="../reveal/theme/white.css">
<link rel="stylesheet" href="../deck.css">
</head>
<body>
<div class="reveal"><div class="slides">
{slides}
</div></div>
<script src="../reveal/reveal.js"></script>
<script src="../deck.js"></script>
</body>
</html>
"""

INDEX = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}: slides</title>
<style>
body {{ font-family: "Source Sans Pro", Helvetica, Arial, sans-serif; max-width: 52em; margin: 2em auto;
        padding: 0 1em; color: #222; line-height: 1.4; }}
li {{ margin: 0.8em 0; }}
.where {{ color: #555; font-size: 0.9em; }}
</style>
</head>
<body>
<h1>{title}: slides</h1>
<p>One deck per lesson, made from the outputs of one run of its notebook. Open a deck, press F for full screen and
the arrow keys to move; Esc shows every slide. Each guess has its own slide, before the measurement that
answers it.</p>
<ul>
{decks}
</ul>
</body>
</html>
"""


def deck_html(d: Deck) -> str:
    """The deck's page: one <section> per slide (its kind in data-kind), reveal.js from ../reveal/."""
    sections = "\n".join(f'<section data-kind="{s.kind}">{s.html}</section>' for s in d.slides)
    return PAGE.format(title=html.escape(plain(d.title) + " · slides"), slides=sections)


def write_deck(d: Deck, out: Path) -> Path:
    """Write a deck's page and its plots into out/<name>/; returns the page."""
    folder = out / d.name
    folder.mkdir(parents=True, exist_ok=True)
    for s in d.slides:
        if s.image:
            (folder / s.image_name).write_bytes(s.image)
    page = folder / "index.html"
    page.write_text(deck_html(d), encoding="utf-8")
    return page


def index_html(decks: list[Deck]) -> str:
    rows = [
        f'<li><a href="{d.name}/index.html">{md_inline(d.title)}</a> ({len(d.slides)} slides)<br>'
        f'<span class="where">{html.escape(d.provenance)}</span></li>'
        for d in decks
    ]
    return INDEX.format(title=html.escape(build_site.TITLE), decks="\n".join(rows))


def lessons(names: list[str] | None = None) -> list[Path]:
    """The lesson notebooks (notebooks/NN_*.ipynb), or those whose name starts with one of ``names``."""
    every = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    if not names:
        return every
    chosen = [p for p in every if any(p.stem.startswith(n.removesuffix(".ipynb")) for n in names)]
    unknown = [n for n in names if not any(p.stem.startswith(n.removesuffix(".ipynb")) for p in every)]
    if unknown:
        raise SlidesError(f"no lesson named {', '.join(unknown)}; the lessons: {', '.join(p.stem for p in every)}")
    return chosen


def fetch_reveal(cache: Path) -> Path:
    """reveal.js's package folder (fetched once with `npm pack`, then kept in `cache`)."""
    return build_site.fetch_frontend(cache, REVEAL, what="reveal.js")["reveal.js"]


def build(out: Path = OUT, names: list[str] | None = None, execute: bool = True) -> dict:
    """Build a deck per lesson (or per lesson named) into ``out``; returns what was built and what was left out."""
    start = time.perf_counter()
    sources = lessons(names)
    left_out: dict[Path, str] = {}
    if not execute:  # only what is there: a lesson without a usable executed copy is left out, with why
        for source in sources:
            if nbrun.load_executed(source) is None:
                left_out[source] = "no executed copy made from its current code"
            elif problems := build_site.stored_problems(nbrun.executed_path(source)):
                left_out[source] = problems[0]
        sources = [s for s in sources if s not in left_out]
    copies = build_site.executed_copies(sources, execute=True)
    build_site.check_stored(copies, what="The slide decks are made")
    reveal = fetch_reveal(out / "npm")
    for stale in [out / "reveal", *out.glob("[0-9][0-9]_*")]:
        shutil.rmtree(stale, ignore_errors=True)
    for rel in REVEAL_FILES:
        target = out / "reveal" / rel.removeprefix("dist/")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(reveal / rel, target)
    (out / "deck.css").write_text(DECK_CSS)
    (out / "deck.js").write_text(DECK_JS)
    decks = [deck(nbformat.read(copy, as_version=4), source.stem) for source, copy in zip(sources, copies)]
    for d in decks:
        write_deck(d, out)
    (out / "index.html").write_text(index_html(decks), encoding="utf-8")
    return {
        "index": out / "index.html",
        "decks": decks,
        "slides": sum(len(d.slides) for d in decks),
        "plots": sum(s.kind == "plot" for d in decks for s in d.slides),
        "guesses": sum(s.kind == "guess" for d in decks for s in d.slides),
        "claims": sum(s.html.count("<li class=") for d in decks for s in d.slides if s.kind == "claims"),
        "left_out": left_out,
        "seconds": time.perf_counter() - start,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("lessons", nargs="*", help="lessons to build, by name or prefix (05_1); default: every one")
    parser.add_argument("--out", type=Path, default=OUT, help=f"build folder (default {build_site._rel(OUT)})")
    parser.add_argument(
        "--no-execute",
        action="store_true",
        help="execute nothing: build only the lessons with an error-free executed copy made from their current code",
    )
    args = parser.parse_args(argv)
    try:
        made = build(args.out.resolve(), args.lessons, execute=not args.no_execute)
    except build_site.SiteError as exc:
        print(f"Slides build failed: {exc}", file=sys.stderr)
        return 1
    decks = f"{len(made['decks'])} deck" + ("" if len(made["decks"]) == 1 else "s")
    print(
        f"Built {decks} ({made['slides']} slides: {made['guesses']} guesses, {made['plots']} plots, "
        f"{made['claims']} claims) in {made['seconds']:.1f} s: {build_site._rel(made['index'])}"
    )
    if made["left_out"]:
        print("Left out (run `python3 bootstrap.py timings <notebook>`, or build without --no-execute):")
        for source, why in made["left_out"].items():
            print(f"  {source.stem}: {why}")
    print(
        "Open it in a browser (it works offline), or serve it with: python3 -m http.server --bind 127.0.0.1 "
        f"--directory {build_site._rel(made['index'].parent)}"
    )
    return 0 if made["decks"] else 1


if __name__ == "__main__":
    sys.exit(main())
