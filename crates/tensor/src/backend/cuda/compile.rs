//! Compiling the kernels with NVRTC, with an on-disk cache.
//!
//! NVRTC takes seconds for the whole kernel file, once per process. The CUBIN it makes is
//! kept under the cache folder (`EMBER_CUDA_CACHE`, else `$XDG_CACHE_HOME/ember` or
//! `~/.cache/ember`), named by a hash of the source, the architecture and the NVRTC
//! version, so later processes load it directly. A cache that cannot be read or written is
//! skipped silently: it only saves time.

use cudarc::nvrtc::{result, sys};
use std::ffi::CString;
use std::hash::{Hash, Hasher};
use std::path::PathBuf;

/// The options every compilation uses: no fused multiply-adds, so that products and sums
/// round like the CPU kernels; IEEE division and square roots (NVRTC's defaults, spelled
/// out because results depend on them).
const OPTIONS: [&str; 5] = ["--std=c++17", "--fmad=false", "--prec-div=true", "--prec-sqrt=true", "--ftz=false"];

/// The compiled image for compute capability `major.minor`: a CUBIN, or NUL-terminated
/// PTX where NVRTC cannot target the architecture directly.
pub(crate) fn kernels(source: &str, major: i32, minor: i32) -> Result<Vec<u8>, String> {
    let arch = format!("sm_{major}{minor}");
    let version = nvrtc_version();
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (source, &arch, version, OPTIONS).hash(&mut h);
    let file = cache_dir().map(|d| d.join(format!("kernels-{arch}-{:016x}.cubin", h.finish())));
    if let Some(bytes) = file.as_ref().and_then(|f| std::fs::read(f).ok()) {
        return Ok(bytes);
    }
    let image = compile(source, &format!("--gpu-architecture={arch}"), true)
        .or_else(|e| compile(source, &format!("--gpu-architecture=compute_{major}{minor}"), false).map_err(|_| e))?;
    if let Some(f) = file {
        // Written under a temporary name and renamed, so that a concurrent process never
        // reads half a file.
        let tmp = f.with_extension(format!("tmp{}", std::process::id()));
        if std::fs::create_dir_all(f.parent().unwrap_or(&f)).is_ok() && std::fs::write(&tmp, &image).is_ok() {
            let _ = std::fs::rename(&tmp, &f);
        }
    }
    Ok(image)
}

fn cache_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("EMBER_CUDA_CACHE") {
        return Some(PathBuf::from(d));
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        return Some(PathBuf::from(d).join("ember"));
    }
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache").join("ember"))
}

fn nvrtc_version() -> (i32, i32) {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: plain out-parameters.
    unsafe { sys::nvrtcVersion(&mut major, &mut minor) };
    (major, minor)
}

fn compile(source: &str, arch: &str, cubin: bool) -> Result<Vec<u8>, String> {
    let src = CString::new(source).map_err(|e| format!("the kernel source: {e}"))?;
    let name = CString::new("ember_kernels.cu").map_err(|e| format!("{e}"))?;
    let prog = result::create_program(&src, Some(&name)).map_err(|e| format!("NVRTC: {e:?}"))?;
    let mut options: Vec<String> = OPTIONS.iter().map(|s| s.to_string()).collect();
    options.push(arch.to_string());
    // SAFETY: `prog` was just created and is destroyed below.
    let compiled = unsafe { result::compile_program(prog, &options) };
    let out = match compiled {
        Err(e) => {
            // SAFETY: as above.
            let log = unsafe { result::get_program_log(prog) }
                .map(|l| l.iter().map(|&c| c as u8 as char).collect::<String>())
                .unwrap_or_default();
            Err(format!("NVRTC could not compile the kernels for {arch}: {e:?}\n{log}"))
        }
        Ok(()) if cubin => {
            let mut size = 0usize;
            // SAFETY: as above; the buffer has the size NVRTC reported.
            unsafe {
                let r = sys::nvrtcGetCUBINSize(prog, &mut size);
                if r != sys::nvrtcResult::NVRTC_SUCCESS || size == 0 {
                    Err(format!("NVRTC made no CUBIN for {arch}"))
                } else {
                    let mut buf = vec![0u8; size];
                    match sys::nvrtcGetCUBIN(prog, buf.as_mut_ptr().cast()) {
                        sys::nvrtcResult::NVRTC_SUCCESS => Ok(buf),
                        r => Err(format!("NVRTC could not hand over the CUBIN: {r:?}")),
                    }
                }
            }
        }
        // SAFETY: as above.
        Ok(()) => unsafe { result::get_ptx(prog) }
            .map(|p| p.iter().map(|&c| c as u8).collect())
            .map_err(|e| format!("NVRTC could not hand over the PTX: {e:?}")),
    };
    // SAFETY: created above, not used after this.
    let _ = unsafe { result::destroy_program(prog) };
    out
}

#[cfg(test)]
mod tests {
    /// The generated source (every kernel, the 16-bit ones included) compiles wherever
    /// NVRTC can be loaded. NVRTC needs no GPU, so a machine with the CUDA 13 libraries on
    /// `LD_LIBRARY_PATH` and no device still finds a kernel that does not compile, which
    /// otherwise shows only on first use of a GPU.
    #[test]
    fn the_kernels_compile_with_nvrtc() {
        // SAFETY: only tries to load the library.
        if unsafe { !cudarc::nvrtc::sys::is_culib_present() } {
            println!("the_kernels_compile_with_nvrtc: skipped, NVRTC (libnvrtc.so.13) could not be loaded");
            return;
        }
        let image = super::compile(&super::super::kernel_source::source(), "--gpu-architecture=sm_80", true);
        assert!(image.as_ref().is_ok_and(|i| !i.is_empty()), "{:?}", image.err());
    }
}
