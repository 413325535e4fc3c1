//! Every CUDA kernel in kernels/ compiles with NVRTC to CUBIN for the GPUs we run on (sm_80,
//! sm_90), without a GPU: a kernel edited on a machine without one is still compiled in CI.
//! NVRTC comes from GPUDOCTOR_NVRTC_DIR (scripts/test installs PyPI's nvidia-cuda-nvrtc-cu12
//! under target/nvrtc), CUDA_HOME, or the loader path. Skips (with a message) where none is
//! found, unless GPUDOCTOR_REQUIRE_NVRTC=1.

use gpudoctor::cuda;
use std::path::PathBuf;

#[test]
fn kernels_compile_with_nvrtc() {
    let require = std::env::var("GPUDOCTOR_REQUIRE_NVRTC").as_deref() == Ok("1");
    let mut homes: Vec<PathBuf> = Vec::new();
    if let Some(d) = std::env::var_os("CUDA_HOME") {
        homes.push(d.into());
    }
    let mut dirs = cuda::nvrtc_search_dirs(&homes);
    if let Some(d) = std::env::var_os("GPUDOCTOR_NVRTC_DIR") {
        dirs.insert(0, d.into());
    }
    if let Err(e) = cuda::find_nvrtc(&dirs) {
        assert!(!require, "GPUDOCTOR_REQUIRE_NVRTC=1 but: {e}");
        eprintln!("NVRTC not found ({e}): skipped");
        return;
    }
    let kernels = [
        ("copy.cu", gpudoctor::probes::live::COPY_KERNEL_SRC),
        ("mlx5_post.cu", gpudoctor::rdma::mlx5::kernel::SRC),
    ];
    for (name, src) in kernels {
        for arch in ["sm_80", "sm_90"] {
            let cubin = cuda::compile_cubin(src, name, arch)
                .unwrap_or_else(|e| panic!("{name} for {arch}: {e}"));
            // An ELF image (CUBIN), not PTX text.
            assert_eq!(&cubin[..4], b"\x7fELF", "{name} for {arch}");
        }
    }
}
