//! Errors: libckpt's numbered status (a Rust enum), its detail (the rule
//! that broke) and where (file, tensor, byte offset).
use std::cell::UnsafeCell;
use std::ffi::{CStr, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::fmt;
use std::path::{Path, PathBuf};

use crate::sys;

/// libckpt's statuses (`ckpt_status`), by name: what a caller acts on.
/// The numbers are stable ([`Status::code`]); a status this binding does
/// not know yet (a newer library) is [`Status::Other`].  Which rule of a
/// format broke is the error's [`Detail`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Status {
    InvalidArgument,
    NoMemory,
    Io,
    NotFound,
    Exists,
    UnknownFormat,
    Cancelled,
    OutOfRange,
    BadState,
    BadSize,
    NoSpace,
    Truncated,
    Limit,
    Incomplete,
    NoMatch,
    UnsafePath,
    Locked,
    /// The file breaks its format's rules; the detail says which.
    Corrupt,
    /// A feature, dtype, transform or source kind ckpt (or the output) does not take.
    Unsupported,
    /// A pickle asks for a global outside the allowlist.
    Forbidden,
    Checksum,
    /// The server answered with an error, changed the file, or contradicted itself.
    Remote,
    /// The server refused the credentials.
    Auth,
    Network,
    Timeout,
    /// Another rank or the communicator failed.
    Peer,
    /// A status number this binding does not name.
    Other(i32),
}

/// Each variant and its number; checked against the library's table (every
/// status there has a variant here, and the names agree) by the tests.
pub(crate) const STATUSES: &[(Status, i32)] = &[
    (Status::InvalidArgument, sys::CKPT_E_INVALID_ARGUMENT),
    (Status::NoMemory, sys::CKPT_E_NO_MEMORY),
    (Status::Io, sys::CKPT_E_IO),
    (Status::NotFound, sys::CKPT_E_NOT_FOUND),
    (Status::Exists, sys::CKPT_E_EXISTS),
    (Status::UnknownFormat, sys::CKPT_E_UNKNOWN_FORMAT),
    (Status::Cancelled, sys::CKPT_E_CANCELLED),
    (Status::OutOfRange, sys::CKPT_E_OUT_OF_RANGE),
    (Status::BadState, sys::CKPT_E_BAD_STATE),
    (Status::BadSize, sys::CKPT_E_BAD_SIZE),
    (Status::NoSpace, sys::CKPT_E_NO_SPACE),
    (Status::Truncated, sys::CKPT_E_TRUNCATED),
    (Status::Limit, sys::CKPT_E_LIMIT),
    (Status::Incomplete, sys::CKPT_E_INCOMPLETE),
    (Status::NoMatch, sys::CKPT_E_NO_MATCH),
    (Status::UnsafePath, sys::CKPT_E_UNSAFE_PATH),
    (Status::Locked, sys::CKPT_E_LOCKED),
    (Status::Corrupt, sys::CKPT_E_CORRUPT),
    (Status::Unsupported, sys::CKPT_E_UNSUPPORTED),
    (Status::Forbidden, sys::CKPT_E_FORBIDDEN),
    (Status::Checksum, sys::CKPT_E_CHECKSUM),
    (Status::Remote, sys::CKPT_E_REMOTE),
    (Status::Auth, sys::CKPT_E_AUTH),
    (Status::Network, sys::CKPT_E_NETWORK),
    (Status::Timeout, sys::CKPT_E_TIMEOUT),
    (Status::Peer, sys::CKPT_E_PEER),
];

impl Status {
    /// The status with this number (`Other` for an unknown one).
    pub fn from_code(code: i32) -> Status {
        STATUSES.iter().find(|(_, c)| *c == code).map(|(s, _)| *s).unwrap_or(Status::Other(code))
    }

    /// Its stable number in `ckpt_status.h`.
    pub fn code(self) -> i32 {
        match self {
            Status::Other(c) => c,
            s => STATUSES.iter().find(|(t, _)| *t == s).map(|(_, c)| *c).unwrap_or(-1),
        }
    }

    /// The C identifier, e.g. `"CKPT_E_CORRUPT"`.
    pub fn name(self) -> &'static str {
        unsafe { static_str(sys::ckpt_status_name(self.code())) }
    }

    /// libckpt's one-line description, e.g. "the file breaks its format's rules".
    pub fn message(self) -> &'static str {
        unsafe { static_str(sys::ckpt_status_message(self.code())) }
    }
}

/// Which rule broke, where the status alone does not say it
/// (`ckpt_detail`): `CKPT_D_DATA_HOLE` of a [`Status::Corrupt`] safetensors
/// file.  Its number is stable; names, messages and its status come from
/// the library's table, so a detail a newer library adds needs no change
/// here.  Compare with the `ckpt_sys::CKPT_D_*` numbers or by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Detail(i32);

impl Detail {
    /// The detail with this number; None for 0 (`CKPT_D_NONE`).
    pub fn from_code(code: i32) -> Option<Detail> {
        if code == sys::CKPT_D_NONE {
            None
        } else {
            Some(Detail(code))
        }
    }

    /// Its stable number in `ckpt_status.h` (the number the per-format
    /// status of the same name had).
    pub fn code(self) -> i32 {
        self.0
    }

    /// The C identifier, e.g. `"CKPT_D_DATA_HOLE"`.
    pub fn name(self) -> &'static str {
        unsafe { static_str(sys::ckpt_detail_name(self.0)) }
    }

    /// libckpt's one-line description, e.g. "bytes between tensors belong to no tensor".
    pub fn message(self) -> &'static str {
        unsafe { static_str(sys::ckpt_detail_message(self.0)) }
    }

    /// The status it belongs to.
    pub fn status(self) -> Status {
        Status::from_code(unsafe { sys::ckpt_detail_status(self.0) })
    }
}

impl fmt::Display for Detail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

unsafe fn static_str(p: *const std::os::raw::c_char) -> &'static str {
    if p.is_null() {
        ""
    } else {
        CStr::from_ptr(p).to_str().unwrap_or("")
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A failed call.  `Library` errors come from libckpt and carry what it
/// reported; `Argument` errors are refused by the binding before libckpt is
/// called (a typed slice whose element type or length does not fit the
/// tensor, a string with a NUL byte, a plan changed after buffers were set).
/// Both answer [`status`](Error::status), [`detail`](Error::detail), [`path`](Error::path),
/// [`tensor`](Error::tensor) and [`offset`](Error::offset).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    Library {
        status: Status,
        /// Which rule broke, where the status does not say it.
        detail: Option<Detail>,
        /// The file concerned.
        path: Option<PathBuf>,
        /// The tensor concerned.
        tensor: Option<String>,
        /// The byte offset in `path` where the problem lies.
        offset: Option<u64>,
        /// errno of a failed system call.
        errno: Option<i32>,
        /// libckpt's sentence naming all of the above.
        message: String,
    },
    Argument {
        status: Status,
        detail: Option<Detail>,
        tensor: Option<String>,
        message: String,
    },
}

/// `Result<T, ckpt::Error>`.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub fn status(&self) -> Status {
        match self {
            Error::Library { status, .. } | Error::Argument { status, .. } => *status,
        }
    }
    pub fn detail(&self) -> Option<Detail> {
        match self {
            Error::Library { detail, .. } | Error::Argument { detail, .. } => *detail,
        }
    }
    pub fn path(&self) -> Option<&Path> {
        match self {
            Error::Library { path, .. } => path.as_deref(),
            Error::Argument { .. } => None,
        }
    }
    pub fn tensor(&self) -> Option<&str> {
        match self {
            Error::Library { tensor, .. } | Error::Argument { tensor, .. } => tensor.as_deref(),
        }
    }
    pub fn offset(&self) -> Option<u64> {
        match self {
            Error::Library { offset, .. } => *offset,
            Error::Argument { .. } => None,
        }
    }
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::Library { errno, .. } => *errno,
            Error::Argument { .. } => None,
        }
    }
    pub fn message(&self) -> &str {
        match self {
            Error::Library { message, .. } | Error::Argument { message, .. } => message,
        }
    }

    pub(crate) fn argument(tensor: Option<&str>, message: String) -> Error {
        Error::Argument { status: Status::InvalidArgument, detail: None, tensor: tensor.map(String::from), message }
    }

    pub(crate) fn state(message: &str) -> Error {
        Error::Argument { status: Status::BadState, detail: None, tensor: None, message: message.to_string() }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.detail() {
            Some(d) => write!(f, "{} [{}/{}]", self.message(), self.status().name(), d.name()),
            None => write!(f, "{} [{}]", self.message(), self.status().name()),
        }
    }
}

impl std::error::Error for Error {}

impl From<Error> for std::io::Error {
    fn from(e: Error) -> std::io::Error {
        use std::io::ErrorKind as K;
        if let Some(code) = e.errno() {
            if e.status() == Status::Io {
                return std::io::Error::new(std::io::Error::from_raw_os_error(code).kind(), e);
            }
        }
        let kind = match e.status() {
            Status::NotFound => K::NotFound,
            Status::Exists => K::AlreadyExists,
            Status::InvalidArgument | Status::BadSize => K::InvalidInput,
            Status::NoMemory => K::OutOfMemory,
            Status::Cancelled => K::Interrupted,
            Status::Truncated => K::UnexpectedEof,
            Status::Io | Status::NoSpace => K::Other,
            _ => K::InvalidData,
        };
        std::io::Error::new(kind, e)
    }
}

/// A `ckpt_error` on the stack, turned into an [`Error`] on failure.
pub(crate) struct RawError(Box<UnsafeCell<sys::ckpt_error>>);

impl RawError {
    pub(crate) fn new() -> RawError {
        // SAFETY: ckpt_error is plain C data (ints and char arrays): all zero is valid.
        let e: Box<UnsafeCell<sys::ckpt_error>> = Box::new(UnsafeCell::new(unsafe { std::mem::zeroed() }));
        unsafe { sys::ckpt_error_clear(e.get()) };
        RawError(e)
    }

    /// The pointer handed to libckpt, which fills it on failure.
    pub(crate) fn ptr(&self) -> *mut sys::ckpt_error {
        self.0.get()
    }

    /// Ok(()) for CKPT_OK, else the error the library filled.
    pub(crate) fn check(&self, status: sys::ckpt_status) -> Result<()> {
        if status == sys::CKPT_OK {
            return Ok(());
        }
        // SAFETY: the C call that filled it has returned.
        let e = unsafe { &*self.0.get() };
        let text = |buf: &[std::os::raw::c_char]| -> Option<String> {
            let bytes: Vec<u8> = buf.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
            if bytes.is_empty() {
                None
            } else {
                Some(String::from_utf8_lossy(&bytes).into_owned())
            }
        };
        let st = Status::from_code(status);
        Err(Error::Library {
            status: st,
            detail: Detail::from_code(e.detail),
            path: path_text(&e.path),
            tensor: text(&e.tensor),
            offset: if e.offset >= 0 { Some(e.offset as u64) } else { None },
            errno: if e.sys_errno != 0 { Some(e.sys_errno) } else { None },
            message: text(&e.message).unwrap_or_else(|| st.message().to_string()),
        })
    }
}

fn path_text(buf: &[std::os::raw::c_char]) -> Option<PathBuf> {
    let bytes: Vec<u8> = buf.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
    if bytes.is_empty() {
        None
    } else {
        Some(PathBuf::from(OsStr::from_bytes(&bytes)))
    }
}
