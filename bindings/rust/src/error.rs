//! Errors: libckpt's numbered status and its details (file, tensor, byte
//! offset), as a Rust enum.
use std::cell::UnsafeCell;
use std::ffi::{CStr, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::fmt;
use std::path::{Path, PathBuf};

use crate::sys;

/// libckpt's status codes (`ckpt_status`), by name.  The numbers are stable
/// ([`Status::code`]); a code this binding does not know yet (a newer
/// library) is [`Status::Other`].
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
    HeaderTooSmall,
    HeaderTooLarge,
    HeaderPastEnd,
    HeaderNotUtf8,
    HeaderNotJson,
    HeaderSchema,
    MetadataNotString,
    UnknownDtype,
    ShapeOverflow,
    PartialByte,
    SizeMismatch,
    DataHole,
    DataOverlap,
    TrailingBytes,
    DuplicateName,
    BadOffsets,
    IndexInvalid,
    IndexMismatch,
    ZipInvalid,
    ZipUnsupported,
    Checksum,
    PickleInvalid,
    PickleForbidden,
    Incomplete,
    NoMatch,
    UnsafePath,
    Locked,
    GgufVersion,
    GgufLength,
    GgufCount,
    GgufKvType,
    GgufTensorType,
    GgufDims,
    GgufAlignment,
    GgufOffset,
    GgufSplit,
    UnsupportedDtype,
    DcpMetadata,
    DcpChunkHole,
    DcpChunkOverlap,
    DcpChunkBounds,
    DcpChunkMismatch,
    DcpPath,
    DcpUnsupported,
    NpyInvalid,
    MsgpackInvalid,
    HttpStatus,
    HttpAuth,
    RemoteChanged,
    NoRanges,
    Network,
    Timeout,
    BadResponse,
    UnsupportedSource,
    PeerFailed,
    PeerTimeout,
    Comm,
    CommData,
    /// A status number this binding does not name.
    Other(i32),
}

const STATUSES: &[(Status, i32)] = &[
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
    (Status::HeaderTooSmall, sys::CKPT_E_HEADER_TOO_SMALL),
    (Status::HeaderTooLarge, sys::CKPT_E_HEADER_TOO_LARGE),
    (Status::HeaderPastEnd, sys::CKPT_E_HEADER_PAST_END),
    (Status::HeaderNotUtf8, sys::CKPT_E_HEADER_NOT_UTF8),
    (Status::HeaderNotJson, sys::CKPT_E_HEADER_NOT_JSON),
    (Status::HeaderSchema, sys::CKPT_E_HEADER_SCHEMA),
    (Status::MetadataNotString, sys::CKPT_E_METADATA_NOT_STRING),
    (Status::UnknownDtype, sys::CKPT_E_UNKNOWN_DTYPE),
    (Status::ShapeOverflow, sys::CKPT_E_SHAPE_OVERFLOW),
    (Status::PartialByte, sys::CKPT_E_PARTIAL_BYTE),
    (Status::SizeMismatch, sys::CKPT_E_SIZE_MISMATCH),
    (Status::DataHole, sys::CKPT_E_DATA_HOLE),
    (Status::DataOverlap, sys::CKPT_E_DATA_OVERLAP),
    (Status::TrailingBytes, sys::CKPT_E_TRAILING_BYTES),
    (Status::DuplicateName, sys::CKPT_E_DUPLICATE_NAME),
    (Status::BadOffsets, sys::CKPT_E_BAD_OFFSETS),
    (Status::IndexInvalid, sys::CKPT_E_INDEX_INVALID),
    (Status::IndexMismatch, sys::CKPT_E_INDEX_MISMATCH),
    (Status::ZipInvalid, sys::CKPT_E_ZIP_INVALID),
    (Status::ZipUnsupported, sys::CKPT_E_ZIP_UNSUPPORTED),
    (Status::Checksum, sys::CKPT_E_CHECKSUM),
    (Status::PickleInvalid, sys::CKPT_E_PICKLE_INVALID),
    (Status::PickleForbidden, sys::CKPT_E_PICKLE_FORBIDDEN),
    (Status::Incomplete, sys::CKPT_E_INCOMPLETE),
    (Status::NoMatch, sys::CKPT_E_NO_MATCH),
    (Status::UnsafePath, sys::CKPT_E_UNSAFE_PATH),
    (Status::Locked, sys::CKPT_E_LOCKED),
    (Status::GgufVersion, sys::CKPT_E_GGUF_VERSION),
    (Status::GgufLength, sys::CKPT_E_GGUF_LENGTH),
    (Status::GgufCount, sys::CKPT_E_GGUF_COUNT),
    (Status::GgufKvType, sys::CKPT_E_GGUF_KV_TYPE),
    (Status::GgufTensorType, sys::CKPT_E_GGUF_TENSOR_TYPE),
    (Status::GgufDims, sys::CKPT_E_GGUF_DIMS),
    (Status::GgufAlignment, sys::CKPT_E_GGUF_ALIGNMENT),
    (Status::GgufOffset, sys::CKPT_E_GGUF_OFFSET),
    (Status::GgufSplit, sys::CKPT_E_GGUF_SPLIT),
    (Status::UnsupportedDtype, sys::CKPT_E_UNSUPPORTED_DTYPE),
    (Status::DcpMetadata, sys::CKPT_E_DCP_METADATA),
    (Status::DcpChunkHole, sys::CKPT_E_DCP_CHUNK_HOLE),
    (Status::DcpChunkOverlap, sys::CKPT_E_DCP_CHUNK_OVERLAP),
    (Status::DcpChunkBounds, sys::CKPT_E_DCP_CHUNK_BOUNDS),
    (Status::DcpChunkMismatch, sys::CKPT_E_DCP_CHUNK_MISMATCH),
    (Status::DcpPath, sys::CKPT_E_DCP_PATH),
    (Status::DcpUnsupported, sys::CKPT_E_DCP_UNSUPPORTED),
    (Status::NpyInvalid, sys::CKPT_E_NPY_INVALID),
    (Status::MsgpackInvalid, sys::CKPT_E_MSGPACK_INVALID),
    (Status::HttpStatus, sys::CKPT_E_HTTP_STATUS),
    (Status::HttpAuth, sys::CKPT_E_HTTP_AUTH),
    (Status::RemoteChanged, sys::CKPT_E_REMOTE_CHANGED),
    (Status::NoRanges, sys::CKPT_E_NO_RANGES),
    (Status::Network, sys::CKPT_E_NETWORK),
    (Status::Timeout, sys::CKPT_E_TIMEOUT),
    (Status::BadResponse, sys::CKPT_E_BAD_RESPONSE),
    (Status::UnsupportedSource, sys::CKPT_E_UNSUPPORTED_SOURCE),
    (Status::PeerFailed, sys::CKPT_E_PEER_FAILED),
    (Status::PeerTimeout, sys::CKPT_E_PEER_TIMEOUT),
    (Status::Comm, sys::CKPT_E_COMM),
    (Status::CommData, sys::CKPT_E_COMM_DATA),
];

impl Status {
    /// The status with this number (`Other` for an unknown one).
    pub fn from_code(code: i32) -> Status {
        STATUSES.iter().find(|(_, c)| *c == code).map(|(s, _)| *s).unwrap_or(Status::Other(code))
    }

    /// Its stable number in `ckpt.h`.
    pub fn code(self) -> i32 {
        match self {
            Status::Other(c) => c,
            s => STATUSES.iter().find(|(t, _)| *t == s).map(|(_, c)| *c).unwrap_or(-1),
        }
    }

    /// The C identifier, e.g. `"CKPT_E_DATA_HOLE"`.
    pub fn name(self) -> &'static str {
        unsafe { static_str(sys::ckpt_status_name(self.code())) }
    }

    /// libckpt's one-line description, e.g. "bytes between tensors belong to no tensor".
    pub fn message(self) -> &'static str {
        unsafe { static_str(sys::ckpt_status_message(self.code())) }
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
/// Both answer [`status`](Error::status), [`path`](Error::path),
/// [`tensor`](Error::tensor) and [`offset`](Error::offset).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    Library {
        status: Status,
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
        Error::Argument { status: Status::InvalidArgument, tensor: tensor.map(String::from), message }
    }

    pub(crate) fn state(message: &str) -> Error {
        Error::Argument { status: Status::BadState, tensor: None, message: message.to_string() }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} [{}]", self.message(), self.status().name())
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
