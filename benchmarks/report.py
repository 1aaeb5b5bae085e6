"""Render the JSON of benchmarks/stencils.py as a Markdown table.

    python3 benchmarks/report.py stencils.json
"""

from __future__ import annotations

import json
import sys

PEERS = ("pystencils", "pystencils_simd", "devito", "devito_autotuned")


def main(path: str) -> None:
    data = json.loads(open(path).read())
    copy = data["stream_copy"]
    print(f"STREAM copy ({data['threads']} threads): {copy['median_gbs']:.1f} GB/s median, "
          f"{copy.get('nt_median_gbs', float('nan')):.1f} with non-temporal stores\n")
    tools = list(data["cases"][0]["tools"])
    print("| ms per step (GStencil/s) | " + " | ".join(c["stencil"] for c in data["cases"]) + " |")
    print("|---|" + "---|" * len(data["cases"]))
    for tool in tools:
        cells = [f"{c['tools'][tool]['ms_per_step']:.2f} ({c['tools'][tool]['gstencils_per_s']:.2f})"
                 for c in data["cases"]]
        print(f"| {tool} | " + " | ".join(cells) + " |")
    print()
    for c in data["cases"]:
        peers = [(c["tools"][p]["ms_per_step"], p) for p in PEERS if p in c["tools"]]
        if not peers:
            print(f"- {c['stencil']}: no peer (pystencils, Devito) was measured")
            continue
        best_peer = min(peers)
        sweep = min(c["tools"]["msc"]["ms_per_step"], c["tools"]["msc_sweep_tuned"]["ms_per_step"])
        tiled = c["tools"]["msc_time_tiled"]["ms_per_step"]
        print(f"- {c['stencil']}: best peer {best_peer[1]} {best_peer[0]:.2f} ms; msc single sweep "
              f"{best_peer[0] / sweep:.2f}x, time-tiled {best_peer[0] / tiled:.2f}x of it; effective "
              f"{c['tools']['msc_time_tiled']['effective_gbs']:.0f} GB/s time-tiled; schedules: "
              + "; ".join(f"{k}: {v}" for k, v in c["msc_schedules"].items())
              + f"; compile cold {c['msc_compile_cold_s']:.2f} s, cached {c['msc_compile_warm_s'] * 1e3:.0f} ms")


if __name__ == "__main__":
    main(sys.argv[1])
