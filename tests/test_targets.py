"""The target registry and the serial C target: a second target built from
the same kernel IR and printer, run on the generated stencils (with random
schedules) against the reference interpreter; buffer capacities."""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pytest
from stencil_gen import generate
from test_schedules import random_schedule

import msc
from msc.codegen import get_target, target_names
from msc.codegen import index as ix
from msc.errors import ScheduleError, TargetError
from msc.poly.schedule import TARGET_OPTIONS


def test_registry_lists_what_registered_itself():
    assert {"openmp", "openmp+mpi", "serial"} <= set(target_names())
    with pytest.raises(TargetError, match="unknown target 'nosuch'; available: .*openmp.*serial"):
        get_target("nosuch")


def test_cli_lists_the_registered_targets(capsys):
    from msc.cli import main

    with pytest.raises(SystemExit):
        main(["emit", "--help"])
    assert "serial" in capsys.readouterr().out


@pytest.mark.parametrize("seed", range(48))
def test_serial_target_matches_reference(seed, assert_matches):
    case = generate(seed)
    expected = case.stencil.reference(steps=case.steps, dtype=case.dtype, **case.inputs)
    schedule = None
    if seed % 3 == 0:  # a random schedule, without the x86 store primitives the serial platform lacks
        schedule = replace(random_schedule(seed, case.stencil), streaming=False, prefetch_distance=0)
    kernel = case.stencil.compile(target="serial", dtype=case.dtype, schedule=schedule)
    assert kernel.target == "serial"
    assert_matches(kernel.run(steps=case.steps, **case.inputs), expected, case.dtype, (case, schedule))


def test_serial_source_has_no_openmp_and_openmp_source_does():
    st = generate(3).stencil
    tiled = msc.Schedule().tile(x=8).parallel("x_tile")
    serial = get_target("serial").source(st.poly(), tiled)
    openmp = get_target("openmp").source(st.poly(), tiled)
    assert "omp" not in serial and "msc_line" not in serial
    assert "#pragma omp for schedule(static)" in openmp
    # the same loops, statements and addressing: only pragmas and line stores differ
    body = re.compile(r"^\s*(#pragma|\{|\}).*$", re.MULTILINE)
    assert "f_" in serial and body.sub("", serial).count("for (") <= body.sub("", openmp).count("for (")


def test_serial_refuses_what_its_platform_lacks():
    st = generate(3).stencil
    with pytest.raises(ScheduleError, match="target 'serial'.*stream_stores"):
        st.compile(target="serial", schedule=msc.Schedule().stream_stores())
    with pytest.raises(ScheduleError, match="target 'serial' has no tuner"):
        st.compile(target="serial", schedule="auto")
    with pytest.raises(TargetError, match="target 'serial' compiles in process only"):
        st.emit("serial", "unused-directory")


def test_cache_buffers_over_capacity_name_field_tile_and_sizes():
    @msc.stencil
    def heat(u, alpha):
        u[msc.t + 1, msc.x, msc.y] = u[msc.t, msc.x, msc.y] + alpha * (
            u[msc.t, msc.x - 1, msc.y] + u[msc.t, msc.x + 1, msc.y] - 2 * u[msc.t, msc.x, msc.y])

    big = msc.Schedule().tile(x=1024, y=1024).cache_read("u")
    with pytest.raises(ScheduleError) as err:
        get_target("openmp").source(heat.poly(), big)
    text = str(err.value)
    for words in ("stencil 'heat'", "x=1024, y=1024", "u 1026x1024", str(1026 * 1024 * 8), str(512 << 10), "'openmp'"):
        assert words in text, (words, text)
    small = msc.Schedule().tile(x=64, y=64).cache_read("u")
    assert "cr_f_u_t0[4224]" in get_target("openmp").source(heat.poly(), small)


def test_kernel_ir_orders_workers_with_barriers_each_target_implements():
    from msc.codegen import kernel_ir as k
    from msc.codegen.lower import lower_kernel
    from msc.codegen.printers.c import CPrinter
    from msc.poly.schedule import lower
    from msc.targets.cpu.openmp_pass import map_loops

    st = generate(3).stencil
    poly = st.poly()
    schedule = lower(msc.Schedule().tile(x=8).parallel("x_tile"), poly)
    kernel = lower_kernel(poly, schedule, "msc_run")
    barriers = [n for n in k.walk(kernel.body) if isinstance(n, k.Barrier)]
    shared = [n for n in k.walk(kernel.body) if isinstance(n, k.Loop) and n.parallel]
    assert barriers and len(barriers) == len(shared) == len(st.ir.statements)
    with pytest.raises(TypeError, match="barrier is left"):
        CPrinter(st.ir.dtype).lines(kernel.body)
    mapped = map_loops(kernel)  # `omp for` implies them
    assert not any(isinstance(n, k.Barrier) for n in k.walk(mapped.body))
    assert all(n.mapping == "omp for schedule(static)" for n in k.walk(mapped.body) if isinstance(n, k.Loop) and n.parallel)



def test_gpu_launches_are_kernel_ir_nodes_only_a_gpu_printer_prints():
    from msc.codegen import index as ix
    from msc.codegen import kernel_ir as k
    from msc.codegen.lower import lower_kernel
    from msc.codegen.printers.c import CPrinter
    from msc.poly.schedule import lower
    from msc.targets.gpu import cuda_pass
    from msc.targets.gpu.cuda_printer import CudaPrinter

    st = generate(3).stencil
    poly = st.poly()
    schedule = lower(msc.Schedule().tile(x=8).parallel("x_tile"), poly)
    host, functions = cuda_pass.split(lower_kernel(poly, schedule, "msc_run"), poly, schedule, [("long", "T")])
    launches = [n for n in k.walk(host.body) if isinstance(n, k.Launch)]
    assert [n.name for n in launches] == [f.name for f in functions] and len(launches) == len(st.ir.statements)
    assert all(n.grid == f.grid and n.block == f.block for n, f in zip(launches, functions))
    with pytest.raises(TypeError, match="only a GPU printer prints launches"):
        CPrinter(st.ir.dtype).lines(host.body)
    line = CudaPrinter(st.ir.dtype).lines(k.Launch("f", (ix.Lit(4), ix.Var("n")), (32, 8), (ix.Var("a"),)))
    assert line == ["MSC_LAUNCH(f, dim3(4, n), dim3(32, 8), 0, a);"]


def test_gpu_time_tiles_are_kernel_ir_the_gpu_printer_prints():
    """The shared-memory time tiles (streamed in 2D and 3D, boxes in 1D) are built as
    kernel IR, device function and host loop alike, with no source text: values in
    shared rings, the stencil's expression bound to its loads, barriers, a launch per
    `depth` steps and the device copy that puts the newest level in its slot."""
    from msc.codegen import kernel_ir as k
    from msc.codegen.printers.c import CPrinter
    from msc.poly.schedule import lower
    from msc.targets.gpu import cuda_time_tile
    from msc.targets.gpu.cuda_printer import CudaPrinter

    for seed in (8, 9):  # 1D (a box), 2D (streamed)
        st = generate(seed).stencil
        schedule = lower(msc.Schedule().time_tile(3, **get_target("cuda").platform.default_time_tile(st.ir, 3)),
                         st.poly())
        plan = cuda_time_tile.shared_time_tile(st.ir, schedule)
        assert plan is not None and plan.depth == 3
        [function] = cuda_time_tile.device_functions(plan, "f")
        nodes = list(k.walk(function.body))
        shared = [n for n in nodes if isinstance(n, k.Buffer) and n.space == k.Space.SHARED]
        assert len(shared) == 1 and shared[0].rows >= 1
        assert any(isinstance(n, k.Barrier) for n in nodes)
        assert any(isinstance(n, k.Store) and n.ref.array == "dst" for n in nodes)
        computes = [e for n in nodes if isinstance(n, (k.Store, k.Set)) for e in ix.walk(n.value)
                    if isinstance(e, k.Compute)]
        assert computes and all(e.expr == st.ir.statements[0].expr for e in computes)
        host = cuda_time_tile.host_loop(plan, [function])
        launches = [n for n in k.walk(host) if isinstance(n, k.Launch)]
        assert len(launches) == 1 and len(launches[0].args) == len(function.scope)
        assert any(isinstance(n, k.DeviceCopy) for n in k.walk(host))
        with pytest.raises(TypeError, match="only a GPU printer prints launches"):
            CPrinter(st.ir.dtype).lines(host)
        text = "\n".join(CudaPrinter(st.ir.dtype).lines(host))
        assert "MSC_LAUNCH_INDEXED(f, " in text and "cudaMemcpyDeviceToDevice" in text  # int or long indices


@pytest.mark.parametrize("precision", ["fp64", "tf32", "fp16"])
def test_the_tensor_core_kernel_is_kernel_ir_with_the_matrix_unit(precision):
    """The wmma kernel is built as kernel IR: operands staged in shared memory of their
    own type, fragments loaded, multiplied and stored by matrix-unit nodes that only the
    GPU printer prints, a warp's barrier before its tiles are read back; per chunk one
    weight load for the warp's tiles (4 but in fp16), each with its own accumulator; in 3D
    a block barrier before the next plane's staging."""
    from test_tensor_core import CASES, make_stencil

    from msc.codegen import kernel_ir as k
    from msc.codegen.printers.c import CPrinter
    from msc.targets.gpu import cuda_tensor_core
    from msc.targets.gpu.cuda_printer import CudaPrinter

    st = make_stencil(*CASES[9])  # 3D, box, radius 2, periodic
    dtype = "float64" if precision == "fp64" else "float32"
    kernel = cuda_tensor_core.generate(st.ir, 0, precision, dtype, "tc", wrap=True)
    function = cuda_tensor_core.device_function(kernel)
    nodes = list(k.walk(function.body))
    products = [n for n in nodes if isinstance(n, k.MatrixMultiply)]
    assert kernel.tiles == (1 if precision == "fp16" else 4)
    assert len(products) == kernel.plan.mmas_per_tile * kernel.tiles
    loads = [n for n in nodes if isinstance(n, k.MatrixLoad)]
    assert len(loads) == len(products) + kernel.plan.mmas_per_tile and {n.fragment for n in loads} == {"a", "b"}
    staged = {n.name: n for n in nodes if isinstance(n, k.Buffer)}
    assert staged["stage"].element == {"fp64": "float64", "tf32": "float32", "fp16": "float16"}[precision]
    assert staged["stage"].offset == 0 and staged["tiles"].offset > 0
    assert [n.workers for n in nodes if isinstance(n, k.Barrier)] == ["all", "warp", "all"]
    for node in (n for n in nodes if isinstance(n, (k.Fragment, k.MatrixLoad, k.MatrixMultiply, k.MatrixStore))):
        with pytest.raises(TypeError, match="only a printer for a matrix unit prints it"):
            CPrinter(dtype).lines(node)
    text = "\n".join(CudaPrinter(dtype).lines(function.body))
    assert all(text.count(f"nvcuda::wmma::mma_sync(acc{i}, a, b, acc{i});") == kernel.plan.mmas_per_tile
               for i in range(kernel.tiles)) and "__syncwarp();" in text


def test_an_option_the_target_lacks_is_named(tmp_path):
    case = generate(0)
    with pytest.raises(TargetError, match="target 'openmp' has no compile option 'emulat'"):
        case.stencil.compile(target="openmp", emulat=True)
    with pytest.raises(TargetError, match="target 'serial' has no emit option 'chip'"):
        case.stencil.emit("serial", tmp_path / "out", chip="sw26010")
    assert not (tmp_path / "out").exists()
    with pytest.raises(TargetError, match=r"target 'openmp' has no compile option 'schedul' \(its compile options: "
                                          r"none\); 'schedul' looks like a misspelling of 'schedule'$"):
        case.stencil.compile(target="openmp", schedul="auto")
    with pytest.raises(TargetError, match="'emulat' looks like a misspelling of 'emulate'$"):
        case.stencil.compile(target="cuda", emulat=True)


OPTION_SCHEDULES = {"stream_stores": msc.Schedule().stream_stores(), "prefetch": msc.Schedule().prefetch(8),
                    "with_threads": msc.Schedule().with_threads(2), "tensor_cores": msc.Schedule().tensor_cores("fp64"),
                    "pipeline": msc.Schedule().time_tile(4, x=8, y=8).pipeline(),
                    "update_in_place": msc.Schedule().tile(y=8).update_in_place()}


@pytest.mark.parametrize("target", ["openmp", "serial", "cuda", "hip", "athread"])
def test_a_target_option_the_target_lacks_is_one_error_naming_the_targets_that_take_it(target):
    """A schedule is a target-neutral core plus target options; each target
    lists the options it takes, and one check refuses the others before any
    code is generated, naming the targets that take the option."""
    assert set(OPTION_SCHEDULES) == set(TARGET_OPTIONS)
    takes = get_target(target).schedule_options
    assert set(takes) <= set(TARGET_OPTIONS)
    st = generate(0).stencil
    options = {"emulate": True} if target in ("cuda", "hip") else {}
    for option, schedule in OPTION_SCHEDULES.items():
        assert schedule.target_options() == [option]
        if option in takes:
            continue
        takers = [name for name in target_names() if option in get_target(name).schedule_options]
        with pytest.raises(ScheduleError, match=f"target '{target}' has no ") as refused:
            st.compile(target=target, schedule=schedule, **options)
        assert takers and all(repr(name) in str(refused.value) for name in takers), (str(refused.value), takers)
    if f"{target}+mpi" in target_names():
        assert get_target(f"{target}+mpi").schedule_options == takes


def test_mpi_driver_takes_everything_node_specific_from_the_node_target(tmp_path, monkeypatch):
    """A node target with its own files, Make variables, rules, link line and no
    OpenMP (as a GPU or Sunway target would have) gets an MPI program through
    the node interface alone (msc/targets/node.py); one without it is refused."""
    import msc.codegen
    from msc.targets.mpi import MPITarget
    from msc.targets.node import MakeRule, NodeBuild, NodeKernel

    class Accelerator:
        name, compile_options, emit_options, schedule_options = "accel", (), ("chip",), ()

        def node_build(self, chip: str = "a1") -> NodeBuild:
            rule = MakeRule("accel_rt.o", ("accel_rt.c",), ("$(ACC) -c accel_rt.c -o $@",))
            return NodeBuild(cflags="-O2 -std=c11", threads=False, ldlibs="-lm -laccel",
                             variables=(("ACC", f"acc --chip={chip}"),), files={"accel_rt.c": "/* runtime */\n"},
                             rules=(rule,), link="$(ACC) -o $@ $(OBJECTS) $(LDLIBS)")

        def node_kernel(self, poly, schedule, tag, box, chip="a1") -> NodeKernel:
            files = {f"host_{tag}.c": f"/* {poly.ir.name} {tag} */\n", f"dev_{tag}.acc": "/* device */\n"}
            rule = MakeRule(f"{tag}.o", tuple(files), (f"$(ACC) -c host_{tag}.c dev_{tag}.acc -o $@",))
            return NodeKernel(files, (rule,), f"msc_run_{tag}", f"msc_run_box_{tag}" if box else None)

    monkeypatch.setitem(msc.codegen._REGISTRY, "accel", Accelerator)
    monkeypatch.setitem(msc.codegen._REGISTRY, "accel+mpi", lambda: MPITarget("accel"))
    st = generate(3).stencil
    out = st.emit("accel+mpi", tmp_path / "src", chip="a2")
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted([".msc-files", "Makefile", "main.c", "halo.c", "halo.h", "npy.h", "accel_rt.c",
                            "host_phase0.c", "dev_phase0.acc"]), names
    make = (out / "Makefile").read_text()
    for words in ("ACC ?= acc --chip=a2", "CFLAGS ?= -O2 -std=c11", "LDLIBS = -lm -laccel",
                  "OBJECTS = main.o halo.o accel_rt.o phase0.o", "\t$(ACC) -o $@ $(OBJECTS) $(LDLIBS)",
                  "phase0.o: host_phase0.c dev_phase0.acc\n\t$(ACC) -c host_phase0.c dev_phase0.acc -o $@"):
        assert words in make, (words, make)
    main = (out / "main.c").read_text()
    assert "msc_run_box_phase0(" in main and not re.search(r"\bomp_|omp\.h|OMP_", main)

    class Opaque:
        name, compile_options, emit_options = "opaque", (), ()

    monkeypatch.setitem(msc.codegen._REGISTRY, "opaque", Opaque)
    with pytest.raises(TargetError, match="target 'opaque' cannot run under MPI: it does not implement"):
        MPITarget("opaque")


def test_tuning_space_comes_from_the_platform_and_a_cost_model_runs_nothing(tmp_path, monkeypatch, assert_matches):
    """schedule="auto" tries what the target's platform offers; a platform that
    does not measure (a chip not at hand) picks by its cost model, and only the
    chosen schedule is ever compiled."""
    import numpy as np

    from msc.targets.cpu.openmp import CPUPlatform
    from msc.targets.ctarget import Platform
    from msc.tune.tuner import AutoKernel, Estimate, candidates

    monkeypatch.setenv("MSC_CACHE_DIR", str(tmp_path))
    st = generate(3).stencil  # 2D dirichlet
    poly = st.poly()
    assert get_target("openmp").compile(poly, schedule="auto").platform.__class__ is CPUPlatform
    assert candidates(poly, (40, 40), platform=CPUPlatform()) == candidates(poly, (40, 40))

    class Modelled(Platform):
        name = "modelled"
        tunes, measures = True, False

        def tuning_space(self, poly, shape, steps):
            return [msc.Schedule().time_tile(d, x=8) for d in (2, 4, 8)] + [msc.Schedule().tile(z=4)]

        def cost(self, poly, shape, steps, schedule):  # time tiles of depth 4 are the favourite of the legal ones
            return Estimate(0.5 if schedule.tiles == (("z", 4),) else abs(schedule.time_depth - 4) + 1.0)

    compiled = []

    def compile_fn(schedule, threads):
        compiled.append(schedule)
        return st.compile(target="serial", schedule=schedule)

    kernel = AutoKernel(poly, compile_fn, threads=1, echo=False, platform=Modelled())
    case = generate(3)
    expected = st.reference(steps=case.steps, dtype=case.dtype, **case.inputs)
    assert_matches(kernel.run(steps=case.steps, **case.inputs), expected, case.dtype)
    assert kernel.report.schedule == msc.Schedule().time_tile(4, x=8) and compiled == [kernel.report.schedule]
    assert kernel.report.ms_per_step == 1.0 and kernel.report.default_ms_per_step == 5.0
    assert "tile(z=4)" not in {t.schedule for t in kernel.report.trials}  # illegal for a 2D stencil: skipped
    assert np.isfinite(kernel.report.speedup)


def test_a_measuring_platform_with_a_cost_model_times_only_what_it_ranks_best(tmp_path, monkeypatch):
    """The tuner times the default and the TIMED - 1 candidates the platform's
    cost model ranks best (the CPU's: msc/targets/cpu/model.py); a platform
    without a model has its whole pool timed."""
    from msc.targets.ctarget import Platform
    from msc.tune.tuner import TIMED, AutoKernel, Estimate

    monkeypatch.setenv("MSC_CACHE_DIR", str(tmp_path))
    st = generate(3).stencil
    case = generate(3)
    widths = list(range(1, 17))

    class Ranked(Platform):
        name = "ranked"
        tunes = True

        def tuning_space(self, poly, shape, steps):
            return [msc.Schedule().tile(x=w) for w in widths]

        def cost(self, poly, shape, steps, schedule):  # the model likes widths near 6
            return Estimate(abs(dict(schedule.tiles).get("x", 100) - 6) + 0.5)

    class Unranked(Ranked):
        name = "unranked"

        def cost(self, poly, shape, steps, schedule):
            raise NotImplementedError

    nearest = set(sorted(widths, key=lambda w: abs(w - 6))[:TIMED - 1])  # the model's best: 6, then 5 and 7, ...
    for platform, expected in ((Ranked(), nearest), (Unranked(), set(widths))):
        compiled = []

        def compile_fn(schedule, threads, compiled=compiled):
            compiled.append(schedule)
            return st.compile(target="serial", schedule=schedule)

        kernel = AutoKernel(st.poly(), compile_fn, threads=1, echo=False, platform=platform)
        kernel.run(steps=case.steps, **case.inputs)
        assert {dict(s.tiles).get("x") for s in compiled} == expected | {None}, platform.name
        assert len(expected) == (TIMED - 1 if platform.name == "ranked" else len(widths))


@pytest.mark.parametrize("target, options", [("openmp", {}), ("serial", {}), ("cuda", {"emulate": True}),
                                             ("athread", {"chip": "sw26010"})])
def test_a_time_tile_without_sizes_gets_the_platforms_tile(target, options, tmp_path):
    """time_tile(d) names no sizes: each target fills in its platform's default tile (a C or CUDA kernel
    records the schedule it was built with), and the result is the reference's; lowering such a schedule
    without a target says a target chooses the sizes."""
    from msc.poly.schedule import lower

    @msc.stencil
    def heat(u, alpha):
        u[msc.t + 1, msc.x, msc.y] = u[msc.t, msc.x, msc.y] + alpha * (
            u[msc.t, msc.x - 1, msc.y] + u[msc.t, msc.x + 1, msc.y] + u[msc.t, msc.x, msc.y - 1]
            + u[msc.t, msc.x, msc.y + 1] - 4 * u[msc.t, msc.x, msc.y])

    schedule = msc.Schedule().time_tile(4)
    assert str(schedule) == "Schedule().time_tile(4)"
    u = np.random.default_rng(9).random((30, 41))
    kernel = heat.compile(target=target, schedule=schedule, **options)
    result = kernel.run(steps=9, u=u, alpha=0.1)
    np.testing.assert_allclose(result["u"], heat.reference(steps=9, u=u, alpha=0.1)["u"], rtol=1e-12, atol=0)
    if target != "athread":  # the athread target completes it inside, per chip
        assert kernel.schedule.time_depth == 4 and kernel.schedule.tiles, kernel.schedule
    if target != "serial":  # (which compiles in process only)
        heat.emit(target, tmp_path / target, schedule=schedule, **{k: v for k, v in options.items() if k != "emulate"})
    with pytest.raises(ScheduleError, match=r"time_tile\(4\) names no sizes: a target chooses them"):
        lower(schedule, heat.poly())


def test_the_bandwidth_copy_stays_small_beside_a_server_sized_last_level_cache(monkeypatch):
    """sysfs reports a socket's whole L3 (hundreds of MiB on servers); the cost model's bandwidth
    copy keeps each array at COPY_BYTES_MAX instead of twice that cache."""
    from msc.tune import machine

    sizes = []
    real_ones = np.ones

    def ones(n, *args, **kwargs):
        sizes.append(n)
        return real_ones(1 << 16, *args, **kwargs)  # the copy itself on a small array

    monkeypatch.setattr(machine, "cache_bytes", lambda: {1: 48 << 10, 2: 2 << 20, 3: 480 << 20})
    monkeypatch.setattr(machine.np, "ones", ones)
    machine.memory_bandwidth.cache_clear()
    try:
        assert machine.memory_bandwidth() > 0
    finally:
        machine.memory_bandwidth.cache_clear()
    assert sizes == [machine.COPY_BYTES_MAX // 8]


def test_cpu_run_off_tries_a_streamed_sweep_with_ordinary_stores_too():
    """The model ranks a streamed sweep by the bytes its stores save, which need not buy
    time: the run-off times the same sweep with ordinary stores beside it."""
    from msc.targets.cpu.openmp import CPUPlatform

    streamed = msc.Schedule().tile(y=128).stream_stores().prefetch(512)
    variants = CPUPlatform().refinements(streamed, 2)
    assert msc.Schedule().tile(y=128).prefetch(512) in variants
    assert streamed.with_threads(1) in variants
    tile = msc.Schedule().time_tile(8, x=16).stream_stores()
    assert not any(v.time_depth and not v.streaming for v in CPUPlatform().refinements(tile, 2))
