"""GPU targets: CUDA and HIP from one generator (the HIP target is CUDA's with
AMD's runtime names), the AN5D-style time tile and the tensor-core kernel."""
