"""Render the JSON of benchmarks/stencils.py as Markdown tables.

    python3 benchmarks/report.py stencils.json
"""

from __future__ import annotations

import argparse
import json

PEERS = ("c_handwritten", "pystencils", "pystencils_simd", "devito", "devito_autotuned")


def main(path: str) -> None:
    data = json.loads(open(path).read())
    cases = data["cases"]
    size = "quick" if data.get("quick") else "reduced" if data.get("reduced") else "full"
    print(f"{data['threads']} threads, {size} sizes, best of {data.get('repeat', '?')} rounds; "
          + ", ".join(f"{c['stencil']} {'x'.join(map(str, c['shape']))} x {c['steps']} steps" for c in cases) + "\n")
    tools = list(cases[0]["tools"])
    print("Kernel time, one-shot run: ms per step (GStencil/s)\n")
    print("| tool | " + " | ".join(c["stencil"] for c in cases) + " |")
    print("|---|" + "---|" * len(cases))
    for tool in tools:
        cells = [f"{c['tools'][tool]['ms_per_step']:.2f} ({c['tools'][tool]['gstencils_per_s']:.2f})"
                 if tool in c["tools"] else "-" for c in cases]
        print(f"| {tool} | " + " | ".join(cells) + " |")
    print("| STREAM copy, same rounds (GB/s; non-temporal) | " + " | ".join(
        f"{c['stream_copy_best_gbs']['stream_copy']:.1f}; {c['stream_copy_best_gbs']['stream_copy_nt']:.1f}"
        for c in cases) + " |")
    print("\nWall time per step as called: one-shot run / loop of 10 calls x 10 steps (its kernel time), ms\n")
    print("| tool | " + " | ".join(c["stencil"] for c in cases) + " |")
    print("|---|" + "---|" * len(cases))
    for tool in tools:
        cells = []
        for c in cases:
            e = c["tools"].get(tool)
            cells.append("-" if e is None else f"{e['one_shot_wall_ms_per_step']:.2f} / "
                         f"{e['loop_wall_ms_per_step']:.2f} ({e['loop_kernel_ms_per_step']:.2f})")
        print(f"| {tool} | " + " | ".join(cells) + " |")
    print()
    for c in cases:
        missing = [f"{p}: {c[p]}" for p in ("pystencils", "pystencils_simd", "devito") if p in c]
        peers = [(c["tools"][p]["ms_per_step"], p) for p in PEERS if p in c["tools"]]
        tiles = f" ({c['time_tiles_per_run']:.0f} time tiles per run)" if "time_tiles_per_run" in c else ""
        line = f"- {c['stencil']}: schedules: " + "; ".join(
            f"{k}: {v}" + (tiles if k == "msc_time_tiled" else "") for k, v in c["msc_schedules"].items())
        if peers:
            best = min(peers)
            sweep = min(c["tools"]["msc"]["ms_per_step"], c["tools"]["msc_sweep_tuned"]["ms_per_step"])
            line += (f"; best peer {best[1]} {best[0]:.2f} ms/step: msc single sweep {best[0] / sweep:.2f}x, "
                     f"time-tiled {best[0] / c['tools']['msc_time_tiled']['ms_per_step']:.2f}x"
                     + (f", auto {best[0] / c['tools']['msc_auto']['ms_per_step']:.2f}x" if "msc_auto" in c["tools"]
                        else "") + " of it")
        else:
            line += "; no peer was measured"
        line += (f"; compile cold {c['msc_compile_cold_s']:.2f} s, cached {c['msc_compile_warm_s'] * 1e3:.0f} ms"
                 + ("; " + "; ".join(missing) if missing else ""))
        print(line)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Render the JSON of benchmarks/stencils.py as Markdown tables.")
    parser.add_argument("json", help="a JSON file benchmarks/stencils.py wrote")
    main(parser.parse_args().json)
