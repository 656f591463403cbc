//! Strings, paths and callbacks across the C boundary.
use std::any::Any;
use std::ffi::{c_void, CString};
use std::os::raw::c_int;
use std::os::unix::ffi::OsStrExt;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::path::Path;

use crate::error::{Error, Result};

pub(crate) fn cstring(s: &str, what: &str) -> Result<CString> {
    CString::new(s).map_err(|_| Error::argument(None, format!("{} {:?} contains a NUL byte", what, s)))
}

pub(crate) fn cpath(p: &Path) -> Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| Error::argument(None, format!("path {:?} contains a NUL byte", p)))
}

/// A progress closure handed to libckpt as (callback, user pointer).  A
/// panic inside the closure cancels the operation and is resumed once the
/// C call has returned.
pub(crate) struct Progress<F> {
    f: F,
    panic: Option<Box<dyn Any + Send + 'static>>,
}

impl<F: FnMut(u64, u64) -> bool> Progress<F> {
    pub(crate) fn new(f: F) -> Self {
        Progress { f, panic: None }
    }

    pub(crate) fn user(&mut self) -> *mut c_void {
        self as *mut Self as *mut c_void
    }

    /// Re-raises a panic caught in the callback.
    pub(crate) fn finish(self) {
        if let Some(p) = self.panic {
            resume_unwind(p);
        }
    }
}

pub(crate) unsafe extern "C" fn progress_call<F: FnMut(u64, u64) -> bool>(
    done: u64,
    total: u64,
    user: *mut c_void,
) -> c_int {
    let p = &mut *(user as *mut Progress<F>);
    if p.panic.is_some() {
        return 1;
    }
    match catch_unwind(AssertUnwindSafe(|| (p.f)(done, total))) {
        Ok(true) => 0,
        Ok(false) => 1,
        Err(e) => {
            p.panic = Some(e);
            1
        }
    }
}
