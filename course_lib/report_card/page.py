"""The card's HTML page: self-contained (the PNG embedded), with the figures per result and the best marked,
each result's hardware, the reference accelerators with their sources, and the files skipped."""

from __future__ import annotations

import base64
import html
from datetime import datetime, timezone

import course_lib

from ..plots import _short_number
from .reading import _compared


def _fmt(value) -> str:
    return "n/a" if value is None else _short_number(float(value))


def _hardware_rows(results: list[dict], labels: list[str], files: list[str]) -> list[dict]:
    out = []
    for label, r, f in zip(labels, results, files):
        hw = r.get("hardware") if isinstance(r.get("hardware"), dict) else {}
        cpu = hw.get("cpu") if isinstance(hw.get("cpu"), dict) else {}
        accs = hw.get("accelerators") if isinstance(hw.get("accelerators"), list) else []
        acc = ", ".join(str(a.get("name", "?")) for a in accs if isinstance(a, dict)) or "none"
        simd = cpu.get("vector_isa") or (
            ", ".join(map(str, cpu.get("simd", []))) if isinstance(cpu.get("simd"), list) else None
        )
        quick = r.get("quick")
        details = r.get("details") if isinstance(r.get("details"), dict) else {}
        threads = details.get("threads", hw.get("torch_threads", "?"))
        matmul = details.get("matmul") if isinstance(details.get("matmul"), dict) else {}
        all_cores = matmul.get("all_cores_gflops")
        out.append(
            {
                "label": label,
                "file": f,
                "cpu": cpu.get("model", "unknown"),
                "threads": threads if isinstance(threads, int) else "?",
                "all_cores": f"{all_cores:.4g}" if isinstance(all_cores, (int, float)) else "-",
                "cores": f"{cpu.get('physical_cores', '?')} physical / {cpu.get('logical_cores', '?')} logical",
                "simd": simd or "unknown",
                "bf16": {True: "native", False: "no"}.get(cpu.get("native_bf16"), "?"),
                "accelerators": acc,
                "device": r.get("device", "unknown"),
                "platform": hw.get("platform", "unknown"),
                "torch": hw.get("torch_version", "unknown"),
                "course": r.get("course_version", "unknown"),
                "created": r.get("created", "unknown"),
                "run": "quick" if quick is True else "full" if quick is False else "unknown",
                "energy": (r.get("energy") or {}).get("source") or "not available"
                if isinstance(r.get("energy"), dict)
                else "unknown",
            }
        )
    return out


_CSS = """body{font-family:system-ui,sans-serif;max-width:1100px;margin:1.5em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:0.5em 0 1.5em;font-size:0.9em}th,td{border:1px solid #ccc;padding:3px 8px}
th{background:#f3f3f3;text-align:left}td.num{text-align:right}td.best{font-weight:bold;background:#e6f4e6}
img{max-width:100%}.note{color:#555;font-size:0.9em}"""


def _html(card_png: bytes, rows, labels, hw_rows, refs, skipped, n_hardware: int) -> str:
    e = lambda x: html.escape(str(x), quote=True)  # noqa: E731 - every string from a file goes through here
    created = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        "<title>Benchmark report card</title>",
        f"<style>{_CSS}</style></head><body>",
        "<h1>Benchmark report card</h1>",
        f'<p class="note">{e(_compared(len(labels), n_hardware))} compared, {len(skipped)} file(s) skipped; '
        f"made {e(created)} by course_lib {e(course_lib.__version__)}. A result is highlighted as "
        "best only where its worst process beats every other result's best process; otherwise the row says "
        "no winner. Time to accuracy is judged on each process's time per step: every result trains from the "
        "same seeds, and the seed sets a process's number of steps, which would otherwise blur the comparison."
        "</p>",
        f'<img alt="Headline figures per result, with catalog reference lines" '
        f'src="data:image/png;base64,{base64.b64encode(card_png).decode("ascii")}">',
        "<h2>Headline figures</h2><table><tr><th>figure</th><th>unit</th><th>better</th>"
        + "".join(f"<th>{e(label)}</th>" for label in labels)
        + "<th>best</th></tr>",
    ]
    for row in rows:
        cells = "".join(
            f'<td class="num{" best" if label == row["best"] else ""}">{e(_fmt(row["values"][label]))}</td>'
            for label in labels
        )
        best = row["verdict"]
        out.append(
            f"<tr><td>{e(row['figure'])}</td><td>{e(row['unit'])}</td><td>{e(row['better'])}</td>{cells}"
            f"<td>{e(best)}</td></tr>"
        )
    out.append(
        "</table><h2>Results and their hardware</h2><table><tr>"
        + "".join(
            f"<th>{h}</th>"
            for h in (
                "result",
                "file",
                "CPU",
                "cores",
                "SIMD",
                "native bf16",
                "torch threads",
                "fp32 matmul, all cores (GFLOP/s)",
                "accelerators",
                "device",
                "platform",
                "torch",
                "course version",
                "date",
                "run",
                "energy source",
            )
        )
        + "</tr>"
    )
    for h in hw_rows:
        out.append(
            "<tr>"
            + "".join(
                f"<td>{e(h[k])}</td>"
                for k in (
                    "label",
                    "file",
                    "cpu",
                    "cores",
                    "simd",
                    "bf16",
                    "threads",
                    "all_cores",
                    "accelerators",
                    "device",
                    "platform",
                    "torch",
                    "course",
                    "created",
                    "run",
                    "energy",
                )
            )
            + "</tr>"
        )
    out.append("</table>")
    out.append(
        '<p class="note">On a CPU the headline figures are measured with the torch thread count shown '
        "(one unless the run set <code>--threads</code>), so that they repeat when another program takes a "
        "core; the all-core matmul rate is listed for comparison. The memory bandwidth headline is then one "
        "core's copy, well below what every core together draws from memory.</p>"
    )
    out.append("<h2>Reference accelerators (catalog data sheets, not measured)</h2>")
    if refs:
        out.append(
            '<p class="note">Dense peaks and vendor figures: ceilings no real program reaches. The matmul '
            "lines are the fp32 and bf16 peaks in GFLOP/s; all-reduce is compared with the chip's link, "
            "per direction.</p><table><tr><th>accelerator</th><th>fp32 peak (GFLOP/s)</th>"
            "<th>bf16 peak (GFLOP/s)</th><th>memory bandwidth (GB/s)</th><th>interconnect (GB/s per "
            "direction)</th><th>source</th><th>checked</th></tr>"
        )
        for r in refs:
            links = "<br>".join(
                f'<a href="{e(u.strip())}">{e(u.strip())}</a>' for u in r["source"].split(";") if u.strip()
            )
            bf16 = _fmt(r["bf16_gflops"]) if r["bf16_gflops"] else "no bf16 in hardware"
            fp32 = _fmt(r["fp32_gflops"]) if r["fp32_gflops"] else "not published"
            out.append(
                f'<tr><td>{e(r["name"])}</td><td class="num">{e(fp32)}</td>'
                f'<td class="num">{e(bf16)}</td><td class="num">{e(_fmt(r["memory_bandwidth_gbs"]))}</td>'
                f"<td>{e(r['interconnect'])}: {e(_fmt(r['interconnect_gbs']))}</td><td>{links}</td>"
                f"<td>{e(r['source_date'])}</td></tr>"
            )
        out.append("</table>")
    else:
        out.append("<p>None asked for.</p>")
    out.append("<h2>Skipped files</h2>")
    out.append(
        "<ul>" + "".join(f"<li><code>{e(f)}</code>: {e(why)}</li>" for f, why in skipped) + "</ul>"
        if skipped
        else "<p>None: every file was a usable result.</p>"
    )
    out.append("</body></html>")
    return "\n".join(out)
