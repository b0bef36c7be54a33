"""The class page (course_lib.classpage, ``course class``): a folder of learners' run files merged into one offline
page; hostile files skipped or flagged by name with the reason, everything from a file escaped, copies merged once,
and the page checked in a headless Chromium."""

from __future__ import annotations

import copy
import html.parser
import json
import os
import random
import sys
import time
from pathlib import Path

import pytest

from course_lib import classpage, cli
from course_lib.runs import atlas as atlas_module
from course_lib.runs import check_run, kind_of
from course_lib.runs.atlas import Group

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import browser  # noqa: E402

LAPTOP = {
    "cpu": "Intel(R) Core(TM) i5-8250U CPU @ 1.60GHz",
    "architecture": "x86_64",
    "isa": "AVX2",
    "bf16": "emulated",
    "cores": 4,
    "free_cores": 4,
    "busy": False,
    "accelerator": "none",
    "torch": "2.13.0+cpu",
    "platform": "local",
    "os": "Linux",
    "held": {},
    "course": "0.5.0",
}
COLAB = {**LAPTOP, "cpu": "Intel(R) Xeon(R) CPU @ 2.20GHz", "isa": "AVX512", "bf16": "native", "cores": 1}
COLAB.update(free_cores=1, platform="colab", torch="2.12.0+cu126")
GPU = {**COLAB, "accelerator": "Tesla T4", "cores": 2, "free_cores": 1, "busy": True, "platform": "kaggle"}


def guess(key, value, guess=None, model=None, unit="GFLOP/s", what="float32 matmul rate"):
    return {"kind": "guess", "key": key, "guess": guess, "value": value, "model": model, "unit": unit, "what": what}


def claim(key, value, low=1.3, high=None, status=None, text="two threads beat one", why=""):
    inside = value is not None and (low is None or value > low) and (high is None or value < high)
    status = status or ("held" if inside else "not held" if value is not None else "not judged")
    return {
        "kind": "claim",
        "key": key,
        "text": text,
        "value": value,
        "low": low if value is not None else None,
        "high": high,
        "no_effect": 1.0 if value is not None else None,
        "no_effect_is": "one thread",
        "unit": "x",
        "status": status,
        "why": why,
    }


def run(lesson="01", label="", machine=LAPTOP, entries=(), date="2026-12-01"):
    """A run file's content, as the last cell of a lesson writes it."""
    out = {
        "format": "course-run",
        "version": 1,
        "lesson": lesson,
        "notebook": "",
        "label": label,
        "date": date,
        "revealed": False,
        "machine": copy.deepcopy(machine),
        "entries": [dict(e) for e in entries],
    }
    check_run(out)  # the tests' own runs are valid
    return out


def write(folder: Path, name: str, content) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content if isinstance(content, str) else json.dumps(content, indent=1), encoding="utf-8")
    return path


def room(n: int, seed: int = 0) -> list[dict]:
    """``n`` runs from a made-up room: three machine kinds, lessons 00 and 01, guesses, values and claims."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        machine = (LAPTOP, COLAB, GPU)[i % 3]
        speed = {0: 90.0, 1: 40.0, 2: 60.0}[i % 3] * rng.uniform(0.8, 1.2)
        if i % 2:
            entries = [
                guess("01/matmul64_gflops", speed, guess=rng.choice([None, 10.0, 50.0, 400.0]), model=speed * 1.3),
                guess("01/speedup", rng.uniform(1.0, 1.9), guess=2.0, model=2.0, unit="x", what="two threads vs one"),
                claim("01/threads_help", rng.uniform(0.9, 1.9)),
                {"kind": "value", "key": "01/add_gflops", "value": speed / 30, "unit": "GFLOP/s", "what": "a + b"},
            ]
            out.append(run("01", f"learner {i}", machine, entries))
        else:
            entries = [
                guess("00/tensor_mib", 256 + rng.uniform(0, 3), guess=rng.choice([256.0, 1024.0, 64.0]), model=256.0),
                claim("00/empty_free", None, text="torch.empty touches no memory", why="its cell did not run"),
            ]
            out.append(run("00", f"learner {i}" if i % 4 else "", machine, entries))
    return out


@pytest.fixture
def folder(tmp_path) -> Path:
    good = tmp_path / "runs"
    for i, r in enumerate(room(12)):
        write(good, f"run-{i:02d}.json", r)
    return good


# --- reading: every hostile kind skipped or flagged by name, with the reason -----------------------------


def _hostile(folder: Path) -> dict[str, str]:
    """One file of each hostile kind in ``folder``; returns name -> a word its reason must contain."""
    base = room(2, seed=5)[1]
    nan = json.dumps(base).replace(str(base["entries"][0]["value"]), "NaN", 1)
    infinite = json.dumps(base).replace(str(base["entries"][0]["value"]), "Infinity", 1)
    edited = copy.deepcopy(base)
    edited["entries"][2].update(value=1.1, status="held")  # a claim marked held whose measurement is below its bound
    newer = {**base, "version": 2}
    cases = {
        "empty.json": ("", "empty"),
        "binary.json": (bytes(range(256)) * 4, "binary"),
        "nan.json": (nan, "NaN"),
        "infinite.json": (infinite, "Infinity"),
        "deep.json": ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        "huge.json": (" " * 1_100_000 + "{}", "too large"),
        "newer.json": (newer, "newer course version"),
        "benchmark.json": ({"schema": "course-benchmark/3", "headline": {"matmul_gflops": 120.0}}, "not a course run"),
        "edited.json": (edited, "edited"),
        "list.json": ([1, 2, 3], "not a course run"),
        "notes.txt": ("bring a laptop", "not valid JSON"),
        "lab.ipynb": ({"cells": [{"cell_type": "code", "outputs": []}]}, "without its run file"),
        "bad-key.json": ({**base, "entries": [{**base["entries"][0], "key": "01/<b>x</b>"}]}, "key"),
    }
    for name, (content, _) in cases.items():
        write(folder, name, content)
    return {name: word for name, (_, word) in cases.items()}


def test_each_hostile_file_is_skipped_by_name_with_its_reason_and_the_rest_merge(folder):
    words = _hostile(folder)
    write(folder, ".DS_Store", b"\x00\x01")  # hidden files are not learners' files
    if hasattr(os, "mkfifo"):
        os.mkfifo(folder / "pipe.json")  # opening it would block forever: never opened
        words["pipe.json"] = "not a regular file"
    if Path("/dev/zero").exists():
        (folder / "zero.json").symlink_to("/dev/zero")  # an endless file: never read
        words["zero.json"] = "not a regular file"
    reading = classpage.read_folder(folder)
    skipped = dict(reading.skipped)
    assert set(skipped) == set(words), sorted(skipped)
    for name, word in words.items():
        assert word.lower() in skipped[name].lower(), (name, skipped[name])
        assert not skipped[name].startswith(name), "the reason does not repeat the file's name"
    assert len(reading.runs) == 12 and all(r.name.startswith("run-") for r in reading.runs)
    assert ".DS_Store" not in skipped


def test_a_notebook_saved_with_its_run_file_merges(folder):
    r = room(2, seed=9)[1]
    nb = {
        "cells": [
            {"cell_type": "code", "outputs": [{"output_type": "display_data", "data": {classpage.reading.RUN_MIME: r}}]}
        ],
        "metadata": {},
    }
    write(folder, "sub/ana.ipynb", nb)
    reading = classpage.read_folder(folder)
    assert "sub/ana.ipynb" in [x.name for x in reading.runs] and not reading.skipped


def test_copies_are_merged_once_and_flagged_by_name(folder, tmp_path):
    original = json.loads((folder / "run-01.json").read_text())
    write(folder, "zz-same-bytes.json", (folder / "run-01.json").read_bytes())
    write(folder, "zz-saved-again.json", json.dumps(original, indent=4, sort_keys=True))
    write(folder, "zz-relabelled.json", {**original, "label": "someone else"})
    reading = classpage.read_folder(folder)
    skipped = dict(reading.skipped)
    assert skipped["zz-same-bytes.json"] == "duplicate: the same content as run-01.json, merged once"
    assert "same run as run-01.json (saved again)" in skipped["zz-saved-again.json"]
    assert "same run as run-01.json under another label" in skipped["zz-relabelled.json"]
    assert len(reading.runs) == 12


def test_an_empty_folder_gives_a_page_that_says_so_and_exit_code_1(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    page = classpage.write_class_page(tmp_path / "empty", tmp_path / "out")
    text = page.path.read_text()
    assert page.reading.runs == () and "No runs merged yet" in text
    assert cli.main(["class", str(tmp_path / "empty"), "--out", str(tmp_path / "out")]) == 1
    assert "no usable run file" in capsys.readouterr().err


def test_a_missing_folder_or_a_file_for_out_is_refused_naming_the_argument(tmp_path, capsys):
    with pytest.raises(ValueError, match="folder .*no such folder"):
        classpage.read_folder(tmp_path / "nope")
    write(tmp_path, "a.json", "{}")
    with pytest.raises(ValueError, match="is a file"):
        classpage.read_folder(tmp_path / "a.json")
    with pytest.raises(ValueError, match="out .* is a file"):
        classpage.write_class_page(tmp_path, tmp_path / "a.json")
    assert cli.main(["class", str(tmp_path / "nope")]) == 2
    assert "no such folder" in capsys.readouterr().err
    assert cli.main(["class", str(tmp_path), "--out", str(tmp_path / "a.json")]) == 2


@pytest.mark.parametrize(
    "call, words",
    [
        (lambda: classpage.read_folder(3), "folder must be a path"),
        (lambda: classpage.read_folder(".", exclude=1.5), "exclude must be a path"),
        (lambda: classpage.landscape("runs"), "runs must be a list"),
        (lambda: classpage.guess_rows([{"lesson": "00"}]), "runs must hold Loaded"),
        (lambda: classpage.claim_rows(None), "runs must be a list"),
        (lambda: classpage.atlas_rows([], groups_of=3), "groups_of must be a function"),
        (lambda: classpage.class_page_html({}), "reading must be a Reading"),
        (lambda: classpage.strip_svg(None, str), "row must be a GuessRow"),
        (lambda: classpage.factor("2", 1.0), "value must be a number"),
        (lambda: classpage.write_class_page(".", out=None), "out must be a path"),
    ],
)
def test_bad_arguments_raise_type_errors_naming_them(call, words):
    with pytest.raises(TypeError, match=words):
        call()


# --- escaping ---------------------------------------------------------------------------------------------

ALLOWED_TAGS = {
    "html", "head", "meta", "title", "style", "body", "h1", "h2", "h3", "h4", "p", "nav", "a", "code", "table",
    "tr", "th", "td", "span", "div", "br", "strong", "details", "summary", "svg", "line", "text", "circle", "rect",
    "path",
}  # fmt: skip


class _Tags(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.attrs, self.style = set(), [], []
        self._in_style = False

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        self.attrs += attrs
        self._in_style = tag == "style"

    def handle_endtag(self, tag):
        self._in_style = False

    def handle_data(self, data):
        if self._in_style:
            self.style.append(data)


HOSTILE = {
    "label": '<script>alert("label")</script>',
    "text": '"><img src=x onerror=alert(1)> claim',
    "cpu": "<svg onload=alert(2)> CPU 'quoted' \u202eevil",
    "unit": "</style><script>alert(3)",
    "why": 'it\'s <b>bold</b> & "quoted"',
}


def test_markup_from_files_is_shown_as_text_never_as_markup(tmp_path):
    entries = [
        guess("01/matmul64_gflops", 50.0, guess=70.0, model=60.0, unit=HOSTILE["unit"], what=HOSTILE["text"]),
        claim("01/threads_help", 1.1, text=HOSTILE["text"], why=HOSTILE["why"]),
        {"kind": "value", "key": "01/add_gflops", "value": 500.0, "unit": HOSTILE["unit"], "what": "\ud800 broken"},
    ]
    machine = {**LAPTOP, "cpu": HOSTILE["cpu"], "accelerator": '<img src=x onerror="alert(4)">'}
    write(tmp_path / "in", "a.json", run("01", HOSTILE["label"], machine, entries))
    write(tmp_path / "in", '<img src=x onerror=alert(5)>".json', run("00", "b", LAPTOP, [guess("00/tensor_mib", 2.0)]))
    write(tmp_path / "in", "<script>x</script>.json", "not json")

    def groups_of(key):
        return [Group(kind_of(machine), "idle", (1.0, 60.0))]

    page = classpage.write_class_page(tmp_path / "in", tmp_path / "out", groups_of=groups_of)
    text = page.path.read_text(encoding="utf-8")
    assert "<script" not in text.lower() and "<img" not in text.lower() and "<svg onload" not in text.lower()
    parser = _Tags()
    parser.feed(text)
    assert parser.tags <= ALLOWED_TAGS, parser.tags - ALLOWED_TAGS
    assert not [name for name, _ in parser.attrs if name.startswith("on")], "an event handler attribute"
    assert not [value for name, value in parser.attrs if name in ("href", "src") and not value.startswith("#")]
    assert "alert" not in "".join(parser.style)
    assert "&lt;script&gt;alert(&quot;label&quot;)&lt;/script&gt;" in text  # the label shows as text
    assert "\\u202e" in text and "\u202e" not in text and "\\ud800 broken" in text
    assert "&lt;img src=x onerror=alert(5)&gt;&quot;.json" in text  # a file's name too
    assert [r.name for r in page.reading.runs] == ['<img src=x onerror=alert(5)>".json', "a.json"]


def test_the_cli_prints_what_it_merged_what_it_skipped_and_the_page(folder, tmp_path, capsys):
    write(folder, "empty.json", "")
    write(folder, "\x1b[31mred.json", "")
    assert cli.main(["class", str(folder), "--out", str(tmp_path / "page")]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"merged 12 run files from {folder}")
    assert "skipped empty.json: the file is empty" in out
    assert "skipped \\x1b[31mred.json: the file is empty" in out and "\x1b" not in out
    assert out.rstrip().endswith(f"wrote {tmp_path / 'page' / 'index.html'}")


def test_the_page_is_not_read_as_a_run_file_when_written_inside_the_folder(folder, capsys):
    for _ in range(2):
        assert cli.main(["class", str(folder), "--out", str(folder / "page")]) == 0
    assert "skipped" not in capsys.readouterr().out


# --- what the page computes -------------------------------------------------------------------------------


def test_the_landscape_counts_runs_and_learners_per_machine_kind():
    runs = [classpage.Loaded(f"{i}.json", r) for i, r in enumerate(room(12))]
    land = classpage.landscape(runs)
    assert land.runs == 12 and sum(k.runs for k in land.kinds) == 12 and len(land.kinds) == 3
    assert land.unlabelled == 3 and land.learners == 9  # runs 0, 4 and 8 carry no label
    gpu = next(k for k in land.kinds if "Tesla T4" in k.kind)
    assert gpu.busy == gpu.runs == 4 and gpu.platforms == (("kaggle", 4),)
    assert dict(land.facets)["accelerator"] == (("none", 8), ("Tesla T4", 4))


def test_guesses_are_judged_against_each_runs_own_measurement():
    entries = [guess("00/tensor_mib", 100.0, guess=g, model=m) for g, m in ((150.0, 100.0), (400.0, 30.0))]
    runs = [classpage.Loaded(f"{i}.json", run("00", f"l{i}", LAPTOP, [e])) for i, e in enumerate(entries)]
    runs.append(classpage.Loaded("x.json", run("00", "", LAPTOP, [guess("00/tensor_mib", 100.0)])))
    (row,) = classpage.guess_rows(runs)
    assert len(row.guessed) == 2 and row.within_2x == 1 and row.model_within_2x == 1
    assert row.direction() == "2 too high, 0 too low; typically too high (median 2.8x the measurement)"
    assert classpage.factor(50.0, 100.0) == 2.0 and classpage.factor(0.0, 1.0) is None
    assert classpage.factor(None, 1.0) is None and classpage.factor(0.0, 0.0) == 1.0
    svg = classpage.strip_svg(row, classpage.escape)
    assert svg.count("<path") == 2 and svg.count("<circle") == 3 and svg.count("rotate(45") == 2


def _section(page: str, anchor: str) -> str:
    """The HTML of one section of the page, from its heading to the next."""
    start = page.index(f'<h2 id="{anchor}">')
    end = page.find("<h2", start + 1)
    return page[start : end if end > 0 else len(page)]


def _page(runs, **kwargs) -> str:
    loaded = tuple(classpage.Loaded(f"{i:02d}.json", r) for i, r in enumerate(runs))
    return classpage.class_page_html(classpage.Reading(Path("room"), loaded, ()), **kwargs)


def test_claims_that_failed_or_were_not_judged_are_listed_with_why():
    runs = [classpage.Loaded(f"{i}.json", r) for i, r in enumerate(room(12))]
    rows = {r.key: r for r in classpage.claim_rows(runs)}
    empty = rows["00/empty_free"]
    assert empty.not_judged == 6 and empty.held == 0 and {c.why for c in empty.cases} == {"its cell did not run"}
    assert empty.judged_on == () and not empty.all_held
    threads = rows["01/threads_help"]
    assert threads.held + threads.not_held == 6 and len(threads.cases) == threads.not_held
    assert all(c.value < 1.3 and c.no_effect == 1.0 and c.low == 1.3 for c in threads.cases)
    assert sum(n for _, _, n in threads.judged_on) == 6 and threads.judged(kind_of(GPU), "busy") == 2


def test_claims_that_held_everywhere_are_folded_into_one_collapsed_list():
    held = [claim(f"01/held_{i}", 1.8, text=f"claim {i} holds") for i in range(30)]
    runs = [
        run("01", "ana", LAPTOP, [*held, claim("01/threads_help", 1.1)]),
        run("01", "ben", COLAB, [*held, claim("01/threads_help", 1.5)]),
    ]
    section = _section(_page(runs), "claims")
    table, folded = section.split("<details>", 1)
    assert "01/threads_help" in table and "01/held_" not in table  # only claims with a run that failed them
    assert "<details open" not in section and folded.count("01/held_") == 30
    assert "30 claims held on every run that has them</summary>" in folded
    assert '<code title="claim 7 holds">01/held_7</code></td><td class="num">2</td>' in folded  # key, n held
    assert "Of the room's 31 claims: 1 did not hold on at least one run" in section
    assert "Did not hold: where and why" in section and "ana (00.json): 1.1x" in section


def test_claims_not_judged_are_grouped_by_reason_and_said_to_be_often_another_branch():
    branch = "not judged in this session: its cell did not run, or this machine takes another branch"
    stopped = "a cell before it stopped"
    runs = [
        run("05.2", "ana", LAPTOP, [claim("05.2/vnni_int8", None, text="VNNI int8 wins", why=branch)]),
        run("05.2", "ben", LAPTOP, [claim("05.2/vnni_int8", None, text="VNNI int8 wins", why=branch)]),
        run("05.2", "cai", COLAB, [claim("05.2/vnni_int8", 1.5, text="VNNI int8 wins")]),
        run("05.2", "dee", COLAB, [claim("05.2/vnni_int8", None, text="VNNI int8 wins", why=stopped)]),
    ]
    section = _section(_page(runs), "claims")
    assert "often means the claim does not apply to that machine, not that the learner skipped it" in section
    assert section.count("<summary>") == 2  # one group per reason, the larger first
    assert section.index(f"<summary>{branch}: 1 claim, 2 times") < section.index(f"<summary>{stopped}: 1 claim")
    laptop, colab = (f"{kind_of(m)}, idle" for m in (LAPTOP, COLAB))
    by_branch, by_stop = section.split("<details>")[1:3]
    assert f">{laptop}: 2 runs</span>" in by_branch and "likely a branch this machine does not take" in by_branch
    assert f">{colab}: 1 run</span>" in by_stop and f"{colab}: 1</td>" in by_stop  # cai judged it on that kind
    alone = _section(_page(runs[:2]), "claims")  # no run in the room judged it: no guess at a branch
    assert "likely a branch" not in alone and '<td>none</td><td class="num">none in this room</td>' in alone


def test_the_grid_shows_who_ran_what_with_claims_held():
    runs = room(12)
    runs.append(run("00", "learner 1", LAPTOP, [claim("00/x_holds", 1.5)]))  # learner 1 ran lesson 00 as well
    loaded = [classpage.Loaded(f"run-{i:02d}.json", r) for i, r in enumerate(runs)]
    grid = classpage.lesson_grid(loaded)
    assert grid.lessons == ("00", "01")
    labelled = [r for r in grid.rows if r.labelled]
    unlabelled = [r for r in grid.rows if not r.labelled]
    assert grid.rows == tuple(labelled + unlabelled) and len(labelled) == 9 and len(unlabelled) == 3
    assert [r.who for r in unlabelled] == ["run-00.json", "run-04.json", "run-08.json"]  # by machine kind, file
    assert unlabelled[1].kinds == (kind_of(COLAB),) and unlabelled[1].cell("01") is None
    one = next(r for r in labelled if r.who == "learner 1")
    assert one.cell("00") == classpage.GridCell(1, 1, 0, 0) and one.cell("01").claims == 1
    assert one.files == ("run-01.json", "run-12.json")
    page = classpage.class_page_html(classpage.Reading(Path("room"), tuple(loaded), ()))
    grid_html = page[page.index('<h3 id="who">') : page.index('<h2 id="guesses">')]
    assert '<th class="num" title="00_setup">00</th><th class="num" title="01_processing_units">01</th>' in grid_html
    assert grid_html.count("<tr><td>") == 12  # 9 learners and 3 unlabelled runs, each under its machine kind
    assert '<th colspan="3" class="group">learners (labelled)</th>' in grid_html
    laptop = f'<th colspan="3" class="group">unlabelled run on {classpage.escape(kind_of(LAPTOP))} (1)</th></tr>'
    row = grid_html[grid_html.index(laptop) :].split("</tr>")[1].strip()
    assert row == '<tr><td><code class="file">run-00.json</code></td><td class="num part" ' + (
        'title="0 held, 0 not held, 1 not judged">0/1</td><td></td>'
    )
    assert 'title="1 held, 0 not held, 0 not judged">1/1</td>' in grid_html  # learner 1's lesson 00


def test_units_show_without_a_stray_space_in_parentheses():
    entries = [
        guess("01/tensor_mib", 256.0, guess=200.0, model=256.0, unit=" MiB", what="ones"),
        guess("01/steps", 40.0, unit=" updates", what="steps"),
    ]
    page = _page([run("01", "ana", LAPTOP, entries)], groups_of=lambda key: [])
    assert "( MiB)" not in page and "( updates)" not in page
    assert "ones (MiB)" in page and "steps (updates)" in page and ": 200 MiB</title>" in page


def test_revealed_runs_say_once_there_are_no_guesses_and_keep_the_model_table_compact():
    runs = [{**r, "revealed": True} for r in room(6)]
    for r in runs:
        for e in r["entries"]:
            if e["kind"] == "guess":
                e["guess"] = None
    section = _section(_page(runs, groups_of=lambda key: []), "guesses")
    assert section.count("no guesses to show") == 1
    assert "These runs were made with answers revealed: no guesses to show." in section
    table = section[section.index("<table>") : section.index("</table>")]
    assert "typical error" not in table and "guesses</th>" not in table and "model within 2x" in table
    assert table.count("<th>") == 9 and "guesses (" not in section and "guess off by" not in section
    mixed = _section(_page([*runs[:2], *room(2, seed=3)], groups_of=lambda key: []), "guesses")
    assert "no guesses to show" not in mixed and "2 runs were made with the answers revealed" in mixed


def _speedup_runs(values):
    return [
        classpage.Loaded(
            f"{i}.json", run("01", f"l{i}", m, [guess("01/speedup", v, unit="x"), guess("01/add_gflops", 2.0)])
        )
        for i, (m, v) in enumerate(values)
    ]


def test_each_machine_is_set_against_the_atlas_widened_by_a_noise_band(monkeypatch):
    a = run("01", "", LAPTOP, [guess("01/speedup", 1.5, unit="x")])
    b = run("01", "", COLAB, [guess("01/speedup", 1.05, unit="x")])
    atlas = (a, b, run("01", "", LAPTOP, [guess("01/speedup", 1.7, unit="x")]))
    monkeypatch.setattr(atlas_module, "atlas_runs", lambda folder=None: atlas)  # the atlas the page reads
    # recorded 1.05 to 1.7, median 1.5: the band is 25 % of 1.5 = 0.375 (more than half the range, 0.325)
    assert classpage.noise_band([1.5, 1.05, 1.7]) == pytest.approx(0.375)
    assert classpage.noise_band([1.0, 9.0, 2.0]) == pytest.approx(4.0) and classpage.noise_band([]) == 0.0
    values = [(LAPTOP, 1.6), (LAPTOP, 1.9), (COLAB, 1.1), (LAPTOP, 9.0), (GPU, 1.3), (LAPTOP, 0.5)]
    runs = _speedup_runs(values)
    runs.append(classpage.Loaded("copy-of-atlas.json", {**a, "label": "mine"}))  # an atlas run handed in again
    assert classpage.atlas_copies(runs) == (runs[-1],)
    machines = {(m.kind, m.state): m for m in classpage.atlas_rows(runs)}
    laptop = machines[(kind_of(LAPTOP), "idle")]
    assert laptop.runs == 4  # the atlas's own run is left out
    cells = {c.key: c for c in laptop.cells}
    assert cells["01/speedup"].verdicts == ("inside", "band", "outside", "outside")
    assert cells["01/speedup"].outliers == (("l3", 9.0), ("l5", 0.5)) and cells["01/speedup"].verdict == "outside"
    assert cells["01/speedup"].widened == pytest.approx((0.675, 2.075))
    assert cells["01/add_gflops"].verdict == "no record"
    assert machines[(kind_of(COLAB), "idle")].cells[1].verdicts == ("inside",)
    assert machines[(kind_of(GPU), "busy")].cells[1].verdicts == ("inside",)
    section = _section(_page([r.run for r in runs]), "atlas")
    assert "The atlas holds 3 recorded runs" in section and "<strong>2 outliers</strong>" in section
    assert "1 of the room's 7 runs are the atlas's own recorded runs" in section
    shown = section.split("<details>")[0]
    assert "l3: 9x" in shown and "l5: 0.5x" in shown and "l1: 1.9x" not in shown  # only the values outside
    assert shown.count("<tr>") == 3 and "0.675 to 2.08x" in shown  # the header, the laptop kind, its one key
    assert f'<th colspan="7" class="group">{classpage.escape(kind_of(LAPTOP))}, idle (4 runs)</th>' in shown
    assert '<td class="bad">outlier</td>' in shown
    folded = section.split("<details>")[1]
    assert "3 inside the recorded range, 1 within its noise band, 6 with no atlas record" in folded
    assert "01/add_gflops" in folded and "<details open" not in section


def test_a_thin_atlas_calls_nothing_an_outlier_and_bolds_no_count():
    def thin(key):  # two recorded runs of each key: too few to call anything an outlier
        return [Group(kind_of(LAPTOP), "idle", (1.5, 1.7))]

    runs = _speedup_runs([(LAPTOP, 9.0), (LAPTOP, 40.0), (COLAB, 0.1), (LAPTOP, 1.6)])
    cells = [c for m in classpage.atlas_rows(runs, thin) for c in m.cells if c.key == "01/speedup"]
    assert {v for c in cells for v in c.verdicts} == {"thin", "inside"} and not any(c.outliers for c in cells)
    section = _section(_page([r.run for r in runs], groups_of=thin), "atlas")
    assert "<strong>" not in section and "<b>" not in section and "no outlier" in section
    assert section.count("the atlas holds only 2 runs here: too few to call anything an outlier") == 2
    assert 'class="bad"' not in section


def test_an_atlas_of_the_rooms_own_runs_is_not_compared_with_itself(monkeypatch):
    atlas = tuple(room(6, seed=4))
    monkeypatch.setattr(atlas_module, "atlas_runs", lambda folder=None: atlas)
    section = _section(_page([{**r, "label": "relabelled"} for r in atlas]), "atlas")
    assert "6 of the room's 6 runs are the atlas's own recorded runs" in section
    assert "nothing left to set against it" in section and "<table>" not in section


def test_300_files_merge_in_a_few_seconds(tmp_path, capsys):
    folder = tmp_path / "room"
    for i, r in enumerate(room(300, seed=1)):
        write(folder, f"{i:03d}.json", r)
    start = time.perf_counter()
    page = classpage.write_class_page(folder, tmp_path / "page")
    seconds = time.perf_counter() - start
    with capsys.disabled():
        print(f"\n300 run files merged into the class page in {seconds:.2f} s")
    assert len(page.reading.runs) == 300 and page.reading.skipped == ()
    assert seconds < 20, f"300 files took {seconds:.1f} s"


# --- in a real browser ------------------------------------------------------------------------------------

SHOTS = ROOT / "build" / "class-page-test"


@pytest.mark.browser
def test_the_page_loads_offline_in_a_browser_with_no_errors_and_no_requests(tmp_path, monkeypatch):
    why = browser.missing()
    if why:
        pytest.skip(f"The class page check needs a browser: {why}")
    from playwright.sync_api import sync_playwright

    recorded = tuple(room(24, seed=7))
    monkeypatch.setattr(atlas_module, "atlas_runs", lambda folder=None: recorded)  # a made-up atlas to compare with

    folder = tmp_path / "room"
    for i, r in enumerate(room(30, seed=2)):
        write(folder, f"{i:02d}-{r['lesson']}.json", r)
    write(folder, "zz-hostile.json", run("01", HOSTILE["label"], {**LAPTOP, "cpu": HOSTILE["cpu"]}))
    _hostile(folder)
    page_file = classpage.write_class_page(folder, SHOTS).path
    errors, requests, dialogs = [], [], []
    with sync_playwright() as p:
        chromium = browser.launch(p)
        try:
            page = chromium.new_page(viewport={"width": 1280, "height": 900})
            page.on("console", lambda m: errors.append(m.text) if m.type in ("error", "warning") else None)
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.on("request", lambda req: requests.append(req.url))
            page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
            page.goto(page_file.as_uri(), wait_until="load")
            images = page.evaluate("Array.from(document.images).map(i => i.complete && i.naturalWidth > 0)")
            svgs = page.evaluate(
                "Array.from(document.querySelectorAll('svg')).map(s => s.getBoundingClientRect().width)"
            )
            shown = page.evaluate("document.body.textContent")
            page.screenshot(path=str(SHOTS / "class-page.png"), full_page=True)
        finally:
            chromium.close()
    assert not errors and not dialogs, errors + dialogs
    assert [u for u in requests if not u.startswith(("file://", "data:"))] == []
    assert all(images) and svgs and all(w > 100 for w in svgs)
    assert HOSTILE["label"] in shown and "1. The room's hardware" in shown and "The atlas holds 24 recorded" in shown
    assert (SHOTS / "class-page.png").stat().st_size > 10_000
