"""The report card (course_lib.report_card, notebook 07.1 "Compare machines"): saved benchmark results side by
side, bad files skipped with a reason, catalog reference lines, a self-contained HTML page that escapes what
it reads."""

import base64
import copy
import json
import os
import pathlib
import re

import matplotlib
import pytest

matplotlib.use("Agg")

from course_lib import catalog, hardware, plots, report_card  # noqa: E402
from course_lib.benchmark import combine, results, suite  # noqa: E402

HW = hardware.detect().to_dict()
HEADLINE = {
    "time_to_accuracy_s": 2.5,
    "train_samples_per_s": 4000.0,
    "latency_p50_ms": 0.8,
    "latency_p95_ms": 1.4,
    "matmul_gflops": 120.0,
    "memory_bandwidth_gbs": 12.0,
    "allreduce_gbs": 1.5,
    "energy_j": None,
}


def fake(label, scale=1.0, jitter=0.05, **changes):
    """A result in the saved schema: every 'higher is better' figure times ``scale``, every 'lower' one divided;
    its 5 processes scatter by +-``jitter`` (relative) around each figure (``jitter=None``: no per-process
    figures, as a result from an older course version)."""
    headline = {
        k: None if v is None else (v * scale if results.HEADLINES[k][2] else v / scale) for k, v in HEADLINE.items()
    }
    headline.update(changes)
    per = (
        None
        if jitter is None
        else {
            k: [v * (1 + jitter * j) for j in (-1, -0.5, 0, 0.5, 1)]
            for k, v in headline.items()
            if isinstance(v, float) and not isinstance(v, bool)
        }
    )
    details = {} if per is None else {"repeatability": {"per_process": per, "processes": 5}}
    return {
        "schema": results.SCHEMA,
        "course_version": "0.5.0",
        "created": "2026-11-20T10:00:00+00:00",
        "label": label,
        "hardware": copy.deepcopy(HW),
        "device": "cpu",
        "quick": True,
        "seconds": 40.0,
        "headline": headline,
        "details": details,
        "energy": {"available": False, "source": None, "joules": None, "why": "no RAPL counters here"},
    }


def save(folder, name, result):
    path = folder / name
    path.write_text(json.dumps(result))
    return path


@pytest.fixture
def good(tmp_path):
    folder = tmp_path / "results"
    folder.mkdir()
    gpu = fake("Colab T4", 20.0, energy_j=900.0)
    gpu["device"], gpu["quick"] = "cuda:0", False
    gpu["hardware"]["accelerators"] = [
        {"kind": "cuda", "index": 0, "name": "Tesla T4", "memory_bytes": 15 * 2**30, "capability": "7.5"}
    ]
    return [
        save(folder, "laptop.json", fake("laptop")),
        save(folder, "colab-cpu.json", fake("Colab CPU", 0.5)),
        save(folder, "colab-t4.json", gpu),
    ]


def test_compare_table_picks_the_best_per_figure():
    rows = report_card.compare_table([fake("a"), fake("b", 2.0, allreduce_gbs=None), fake("a", 0.5)])
    by = {r["key"]: r for r in rows}
    assert [r["key"] for r in rows] == list(results.HEADLINES)
    assert list(by["matmul_gflops"]["values"]) == ["a", "b", "a (2)"]
    assert by["matmul_gflops"]["values"] == {"a": 120.0, "b": 240.0, "a (2)": 60.0}
    assert by["matmul_gflops"]["best"] == "b" and by["matmul_gflops"]["better"] == "higher"
    assert by["matmul_gflops"]["spread"] == pytest.approx(4.0)
    assert by["latency_p95_ms"]["best"] == "b" and by["latency_p95_ms"]["better"] == "lower"
    assert by["time_to_accuracy_s"]["values"]["a (2)"] == pytest.approx(5.0)
    assert by["allreduce_gbs"]["values"]["b"] is None and by["allreduce_gbs"]["best"] == "a"
    assert by["energy_j"]["best"] is None and by["energy_j"]["spread"] is None
    assert by["matmul_gflops"]["unit"] == results.HEADLINES["matmul_gflops"][1]
    zero = {r["key"]: r for r in report_card.compare_table([fake("a", energy_j=0.0), fake("b", energy_j=5.0)])}
    assert zero["energy_j"]["best"] == "a" and zero["energy_j"]["spread"] is None  # no ratio to a zero
    with pytest.raises(TypeError, match="results"):
        report_card.compare_table([{"label": "no headline"}])


def test_no_winner_inside_the_spread():
    # two results of the same machine: the same figures, each process within 5 %: no winner anywhere
    rows = report_card.compare_table([fake("run 1"), fake("run 2", 1.02)])
    assert all(r["best"] is None for r in rows) and rows[0]["ahead"] == "run 2"  # 2 % ahead, inside 5 %
    assert {r["verdict"] for r in rows if r["key"] != "energy_j"} == {"within the spread: no winner"}
    # a 30 % difference with 5 % scatter is outside it; 8 % with 5 % scatter overlaps
    by = {r["key"]: r for r in report_card.compare_table([fake("a"), fake("b", 1.3)])}
    assert by["matmul_gflops"]["best"] == "b" and by["matmul_gflops"]["verdict"].startswith("best: b, 1.3x")
    assert by["time_to_accuracy_s"]["best"] == "b"  # lower is better: 2.5 / 1.3 s
    by = {r["key"]: r for r in report_card.compare_table([fake("a"), fake("b", 1.08)])}
    assert by["matmul_gflops"]["best"] is None and by["matmul_gflops"]["ahead"] == "b"
    # processes that do not overlap, but medians 3 % apart: drift between runs, no winner; 10 % apart: a winner
    tight = {r["key"]: r for r in report_card.compare_table([fake("a", jitter=0.005), fake("b", 1.03, jitter=0.005)])}
    assert tight["matmul_gflops"]["best"] is None and tight["matmul_gflops"]["ahead"] == "b"
    tight = {r["key"]: r for r in report_card.compare_table([fake("a", jitter=0.005), fake("b", 1.1, jitter=0.005)])}
    assert tight["matmul_gflops"]["best"] == "b"
    # the leader must beat every other result, not only the worst one
    three = {r["key"]: r for r in report_card.compare_table([fake("a"), fake("b", 2.0), fake("c", 1.95)])}
    assert three["matmul_gflops"]["best"] is None
    # a result without per-process figures has no spread: no winner is called, and the row says why
    old = {r["key"]: r for r in report_card.compare_table([fake("a", jitter=None), fake("b", 3.0)])}
    assert old["matmul_gflops"]["best"] is None and old["matmul_gflops"]["verdict"].startswith("no spread")
    assert report_card.process_values(fake("a"), "matmul_gflops") == pytest.approx([114, 117, 120, 123, 126])
    assert report_card.process_values(fake("a", jitter=None), "matmul_gflops") is None
    with pytest.raises(ValueError, match="key"):
        report_card.process_values(fake("a"), "gflops")
    with pytest.raises(TypeError, match="result"):
        report_card.process_values([1, 2], "matmul_gflops")


def _seeded(label, step_ms, steps=(172, 129, 129, 172, 172), jitter=0.01):
    """A result whose 5 processes needed ``steps`` (the same seeds in every result) at ``step_ms`` per step."""
    r = fake(label)
    secs = [n * step_ms * (1 + jitter * j) / 1e3 for n, j in zip(steps, (-1, -0.5, 0, 0.5, 1))]
    r["details"]["repeatability"]["per_process"]["time_to_accuracy_s"] = secs
    r["details"]["time_to_accuracy"] = {"steps_per_process": list(steps)}
    r["headline"]["time_to_accuracy_s"] = combine.olympic_mean(secs)
    return r


def test_time_to_accuracy_is_judged_per_step_where_the_seed_sets_the_steps():
    # 20 % faster per step: the seeds' 129-172 steps make the raw times overlap, the times per step do not
    a, b = _seeded("a", 1.5), _seeded("b", 1.2)
    assert report_card.step_times(a) == pytest.approx(
        [
            1e3 * t / n
            for t, n in zip(
                a["details"]["repeatability"]["per_process"]["time_to_accuracy_s"], (172, 129, 129, 172, 172)
            )
        ]
    )
    raw = report_card.process_values(a, "time_to_accuracy_s"), report_card.process_values(b, "time_to_accuracy_s")
    assert max(raw[1]) > min(raw[0]), "the raw times overlap"
    row = report_card.compare_table([a, b])[0]
    assert row["best"] == "b" and row["verdict"].endswith("(per step)")
    same = report_card.compare_table([_seeded("a", 1.5), _seeded("b", 1.49)])[0]
    assert same["best"] is None and same["verdict"] == "within the spread: no winner (per step)"
    # a result without steps per process falls back to the raw times; step_times says why it cannot
    assert report_card.step_times(fake("old")) is None
    assert not report_card.compare_table([a, fake("old")])[0]["verdict"].endswith("(per step)")
    with pytest.raises(TypeError, match="result"):
        report_card.step_times("a.json")


@pytest.mark.slow
def test_the_title_names_no_winner_for_two_runs_of_one_machine(tmp_path):
    files = [save(tmp_path, "a.json", fake("this machine")), save(tmp_path, "b.json", fake("this machine", 1.01))]
    card = report_card.write_report_card(files, tmp_path / "card", references=())
    fig, _ = report_card.card_figure(card)
    title = fig.get_suptitle()
    matplotlib.pyplot.close(fig)
    assert "no winner" in title and "best on" not in title, title
    assert "no winner (within the spread)" in report_card.summary_text(card)
    assert "within the spread: no winner" in card.html.read_text()


def test_labels_are_made_unique():
    results = [fake("laptop"), fake("laptop"), fake("laptop (2)"), fake(""), fake("  two   spaces "), fake(" \n")]
    assert list(report_card.compare_table(results)[0]["values"]) == [
        "laptop",
        "laptop (3)",
        "laptop (2)",
        "machine 4",
        "two spaces",
        "machine 6",
    ]


@pytest.mark.slow
def test_card_from_files_and_folder(good, tmp_path):
    lines = []
    card = report_card.write_report_card(good[0].parent, tmp_path / "card", echo=lines.append)
    assert lines == [] and card.skipped == []
    assert card.labels == ["Colab CPU", "Colab T4", "laptop"]  # a folder is read in name order
    assert card.png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and card.png.name == report_card.PNG_NAME
    page = card.html.read_text()
    assert page.count("<img") == 1 and "data:image/png;base64," in page and "http://" not in page.split("<h2>")[0]
    embedded = re.search(r'src="data:image/png;base64,([^"]+)"', page).group(1)
    assert base64.b64decode(embedded) == card.png.read_bytes()  # self-contained: the PNG travels inside
    for text in (
        "Tesla T4",
        "cuda:0",
        HW["cpu"]["model"],
        HW["torch_version"],
        "0.5.0",
        "2026-11-20",
        "quick",
        "full",
        "GFLOP/s",
        "samples/s",
        catalog.get_accelerator("t4").source,
        "NVIDIA A100 80GB SXM",
    ):
        assert text in page, text
    # the best machine per row is marked: the T4 result is 20x the laptop on every figure
    assert re.search(r'<td class="num best">2,400</td>', page)
    text = report_card.summary_text(card)
    assert "[2] Colab T4" in text and "best" in text and str(card.html) in text
    matmul = next(line for line in text.splitlines() if line.startswith(results.HEADLINES["matmul_gflops"][0]))
    assert "[2]" in matmul.split()[-4:] and "2,400" in matmul
    # the same files listed one by one (and twice) give the same card
    again = report_card.write_report_card([*good, good[0]], tmp_path / "again", echo=None)
    assert sorted(again.labels) == sorted(card.labels) and again.rows == report_card.compare_table(again.results)


@pytest.mark.slow
def test_the_title_counts_results_and_hardware_truthfully(good, tmp_path):
    # two runs on one machine at different settings are two results on the same hardware, not two machines
    busy = fake("laptop, one core busy", 0.6)
    busy["hardware"]["torch_threads"] = 1
    busy["hardware"]["available_ram_bytes"] = 1
    busy["hardware"]["cpu"]["usable_cores"] = 1
    assert report_card.hardware_count([fake("laptop"), busy]) == 1
    for files, claim in (
        ([save(tmp_path, "a.json", fake("laptop")), save(tmp_path, "b.json", busy)], "2 results on the same hardware"),
        (good, "3 results from 2 kinds of hardware"),  # laptop and Colab CPU share the fake CPU
        ([good[0], good[2]], "2 machines"),
    ):
        card = report_card.write_report_card(files, tmp_path / claim.replace(" ", "-"), references=())
        fig, _ = report_card.card_figure(card)
        title = fig.get_suptitle()
        matplotlib.pyplot.close(fig)
        assert title.startswith(f"{claim} on the course benchmark: "), title
        assert f"{claim} compared" in card.html.read_text()
        assert report_card.summary_text(card).startswith(claim[0].upper() + claim[1:] + ": [1] ")
    one = report_card.write_report_card(good[0], tmp_path / "one", references=())
    assert report_card.summary_text(one).startswith("1 result: [1] ")


@pytest.mark.slow
def test_reference_lines_are_in_the_figure(good, tmp_path):
    card = report_card.write_report_card(good, tmp_path, references=("t4", "A100 80GB", "tpu-v5e"))
    fig, axes = report_card.card_figure(card)
    by = dict(zip(results.HEADLINES, axes))
    lines = {
        key: {round(line.get_ydata()[0], 2): line.get_label() for line in ax.get_lines()} for key, ax in by.items()
    }
    assert lines["matmul_gflops"] == {
        8100.0: "T4 fp32 peak",
        19500.0: "A100 80GB SXM fp32 peak",
        312000.0: "A100 80GB SXM bf16 peak",
        197000.0: "TPU v5e bf16 peak",
    }
    assert lines["memory_bandwidth_gbs"] == {
        320.0: "T4 memory bandwidth",
        2039.0: "A100 80GB SXM memory bandwidth",
        819.0: "TPU v5e memory bandwidth",
    }
    assert set(lines["allreduce_gbs"]) == {15.75, 300.0, 200.0}
    for key in ("time_to_accuracy_s", "train_samples_per_s", "latency_p50_ms", "energy_j"):
        assert lines[key] == {}, f"{key} has no catalog counterpart"
    written = {t.get_text() for ax in axes for t in ax.texts}
    assert {"T4 fp32 peak", "TPU v5e memory bandwidth", "A100 80GB SXM link per direction"} <= written
    # one bar per machine with its value written on it; a log axis where the spread is over 10x
    assert [round(p.get_height(), 6) for p in by["matmul_gflops"].patches] == [120.0, 60.0, 2400.0]
    assert "2,400" in {t.get_text() for t in by["matmul_gflops"].texts}
    assert by["matmul_gflops"].get_yscale() == "log"
    assert by["latency_p50_ms"].get_yscale() == "log"  # 0.04 to 1.6 ms
    assert "lower is better" in by["latency_p50_ms"].get_title()
    assert "higher is better" in by["matmul_gflops"].get_title()
    assert by["matmul_gflops"].get_ylabel() == "GFLOP/s" and "peak" in fig.get_suptitle()
    assert sorted(t.get_text() for t in by["energy_j"].texts) == ["900", "not\nmeasured", "not\nmeasured"]
    matplotlib.pyplot.close(fig)
    small = report_card.write_report_card([good[0], good[1]], tmp_path / "cpu", references=())
    fig, axes = report_card.card_figure(small)
    assert all(not ax.get_lines() for ax in axes)
    assert dict(zip(results.HEADLINES, axes))["matmul_gflops"].get_yscale() == "linear"  # 60 vs 120: 2x
    matplotlib.pyplot.close(fig)


@pytest.mark.slow
def test_bad_files_are_skipped_and_the_rest_compared(good, tmp_path, monkeypatch):
    bad = tmp_path / "bad"
    bad.mkdir()
    text = json.dumps(fake("cut short"))
    newer = fake("from the future")
    newer["schema"] = "course-benchmark/99"
    missing = fake("no matmul")
    del missing["headline"]["matmul_gflops"]
    files = {
        "corrupt.json": "{this is not json",
        "truncated.json": text[: len(text) // 2],
        "empty.json": "",
        "package.json": json.dumps({"name": "left-pad", "version": "1.3.0", "dependencies": {}}),
        "pytest-benchmark.json": json.dumps({"machine_info": {"node": "x"}, "benchmarks": [], "version": "4.0.0"}),
        "list.json": json.dumps([1, 2, 3]),
        "newer.json": json.dumps(newer),
        "missing.json": json.dumps(missing),
        "words.json": json.dumps(fake("words", matmul_gflops="fast")),
        "nan.json": json.dumps(fake("nan", memory_bandwidth_gbs=float("nan"))),
        "negative.json": json.dumps(fake("negative", latency_p50_ms=-1.0)),
        "flag.json": json.dumps(fake("flag", allreduce_gbs=True)),
        "deep.json": "[" * 200_000,  # nested too deeply for json.loads: skipped, not a crash
    }
    for name, content in files.items():
        (bad / name).write_text(content)
    (bad / "binary.json").write_bytes(b"\xff\xfe\x00garbage\x81")
    (bad / "notes.txt").write_text("not a .json file: a folder's other files are not read")
    locked = save(tmp_path, "locked.json", fake("locked"))
    locked.chmod(0)
    if os.geteuid() == 0:  # root reads any file: make this one fail the way a file without read permission does
        real = {name: getattr(pathlib.Path, name) for name in ("read_bytes", "read_text", "open")}

        def refuse(name):
            def method(self, *args, **kwargs):
                if self.name == "locked.json":
                    raise PermissionError(13, "Permission denied", str(self))
                return real[name](self, *args, **kwargs)

            return method

        for name in real:
            monkeypatch.setattr(pathlib.Path, name, refuse(name))
    lines = []
    card = report_card.write_report_card(
        [*good, bad, locked, tmp_path / "gone.json"], tmp_path / "card", echo=lines.append
    )
    assert card.labels == ["laptop", "Colab CPU", "Colab T4"]
    skipped = dict(card.skipped)
    expected = sorted([str(bad / n) for n in [*files, "binary.json"]] + [str(locked), str(tmp_path / "gone.json")])
    assert sorted(skipped) == expected
    assert lines == [f"skipped {f}: {why}" for f, why in card.skipped]
    assert all(why.strip() for why in skipped.values())
    assert "fast" in skipped[str(bad / "words.json")] and "matmul_gflops" in skipped[str(bad / "words.json")]
    assert "memory_bandwidth_gbs" in skipped[str(bad / "nan.json")]
    assert "latency_p50_ms" in skipped[str(bad / "negative.json")]
    assert "allreduce_gbs" in skipped[str(bad / "flag.json")]
    assert "Permission" in skipped[str(locked)] and "no such file" in skipped[str(tmp_path / "gone.json")]
    assert "matmul_gflops" in skipped[str(bad / "missing.json")]
    assert "nested too deeply" in skipped[str(bad / "deep.json")]
    assert skipped[str(bad / "truncated.json")].startswith("truncated")
    assert "newer" in skipped[str(bad / "newer.json")].lower() or "99" in skipped[str(bad / "newer.json")]
    page = card.html.read_text()
    assert all(name in page for name in files) and "Permission" in page
    # notes stand between tables, never inside one
    import re

    for table in re.findall(r"<table>.*?</table>", page, flags=re.S):
        assert '<p class="note">' not in table
    assert "notes.txt" not in page


@pytest.mark.slow
def test_html_escapes_what_it_reads(tmp_path):
    nasty = fake('<script>alert("x")</script> $5 & co')
    nasty["hardware"]["cpu"]["model"] = "<b>bold</b> CPU"
    nasty["device"] = "<img src=x onerror=alert(1)>"
    nasty["created"] = "2026-11-20 <i>today</i>"
    other = fake('<script>alert("x")</script> $5 & co', 2.0)
    folder = tmp_path / "a&b <folder>"
    folder.mkdir()
    paths = [save(folder, "nasty.json", nasty), save(folder, "other.json", other)]
    (folder / "<bad>.json").write_text("{")
    card = report_card.write_report_card(folder, tmp_path / "card", echo=None)
    page = card.html.read_text()
    for raw in ("<script>", "<b>bold", "<img src=x", "<i>today", "<bad>", "a&b <folder>"):
        assert raw not in page, raw
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; $5 &amp; co" in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; $5 &amp; co (2)" in page  # told apart, escaped
    assert "&lt;b&gt;bold&lt;/b&gt; CPU" in page and "&lt;bad&gt;.json" in page
    assert len(paths) == len(card.results) == 2 and card.png.stat().st_size > 10_000  # '$5' did not break the PNG
    assert page.count("<script") == 0 and page.count("<img") == 1


def test_nothing_usable_and_bad_arguments(tmp_path):
    (tmp_path / "corrupt.json").write_text("{")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match=r"no usable benchmark result.*corrupt\.json.*empty.*no \.json"):
        report_card.write_report_card([tmp_path / "corrupt.json", empty], tmp_path / "out", echo=None)
    with pytest.raises(ValueError, match="no paths were given"):
        report_card.write_report_card([], tmp_path / "out", echo=None)
    assert not (tmp_path / "out").exists()
    good = save(tmp_path, "good.json", fake("laptop"))
    with pytest.raises(ValueError, match=r"references.*h100-sxm.*tpu-v5e"):
        report_card.write_report_card(good, tmp_path / "out", references=("t4", "rtx-9090"))
    with pytest.raises(ValueError, match="a100-80gb"):
        report_card.reference_rows("nonsense")
    with pytest.raises(TypeError, match="paths"):
        report_card.write_report_card(3, tmp_path / "out")
    with pytest.raises(TypeError, match="paths"):
        report_card.write_report_card([good, 3], tmp_path / "out")
    with pytest.raises(TypeError, match="echo"):
        report_card.write_report_card(good, tmp_path / "out", echo="print")
    with pytest.raises(ValueError, match="must be a folder"):  # an existing file as out_dir
        report_card.write_report_card(good, good, echo=None)
    rows = report_card.reference_rows(["T4", "t4", "tpu-v5e"])
    assert [r["key"] for r in rows] == ["t4", "tpu-v5e"]
    assert rows[0]["bf16_gflops"] is None and rows[1]["fp32_gflops"] is None
    assert rows[1]["bf16_gflops"] == pytest.approx(197000.0)


def test_reference_bars_refuses_bad_panels():
    with pytest.raises(ValueError, match="non-empty"):
        plots.reference_bars([], title="t")
    with pytest.raises(ValueError, match="lacks"):
        plots.reference_bars([{"title": "t", "labels": ["a"], "values": [1]}], title="t")
    with pytest.raises(ValueError, match="2 labels but 1 values"):
        plots.reference_bars([{"title": "t", "ylabel": "s", "labels": ["a", "b"], "values": [1]}], title="t")
    with pytest.raises(ValueError, match="title"):
        plots.reference_bars([{"title": "t", "ylabel": "s", "labels": ["a"], "values": [1]}], title=" ")
    with pytest.raises(TypeError, match="title must be a string"):
        plots.reference_bars([{"title": "t", "ylabel": "s", "labels": ["a"], "values": [1]}], title=3)
    with pytest.raises(TypeError, match="panels\\[0\\] must be a mapping"):
        plots.reference_bars([("t", "s")], title="t")
    with pytest.raises(TypeError, match="ncols must be an int"):
        plots.reference_bars([{"title": "t", "ylabel": "s", "labels": ["a"], "values": [1]}], title="t", ncols=1.5)
    fig, (ax,) = plots.reference_bars(
        [
            {
                "title": "$x$ cost",
                "ylabel": "s",
                "labels": ["a"],
                "values": [2.0],
                "references": [("ceiling", 3.0)],
                "log": True,
            }
        ],
        title="one panel",
    )
    assert ax.get_yscale() == "log" and ax.get_title() == r"\$x\$ cost"  # shown literally, not as math
    matplotlib.pyplot.close(fig)


@pytest.mark.slow
def test_card_from_a_real_quick_benchmark(tmp_path):
    """The card reads what `course benchmark --quick` writes (about 10 s on 2 cores)."""
    result = suite.run_benchmark(quick=True, progress=False, seed=0)
    path = results.save_result(result, tmp_path / "here.json")
    card = report_card.write_report_card(
        [path, save(tmp_path, "laptop.json", fake("laptop"))], tmp_path / "card", echo=None
    )
    assert card.skipped == [] and card.labels[0] == " ".join(result["label"].split())
    for row in card.rows:
        assert row["values"][card.labels[0]] == result["headline"][row["key"]]
    page = card.html.read_text()
    assert result["hardware"]["cpu"]["model"] in page
    all_cores = result["details"]["matmul"].get("all_cores_gflops")
    assert "torch threads" in page and f"<td>{result['details']['threads']}</td>" in page
    if all_cores is not None:  # a 1-core machine measures no separate all-core rate
        assert f"{all_cores:.4g}" in page
