"""Hand-written mutants of the generated C, of the code that prints it and of
the emulators that run it, each run against the ordinary (not slow) tests
that should kill it.

Each mutant replaces one exact piece of text in one file of a scratch copy
of the checkout; the tests run on that copy (first on PYTHONPATH, it shadows
the installed msc), so the checkout itself is never modified. A mutant is killed
when a test fails. Usage:

    python tools/mutate.py [--only NAME ...] [--json mutants.json]

With `--cosmic-ray N` it runs cosmic-ray (pip install -e ".[mutation]")
instead, as configured in tools/cosmic-ray.toml, on a seeded sample of N of
the mutants it generates (all of them with N = 0), again in a scratch copy.

Exit status 0 when every mutant is killed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KERNEL = "msc/targets/templates/openmp_kernel.c.j2"
DIFFERENTIAL = ["tests/test_openmp_differential.py", "-m", "not slow"]
SCHEDULES = ["tests/test_schedules.py", "-m", "not slow"]
MPI = ["tests/mpi/test_mpi.py", "-k", "cases_and_errors or generated or halo_library"]
CUDA_TIME_TILES = ["tests/test_cuda_target.py::test_time_tiles_in_shared_memory_match_reference"]
CUDA_ROWS = ["tests/test_cuda_target.py::test_streamed_threads_take_several_points_of_the_middle_dimension"]
CUDA_CHAINS = ["tests/test_cuda_target.py::test_a_level_t_plus_1_read_at_neighbours_streams"]
CUDA_DEFAULT = ["tests/test_cuda_target.py", "-k", "test_emulated_cuda_matches_reference and not True"]  # default launches
IMPLICIT = ["tests/test_pde.py", "-k", "implicit"]
FUSED_TC = "msc/targets/gpu/cuda_tensor_core_tile.py"
FUSED_TC_TEST = "tests/test_cuda_tensor_core_tile.py::test_fused_steps_equal_reference_and_replay"


@dataclass(frozen=True)
class Mutant:
    name: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...]


MUTANTS = [
    Mutant("msc_min returns the max", KERNEL,
           "msc_min(real a, real b) { return (a < b ||", "msc_min(real a, real b) { return (a > b ||",
           (*DIFFERENTIAL,)),
    Mutant("msc_max returns the min", KERNEL,
           "msc_max(real a, real b) { return (a > b ||", "msc_max(real a, real b) { return (a < b ||",
           (*DIFFERENTIAL,)),
    Mutant("msc_min drops a NaN on its left", KERNEL,
           "msc_min(real a, real b) { return (a < b || a != a) ? a : b; }",
           "msc_min(real a, real b) { return a < b ? a : b; }",
           ("tests/test_math_functions.py", "-k", "nan")),
    Mutant("3D periodic wrap skips edges and corners", KERNEL,
           "    for (long i0 = 0; i0 < n0; i0++)\n        for (long i1 = 0; i1 < n1; i1++)\n",
           "    for (long i0 = r0; i0 < n0 - r0; i0++)\n        for (long i1 = r1; i1 < n1 - r1; i1++)\n",
           (*DIFFERENTIAL,)),
    Mutant("2D periodic wrap skips corners", KERNEL,
           "    for (long i0 = 0; i0 < n0; i0++)\n        for (long g = 0; g < r1; g++)",
           "    for (long i0 = r0; i0 < n0 - r0; i0++)\n        for (long g = 0; g < r1; g++)",
           (*DIFFERENTIAL,)),
    Mutant("periodic wrap of the upper ghosts off by one", KERNEL,
           "a[(i0 * n1 + i1) * n2 + n2 - r2 + g - p2];", "a[(i0 * n1 + i1) * n2 + n2 - r2 + g - p2 - 1];",
           (*DIFFERENTIAL,)),
    Mutant("AVX streaming line store repeats the first half-line", KERNEL,
           "_mm256_stream_{{ suffix }}(dst + k, _mm256_load_{{ suffix }}(src + k));",
           "_mm256_stream_{{ suffix }}(dst + k, _mm256_load_{{ suffix }}(src));",
           (*SCHEDULES,)),
    Mutant("line loop stops a point short of the line", "msc/targets/cpu/x86_pass.py",
           "it.lt(base_point + LINE)",
           "it.lt(base_point + LINE - 1)",
           (*DIFFERENTIAL,)),
    Mutant("a row's rest stores none of its points", "msc/targets/cpu/x86_pass.py",
           "edge(end - LINE, loop.cond)", "edge(end - LINE, last)",
           (*SCHEDULES,)),
    Mutant("a row's peel computes the line a point late", "msc/targets/cpu/x86_pass.py",
           "edge(it, aligned.not_())", "edge(it + 1, aligned.not_())",
           (*SCHEDULES,)),
    Mutant("floor division rounds toward zero", "msc/codegen/printers/c.py",
           "return a >= 0 ? a / b : -((-a + b - 1) / b);", "return a / b;",
           (*SCHEDULES,)),
    Mutant("& and | swapped in C", "msc/codegen/printers/cexpr.py",
           '_C_OP = {"&": "&&", "|": "||"}', '_C_OP = {"&": "||", "|": "&&"}', (*DIFFERENTIAL,)),
    Mutant("x**3 printed as x*x", "msc/codegen/printers/cexpr.py",
           "[self.visit(e.lhs)] * int(e.rhs.value)", "[self.visit(e.lhs)] * min(int(e.rhs.value), 2)", (*DIFFERENTIAL,)),
    Mutant("~ dropped in C", "msc/codegen/printers/cexpr.py",
           'return f"(!{self.visit(e.operand)})"', 'return f"({self.visit(e.operand)})"', (*DIFFERENTIAL,)),
    Mutant("abs printed as the identity", "msc/codegen/printers/cexpr.py", '"abs": "fabs"', '"abs": ""', (*DIFFERENTIAL,)),
    Mutant("C integer printing leaves a right operand of equal precedence bare", "msc/codegen/printers/c.py",
           'return f"{side(e.lhs, p)} {e.op} {side(e.rhs, p + 1)}"', 'return f"{side(e.lhs, p)} {e.op} {side(e.rhs, p)}"',
           ("tests/test_index_exprs.py", *DIFFERENTIAL)),
    Mutant("row-major indices drop the first coordinate's offset", "msc/codegen/index.py",
           "index = lift(coords[0]) + offsets[0]", "index = lift(coords[0])", ("tests/test_index_exprs.py", *DIFFERENTIAL)),
    Mutant("the ring slot ignores the start step t0", "msc/codegen/lower.py",
           'return (ix.Var("t0") + step + (dt + slots)) % slots',
           'return (step + (dt + slots)) % slots', (*DIFFERENTIAL,)),
    Mutant("halo exchange sends faces only", "msc/codegen/halo_plan.py",
           "return {v for v in itertools.product(*choices) if any(v)}",
           "return {v for v in itertools.product(*choices) if sum(map(abs, v)) == 1}", (*MPI,)),
    Mutant("CUDA time tile writes one point past its tile", "msc/targets/gpu/cuda_time_tile.py",
           "local[d].lt(depth * r[d] + plan.tile[d])", "local[d].le(depth * r[d] + plan.tile[d])", (*CUDA_TIME_TILES,)),
    Mutant("CUDA time tiles start in ring slot 0", "msc/targets/gpu/cuda_time_tile.py",
           'k.Decl("slot", "index", ix.Var("t0") % 2, const=False)', 'k.Decl("slot", "index", ix.Lit(0), const=False)',
           (*CUDA_TIME_TILES,)),
    Mutant("CUDA time tile steps without the barrier between them", "msc/targets/gpu/cuda_time_tile.py",
           "k.Load(k.Ref(\"a\", q, k.Space.SHARED)))),))),\n        k.Barrier()))",
           "k.Load(k.Ref(\"a\", q, k.Space.SHARED)))),)))))", (*CUDA_TIME_TILES,)),
    Mutant("CUDA streamed tile computes before its plane is stored", "msc/targets/gpu/cuda_stream.py",
           "    step.append(k.Barrier())\n", "",
           (*CUDA_TIME_TILES,)),
    Mutant("CUDA time tile step hands on its point's old value", "msc/targets/gpu/cuda_stream.py",
           '_hand_on(plan, stage + 1, point, point.var("v"))',
           '_hand_on(plan, stage + 1, point, point.var(f"w{stage}_0"))',
           (*CUDA_TIME_TILES,)),
    Mutant("CUDA time tile hands on the plane after the loaded one", "msc/targets/gpu/cuda_stream.py",
           '_hand_on(plan, 1, point, point.var("next0"))', '_hand_on(plan, 1, point, point.var("next1"))',
           (*CUDA_TIME_TILES,)),
    Mutant("CUDA streamed rings one plane short", "msc/targets/gpu/cuda_stream.py",
           "return 2 * r0 + (2 if self.depth == 1 else 1)", "return 2 * r0 + 1", (*CUDA_DEFAULT,)),
    Mutant("CUDA streamed ring's planes one point short", "msc/targets/gpu/cuda_stream.py",
           "(len(plan.rings), slots, math.prod(sides)), rows=2", "(len(plan.rings), slots, math.prod(sides) - 1), rows=2",
           ("tests/test_cuda_target.py::test_time_tiles_in_shared_memory_match_reference",)),
    Mutant("CUDA streamed step reads every past level as level t", "msc/targets/gpu/cuda_stream.py",
           "level = Level(read.name, stage - 1 + read.dt)", "level = Level(read.name, stage - 1)",
           ("tests/test_cuda_target.py::test_several_statements_and_levels_stream",)),
    Mutant("CUDA streamed ring read by the last step keeps no plane more", "msc/targets/gpu/cuda_stream.py",
           "most = max(most, span + 1 + (level.at <= 0 and stage == self.depth))", "most = max(most, span + 1)",
           ("tests/test_cuda_target.py::test_the_last_step_reading_a_loaded_level_keeps_a_plane_more",)),
    Mutant("CUDA streamed statement reads a level t+1 other threads wrote without a barrier",
           "msc/targets/gpu/cuda_stream.py", "body.append(k.Barrier())  # its first statement reads",
           "pass  # its first statement reads", (*CUDA_CHAINS,)),
    Mutant("CUDA streamed statement computes the plane of its step, not its chain's lag",
           "msc/targets/gpu/cuda_stream.py", "return self.inset(stage, statement, ABOVE)[0]",
           "return stage * reach(self.stencil, ABOVE)[0]", (*CUDA_CHAINS,)),
    Mutant("CUDA streamed tile's halo leaves out the chain of level t+1 reads", "msc/targets/gpu/cuda_stream.py",
           "depth * r + max(c[d] for c in chain)", "depth * r", (*CUDA_CHAINS,)),
    Mutant("CUDA streamed ring keeps no planes for a level t+1 read behind", "msc/targets/gpu/cuda_stream.py",
           "read.dt is not None and (read.dt <= 0 or self.from_ring(i, read))]", "read.dt is not None and read.dt <= 0]",
           (*CUDA_CHAINS,)),
    Mutant("CUDA streamed step's reach leaves out a lagging writer's chain", "msc/targets/gpu/cuda_stream.py",
           "out = [max(r, side * o + c - own)", "out = [max(r, side * o + 0 * (c - own))", (*CUDA_CHAINS,)),
    Mutant("CUDA default streamed block keeps its size where its rings do not fit", "msc/targets/gpu/cuda_stream.py",
           "while streamed_tile(stencil, depth, tile).too_large() is not None:", "while False:",
           ("tests/test_cuda_target.py::test_a_default_block_whose_rings_do_not_fit_halves",)),
    Mutant("CUDA time tile of several levels copies no level to its slot", "msc/targets/templates/cuda_kernel.cu.j2",
           "MSC_CUDA_CHECK(cudaMemcpy(to[next], from[next]", "if (0) MSC_CUDA_CHECK(cudaMemcpy(to[next], from[next]",
           ("tests/test_cuda_target.py::test_several_statements_and_levels_stream",)),
    Mutant("CUDA time tile's scratch levels are never freed", "msc/targets/templates/cuda_kernel.cu.j2",
           "if (levels) cudaFree(levels);", "(void)levels;",
           ("tests/test_cuda_target.py::test_a_failed_launch_frees_the_scratch_levels",)),
    Mutant("CUDA indexed launches take 64-bit indices at every size", "msc/runtime/cuda/msc_index.h",
           "return points <= MSC_INDEX32_POINTS;", "return false;",
           ("tests/test_cuda_emulator.py::test_indexed_launches_take_32_bit_indices_where_the_points_allow",)),
    Mutant("CUDA indexed device functions keep 64-bit indices in their bodies", "msc/targets/gpu/cuda.py",
           "return replace(printer, index=INDEX_TYPE) if function.indexed else printer", "return printer",
           ("tests/test_cuda_target.py::test_kernels_run_with_either_index_width",)),
    Mutant("CUDA streamed thread's next point one column short of a row below", "msc/targets/gpu/cuda_stream.py",
           "q + i * plan.points[1], f\"_{i}\")", "q + i * (plan.points[1] - 1), f\"_{i}\")", (*CUDA_ROWS,)),
    Mutant("CUDA streamed thread's points all weigh the first point's neighbours", "msc/targets/gpu/cuda_stream.py",
           "value[i * row + plan.shift(offsets)]", "value[plan.shift(offsets)]", (*CUDA_ROWS,)),
    Mutant("CUDA wave step takes level t-1 a plane off", "msc/targets/gpu/cuda_stream.py",
           'if s == 1 else point.var(f"o{s}_0"))', 'if s == 1 else point.var(f"o{s}_1"))',
           ("tests/test_cuda_target.py::test_several_statements_and_levels_stream",)),
    Mutant("CUDA summed time tile writes no level before its newest", "msc/targets/gpu/cuda_stream.py",
           "for point in points if back < st.field(target).window]", "for point in points if back == 0]",
           ("tests/test_cuda_target.py::test_several_statements_and_levels_stream",)),
    Mutant("tensor-core staging keeps its least pitch (bank conflicts)", "msc/targets/gpu/cuda_tensor_core.py",
           "for i in range(BANK_BYTES // ALIGN_BYTES)", "for i in range(1)",
           ("tests/test_cuda_target.py::test_tensor_core_kernels_meet_no_bank_conflicts",)),
    Mutant("tensor-core staging loads its padding columns", "msc/targets/gpu/cuda_tensor_core.py",
           "columns = lanes(s.columns,", "columns = lanes(s.pitch,",
           ("tests/test_cuda_target.py::test_tensor_core_kernels_meet_no_bank_conflicts",)),
    Mutant("CUDA emulator counts a fragment's elements lane by lane", "msc/runtime/cuda/cuda_emu.cpp",
           "same ? it->second - 1 : it->second++", "it->second++",
           ("tests/test_cuda_emulator.py::test_counters_model_fragment_loads_and_stores_as_one_access",)),
    Mutant("tensor-core staging's lanes leave a row's last columns out", "msc/targets/gpu/cuda_tensor_core.py",
           "j.lt(-(-count // 32))", "j.lt(count // 32)",
           ("tests/test_cuda_tensor_core.py::test_emulated_kernel_equals_replay_and_reference", FUSED_TC_TEST)),
    Mutant("tensor-core warp's further tiles read the first tile's columns", "msc/targets/gpu/cuda_tensor_core.py",
           "(o[-1] + s.column_offset + i * n)", "(o[-1] + s.column_offset)",
           ("tests/test_cuda_tensor_core.py::test_emulated_kernel_equals_replay_and_reference",)),
    Mutant("tensor-core lanes write their column's row past the grid", "msc/targets/gpu/cuda_tensor_core.py",
           "r.lt(dims[-2]), written)", "r.lt(dims[-2] + 1), written)",
           ("tests/test_cuda_tensor_core.py::test_emulated_kernel_equals_replay_and_reference",)),
    Mutant("tensor-core output tiles read back at the unpadded pitch", "msc/targets/gpu/cuda_tensor_core.py",
           "row * tile_pitch(kern.plan.shape, kern.tiles) + column", "row * kern.tiles * kern.plan.shape.n + column",
           ("tests/test_cuda_tensor_core.py::test_emulated_kernel_equals_replay_and_reference",)),
    Mutant("3D tensor-core block stages one plane at its first too", "msc/targets/gpu/cuda_tensor_core.py",
           "ix.Select(z.eq(ix.Var(\"z0\")), ix.Lit(0), ix.Lit(s.planes - 1))", "ix.Lit(s.planes - 1)",
           ("tests/test_cuda_tensor_core.py::test_3d_blocks_stream_their_planes",)),
    Mutant("3D tensor-core plane overwrites a ring's oldest without a barrier", "msc/targets/gpu/cuda_tensor_core.py",
           "kir.Comment(\"before the next plane overwrites a ring's oldest\"),\n                                            kir.Barrier()",
           "kir.Comment(\"before the next plane overwrites a ring's oldest\")",
           ("tests/test_cuda_tensor_core.py::test_3d_blocks_stream_their_planes",)),
    Mutant("tensor-core staging without its barrier", "msc/targets/gpu/cuda_tensor_core.py",
           "staged = [*staging, kir.Barrier()]", "staged = [*staging]",
           ("tests/test_cuda_tensor_core.py::test_emulated_kernel_equals_replay_and_reference",)),
    Mutant("tensor-core input fragment reused by the tiles beside it", "msc/targets/gpu/cuda_tensor_core.py",
           "(line.source, input_fragment, *o[:-1], o[-1] + i * shape.n)", "(line.source, input_fragment, *o[:-1], o[-1])",
           ("tests/test_cuda_tensor_core.py::test_emulated_kernel_equals_replay_and_reference", FUSED_TC_TEST)),
    Mutant("fused tensor-core direct store never puts the ring back", FUSED_TC,
           "(ix.Var(\"c0\") + uc + width).le(n1)]).not_()", "(ix.Var(\"c0\") + uc + width).le(n1)])", (FUSED_TC_TEST,)),
    Mutant("fused tensor-core direct store drops the constant", FUSED_TC,
           "ix.Var(\"constant\"))\n    else:", "None)\n    else:",
           (FUSED_TC_TEST,)),
    Mutant("fused tensor-core step without its barrier", FUSED_TC,
           "kir.Comment(\"before the next step reads what this one wrote\"),\n                 kir.Barrier()",
           "kir.Comment(\"before the next step reads what this one wrote\")", (FUSED_TC_TEST,)),
    Mutant("fused tensor-core frame one step of rows short", FUSED_TC,
           "reach = depth - 1  #", "reach = depth - 2  #", (FUSED_TC_TEST,)),
    Mutant("fused tensor-core lanes write a column past their tile", FUSED_TC,
           "[*([fc.lt(cols)] if cols is not None else [])", "[*([fc.lt(cols + 1)] if cols is not None else [])",
           (FUSED_TC_TEST,)),
    Mutant("fused tensor-core lanes write a column past the grid", FUSED_TC,
           "else []), c.ge(0), c.lt(n1)])", "else []), c.ge(0), c.lt(n1 + 1)])",
           (FUSED_TC_TEST,)),
    Mutant("fused tensor-core step writes the ring's first row", FUSED_TC,
           "inside = conjunction([r.ge(0),", "inside = conjunction([r.ge(-1),", (FUSED_TC_TEST,)),
    Mutant("fused tensor-core step writes the copy it reads", FUSED_TC,
           "stepped.offset + (1 - cur) * stepped.size", "stepped.offset + cur * stepped.size", (FUSED_TC_TEST,)),
    Mutant("tensor-core tile read back without __syncwarp", "msc/targets/gpu/cuda_tensor_core.py",
           'range(kern.tiles)),\n            kir.Barrier("warp")]', "range(kern.tiles))]",
           ("tests/test_cuda_tensor_core.py::test_emulated_kernel_equals_replay_and_reference", FUSED_TC_TEST)),
    Mutant("CUDA emulator leaves shared memory unpoisoned", "msc/runtime/cuda/cuda_emu.cpp",
           "    poison_shared();\n", "",
           ("tests/test_cuda_emulator.py::test_shared_memory_another_block_wrote_is_poison",)),
    Mutant("a modelled schedule='auto' keeps the costliest candidate", "msc/tune/tuner.py",
           "ranked = sorted(costs, key=lambda s: (bool(costs[s].caveat), costs[s].ms_per_step, *costs[s].rank))",
           "ranked = sorted(costs, key=lambda s: (bool(costs[s].caveat), costs[s].ms_per_step, *costs[s].rank), "
           "reverse=True)",
           ("tests/test_athread_target.py::test_auto_schedule_is_a_printed_model_that_counts_what_the_emulator_counts",)),
    Mutant("schedule='auto' on Sunway ranks by time alone, below the DMA floor too", "msc/tune/tuner.py",
           "key=lambda s: (bool(costs[s].caveat), ", "key=lambda s: (",
           ("tests/test_athread_target.py::test_auto_tiles_move_blocks_of_a_kilobyte_or_more",)),
    Mutant("the tuner tries fewer threads on long steps too", "msc/tune/tuner.py",
           "if timed[ranked[0]] >= FEWER_THREADS_BELOW_MS:", "if timed[ranked[0]] >= 1e9:",
           ("tests/test_schedules.py::test_fewer_threads_winning_on_long_steps_is_load_and_not_chosen",)),
    Mutant("the tuner's climb goes deeper past a far slower depth", "msc/tune/tuner.py",
           "if schedule.time_depth > _too_deep(here, timed):", "if schedule.time_depth > math.inf:",
           ("tests/test_schedules.py::test_the_climb_goes_no_deeper_than_a_far_slower_depth",)),
    Mutant("a finalist stopped early can still win the run-off", "msc/tune/tuner.py",
           "chosen = min(contenders, key=medians.__getitem__)", "chosen = min(medians, key=medians.__getitem__)",
           ("tests/test_schedules.py::test_a_finalist_stopped_early_does_not_win_when_load_slows_the_rest",)),
    Mutant("a run-off forgets the finalists' first timings", "msc/tune/tuner.py",
           "{s: [timed[s]] if s in timed else [] for s in started}", "{s: [] for s in started}",
           ("tests/test_schedules.py::test_one_unlucky_round_does_not_drop_the_fastest_finalist",)),
    Mutant("the tuner's climb never leaves its first time tile", "msc/tune/tuner.py",
           "                    here, moved = schedule, True\n", "                    moved = False\n",
           ("tests/test_schedules.py::test_the_tuner_climbs_from_its_best_time_tile_to_faster_neighbours",)),
    Mutant("a run-off times a clearly slower finalist every round", "msc/tune/tuner.py",
           "if min(samples[s]) > slower * slowest]", "if min(samples[s]) > 1e9 * slowest]",
           ("tests/test_schedules.py::test_a_clearly_slower_finalist_stops_early",)),
    Mutant("a run-off drops a far slower finalist only after two rounds", "msc/tune/tuner.py",
           "slower = FAR_SLOWER if rounds == 1 else CLEARLY_SLOWER", "slower = 1e9 if rounds == 1 else CLEARLY_SLOWER",
           ("tests/test_schedules.py::test_a_clearly_slower_finalist_stops_early",)),
    Mutant("a tied run-off goes on to the last round", "msc/tune/tuner.py",
           "if max(medians) <= TIED * min(medians):", "if max(medians) < 0:",
           ("tests/test_schedules.py::test_a_run_off_of_tied_finalists_ends_after_three_rounds",)),
    Mutant("a decided run-off goes on to the last round", "msc/tune/tuner.py",
           "if slowest < min((min(samples[s]) for s in running if s != leader), default=math.inf):",
           "if slowest < 0:",
           ("tests/test_schedules.py::test_a_decided_run_off_ends_after_three_rounds",)),
    Mutant("the climb never tries the depth quadrupled", "msc/tune/tuner.py",
           "moves = [(2.0, None), (4.0, None),", "moves = [(2.0, None),",
           ("tests/test_schedules.py::test_the_climb_reaches_a_tile_four_times_as_deep_past_a_slower_one",)),
    Mutant("athread's last time tile runs the full depth", "msc/targets/templates/athread_host.c.j2",
           "a.depth = T - t < {{ time_tile.depth }} ? T - t : {{ time_tile.depth }};",
           "a.depth = {{ time_tile.depth }};",
           ("tests/test_athread_target.py::test_a_last_time_tile_shallower_than_the_depth_matches_reference",)),
    Mutant("athread model counts 3D time-tile gets from tile sizes", "msc/targets/sunway/athread_model.py",
           "    for box, times in _boxes(boxes):\n        get.move(box, buffers * times, streamed=streamed)",
           "    for box, times in _boxes(sizes):\n        get.move(box, buffers * times, streamed=streamed)",
           ("tests/test_athread_target.py::test_model_counts_a_1d_or_3d_time_tile_as_the_emulator_does",)),
    Mutant("athread emulator leaves un-waited gets unfilled", "msc/runtime/athread/athread_emu.c",
           "        memset(ldm, 0xFF, (size_t)len); /* NaN until the transfer is waited for */\n", "",
           ("tests/test_athread_emulator.py::test_jacobi_matches_numpy",)),
    Mutant("athread emulator lets a put's buffer change before its wait", "msc/runtime/athread/athread_emu.c",
           "        int changed = memcmp(t->sent, t->ldm, t->len) != 0;", "        int changed = 0;",
           ("tests/test_athread_target.py::test_a_missing_dma_wait_is_caught",)),
    Mutant("athread emulator misses a race between CPEs", "msc/runtime/athread/athread_emu.c",
           "    if (writer < 0 || writer == c->id) return 1;", "    return 1;",
           ("tests/test_athread_target.py::test_one_spawn_runs_every_step_and_a_missing_barrier_is_caught",
            "tests/test_athread_emulator.py::test_a_get_and_a_put_of_the_same_words_with_no_barrier_are_a_race")),
    Mutant("CPE wrap of a periodic level skips the barrier between dimensions",
           "msc/targets/templates/athread_slave.c.j2",
           "    MSC_SYNC();\n    k = 0;\n    for (long i0 = 0; i0 < n0 && buf; i0++)\n        for (long g = 0; g < r1;",
           "    k = 0;\n    for (long i0 = 0; i0 < n0 && buf; i0++)\n        for (long g = 0; g < r1;",
           ("tests/test_athread_target.py::test_generated_stencils_match_reference",)),
    Mutant("athread emulator ignores a stack deeper than the reserve", "msc/runtime/athread/athread_emu.c",
           "    if (used > ATHREAD_EMU_STACK_RESERVE)\n", "    if (0)\n",
           ("tests/test_athread_emulator.py::test_a_stack_deeper_than_the_reserve_is_caught",)),
    Mutant("streamed 2D time tile copies no boundary row", "msc/targets/templates/athread_slave.c.j2",
           "                            for (long i = 0; i < w1; i++) r_out[i] = ring[i];\n", "",
           ("tests/test_athread_target.py::test_streamed_time_tiles_match_reference",)),
    Mutant("1D time tile fetches the next box into the set it computes in", "msc/targets/templates/athread_slave.c.j2",
           "msc_tt_fetch(&a, ldm + (set ^ 1) * {{ tt.set }}, P, V, bn, wn, &got[set ^ 1]);",
           "msc_tt_fetch(&a, ldm + set * {{ tt.set }}, P, V, bn, wn, &got[set ^ 1]);",
           ("tests/test_athread_target.py::test_model_counts_a_1d_or_3d_time_tile_as_the_emulator_does",)),
    Mutant("streamed 3D time tile copies no boundary row of a plane", "msc/targets/templates/athread_slave.c.j2",
           "                                    for (long i = 0; i < w2; i++) out1[i] = ring1[i];\n", "",
           ("tests/test_athread_target.py::test_streamed_time_tiles_match_reference",)),
    Mutant("implicit stepper misses a changed input beside an unchanged one", "msc/pde/steps.py",
           "if any(not _same(", "if all(not _same(", (*IMPLICIT,)),
    Mutant("implicit stepper misses a partly changed coefficient", "msc/pde/steps.py",
           "a.shape == b.shape and bool(np.all(a == b))", "a.shape == b.shape and bool(np.any(a == b))", (*IMPLICIT,)),
    Mutant("implicit stepper treats a periodic interior as dirichlet", "msc/pde/steps.py",
           '    if L.ir.boundary == "periodic":\n        return tuple(slice(None) for _ in shape)\n', "", (*IMPLICIT,)),
    Mutant("multi-right-hand-side solve skips a tail of one column", "msc/solvers/supernodal.c",
           "        if (q0 < r) forward_tail(c0, cb,", "        if (q0 + 1 < r) forward_tail(c0, cb,",
           ("tests/solvers/test_cholesky_grids.py::test_many_right_hand_sides",)),
    Mutant("multigrid restriction drops a fine row's third neighbour", "msc/pde/transfer.c",
           "                              + w2[2 * m2 + I2] * sum[i2[2 * m2 + I2]];", ";",
           ("tests/test_multigrid.py::test_compiled_transfers_match_explicit_matrices_on_buffer_views",)),
    Mutant("split coefficient operator skips its boundary planes", "msc/pde/matfree.py",
           "            for box in self._shell:\n"
           "                self._launch(kind, t, 1, box, scales=scales, direction=direction)\n", "",
           ("tests/test_multigrid.py::test_coefficient_operators_match_their_matrix",)),
    Mutant("CG's A p reads u's buffers, not the direction's", "msc/pde/matfree.py",
           "return self._applied(0, direction=True)", "return self._applied(0, direction=False)",
           ("tests/test_multigrid.py::test_multigrid_solves_poisson_odd_and_even_sizes",)),
    Mutant("a single-precision V-cycle's coarsest correction is left at zero", "msc/pde/multigrid.py",
           "e = self.coarse.solve(coarse.reshape(-1).astype(np.float64)).reshape(below.shape).astype(r.dtype)",
           "e = np.zeros(below.shape, r.dtype)",
           ("tests/test_multigrid.py::test_a_single_precision_v_cycle_takes_the_iterations_of_a_double_one",)),
    Mutant("the true residual is checked against the V-cycle's right-hand side, not b", "msc/pde/iterative.py",
           "        vectors.scale(1.0, b, r)\n", "",
           ("tests/test_multigrid.py::test_a_single_precision_v_cycle_takes_the_iterations_of_a_double_one",)),
    Mutant("CG's updated residual is not written into the V-cycle's right-hand side", "msc/pde/vectors.c",
           "                if (ry)\n                    ry[k] = (ZREAL)ri;\n", "",
           ("tests/test_multigrid.py::test_a_single_precision_v_cycle_takes_the_iterations_of_a_double_one",)),
    Mutant("CG's steps along p are not scaled back from b / ||b||", "msc/pde/krylov.py",
           "vectors.cg_step(alpha * bnorm, x, z", "vectors.cg_step(alpha, x, z",
           ("tests/test_multigrid.py::test_the_right_hand_side_s_scale_changes_nothing_but_the_solution_s",)),
    Mutant("the MPI V-cycle's float32 halos are exchanged as doubles", "msc/pde/distributed.py",
           "halo = self._halo(grid, ring, item)", "halo = self._halo(grid, ring, 8)",
           ("tests/mpi/test_multigrid_mpi.py",)),
    Mutant("a block's interpolation gives whole weight to points between two coarse ones", "msc/pde/transfer.py",
           "odd = 0.5 * (x % 2)", "odd = 0.0 * (x % 2)",
           ("tests/test_multigrid.py::test_block_transfers_equal_the_whole_grid_s",)),
    Mutant("a coarse level in blocks hands up its correction without the exchanged layer around it",
           "msc/pde/distributed.py", "        self._exchange(block.grid, block.halo, block.ring, padded)\n", "",
           ("tests/mpi/test_multigrid_mpi.py",)),
    Mutant("a block's boundary part takes the values toward its neighbours as boundary values",
           "msc/pde/distributed.py", "                    kept[along_axis(d, kept.ndim, slice(0, rd))] = 0.0\n",
           "                    pass\n", ("tests/mpi/test_multigrid_mpi.py",)),
    Mutant("a block's Galerkin product reads its coefficients from the grid's first point",
           "msc/pde/coarsen.py", "at_x = np.take(c, x - origin, axis=axis)", "at_x = np.take(c, x, axis=axis)",
           ("tests/test_multigrid.py::test_galerkin_on_blocks_equals_the_whole_grid_s",)),
    Mutant("a level on fewer ranks sends its children their slabs without exchanging its layer",
           "msc/pde/distributed.py", "            padded = self._correction(below)\n",
           "            padded = below.op.padded(below.op.step)\n", ("tests/mpi/test_multigrid_mpi.py",)),
    Mutant("a coarse level's blocks are not the coarse centres of the blocks above", "msc/pde/distributed.py",
           "bounds = tuple(tuple(first_centre(b, base) for b in axis) for axis in bounds)",
           "bounds = tuple(tuple((b - base) // 2 for b in axis) for axis in bounds)",
           ("tests/test_multigrid.py::test_coarse_levels_in_blocks_are_the_coarse_centres_of_the_blocks_above",
            "tests/mpi/test_multigrid_mpi.py")),
    Mutant("a grid transfer takes arrays of two types", "msc/pde/transfer.py",
           "        if fine.dtype != coarse.dtype:\n", "        if False:\n",
           ("tests/test_multigrid.py::test_single_precision_transfers_match_double_ones",)),
    Mutant("a per-class level's constant pieces never run", "msc/pde/matfree.py",
           "            for piece, box in enumerate(self._piece_boxes):\n"
           "                self._launch(piece_kind, t, 1, box, piece, scales, direction)\n", "",
           ("tests/test_multigrid.py::test_coefficient_operators_match_their_matrix",)),
    Mutant("constant pieces merged across classes that differ", "msc/pde/coarsen.py",
           "            if any(va[o] is not None and vb[o] is not None and va[o] != vb[o] for o in va):\n"
           "                continue\n", "",
           ("tests/test_multigrid.py::test_coefficient_operators_match_their_matrix",)),
    Mutant("the first two sweeps from zero apply K to b, not to w b", "msc/pde/matfree.py",
           "            return u1 if r.name == unknown else r\n",
           "            return _read(RHS, r.offsets, None) if r.name == unknown else r\n",
           ("tests/test_multigrid.py::test_coefficient_operators_match_their_matrix",)),
    Mutant("every Jacobi sweep takes the first one's factor", "msc/pde/matfree.py",
           "self._scale(k) for k in range(first, first + sweeps)", "self._scale(first) for k in range(first, first + sweeps)",
           ("tests/test_multigrid.py::test_coefficient_operators_match_their_matrix",)),
    Mutant("Galerkin proxy taken without checking its coarse classes", "msc/pde/coarsen.py",
           "    out = _compact(proxy, coarse_proxy)\n",
           "    out = _compact(proxy, coarse_proxy) or {o: np.asarray(c)[(slice(0, 3),) * len(proxy_shape)]"
           " for o, c in proxy.items()}\n",
           ("tests/test_multigrid.py::test_galerkin_through_a_proxy_grid_equals_the_product",)),
    Mutant("CPE vector loop leaves its last points undone", "msc/targets/sunway/simd.py",
           "                *super()._loop(replace(loop, init=None), depth + 1), f\"{pad}}}\"]",
           "                f\"{pad}}}\"]",
           ("tests/test_athread_simd.py::test_rows_of_any_length_match_the_reference",)),
    Mutant("row sums stop one point short of a strip's last point", "msc/codegen/row_sums.py",
           "end + high)),", "end + high - 1)),", ("tests/test_row_sums.py",)),
    Mutant("a tuner timing runs one band of time tiles", "msc/tune/tuner.py",
           "whole * _bands(schedule, threads, trial_steps)", "whole",
           ("tests/test_schedules.py", "-k", "band_of_time_tiles")),
    Mutant("a 2D wavefront's tiles handed out dynamically", "msc/targets/cpu/openmp.py",
           "DYNAMIC_TILED_DIMS = 2", "DYNAMIC_TILED_DIMS = 1", ("tests/test_schedules.py", "-k", "wavefront")),
    Mutant("row sums inside time tiles held to a sweep's saving", "msc/codegen/row_sums.py",
           "(not in_cache and after > MOST_ACCESSES * before)", "(after > MOST_ACCESSES * before)",
           ("tests/test_row_sums.py",)),
    Mutant("ring slots packed a level apart while the generated code pads them", "msc/runtime/buffers.py",
           "return (line + (slot_spread(stencil) - line) % PAGE) // itemsize", "return points",
           ("tests/test_simulation.py", "-k", "slots")),  # a kernel run on such buffers writes past them
    Mutant("the finiteness check takes a NaN for finite", "msc/runtime/finite.c",
           "bad |= zero != 0;", "bad |= zero > 0;", ("tests/test_finite.py",)),
    Mutant("row sums cover a strip without its right halo", "msc/codegen/row_sums.py",
           "strip + (ROW_STRIP + high)", "strip + ROW_STRIP", ("tests/test_row_sums.py",)),
    Mutant("row sums group rows by their shifts alone", "msc/codegen/row_sums.py",
           "    if shifts == pattern:\n        return 1.0\n",
           "    if [s for s, _ in shifts] == [s for s, _ in pattern]:\n        return 1.0\n",
           ("tests/test_row_sums.py",)),
    Mutant("row sums take rows in a proportion that holds at one shift only", "msc/codegen/row_sums.py",
           "return f if all(c == f * p for c, p in values) else None", "return f",
           ("tests/test_row_sums.py",)),
]


def scratch_copy(directory: Path) -> Path:
    """The checkout's files (tracked and untracked, not ignored) in `directory`:
    an importable msc package, whose folders are its import paths."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout.split("\0")
    for name in filter(None, listed):
        if (ROOT / name).is_file():
            (directory / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, directory / name)
    return directory


def run_mutant(mutant: Mutant, timeout: float) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="msc-mutant-") as tmp:
        repo = scratch_copy(Path(tmp) / "repo")
        target = repo / mutant.path
        text = target.read_text()
        if text.count(mutant.old) != 1:
            raise SystemExit(f"{mutant.name}: the text to replace occurs {text.count(mutant.old)} times "
                             f"in {mutant.path}; update the mutant")
        target.write_text(text.replace(mutant.old, mutant.new))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(repo), os.environ.get("PYTHONPATH", "")]),
                   MSC_CACHE_DIR=str(Path(tmp) / "cache"))
        command = [sys.executable, "-m", "pytest", "-x", "-q", "-n", "0", "-p", "no:cacheprovider", *mutant.tests]
        started = time.perf_counter()
        try:
            proc = subprocess.run(command, cwd=repo, env=env, capture_output=True, text=True, timeout=timeout)
            outcome = "killed" if proc.returncode == 1 else "survived" if proc.returncode == 0 else "error"
            tail = proc.stdout.strip().splitlines()[-1:] if proc.stdout.strip() else []
        except subprocess.TimeoutExpired:
            outcome, tail = "timeout", []
        return {"mutant": mutant.name, "file": mutant.path, "outcome": outcome,
                "tests": " ".join(mutant.tests), "seconds": round(time.perf_counter() - started, 1),
                "summary": tail[0] if tail else ""}


def cosmic_ray(sample: int, timeout: float) -> list[dict[str, object]]:
    """cosmic-ray's mutants of the modules in tools/cosmic-ray.toml (a seeded
    sample of `sample` of them; all with 0), each tested in one scratch copy."""
    exe = Path(sys.executable).parent / "cosmic-ray"
    tool = str(exe) if exe.exists() else shutil.which("cosmic-ray")
    if tool is None:
        raise SystemExit('cosmic-ray is not installed: pip install -e ".[mutation]"')
    config = ROOT / "tools" / "cosmic-ray.toml"
    test_command = next(line.split("=", 1)[1].strip()[1:-1] for line in config.read_text().splitlines()
                        if line.startswith("test-command"))
    results = []
    with tempfile.TemporaryDirectory(prefix="msc-cosmic-ray-") as tmp:
        repo = scratch_copy(Path(tmp) / "repo")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(repo), os.environ.get("PYTHONPATH", "")]),
                   MSC_CACHE_DIR=str(Path(tmp) / "cache"))
        session = str(Path(tmp) / "session.sqlite")
        subprocess.run([tool, "init", str(config), session], cwd=repo, env=env, check=True, capture_output=True)
        dump = subprocess.run([tool, "dump", session], cwd=repo, env=env, check=True, capture_output=True, text=True)
        jobs = [json.loads(line)[0]["mutations"][0] for line in dump.stdout.splitlines() if line.strip()]
        command = sys.executable + test_command.removeprefix("python")  # this interpreter
        chosen = random.Random(0).sample(jobs, sample) if 0 < sample < len(jobs) else jobs
        print(f"cosmic-ray: {len(chosen)} of {len(jobs)} mutants", flush=True)
        for job in chosen:
            name = f"{job['module_path']}:{job['start_pos'][0]} {job['operator_name']} #{job['occurrence']}"
            started = time.perf_counter()
            try:
                proc = subprocess.run([tool, "mutate-and-test", job["module_path"], job["operator_name"],
                                       str(job["occurrence"]), command],
                                      cwd=repo, env=env, capture_output=True, text=True, timeout=timeout)
                outcome = json.loads(proc.stdout.strip().splitlines()[-1]).get("test_outcome", "error")
            except (subprocess.TimeoutExpired, json.JSONDecodeError, IndexError):
                outcome = "error"
            # an incompetent mutant (one that cannot even be imported) also fails every test
            outcome = "killed" if outcome == "incompetent" else outcome
            results.append({"mutant": name, "file": job["module_path"], "outcome": outcome,
                            "tests": test_command, "seconds": round(time.perf_counter() - started, 1), "summary": ""})
            print(f"{outcome:>8}  {results[-1]['seconds']:7.1f} s  {name}", flush=True)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", help="run only the mutants whose name contains one of these words")
    parser.add_argument("--json", type=Path, help="write the outcomes to this file")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds allowed per mutant")
    parser.add_argument("--cosmic-ray", type=int, metavar="N", help="run N of cosmic-ray's mutants instead (0: all)")
    args = parser.parse_args(argv)
    results = []
    if args.cosmic_ray is not None:
        results = cosmic_ray(args.cosmic_ray, args.timeout)
    for mutant in [] if args.cosmic_ray is not None else MUTANTS:
        if args.only and not any(w in mutant.name for w in args.only):
            continue
        result = run_mutant(mutant, args.timeout)
        results.append(result)
        print(f"{result['outcome']:>8}  {result['seconds']:7.1f} s  {mutant.name}  ({result['summary']})", flush=True)
    killed = sum(r["outcome"] == "killed" for r in results)
    print(f"{killed} of {len(results)} mutants killed")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0 if killed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
