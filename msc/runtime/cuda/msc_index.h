/* msc_index.h: launches of kernels templated on their index type, for msc_cuda.h and
 * msc_hip.h (included by each after its MSC_LAUNCH; see msc_cuda.h's comment).
 *
 * MSC_LAUNCH_INDEXED(kernel, points, grid, block, shared_bytes, args...) launches
 * kernel<int> for up to MSC_INDEX32_POINTS points (half of int's range, leaving room for
 * the halo's arithmetic) and kernel<long> above; under the emulator kernel<long> wherever
 * MSC_CUDA_EMU_INDEX is "64" (so that tests run both on small grids).
 */
#ifndef MSC_INDEX_H
#define MSC_INDEX_H

#define MSC_INDEX32_POINTS (1L << 30)

static inline bool msc_index32(long points)
{
#ifdef MSC_CUDA_EMULATE
    if (::msc_emu::wide_indices()) return false;
#endif
    return points <= MSC_INDEX32_POINTS;
}

#define MSC_LAUNCH_INDEXED(kernel, points, grid, block, shared_bytes, ...)                  \
    do {                                                                                    \
        if (msc_index32(points))                                                            \
            MSC_LAUNCH(kernel<int>, grid, block, shared_bytes, __VA_ARGS__);                \
        else                                                                                \
            MSC_LAUNCH(kernel<long>, grid, block, shared_bytes, __VA_ARGS__);               \
    } while (0)

#endif /* MSC_INDEX_H */
