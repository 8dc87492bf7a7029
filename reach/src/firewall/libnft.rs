//! libnftables, the library the `nft` command is a thin front-end of, called in process.
//!
//! A converge lists the ruleset and then writes one transaction. Through the `nft` command that
//! is two processes, and on a node starting one costs about as much as nft's own work on 200
//! rules; through the library it is two calls on one netlink socket. The library takes the same
//! input (nft's text syntax), prints the same output (`-j`: JSON) and the same error messages,
//! so the driver's commands and parsing are the same either way.
//!
//! The library is opened at run time (`libnftables.so.1`, shipped with every nftables package)
//! rather than linked: nothing is needed to build the mesh, and where it cannot be opened the
//! driver falls back to the `nft` command. The crates that bind it (`libnftables1-sys`) generate
//! bindings with bindgen against the C headers at build time, for the eight functions used here.

#![allow(unsafe_code)] // the FFI boundary: the only unsafe code in the mesh

use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::sync::{Mutex, OnceLock};

/// `NFT_CTX_OUTPUT_JSON` (libnftables.h): print listings as JSON, as `nft -j` does.
const OUTPUT_JSON: c_uint = 1 << 4;

type Ctx = *mut c_void;

/// The functions of libnftables.so.1 the mesh calls (its stable ABI, `LIBNFTABLES_1`).
struct Api {
    ctx_new: unsafe extern "C" fn(c_uint) -> Ctx,
    ctx_free: unsafe extern "C" fn(Ctx),
    buffer_output: unsafe extern "C" fn(Ctx) -> c_int,
    buffer_error: unsafe extern "C" fn(Ctx) -> c_int,
    output_buffer: unsafe extern "C" fn(Ctx) -> *const c_char,
    error_buffer: unsafe extern "C" fn(Ctx) -> *const c_char,
    set_output_flags: unsafe extern "C" fn(Ctx, c_uint),
    run_cmd: unsafe extern "C" fn(Ctx, *const c_char) -> c_int,
    /// Kept open for as long as the process runs (the pointers above point into it).
    _library: libloading::Library,
}

impl Api {
    fn open() -> Result<Self, libloading::Error> {
        // SAFETY: opening libnftables runs its initialisers, which only set up its own state;
        // each symbol is looked up by its name in the library's LIBNFTABLES_1 ABI and given the
        // signature libnftables.h declares for it.
        unsafe {
            let library = libloading::Library::new("libnftables.so.1")?;
            Ok(Self {
                ctx_new: *library.get(b"nft_ctx_new\0")?,
                ctx_free: *library.get(b"nft_ctx_free\0")?,
                buffer_output: *library.get(b"nft_ctx_buffer_output\0")?,
                buffer_error: *library.get(b"nft_ctx_buffer_error\0")?,
                output_buffer: *library.get(b"nft_ctx_get_output_buffer\0")?,
                error_buffer: *library.get(b"nft_ctx_get_error_buffer\0")?,
                set_output_flags: *library.get(b"nft_ctx_output_set_flags\0")?,
                run_cmd: *library.get(b"nft_run_cmd_from_buffer\0")?,
                _library: library,
            })
        }
    }
}

static API: OnceLock<Option<Api>> = OnceLock::new();
/// libnftables keeps some state of its own outside a context (its parser's and xtables'
/// initialisation); the mesh calls it from one thread at a time.
static CALLS: Mutex<()> = Mutex::new(());

fn api() -> Option<&'static Api> {
    API.get_or_init(|| Api::open().ok()).as_ref()
}

/// Whether libnftables can be used here (the driver falls back to the `nft` command if not).
pub fn available() -> bool {
    api().is_some()
}

/// What nft printed: its output, or (when it refused) its own error message.
pub type Outcome = Result<String, String>;

/// Runs `commands` (nft's syntax, what `nft -f` reads) in the current thread's network
/// namespace; `json` lists as `nft -j` does. `None` when libnftables cannot be opened.
pub fn run(commands: &str, json: bool) -> Option<Outcome> {
    let api = api()?;
    let Ok(commands) = CString::new(commands) else {
        return Some(Err("the commands contain a NUL byte".into()));
    };
    let _one_at_a_time = CALLS.lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY: the context is created, used and freed here, on this thread only; the buffers it
    // returns are copied before it is freed; `commands` outlives the call.
    unsafe {
        let ctx = (api.ctx_new)(0);
        if ctx.is_null() {
            return Some(Err("libnftables could not create a context".into()));
        }
        // Unbuffered, nft would print to the mesh's own stdout and stderr.
        if (api.buffer_output)(ctx) != 0 || (api.buffer_error)(ctx) != 0 {
            (api.ctx_free)(ctx);
            return Some(Err("libnftables could not buffer its output".into()));
        }
        if json {
            (api.set_output_flags)(ctx, OUTPUT_JSON);
        }
        let rc = (api.run_cmd)(ctx, commands.as_ptr());
        let text = |p: *const c_char| {
            if p.is_null() {
                String::new()
            } else {
                CStr::from_ptr(p).to_string_lossy().into_owned()
            }
        };
        let outcome = if rc == 0 {
            Ok(text((api.output_buffer)(ctx)))
        } else {
            Err(text((api.error_buffer)(ctx)).trim().to_owned())
        };
        (api.ctx_free)(ctx);
        Some(outcome)
    }
}
