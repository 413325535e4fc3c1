//! The CUDA layer's own tests: the NVRTC search, a fake libcuda missing symbols, and the
//! guard that keeps every CUDA call behind `resolve`.

use super::library::dlopen_global;
use super::*;
use std::path::{Path, PathBuf};

#[test]
fn nvrtc_search_covers_cuda_home_and_the_targets_dir() {
    let dirs = nvrtc_search_dirs(&[PathBuf::from("/opt/mycuda")]);
    assert_eq!(
        dirs[0],
        PathBuf::from("/opt/mycuda/targets/x86_64-linux/lib")
    );
    // Where NVIDIA's Ubuntu packages put libnvrtc on our GPU machines.
    assert!(dirs.contains(&PathBuf::from("/usr/local/cuda/targets/x86_64-linux/lib")));
    assert!(dirs.contains(&PathBuf::from("/usr/local/cuda/lib64")));
}

/// A libcuda with only cuInit and cuDeviceGetCount (the latter failing), built here with
/// cc and preloaded by absolute path as `find_nvrtc` does, so cudarc's dlopen("libcuda.so")
/// gets it: every missing symbol is a `CudaError::Missing`, where cudarc would panic.
/// (Under nextest each test is its own process: the fake is seen by this test only.)
#[test]
fn a_missing_driver_symbol_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let c = dir.path().join("fake_cuda.c");
    std::fs::write(
        &c,
        "int cuInit(unsigned int f) { (void)f; return 0; }\n\
         int cuDeviceGetCount(int *n) { *n = 0; return 999; }\n",
    )
    .expect("write the fake's source");
    let so = dir.path().join("libcuda.so");
    let built = std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-Wl,-soname,libcuda.so", "-o"])
        .arg(&so)
        .arg(&c)
        .status()
        .expect("cc runs (scripts/test installs gcc)");
    assert!(built.success(), "cc could not build the fake libcuda");
    dlopen_global(&so).expect("the fake libcuda loads");
    assert!(driver_presence().is_ok());
    // cuInit is there and succeeds; cuDriverGetVersion is not.
    match init() {
        Err(CudaError::Missing {
            library: "libcuda.so.1",
            symbol: "cuDriverGetVersion",
            ..
        }) => {}
        other => panic!("init: {other:?}"),
    }
    // cuDeviceGetCount fails with 999 (CUDA_ERROR_UNKNOWN); without cuGetErrorName and
    // cuGetErrorString the error still says which.
    match devices() {
        Err(CudaError::Driver { call, name, text }) => {
            assert_eq!(call, "cuDeviceGetCount");
            assert_eq!(name, "CUDA_ERROR_UNKNOWN");
            assert_eq!(text, "no description");
        }
        other => panic!("devices: {other:?}"),
    }
    let e = context_missing();
    assert!(e.to_string().contains("no cuDevicePrimaryCtxRetain"), "{e}");
}

/// Context::retain on the fake: the first missing symbol of a context.
fn context_missing() -> CudaError {
    match Context::retain(0) {
        Err(e) => e,
        Ok(_) => panic!("a context on the fake libcuda"),
    }
}

/// The guard is the only door: no call into cudarc's bindings outside `driver!`/`nvrtc!`, and
/// no module outside src/cuda/ names cudarc.
#[test]
fn every_cuda_call_goes_through_the_guard() {
    fn walk(d: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(d).expect("read src").flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut mine = Vec::new();
    walk(&root.join("cuda"), &mut mine);
    assert!(mine.len() > 5, "src/cuda/ is split by concern");
    for f in &mine {
        let text = std::fs::read_to_string(f).expect("read a file of src/cuda");
        for (i, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            for bare in ["cu::cu", "nv::nvrtc"] {
                for (at, _) in line.match_indices(bare) {
                    // A call: cuX/nvrtcX then "(" (types such as nv::nvrtcResult, the loader's
                    // cu::culib() and the macros' own `cu::$sym` are not calls into the API).
                    let rest = &line[at + bare.len()..];
                    let name_end = rest
                        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                        .unwrap_or(rest.len());
                    let called = rest.starts_with(|c: char| c.is_ascii_uppercase())
                        && rest[name_end..].starts_with('(');
                    assert!(
                        !called,
                        "{}:{}: a CUDA call outside driver!/nvrtc!: {line}",
                        f.display(),
                        i + 1
                    );
                }
            }
        }
    }
    let mut files = Vec::new();
    walk(&root, &mut files);
    assert!(files.len() > 50);
    for f in files.iter().filter(|f| !f.starts_with(root.join("cuda"))) {
        let text = std::fs::read_to_string(f).expect("read a source file");
        assert!(
            !text.contains("cudarc::"),
            "{} uses cudarc directly: go through crate::cuda",
            f.display()
        );
    }
}

#[test]
fn presence_checks_never_panic() {
    // Here (no CUDA) these say why; on a GPU machine they succeed. Neither panics.
    let _ = driver_presence();
    let _ = find_nvrtc(&nvrtc_search_dirs(&[]));
}
