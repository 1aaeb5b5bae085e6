"""The two Sunway chips as objects: what the generated code, its Makefiles and the cost model need of each
core group (LDM, the CPE header and its DMA calls, the toolchain, the flop and DMA figures). Users name a chip
("sw26010", "sw26010pro"); inside the target everything takes the `Chip` (`as_chip`)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from msc.errors import TargetError
from msc.runtime import athread_emu

NAME = "athread"

#: One SW26010 core group's DMA bandwidth by contiguous block size, (bytes, GB/s): swCandle's measurements
#: (the middle of each measured range: 128 B 5-6.4, 256 B 8-10.7, 1 KB 15-17.6, 4-8 KB 18.4-21.8) and the
#: ceiling of about 22 GB/s they approach (docs/athread.md, 'The model').
DMA_GB_S = ((128, 5.7), (256, 9.35), (1024, 16.3), (4096, 19.3), (8192, 20.9), (16384, 22.0))
#: The memory bandwidth on paper of the core group DMA_GB_S was measured on (SW26010: 136.51 GB/s over 4).
DMA_MEASURED_PEAK_GB_S = 136.51 / 4

#: LDM bytes of the generated code's __thread_local words (reply counters and status word: 24), aligned.
STATIC_LDM = 32


@dataclass(frozen=True)
class Chip:
    """One core group of a Sunway chip (sources: docs/athread.md, 'The model' and 'What each chip needs')."""

    name: str
    ldm_bytes: int  # LDM per CPE
    slave_header: str  # the CPE API: slave.h (athread_get/put) or crts.h (CRTS_dma_iget/iput)
    host_flag: str  # the MPE compile's flag
    slave_cc: str  # the CPE compiler and its flag
    slave_flag: str
    link_flag: str  # the hybrid link's flag
    clock_ghz: float  # CPE clock
    flops_per_cycle: int  # double-precision flops per CPE and cycle (vector FMA)
    peak_gb_s: float  # the core group's memory bandwidth on paper, shared by its 64 CPEs' DMA
    transfer_us: float  # fixed cost of one DMA transfer (the project's assumption: no source gives it)

    def __str__(self) -> str:
        return self.name

    @property
    def ldm_capacity(self) -> int:
        """LDM bytes per CPE that buffers may use: the LDM less the stack reserve and the static words."""
        return self.ldm_bytes - athread_emu.STACK_RESERVE - STATIC_LDM

    @property
    def dma_scale(self) -> float:
        """DMA_GB_S times this is the chip's curve: its peak over the measured chip's (1 on SW26010; on the
        Pro an assumption until measured)."""
        return self.peak_gb_s / DMA_MEASURED_PEAK_GB_S

    @property
    def cpe_gflops(self) -> float:
        return self.clock_ghz * self.flops_per_cycle

    @property
    def ceiling_gb_s(self) -> float:
        return DMA_GB_S[-1][1] * self.dma_scale

    def dma_gb_s(self, block: int) -> float:
        """The core group's DMA bandwidth moving contiguous blocks of `block` bytes: DMA_GB_S interpolated
        in log2(block); below its first point in proportion to the block (a fixed cost per block)."""
        first, last = DMA_GB_S[0], DMA_GB_S[-1]
        if block <= first[0]:
            return first[1] * block / first[0] * self.dma_scale
        if block >= last[0]:
            return last[1] * self.dma_scale
        for (b0, g0), (b1, g1) in zip(DMA_GB_S, DMA_GB_S[1:]):
            if block <= b1:
                w = (math.log2(block) - math.log2(b0)) / (math.log2(b1) - math.log2(b0))
                return (g0 + w * (g1 - g0)) * self.dma_scale
        raise AssertionError(block)


# SW26010: 1.45 GHz, 8 DP flops/cycle per CPE (11.6 GFLOPS); 136.51 GB/s per chip over 4 core groups; DMA
# measured. SW26010-Pro: 2.25 GHz, 512-bit vectors (13.8 TFLOPS over 384 CPEs: 16 DP flops/cycle); 51.2 GB/s
# DDR4 per core group; DMA an assumption until measured: SW26010's block-size curve scaled by the peaks' ratio.
SW26010 = Chip("sw26010", athread_emu.LDM_BYTES["sw26010"], "slave.h", "-host", "sw5cc", "-slave", "-hybrid",
               1.45, 8, DMA_MEASURED_PEAK_GB_S, 0.5)
SW26010_PRO = Chip("sw26010pro", athread_emu.LDM_BYTES["sw26010pro"], "crts.h", "-mhost", "swgcc", "-mslave",
                   "-mhybrid", 2.25, 16, 51.2, 0.5)
CHIPS = {chip.name: chip for chip in (SW26010, SW26010_PRO)}
DEFAULT_CHIP = SW26010_PRO.name


def as_chip(chip: Chip | str) -> Chip:
    """The chip a user named (or the Chip itself); an unknown name is a TargetError naming both."""
    if isinstance(chip, Chip):
        return chip
    if chip not in CHIPS:
        raise TargetError(f"target '{NAME}': chip must be one of {', '.join(CHIPS)}, not {chip!r}")
    return CHIPS[chip]
